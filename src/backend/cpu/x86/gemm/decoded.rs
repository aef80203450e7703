//! The GEMM over rows decoded on the fly (`Tiled`, kernels.rs): the grid i-quants and ternary
//! types, whose blocks are too irregular to repack, are turned 16 rows at a time into signed byte
//! lines (rows_iq.rs `decode_tile`) once for all of a prefill's tokens, and multiplied here as
//! the repacked types are, each 64-byte line by every token's four activation bytes. Each block's
//! integer sum is exact and takes the one float step the row kernels take, so a row's result has
//! the bits generation gives it.

#![allow(clippy::needless_range_loop)] // tile kernels index parallel arrays with one index

use crate::backend::cpu::gemm::{Kernel, Tile, quad};
use crate::backend::cpu::kernels::{BlockQ8K, DECODED_BLOCK, TiledCall};
use crate::backend::cpu::repack::ROWS;
use crate::backend::cpu::x86::isa::{Avx2, Avx512, Isa};

/// The decoded layout against Q8_K activations: per 16 values four lines, less the offset the
/// instruction set adds to signed bytes (`I8_OFFSET`, from the activations' per-16 sums), times
/// the rows' scales; per block the rows' float scales.
struct KDecoded;

impl Kernel<BlockQ8K> for KDecoded {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8K, T>, acc: &mut [V::F; T]) {
        unsafe {
            for b in 0..tile.blocks {
                let mut sum = [V::zero(); T];
                for j in 0..16 {
                    let mut part = [V::zero(); T];
                    for q in 0..4 {
                        let line = V::load(tile.at(0, 0, b, (4 * j + q) * 64 + tile.line));
                        for t in 0..T {
                            let xq = tile.x(t, b).qs.as_ptr().add(16 * j + 4 * q);
                            part[t] = V::dot_i8(part[t], line, quad(xq));
                        }
                    }
                    let scale = V::load(tile.at(0, 0, b, 4096 + 64 * j + tile.line));
                    for t in 0..T {
                        let offset = V::I8_OFFSET * tile.x(t, b).bsums[j] as i32;
                        sum[t] = V::mul_add(sum[t], V::sub_splat(part[t], offset), scale);
                    }
                }
                let d = V::loadf(tile.at(0, 0, b, 4096 + 1024 + 4 * tile.lane) as *const f32);
                for t in 0..T {
                    acc[t] = V::fmadd(V::cvt(sum[t]), V::mul(d, V::fsplat(tile.x(t, b).d)), acc[t]);
                }
            }
        }
    }
}

#[inline(always)]
unsafe fn run<V: Isa, const TILE: usize>(c: &TiledCall<BlockQ8K>) {
    unsafe {
        let base = c.decoded.as_ptr();
        for h in 0..ROWS / V::LANES {
            let mut t0 = c.tokens.start;
            while t0 < c.tokens.end {
                let n = (c.tokens.end - t0).min(TILE);
                let mut x = [c.x.as_ptr(); TILE];
                for (t, xt) in x.iter_mut().enumerate() {
                    *xt = c.x.as_ptr().add((t0 + t.min(n - 1)) * c.stride);
                }
                let tile = Tile {
                    sec: [base; 6],
                    blocks: c.blocks,
                    chunk_shift: 0,
                    chunk_bytes: DECODED_BLOCK,
                    line: h * 4 * V::LANES,
                    lane: h * V::LANES,
                    shift: 0,
                    x,
                    xsum: [std::ptr::null(); TILE],
                    start: base,
                    ahead: 0, // the decoded rows are in L2
                };
                let mut acc = [V::fzero(); TILE];
                KDecoded::run::<V, TILE>(&tile, &mut acc);
                let factor = V::fsplat(c.factor);
                for t in 0..n {
                    let out = c.out.add((t0 + t) * c.m + h * V::LANES);
                    V::store(out, V::mul(acc[t], factor));
                }
                t0 += n;
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn gemm_avx512(c: &TiledCall<BlockQ8K>) {
    unsafe { run::<Avx512, 8>(c) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm_avx2(c: &TiledCall<BlockQ8K>) {
    unsafe { run::<Avx2<false>, 4>(c) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn gemm_avxvnni(c: &TiledCall<BlockQ8K>) {
    unsafe { run::<Avx2<true>, 4>(c) }
}

/// The decoded GEMM of `level` (None for the portable level).
pub fn decoded_kernel(
    level: crate::backend::cpu::kernels::Level,
) -> Option<unsafe fn(&TiledCall<BlockQ8K>)> {
    use crate::backend::cpu::kernels::Level;
    Some(match level {
        Level::Avx512Vnni => gemm_avx512,
        Level::AvxVnni => gemm_avxvnni,
        Level::Avx2 => gemm_avx2,
        Level::Portable => return None,
    })
}
