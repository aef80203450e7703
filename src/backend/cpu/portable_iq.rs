//! The portable integer dot products of the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//! IQ3_S, IQ1_S, IQ1_M), the ternary types (TQ1_0, TQ2_0) against Q8_K activations, and of Q1_0
//! against Q8_0: ports of llama.cpp's `ggml_vec_dot_*_generic` (ggml-cpu/quants.c, MIT). The
//! integer sums are exact in any order; the float steps (which products are formed in f32, and
//! the order they are accumulated in, per block and over the row) follow llama.cpp's, so a row's
//! result is the one its generic kernel gives. Block layouts are described in `gguf/iq.rs`.
//! The x86 and arm row kernels of these types (`x86/rows_iq.rs`, `arm/rows_iq.rs`) are checked
//! against these (`kernels.rs`'s every-level test); the portable table takes them.
#![allow(clippy::needless_range_loop)] // block kernels index several arrays with one index

use super::kernels::{BlockQ8, BlockQ8K};
use crate::gguf::GgmlType;
use crate::gguf::dequant::f16_at;
use crate::gguf::iq::{
    IQ1_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use crate::gguf::types::QK_K;

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

#[inline]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Σ grid[j] · q8[j] · (−1 where bit j of `signs` is set): eight grid magnitudes against eight
/// activations.
#[inline]
fn signed_dot(grid: [u8; 8], signs: u8, q8: &[i8]) -> i32 {
    let mut s = 0i32;
    for j in 0..8 {
        let p = grid[j] as i32 * q8[j] as i32;
        s += if signs & (1 << j) != 0 { -p } else { p };
    }
    s
}

/// Two 4-byte grid entries (IQ3's) as the eight magnitudes of one group.
#[inline]
fn grid_pair(g1: u32, g2: u32) -> [u8; 8] {
    let (a, b) = (g1.to_le_bytes(), g2.to_le_bytes());
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
}

/// Σ grid[j] · q8[j] for an IQ1 grid entry (values −1, 0, 1 as bytes).
#[inline]
fn grid1_dot(entry: u64, q8: &[i8]) -> i32 {
    let g = entry.to_le_bytes();
    (0..8).map(|j| (g[j] as i8) as i32 * q8[j] as i32).sum()
}

/// IQ2_XXS row · Q8_K row (`ggml_vec_dot_iq2_xxs_q8_K_generic`): the 1/8 of the scale
/// (2·ls + 1)/8 applied once to the row's sum.
pub fn dot_iq2_xxs(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ2_XXS.block_bytes()).zip(x) {
        let d = f16_at(wb, 0) * xb.d;
        let mut bsum = 0i32;
        for ib in 0..QK_K / 32 {
            let q = 2 + 8 * ib;
            let aux = u32_at(wb, q + 4);
            let ls = 2 * (aux >> 28) as i32 + 1;
            let mut sumi = 0i32;
            for l in 0..4 {
                let grid = IQ2XXS_GRID[wb[q + l] as usize].to_le_bytes();
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                sumi += signed_dot(grid, signs, &xb.qs[32 * ib + 8 * l..]);
            }
            bsum += sumi * ls;
        }
        sumf += d * bsum as f32;
    }
    0.125 * sumf
}

/// IQ2_XS row · Q8_K row (`ggml_vec_dot_iq2_xs_q8_K_generic`): a 4-bit scale per 16 values.
pub fn dot_iq2_xs(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ2_XS.block_bytes()).zip(x) {
        let d = f16_at(wb, 0) * xb.d;
        let mut bsum = 0i32;
        for ib in 0..QK_K / 32 {
            let sc = wb[66 + ib];
            let ls = [2 * (sc & 0xf) as i32 + 1, 2 * (sc >> 4) as i32 + 1];
            for half in 0..2 {
                let mut sumi = 0i32;
                for l in 2 * half..2 * half + 2 {
                    let q2 = u16_at(wb, 2 + 2 * (4 * ib + l));
                    let grid = IQ2XS_GRID[(q2 & 511) as usize].to_le_bytes();
                    let signs = KSIGNS_IQ2XS[(q2 >> 9) as usize];
                    sumi += signed_dot(grid, signs, &xb.qs[32 * ib + 8 * l..]);
                }
                bsum += sumi * ls[half];
            }
        }
        sumf += d * bsum as f32;
    }
    0.125 * sumf
}

/// IQ2_S row · Q8_K row (`ggml_vec_dot_iq2_s_q8_K_generic`): 10-bit grid indices, explicit
/// sign bytes.
pub fn dot_iq2_s(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let (qs, signs, qh, scales) = (2, 2 + QK_K / 8, 2 + QK_K / 4, 2 + QK_K / 4 + QK_K / 32);
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ2_S.block_bytes()).zip(x) {
        let d = f16_at(wb, 0) * xb.d;
        let mut bsum = 0i32;
        for ib in 0..QK_K / 32 {
            let sc = wb[scales + ib];
            let (ls1, ls2) = (1 + 2 * (sc & 0xf) as i32, 1 + 2 * (sc >> 4) as i32);
            let h = wb[qh + ib] as usize;
            let mut sumi = [0i32; 2];
            for l in 0..4 {
                let index = wb[qs + 4 * ib + l] as usize | ((h << (8 - 2 * l)) & 0x300);
                let grid = IQ2S_GRID[index].to_le_bytes();
                let s = wb[signs + 4 * ib + l];
                sumi[l / 2] += signed_dot(grid, s, &xb.qs[32 * ib + 8 * l..]);
            }
            bsum += ls1 * sumi[0] + ls2 * sumi[1];
        }
        sumf += d * bsum as f32;
    }
    0.125 * sumf
}

/// IQ3_XXS row · Q8_K row (`ggml_vec_dot_iq3_xxs_q8_K_generic`): the 1/4 of the scale applied
/// once to the row's sum.
pub fn dot_iq3_xxs(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let gas = 2 + QK_K / 4;
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ3_XXS.block_bytes()).zip(x) {
        let d = f16_at(wb, 0) * xb.d;
        let mut bsum = 0i32;
        for ib in 0..QK_K / 32 {
            let aux = u32_at(wb, gas + 4 * ib);
            let ls = 2 * (aux >> 28) as i32 + 1;
            let q3 = 2 + 8 * ib;
            let mut sumi = 0i32;
            for l in 0..4 {
                let grid = grid_pair(
                    IQ3XXS_GRID[wb[q3 + 2 * l] as usize],
                    IQ3XXS_GRID[wb[q3 + 2 * l + 1] as usize],
                );
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                sumi += signed_dot(grid, signs, &xb.qs[32 * ib + 8 * l..]);
            }
            bsum += sumi * ls;
        }
        sumf += d * bsum as f32;
    }
    0.25 * sumf
}

/// IQ3_S row · Q8_K row (`ggml_vec_dot_iq3_s_q8_K_generic`): 9-bit grid indices, explicit sign
/// bytes, a 4-bit scale per 32 values.
pub fn dot_iq3_s(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let (qs, qh, signs, scales) = (2, 2 + QK_K / 4, 2 + QK_K / 4 + QK_K / 32, 106);
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ3_S.block_bytes()).zip(x) {
        let d = f16_at(wb, 0) * xb.d;
        let mut bsum = 0i32;
        for ib in 0..QK_K / 32 {
            let sc = wb[scales + ib / 2];
            let nibble = if ib % 2 == 0 { sc & 0xf } else { sc >> 4 };
            let ls = 2 * nibble as i32 + 1;
            let h = wb[qh + ib] as usize;
            let mut sumi = 0i32;
            for l in 0..4 {
                let i1 = wb[qs + 8 * ib + 2 * l] as usize | ((h << (8 - 2 * l)) & 256);
                let i2 = wb[qs + 8 * ib + 2 * l + 1] as usize | ((h << (7 - 2 * l)) & 256);
                let grid = grid_pair(IQ3S_GRID[i1], IQ3S_GRID[i2]);
                let s = wb[signs + 4 * ib + l];
                sumi += signed_dot(grid, s, &xb.qs[32 * ib + 8 * l..]);
            }
            bsum += sumi * ls;
        }
        sumf += d * bsum as f32;
    }
    sumf
}

/// IQ1_S row · Q8_K row (`ggml_vec_dot_iq1_s_q8_K_generic`): the ±1/8 shift of each 32 values
/// taken from the activations' per-16 sums.
pub fn dot_iq1_s(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ1_S.block_bytes()).zip(x) {
        let (mut sumi, mut sumi1) = (0i32, 0i32);
        for ib in 0..QK_K / 32 {
            let qh = u16_at(wb, 2 + QK_K / 8 + 2 * ib);
            let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
            let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
            let mut lsum = 0i32;
            for l in 0..4 {
                let index = wb[2 + 4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                lsum += grid1_dot(IQ1S_GRID[index], &xb.qs[32 * ib + 8 * l..]);
            }
            sumi += ls * lsum;
            sumi1 += ls * delta * (xb.bsums[2 * ib] as i32 + xb.bsums[2 * ib + 1] as i32);
        }
        sumf += f16_at(wb, 0) * xb.d * (sumi as f32 + IQ1_DELTA * sumi1 as f32);
    }
    sumf
}

/// IQ1_M row · Q8_K row (`ggml_vec_dot_iq1_m_q8_K_generic`): a shift sign per 8 values, so the
/// shift's sums are taken from the activations directly.
pub fn dot_iq1_m(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let (qs, qh, scales) = (0, QK_K / 8, QK_K / 8 + QK_K / 16);
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::IQ1_M.block_bytes()).zip(x) {
        let sc = |i: usize| u16_at(wb, scales + 2 * i);
        let bits =
            (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
        let d = half::f16::from_bits(bits).to_f32();
        let (mut sumi1, mut sumi2) = (0i32, 0i32);
        for ib in 0..QK_K / 32 {
            let h = [wb[qh + 2 * ib] as u16, wb[qh + 2 * ib + 1] as u16];
            let delta = [
                if h[0] & 0x08 != 0 { -1 } else { 1 },
                if h[0] & 0x80 != 0 { -1 } else { 1 },
                if h[1] & 0x08 != 0 { -1 } else { 1 },
                if h[1] & 0x80 != 0 { -1 } else { 1 },
            ];
            let (mut sum1, mut sum2) = ([0i32; 2], [0i32; 2]);
            for l in 0..4 {
                let index = wb[qs + 4 * ib + l] as usize
                    | ((h[l / 2] << (8 - 4 * (l % 2))) & 0x700) as usize;
                let q8 = &xb.qs[32 * ib + 8 * l..32 * ib + 8 * l + 8];
                sum1[l / 2] += grid1_dot(IQ1S_GRID[index], q8);
                sum2[l / 2] += q8.iter().map(|&v| v as i32).sum::<i32>() * delta[l];
            }
            let s = sc(ib / 2);
            let ls1 = 2 * ((s >> (6 * (ib % 2))) & 0x7) as i32 + 1;
            let ls2 = 2 * ((s >> (6 * (ib % 2) + 3)) & 0x7) as i32 + 1;
            sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
            sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
        }
        sumf += d * xb.d * (sumi1 as f32 + IQ1_DELTA * sumi2 as f32);
    }
    sumf
}

/// A trit stored base-3 scaled to a byte, times 3^n, back to −1, 0 or 1 (TQ1_0's packing).
#[inline]
fn trit(byte: u8, pow3: u8) -> i32 {
    ((byte.wrapping_mul(pow3) as u16 * 3) >> 8) as i32 - 1
}

/// TQ1_0 row · Q8_K row (`ggml_vec_dot_tq1_0_q8_K_generic`).
pub fn dot_tq1_0(w: &[u8], x: &[BlockQ8K]) -> f32 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::TQ1_0.block_bytes()).zip(x) {
        let mut sum = 0i32;
        // 32 bytes × 5 trits (values 0..160), 16 bytes × 5 trits (160..240), then the 4 bytes
        // of `qh` × 4 trits (240..256).
        for (start, len, trits) in [(0, 32, 5), (32, 16, 5), (48, 4, 4)] {
            for l in 0..trits {
                for m in 0..len {
                    let y = xb.qs[start * 5 + l * len + m] as i32;
                    sum += trit(wb[start + m], POW3[l]) * y;
                }
            }
        }
        sumf += sum as f32 * (f16_at(wb, 52) * xb.d);
    }
    sumf
}

/// TQ2_0 row · Q8_K row (`ggml_vec_dot_tq2_0_q8_K_generic`).
pub fn dot_tq2_0(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w.chunks_exact(GgmlType::TQ2_0.block_bytes()).zip(x) {
        let mut sumi = 0i32;
        for j in (0..64).step_by(32) {
            for l in 0..4 {
                for k in 0..32 {
                    let q = ((wb[j + k] >> (2 * l)) & 3) as i32 - 1;
                    sumi += xb.qs[j * 4 + l * 32 + k] as i32 * q;
                }
            }
        }
        sumf += sumi as f32 * (xb.d * f16_at(wb, 64));
    }
    sumf
}

/// Q1_0 row · Q8_0 row (`ggml_vec_dot_q1_0_q8_0_generic`): each 128-value weight block against
/// four 32-value activation blocks, each of those scaled by its own (f16) `d` in f32 before the
/// weight's.
pub fn dot_q1_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xs) in w
        .chunks_exact(GgmlType::Q1_0.block_bytes())
        .zip(x.chunks_exact(4))
    {
        let d0 = f16_at(wb, 0);
        let mut sumi = 0.0f32;
        for (k, yb) in xs.iter().enumerate() {
            let mut sumi_block = 0i32;
            for j in 0..32 {
                let q = yb.qs[j] as i32;
                sumi_block += if (wb[2 + 4 * k + j / 8] >> (j % 8)) & 1 != 0 {
                    q
                } else {
                    -q
                };
            }
            sumi += yb.d * sumi_block as f32;
        }
        sumf += d0 * sumi;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::CpuBackend;
    use super::super::kernels::{BlockQ8, BlockQ8K, Kernels, TypeKernels};
    use super::super::portable::tests::{activations, random_row};
    use super::super::portable::{kernels, quantize_q8, quantize_q8k};
    use crate::backend::{CoreOps, ExpertMatmulParams, MoeOps};
    use crate::gguf::GgmlType;
    use crate::gguf::dequant::dequantize;
    use crate::tensor::Tensor;

    /// The types whose kernels this module holds.
    const TYPES: [GgmlType; 10] = [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::Q1_0,
    ];

    /// A self-contained pseudo-random case of `n` values of type `t` (xorshift bytes, the f16
    /// scale of each block set to a modest value, activations spread over a wide range), so the
    /// recorded llama.cpp results below stay tied to these inputs whatever other tests' helpers
    /// become.
    fn case(t: GgmlType, n: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        };
        let bb = t.block_bytes();
        let mut w: Vec<u8> = (0..n / t.block_len() * bb).map(|_| next()).collect();
        for (i, block) in w.chunks_exact_mut(bb).enumerate() {
            let d = half::f16::from_f32(0.01 + 0.0031 * ((i as u64 + seed) % 7) as f32).to_bits();
            match t {
                // d in the top nibbles of the four scale words.
                GgmlType::IQ1_M => {
                    for k in 0..4 {
                        let at = 48 + 2 * k;
                        let sc = u16::from_le_bytes([block[at], block[at + 1]]) & 0x0fff;
                        let v = sc | (((d >> (4 * k)) & 0xf) << 12);
                        block[at..at + 2].copy_from_slice(&v.to_le_bytes());
                    }
                }
                _ => {
                    let at = match t {
                        GgmlType::TQ1_0 => 52,
                        GgmlType::TQ2_0 => 64,
                        _ => 0,
                    };
                    block[at..at + 2].copy_from_slice(&d.to_le_bytes());
                }
            }
        }
        let x = (0..n)
            .map(|i| {
                (next() as f32 - 127.5) / 64.0 * (1.0 + ((i / 256) as u64 + seed) as f32 * 0.77)
            })
            .collect();
        (w, x)
    }

    /// The kernel's result on `case(t, n, seed)` with the activations quantized by kiln.
    fn run(t: GgmlType, n: usize, seed: u64) -> f32 {
        let (w, x) = case(t, n, seed);
        match kernels().of(t) {
            TypeKernels::Q8(k) => {
                let mut q = vec![BlockQ8::default(); n / 32];
                quantize_q8(&x, &mut q);
                (k.dot)(&w, &q)
            }
            TypeKernels::Q8K(k) => {
                let mut q = vec![BlockQ8K::default(); n / 256];
                quantize_q8k(&x, &mut q);
                (k.dot)(&w, &q)
            }
            TypeKernels::F32(_) => panic!("{t} should take 8-bit activations"),
        }
    }

    /// The length of recorded case `c`: 256 values for the first 12 (one block, Q1_0's two, so
    /// a result is one block's float steps, not absorbed in a longer sum), 2048 after.
    fn case_len(c: usize) -> usize {
        if c < 12 { 256 } else { 2048 }
    }

    /// The results' bits equal those llama.cpp's generic kernels give on the same inputs
    /// (`ggml_vec_dot_*_generic` after `quantize_row_q8_K_ref`/`quantize_row_q8_0_ref`, from the
    /// llama.cpp that llama-cpp-python 0.3.36 vendors, built for x86-64 without FMA so nothing
    /// is contracted), recorded below: the float steps are llama.cpp's, in its order.
    #[test]
    fn results_have_the_bits_of_llama_cpp() {
        for &(t, ref bits) in LLAMA_CPP_BITS {
            for (c, &want) in bits.iter().enumerate() {
                let got = run(t, case_len(c), c as u64);
                assert_eq!(
                    got.to_bits(),
                    want,
                    "{t} case {c}: {got} vs llama.cpp {}",
                    f32::from_bits(want)
                );
            }
        }
    }

    /// `results_have_the_bits_of_llama_cpp`'s record: per type, llama.cpp's result bits on
    /// cases 0..16.
    const LLAMA_CPP_BITS: &[(GgmlType, [u32; 16])] = &[
        (
            GgmlType::IQ2_XXS,
            [
                0xbfd9109e, 0x407e86f1, 0x4218994d, 0xc21bb12a, 0x42e52749, 0xc298ad97, 0xc168720a,
                0x423e741e, 0x42dcd2fb, 0xc31344ba, 0xc29a3095, 0x43d1c77b, 0xc30cfce8, 0xc49544df,
                0xc480274e, 0x440faee6,
            ],
        ),
        (
            GgmlType::IQ2_XS,
            [
                0x4084e3d9, 0x419fa63e, 0xc0be3cd7, 0xc04b3758, 0xc22cd51a, 0xc29431b5, 0x420f1de4,
                0xc27b80da, 0x428b337b, 0xc31cd84f, 0x42eeb48d, 0x4316fab9, 0x443ad51a, 0x43af44dd,
                0xc2497360, 0x44124338,
            ],
        ),
        (
            GgmlType::IQ2_S,
            [
                0x4109c6b3, 0x418e466f, 0xc10f940b, 0x422bbb6d, 0x42f342cd, 0xc11b7d49, 0x41a5f3c2,
                0xc3012072, 0xc280922c, 0xc31d67d6, 0x433152c1, 0xc297011d, 0xc3506aba, 0xc401a120,
                0x447154a8, 0x440bb0d0,
            ],
        ),
        (
            GgmlType::IQ3_XXS,
            [
                0x419e9b3a, 0x42ac56e1, 0x3e7054a5, 0xc1b7b1e1, 0x4295f239, 0xc3c7a27c, 0x449440be,
                0x42cb2ff8, 0xc3338465, 0xc25fd008, 0xc3cf1ebe, 0x432219d1, 0x45228735, 0x45593773,
                0x41d3ecc0, 0x45749e5b,
            ],
        ),
        (
            GgmlType::IQ3_S,
            [
                0x41c2fa85, 0x40951501, 0xc246e50a, 0x4371e92f, 0xc3a2710b, 0xc37037ae, 0xc3a44b71,
                0xc3ce4a35, 0xc3f1ff18, 0x44082e70, 0xc3172ece, 0x431e9644, 0x457fd2f7, 0xc439511d,
                0x43ac1e74, 0x4531a425,
            ],
        ),
        (
            GgmlType::IQ1_S,
            [
                0xbf55be62, 0xc0b425c8, 0xbfee1eb1, 0x404921cb, 0x4168f727, 0xc2246b60, 0x418bf1b9,
                0x4093719c, 0xbfea5912, 0x40d5098f, 0x4038da89, 0xc2107e42, 0x42426585, 0xc3ada0b2,
                0x4308a354, 0x43043a2e,
            ],
        ),
        (
            GgmlType::IQ1_M,
            [
                0x3fc26e6c, 0x3fea2503, 0xbeaffde5, 0xc052027b, 0xc17dbe88, 0xc199ef83, 0x418f0cca,
                0xc0dde752, 0x411a7361, 0x414de3b1, 0xc1515e7c, 0xc112dee7, 0xc2156dd7, 0x421d4f8f,
                0xc2c5408c, 0x42548820,
            ],
        ),
        (
            GgmlType::TQ1_0,
            [
                0xbda8b28c, 0x3c7452a0, 0xbe14c2a7, 0x3e6b35fa, 0x3efb0828, 0xbeacd0e6, 0x3fcb48ae,
                0xbef45765, 0xbfaa3f1d, 0xbf410586, 0x3fbfb0d8, 0x3fc08491, 0x4150aca2, 0x4187163c,
                0x3fd46d51, 0xc080814b,
            ],
        ),
        (
            GgmlType::TQ2_0,
            [
                0xbcd55cb2, 0x3ea05639, 0xbf3f91ff, 0xc055c3b0, 0xbf3ff1a7, 0x3f2d5007, 0xc0910a9d,
                0xbd34b07e, 0xbe15276f, 0x3ef49a7a, 0x40886882, 0xbf1b0957, 0x40e01596, 0xc14ad26f,
                0xbf2e9258, 0x4200abb1,
            ],
        ),
        (
            GgmlType::Q1_0,
            [
                0xbdce4ec6, 0xbf2f6462, 0x3f22c8f3, 0xc021e160, 0x3dc33822, 0x40b2b5f0, 0xbf61f0bb,
                0x3e4e0c30, 0xbeebcce2, 0xc0a4e42e, 0xbe1fc02b, 0x3e9a9e00, 0x41110dc8, 0xc1ea4dfd,
                0x40102e87, 0xc18aeab4,
            ],
        ),
    ];

    /// An independent truth for the integer kernels: Σ (dequantized weight) · (dequantized
    /// activation, the 8-bit blocks' d·q), in f64, is what they compute exactly up to float
    /// rounding, so a wrong grid index, sign, scale, shift or pairing of weight and activation
    /// blocks shows far above the 1e-5 allowed (rounding is ~1e-7 of Σ|terms|). The weights
    /// decode through `gguf::dequant`, itself checked against llama.cpp.
    #[test]
    fn integer_kernels_equal_dequantized_products() {
        let table = kernels();
        let n = 1024;
        for t in TYPES {
            for seed in 0..4u64 {
                let w = random_row(t, n, seed * 131 + t.id() as u64);
                let x = activations(n, seed + 17);
                let mut wf = vec![0f32; n];
                dequantize(t, &w, &mut wf);
                let (got, xd): (f32, Vec<f64>) = match table.of(t) {
                    TypeKernels::Q8(k) => {
                        let mut q = vec![BlockQ8::default(); n / 32];
                        quantize_q8(&x, &mut q);
                        let xd = q
                            .iter()
                            .flat_map(|b| b.qs.map(|v| b.d as f64 * v as f64))
                            .collect();
                        ((k.dot)(&w, &q), xd)
                    }
                    TypeKernels::Q8K(k) => {
                        let mut q = vec![BlockQ8K::default(); n / 256];
                        quantize_q8k(&x, &mut q);
                        let xd = q
                            .iter()
                            .flat_map(|b| b.qs.map(|v| b.d as f64 * v as f64))
                            .collect();
                        ((k.dot)(&w, &q), xd)
                    }
                    TypeKernels::F32(_) => panic!("{t} should take 8-bit activations"),
                };
                let want: f64 = wf.iter().zip(&xd).map(|(&a, &b)| a as f64 * b).sum();
                let scale: f64 = wf
                    .iter()
                    .zip(&xd)
                    .map(|(&a, &b)| (a as f64 * b).abs())
                    .sum();
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * scale,
                    "{t} seed {seed}: got {got}, want {want}, |terms| {scale}"
                );
            }
        }
    }

    /// One weight row times one activation row through `kernels`: the input quantized by the
    /// table's quantizer, then the type's row kernel.
    fn row_dot(kernels: &Kernels, t: GgmlType, w: &[u8], x: &[f32]) -> f32 {
        match kernels.of(t) {
            TypeKernels::Q8(k) => {
                let mut q = vec![BlockQ8::default(); x.len() / 32];
                (kernels.quantize_q8)(x, &mut q);
                (k.dot)(w, &q)
            }
            TypeKernels::Q8K(k) => {
                let mut q = vec![BlockQ8K::default(); x.len() / 256];
                (kernels.quantize_q8k)(x, &mut q);
                (k.dot)(w, &q)
            }
            TypeKernels::F32(dot) => dot(w, x),
        }
    }

    /// The backend's matmul passes run these types through the table on the row kernels (with
    /// repacking off, as it is for all but Q1_0 on x86 and for all on other CPUs): one token,
    /// prefills of five and thirteen (the eight-, four- and one-row kernels in turn), verify
    /// passes of two, three and six (the grid types' short tails as one padded call), and expert
    /// matmuls of up to ten slots per expert; each output has the bits of the row kernel on its
    /// input row. Then a pass mixing Q1_0 with Q4_0 (both on Q8_0 activations) on a backend that
    /// repacks where the CPU has the GEMM, within the GEMM tests' 1e-4 relative.
    #[test]
    fn matmul_passes_run_these_types() {
        let be = CpuBackend::new(2).unwrap().with_repacking(false);
        let (k, m) = (512, 24);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for t in TYPES {
            assert!(!be.packs(t), "{t} has no repacked layout");
            let bytes: Vec<u8> = (0..m)
                .flat_map(|r| random_row(t, k, r as u64 + 1))
                .collect();
            let tensor = Tensor::from_bytes("w", t, vec![k, m], bytes);
            let w = be.weight(&tensor).unwrap();
            for tokens in [1, 2, 3, 5, 6, 13] {
                let x = activations(tokens * k, 3);
                let mut out = vec![0.0; tokens * m];
                be.matmul(&x, &w, tokens, &mut out);
                let want: Vec<f32> = (0..tokens)
                    .flat_map(|i| (0..m).map(move |r| (i, r)))
                    .map(|(i, r)| row_dot(&be.kernels, t, w.row(r), &x[i * k..(i + 1) * k]))
                    .collect();
                assert_eq!(bits(&out), bits(&want), "{t}, {tokens} tokens");
            }

            // Four experts of 8 rows; token i's slots use experts i and i + 2 (mod 4).
            let (n_exp, stride, tokens, n_used) = (4, 8, 19, 2);
            let bytes: Vec<u8> = (0..n_exp * stride)
                .flat_map(|r| random_row(t, k, r as u64 + 40))
                .collect();
            let stacked = Tensor::from_bytes("exps", t, vec![k, stride, n_exp], bytes);
            let ws = be.weight(&stacked).unwrap();
            let selected: Vec<f32> = (0..tokens * n_used)
                .map(|s| ((s / n_used + 2 * (s % n_used)) % n_exp) as f32)
                .collect();
            let x = activations(tokens * k, 5);
            let p = ExpertMatmulParams {
                rows: tokens,
                n_used,
                per_slot_input: false,
                expert_rows: stride,
                expert_stride: stride,
                row_offset: 0,
            };
            let mut out = vec![0.0; tokens * n_used * stride];
            be.expert_matmul(&x, &ws, &selected, &mut out, &p);
            let want: Vec<f32> = (0..tokens * n_used)
                .flat_map(|s| (0..stride).map(move |r| (s, r)))
                .map(|(s, r)| {
                    let (i, e) = (s / n_used, selected[s] as usize);
                    row_dot(
                        &be.kernels,
                        t,
                        ws.row(e * stride + r),
                        &x[i * k..(i + 1) * k],
                    )
                })
                .collect();
            assert_eq!(bits(&out), bits(&want), "{t} experts");
        }

        // 32 rows each, so both are repacked where the CPU has their GEMM kernels.
        let be = CpuBackend::new(2).unwrap();
        let weight = |t: GgmlType| {
            let bytes: Vec<u8> = (0..32)
                .flat_map(|r| random_row(t, k, r as u64 + 9))
                .collect();
            let w = be
                .weight(&Tensor::from_bytes("w", t, vec![k, 32], bytes))
                .unwrap();
            assert_eq!(w.packed.is_some(), be.packs(t), "{t}");
            w
        };
        let (w1, w4) = (weight(GgmlType::Q1_0), weight(GgmlType::Q4_0));
        let tokens = 5;
        let x = activations(tokens * k, 7);
        let (mut o1, mut o4) = (vec![0.0; tokens * 32], vec![0.0; tokens * 32]);
        be.matmul_many(&x, &[&w1, &w4], tokens, &mut [&mut o1, &mut o4]);
        for i in 0..tokens {
            let xi = &x[i * k..(i + 1) * k];
            for (t, w, out) in [(GgmlType::Q1_0, &w1, &o1), (GgmlType::Q4_0, &w4, &o4)] {
                for r in 0..32 {
                    let want = row_dot(&be.kernels, t, w.row(r), xi);
                    let got = out[i * 32 + r];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{t} row {r}"
                    );
                }
            }
        }
    }
}
