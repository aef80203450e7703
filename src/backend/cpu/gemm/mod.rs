//! GEMM kernels over repacked weights (`repack.rs`), written once against `Isa` (`isa.rs`) and
//! instantiated per instruction set by each architecture (`x86/gemm.rs`: AVX-512 VNNI, AVX2 with
//! or without AVX-VNNI; `arm/gemm.rs`: NEON with SDOT). One kernel call multiplies a group of 16
//! weight rows by a tile of tokens (8 with AVX-512, 4 with AVX2 and NEON; 1 when generating): each
//! 64-byte weight line is loaded once and multiplied, as integers, with every token's 8-bit
//! activations, so prefill is a real GEMM rather than a loop of dot products. A register holds
//! `LANES` rows (16 with AVX-512; AVX2 takes the 16 rows as two halves of 8, or for one token as
//! pairs of registers; NEON as four quarters of 4). How a call walks its group (tiles, spans,
//! weights fetched ahead) is `group.rs`; here are the kernels of each type.
//!
//! Integer arithmetic is exact and each token's float operations are the same whatever the tile
//! size, so a row's result does not depend on how many tokens were batched with it. Generation on
//! 1-2B models is bound by how fast one core turns weight bytes into dot products, so the K-quant
//! kernels save operations where the integer ranges allow (Q4_K's high nibbles in place with
//! VNNI; 16-bit sums scaled by `vpmaddwd` without it; minimums two sub-blocks at a time) and where
//! the repacked layout can make decoding cheaper (Q6_K's six-bit lines).
#![allow(clippy::needless_range_loop)] // tile kernels index parallel arrays with one index

pub(crate) mod f16;
mod group;

use super::isa::Isa;
use crate::backend::cpu::kernels::{ActBlock, BlockQ8, BlockQ8K, Level, PackedKernel};
use crate::gguf::GgmlType;
use crate::gguf::iq::{KVALUES_IQ4NL, KVALUES_MXFP4};
pub(crate) use group::{Kernel, Tile, run_group};

/// Four activation bytes at `p` as one i32 (for broadcasting).
#[inline(always)]
pub(crate) unsafe fn quad(p: *const i8) -> i32 {
    unsafe { (p as *const i32).read_unaligned() }
}

/// An i16 pair vector from two i32 vectors whose values fit in i16.
#[inline(always)]
unsafe fn pair<V: Isa>(lo: V::I, hi: V::I) -> V::I {
    unsafe { V::or(V::and32(lo, 0xFFFF), V::shl32::<16>(hi)) }
}

/// Q4_K (and Q5_K with `Q5`): eight 32-value sub-blocks with 6-bit scales and minimums.
pub struct KQ4<const Q5: bool>;

impl<const Q5: bool> Kernel<BlockQ8K> for KQ4<Q5> {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8K, T>, acc: &mut [V::F; T]) {
        unsafe {
            let s = Q5 as usize; // Q5_K has its masks as section 1
            // Q5_K's sub-blocks are 256 bytes of lines and then 64 of their masks.
            let (region, unit) = if Q5 { (2560, 320) } else { (2048, 256) };
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let mut acc_s = [V::zero(); T];
                // Q4_K with 32-bit unsigned-by-signed dot products (VNNI) takes its high nibbles
                // in place, as 16 times their value (one operation less per line), summed apart
                // (SDOT's operands are signed: NEON shifts them down); without VNNI, a
                // sub-block's products are summed in 16 bits (8 · 2 · 15 · 128 < 2^15) and
                // scaled in one step.
                let in_place = V::WIDE_DOT && V::DOT_U8 && !Q5;
                let narrow = !V::WIDE_DOT && !Q5;
                for j in 0..8 {
                    let mut acc_j = [V::zero(); T];
                    let mut acc_h = [V::zero(); T];
                    for o in 0..4 {
                        let line = V::load(tile.at(0, region, b, j * unit + o * 64 + tile.line));
                        let mut lo = V::and8(line, 0x0F);
                        let mut hi = if in_place {
                            V::and8(line, 0xF0u8 as i8)
                        } else {
                            V::and8(V::srl16::<4>(line), 0x0F)
                        };
                        if Q5 {
                            let q = j * unit + 256 + 16 * o;
                            lo = V::or_where(lo, tile.mask(0, region, b, q), 16);
                            hi = V::or_where(hi, tile.mask(0, region, b, q + 8), 16);
                        }
                        let k = 32 * j + 8 * o;
                        for t in 0..T {
                            let xq = tile.x(t, b).qs.as_ptr();
                            let (x_lo, x_hi) = (quad(xq.add(k)), quad(xq.add(k + 4)));
                            if narrow {
                                acc_j[t] = V::dot16(acc_j[t], lo, x_lo);
                                acc_j[t] = V::dot16(acc_j[t], hi, x_hi);
                            } else if in_place {
                                acc_j[t] = V::dot(acc_j[t], lo, x_lo);
                                acc_h[t] = V::dot(acc_h[t], hi, x_hi);
                            } else {
                                acc_j[t] = V::dot(acc_j[t], lo, x_lo);
                                acc_j[t] = V::dot(acc_j[t], hi, x_hi);
                            }
                        }
                    }
                    let scale = V::u8s(tile.at(1 + s, 128, b, 16 * j + tile.lane));
                    if narrow {
                        let scale2 = pair::<V>(scale, scale);
                        for t in 0..T {
                            acc_s[t] = V::madd16_by(acc_s[t], acc_j[t], scale2);
                        }
                        continue;
                    }
                    for t in 0..T {
                        if in_place {
                            acc_j[t] = V::add(acc_j[t], V::sra32::<4>(acc_h[t]));
                        }
                        acc_s[t] = V::mul_add(acc_s[t], acc_j[t], scale);
                    }
                }
                // Σ_j min_j · (activation sum of sub-block j), two sub-blocks at a time: the
                // minimums are stored as 16-bit pairs' bytes, (min 2i, min 2i + 1) per row.
                let mut acc_m = [V::zero(); T];
                for i in 0..4 {
                    let m = V::u8_pairs(tile.at(2 + s, 128, b, 32 * i + 2 * tile.lane));
                    for t in 0..T {
                        let sums = tile.x(t, b).sums32.as_ptr().add(2 * i);
                        acc_m[t] = V::madd16(acc_m[t], m, quad(sums as *const i8));
                    }
                }
                let d = V::f16s(tile.at(3 + s, 32, b, 2 * tile.lane));
                let dmin = V::f16s(tile.at(4 + s, 32, b, 2 * tile.lane));
                for t in 0..T {
                    let dx = V::fsplat(tile.x(t, b).d);
                    acc[t] = V::fmadd(V::cvt(acc_s[t]), V::mul(d, dx), acc[t]);
                    acc[t] = V::fnmadd(V::cvt(acc_m[t]), V::mul(dmin, dx), acc[t]);
                }
            }
        }
    }
}

/// Σ_i over the eight pairs of 16-value sub-blocks of `pairs[i]` · the activation sums of
/// sub-blocks 2i and 2i + 1.
#[inline(always)]
unsafe fn pair_sums<V: Isa, const T: usize>(
    tile: &Tile<BlockQ8K, T>,
    b: usize,
    pairs: &[V::I; 8],
) -> [V::I; T] {
    unsafe {
        let mut acc = [V::zero(); T];
        for i in 0..8 {
            for t in 0..T {
                let bs = quad(tile.x(t, b).bsums.as_ptr().add(2 * i) as *const i8);
                acc[t] = V::madd16(acc[t], pairs[i], bs);
            }
        }
        acc
    }
}

/// The scaled integer sums Σ_s scale_s · (codes of sub-block s · activations) of one block of a
/// 16-sub-block type; `sub_block(s)` gives sub-block s's four operands and its scales, decoded as
/// they are used (a block's worth of decoded operands held at once would not fit in registers).
#[inline(always)]
unsafe fn sixteen_sub_blocks<V: Isa, const T: usize>(
    tile: &Tile<BlockQ8K, T>,
    b: usize,
    sub_block: impl Fn(usize) -> ([V::I; 4], V::I),
) -> [V::I; T] {
    unsafe {
        let mut acc_s = [V::zero(); T];
        for s in 0..16 {
            let (operands, scale) = sub_block(s);
            let mut acc_j = [V::zero(); T];
            for t in 0..T {
                let xq = tile.x(t, b).qs.as_ptr().add(16 * s);
                for k in 0..4 {
                    acc_j[t] = V::dot(acc_j[t], operands[k], quad(xq.add(4 * k)));
                }
            }
            for t in 0..T {
                acc_s[t] = V::mul_add(acc_s[t], acc_j[t], scale);
            }
        }
        acc_s
    }
}

/// Q6_K: sixteen 16-value sub-blocks with signed 8-bit scales; weights d·scale·(u − 32).
pub struct KQ6;

impl Kernel<BlockQ8K> for KQ6 {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8K, T>, acc: &mut [V::F; T]) {
        unsafe {
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let mut acc_s = [V::zero(); T];
                for s in 0..16 {
                    // Sub-block s: its three six-bit lines, quad k in line k's low six bits
                    // and quad 3 in their top two.
                    let l0 = V::load(tile.at(0, 3072, b, s * 192 + tile.line));
                    let l1 = V::load(tile.at(0, 3072, b, s * 192 + 64 + tile.line));
                    let l2 = V::load(tile.at(0, 3072, b, s * 192 + 128 + tile.line));
                    let top = V::or(
                        V::or(
                            V::and8(V::srl16::<6>(l0), 0x03),
                            V::and8(V::srl16::<4>(l1), 0x0C),
                        ),
                        V::and8(V::srl16::<2>(l2), 0x30),
                    );
                    let q = [V::and8(l0, 0x3F), V::and8(l1, 0x3F), V::and8(l2, 0x3F), top];
                    let scale = V::i8s(tile.at(2, 256, b, 16 * s + tile.lane));
                    if !V::WIDE_DOT {
                        // Without VNNI, two quads' products summed in 16 bits (2 · 2 · 63 · 128 <
                        // 2^15), scaled in one vpmaddwd each.
                        let scale2 = pair::<V>(scale, scale);
                        for t in 0..T {
                            let xq = tile.x(t, b).qs.as_ptr().add(16 * s);
                            for half in 0..2 {
                                let (k0, k1) = (2 * half, 2 * half + 1);
                                let sum = V::dot16(V::zero(), q[k0], quad(xq.add(4 * k0)));
                                let sum = V::dot16(sum, q[k1], quad(xq.add(4 * k1)));
                                acc_s[t] = V::madd16_by(acc_s[t], sum, scale2);
                            }
                        }
                        continue;
                    }
                    let mut acc_j = [V::zero(); T];
                    for t in 0..T {
                        let xq = tile.x(t, b).qs.as_ptr().add(16 * s);
                        for k in 0..4 {
                            acc_j[t] = V::dot(acc_j[t], q[k], quad(xq.add(4 * k)));
                        }
                    }
                    for t in 0..T {
                        acc_s[t] = V::mul_add(acc_s[t], acc_j[t], scale);
                    }
                }
                let mut pairs = [V::zero(); 8];
                for i in 0..8 {
                    pairs[i] = pair::<V>(
                        V::i8s(tile.at(2, 256, b, 32 * i + tile.lane)),
                        V::i8s(tile.at(2, 256, b, 32 * i + 16 + tile.lane)),
                    );
                }
                let acc_o = pair_sums::<V, T>(tile, b, &pairs);
                let d = V::f16s(tile.at(3, 32, b, 2 * tile.lane));
                for t in 0..T {
                    let total = V::sub(acc_s[t], V::shl32::<5>(acc_o[t]));
                    acc[t] = V::fmadd(V::cvt(total), V::mul(d, V::fsplat(tile.x(t, b).d)), acc[t]);
                }
            }
        }
    }
}

/// The four operands of 2-bit line `line` (values 4k..4k+3 of a 16-value sub-block).
#[inline(always)]
unsafe fn two_bit<V: Isa>(line: V::I) -> [V::I; 4] {
    unsafe {
        [
            V::and8(line, 3),
            V::and8(V::srl16::<2>(line), 3),
            V::and8(V::srl16::<4>(line), 3),
            V::and8(V::srl16::<6>(line), 3),
        ]
    }
}

/// Q2_K: sixteen 16-value sub-blocks, 2-bit codes, 4-bit scales and minimums.
pub struct KQ2;

impl Kernel<BlockQ8K> for KQ2 {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8K, T>, acc: &mut [V::F; T]) {
        unsafe {
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let acc_s = sixteen_sub_blocks::<V, T>(tile, b, |s| {
                    (
                        two_bit::<V>(V::load(tile.at(0, 1024, b, s * 64 + tile.line))),
                        V::and32(V::u8s(tile.at(1, 256, b, 16 * s + tile.lane)), 0xF),
                    )
                });
                let mut pairs = [V::zero(); 8];
                for i in 0..8 {
                    pairs[i] = pair::<V>(
                        V::srl32::<4>(V::u8s(tile.at(1, 256, b, 32 * i + tile.lane))),
                        V::srl32::<4>(V::u8s(tile.at(1, 256, b, 32 * i + 16 + tile.lane))),
                    );
                }
                let acc_m = pair_sums::<V, T>(tile, b, &pairs);
                let d = V::f16s(tile.at(2, 32, b, 2 * tile.lane));
                let dmin = V::f16s(tile.at(3, 32, b, 2 * tile.lane));
                for t in 0..T {
                    let dx = V::fsplat(tile.x(t, b).d);
                    acc[t] = V::fmadd(V::cvt(acc_s[t]), V::mul(d, dx), acc[t]);
                    acc[t] = V::fnmadd(V::cvt(acc_m[t]), V::mul(dmin, dx), acc[t]);
                }
            }
        }
    }
}

/// Q3_K: sixteen 16-value sub-blocks, 3-bit codes (2-bit lines plus masks), signed 6-bit scales;
/// weights d·scale·(u − 4).
pub struct KQ3;

impl Kernel<BlockQ8K> for KQ3 {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8K, T>, acc: &mut [V::F; T]) {
        unsafe {
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let scale = |s: usize| V::i8s(tile.at(2, 256, b, 16 * s + tile.lane));
                let acc_s = sixteen_sub_blocks::<V, T>(tile, b, |s| {
                    // Sub-blocks 2p and 2p + 1: their two lines, then their eight masks.
                    let unit = (s / 2) * 192;
                    let line = tile.at(0, 1536, b, unit + (s % 2) * 64 + tile.line);
                    let mut operands = two_bit::<V>(V::load(line));
                    for (k, op) in operands.iter_mut().enumerate() {
                        let m = tile.mask(0, 1536, b, unit + 128 + (s % 2) * 32 + 8 * k);
                        *op = V::or_where(*op, m, 4);
                    }
                    (operands, scale(s))
                });
                let mut pairs = [V::zero(); 8];
                for i in 0..8 {
                    pairs[i] = pair::<V>(scale(2 * i), scale(2 * i + 1));
                }
                let acc_o = pair_sums::<V, T>(tile, b, &pairs);
                let d = V::f16s(tile.at(3, 32, b, 2 * tile.lane));
                for t in 0..T {
                    let total = V::sub(acc_s[t], V::shl32::<2>(acc_o[t]));
                    acc[t] = V::fmadd(V::cvt(total), V::mul(d, V::fsplat(tile.x(t, b).d)), acc[t]);
                }
            }
        }
    }
}

/// IQ4_NL's levels plus 128: with AVX-512's unsigned-by-signed products, the looked-up bytes
/// are the offset codes `dot_i8` would otherwise make per line with an extra operation.
/// (1B shape, IQ4_XS, 2 threads, pp128: +2 %, three alternations.)
const KVALUES_IQ4NL_BIASED: [i8; 16] = {
    let mut out = [0i8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (KVALUES_IQ4NL[i] as u8 ^ 0x80) as i8;
        i += 1;
    }
    out
};

/// IQ4_XS: eight 32-value sub-blocks of nibbles into IQ4_NL's signed levels, each with a
/// 6-bit scale (stored less 32, as i8).
pub struct KIQ4XS;

impl Kernel<BlockQ8K> for KIQ4XS {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8K, T>, acc: &mut [V::F; T]) {
        unsafe {
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let mut acc_s = [V::zero(); T];
                for j in 0..8 {
                    let mut acc_j = [V::zero(); T];
                    for o in 0..4 {
                        let line = V::load(tile.at(0, 2048, b, j * 256 + o * 64 + tile.line));
                        let table = if V::I8_OFFSET == 128 {
                            &KVALUES_IQ4NL_BIASED
                        } else {
                            &KVALUES_IQ4NL
                        };
                        let lo = V::levels(V::and8(line, 0x0F), table);
                        let hi = V::levels(V::and8(V::srl16::<4>(line), 0x0F), table);
                        let k = 32 * j + 8 * o;
                        for t in 0..T {
                            let xq = tile.x(t, b).qs.as_ptr();
                            if V::I8_OFFSET == 128 {
                                acc_j[t] = V::dot(acc_j[t], lo, quad(xq.add(k)));
                                acc_j[t] = V::dot(acc_j[t], hi, quad(xq.add(k + 4)));
                            } else {
                                acc_j[t] = V::dot_i8(acc_j[t], lo, quad(xq.add(k)));
                                acc_j[t] = V::dot_i8(acc_j[t], hi, quad(xq.add(k + 4)));
                            }
                        }
                    }
                    let scale = V::i8s(tile.at(1, 128, b, 16 * j + tile.lane));
                    for t in 0..T {
                        let mut sum = acc_j[t];
                        if V::I8_OFFSET != 0 {
                            let bs = &tile.x(t, b).bsums;
                            let x_sum = bs[2 * j] as i32 + bs[2 * j + 1] as i32;
                            sum = V::sub_splat(sum, V::I8_OFFSET * x_sum);
                        }
                        acc_s[t] = V::mul_add(acc_s[t], sum, scale);
                    }
                }
                let d = V::f16s(tile.at(2, 32, b, 2 * tile.lane));
                for t in 0..T {
                    let dx = V::fsplat(tile.x(t, b).d);
                    acc[t] = V::fmadd(V::cvt(acc_s[t]), V::mul(d, dx), acc[t]);
                }
            }
        }
    }
}

/// The 32-value block types against Q8 activations: `KIND` is one of the `Q*` constants below.
pub struct K32<const KIND: u8>;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;
const IQ4_NL: u8 = 5;
const MXFP4: u8 = 6;

impl<const KIND: u8> Kernel<BlockQ8> for K32<KIND> {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8, T>, acc: &mut [V::F; T]) {
        unsafe {
            let q5 = KIND == Q5_0 || KIND == Q5_1;
            let with_min = KIND == Q4_1 || KIND == Q5_1;
            // Nibbles that index a table of signed levels.
            let levels = match KIND {
                IQ4_NL => Some(&KVALUES_IQ4NL),
                MXFP4 => Some(&KVALUES_MXFP4),
                _ => None,
            };
            // Codes are u = w + offset for the signed types.
            let offset = match KIND {
                Q4_0 => 8,
                Q5_0 => 16,
                Q8_0 | IQ4_NL | MXFP4 => V::I8_OFFSET,
                _ => 0,
            };
            let d_sec = if q5 { 2 } else { 1 };
            let region = if q5 { 320 } else { 256 };
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let mut acc_j = [V::zero(); T];
                if KIND == Q8_0 {
                    for q in 0..8 {
                        let line = V::load(tile.at(0, 512, b, q * 64 + tile.line));
                        for t in 0..T {
                            let xq = tile.x(t, b).qs.as_ptr();
                            acc_j[t] = V::dot_i8(acc_j[t], line, quad(xq.add(4 * q)));
                        }
                    }
                } else {
                    for o in 0..4 {
                        // Q5_0/Q5_1: the block's four lines, then their masks.
                        let line = V::load(tile.at(0, region, b, o * 64 + tile.line));
                        let mut lo = V::and8(line, 0x0F);
                        let mut hi = V::and8(V::srl16::<4>(line), 0x0F);
                        if q5 {
                            lo = V::or_where(lo, tile.mask(0, region, b, 256 + 16 * o), 16);
                            hi = V::or_where(hi, tile.mask(0, region, b, 256 + 16 * o + 8), 16);
                        }
                        if let Some(levels) = levels {
                            let (lo, hi) = (V::levels(lo, levels), V::levels(hi, levels));
                            for t in 0..T {
                                let xq = tile.x(t, b).qs.as_ptr();
                                acc_j[t] = V::dot_i8(acc_j[t], lo, quad(xq.add(8 * o)));
                                acc_j[t] = V::dot_i8(acc_j[t], hi, quad(xq.add(8 * o + 4)));
                            }
                            continue;
                        }
                        for t in 0..T {
                            let xq = tile.x(t, b).qs.as_ptr();
                            acc_j[t] = V::dot(acc_j[t], lo, quad(xq.add(8 * o)));
                            acc_j[t] = V::dot(acc_j[t], hi, quad(xq.add(8 * o + 4)));
                        }
                    }
                }
                let d = if KIND == MXFP4 {
                    V::e8m0_halves(tile.at(1, 16, b, tile.lane))
                } else {
                    V::f16s(tile.at(d_sec, 32, b, 2 * tile.lane))
                };
                for t in 0..T {
                    let xb = tile.x(t, b);
                    let sum = if offset != 0 {
                        V::sub_splat(acc_j[t], offset * *tile.xsum[t].add(b))
                    } else {
                        acc_j[t]
                    };
                    acc[t] = V::fmadd(V::cvt(sum), V::mul(d, V::fsplat(xb.d)), acc[t]);
                }
                if with_min {
                    let m = V::f16s(tile.at(d_sec + 1, 32, b, 2 * tile.lane));
                    for t in 0..T {
                        acc[t] = V::fmadd(m, V::fsplat(tile.x(t, b).s), acc[t]);
                    }
                }
            }
        }
    }
}

/// Q1_0: 128 values of one bit each (+1 where set, −1 where clear) and an f16 scale, against
/// four Q8_0 activation blocks. The bits become 0/1 bytes (a masked byte move), so a 32-value
/// block's integer sum is 2·Σ bit·x − Σ x; each is scaled by its activation's d and the four
/// sums by the weight's d, in the order of llama.cpp's generic kernel.
pub struct KQ1;

impl Kernel<BlockQ8> for KQ1 {
    #[inline(always)]
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<BlockQ8, T>, acc: &mut [V::F; T]) {
        unsafe {
            for b in 0..tile.blocks {
                tile.fetch_ahead(b);
                let mut sums = [V::fzero(); T];
                for q in 0..4 {
                    let xb = 4 * b + q;
                    // One token (generation) sums even and odd quads apart: two chains of
                    // four dot products rather than one of eight.
                    let mut acc_j = [[V::zero(); T]; 2];
                    for i in 0..8 {
                        let bits = V::or_where(V::zero(), tile.mask(0, 256, b, 64 * q + 8 * i), 1);
                        let chain = if T == 1 { i % 2 } else { 0 };
                        for t in 0..T {
                            let xq = tile.x(t, xb).qs.as_ptr();
                            let a = &mut acc_j[chain][t];
                            *a = V::dot(*a, bits, quad(xq.add(4 * i)));
                        }
                    }
                    for t in 0..T {
                        let both = V::add(acc_j[0][t], acc_j[1][t]);
                        let sum = V::sub_splat(V::shl32::<1>(both), *tile.xsum[t].add(xb));
                        sums[t] = V::fmadd(V::fsplat(tile.x(t, xb).d), V::cvt(sum), sums[t]);
                    }
                }
                let d = V::f16s(tile.at(1, 32, b, 2 * tile.lane));
                for t in 0..T {
                    acc[t] = V::fmadd(d, sums[t], acc[t]);
                }
            }
        }
    }
}

/// An architecture's GEMM wrappers: `K` instantiated at `level` in a `#[target_feature]`
/// function (None where the level has no GEMM).
pub(crate) trait Instantiate {
    fn group<A: ActBlock, K: Kernel<A>>(level: Level) -> Option<PackedKernel<A>>;
}

/// The GEMM kernel of a 256-value block type at `level`, where there is one.
pub(crate) fn q8k_kernel<I: Instantiate>(
    level: Level,
    t: GgmlType,
) -> Option<PackedKernel<BlockQ8K>> {
    match t {
        GgmlType::Q2_K => I::group::<BlockQ8K, KQ2>(level),
        GgmlType::Q3_K => I::group::<BlockQ8K, KQ3>(level),
        GgmlType::Q4_K => I::group::<BlockQ8K, KQ4<false>>(level),
        GgmlType::Q5_K => I::group::<BlockQ8K, KQ4<true>>(level),
        GgmlType::Q6_K => I::group::<BlockQ8K, KQ6>(level),
        GgmlType::IQ4_XS => I::group::<BlockQ8K, KIQ4XS>(level),
        _ => None,
    }
}

/// The GEMM kernel of a 32-value block type (and Q1_0) at `level`, where there is one.
pub(crate) fn q8_kernel<I: Instantiate>(
    level: Level,
    t: GgmlType,
) -> Option<PackedKernel<BlockQ8>> {
    match t {
        GgmlType::Q4_0 => I::group::<BlockQ8, K32<Q4_0>>(level),
        GgmlType::Q4_1 => I::group::<BlockQ8, K32<Q4_1>>(level),
        GgmlType::Q5_0 => I::group::<BlockQ8, K32<Q5_0>>(level),
        GgmlType::Q5_1 => I::group::<BlockQ8, K32<Q5_1>>(level),
        GgmlType::Q8_0 => I::group::<BlockQ8, K32<Q8_0>>(level),
        GgmlType::IQ4_NL => I::group::<BlockQ8, K32<IQ4_NL>>(level),
        GgmlType::MXFP4 => I::group::<BlockQ8, K32<MXFP4>>(level),
        GgmlType::Q1_0 => I::group::<BlockQ8, KQ1>(level),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
