//! The portable kernels, in plain Rust for every CPU: the reference every instruction-set level's
//! kernels are tested against, and the table (`kernels`) of CPUs without one (or with
//! `KILN_NO_SIMD=1`). Dot products between a weight row in its GGML type and an activation row,
//! as llama.cpp does them: the activation is first quantized to 8 bits once per matmul (per 32
//! values for the 32-block types and Q1_0, per 256 with per-16 sums for the K-quants, the
//! 256-value i-quants and the ternary types), then each weight block is multiplied in integers
//! and scaled once. The grid i-quants', ternary types' and Q1_0's kernels are in `portable_iq`.
//! Unquantized weights take the f32 activation as is.
#![allow(clippy::needless_range_loop)] // block kernels index several arrays with one index

use half::f16;

use super::kernels::{BlockQ8, BlockQ8K, Dot, Kernels, Level, QuantKernels, TypeKernels};
use super::{ggml_math, portable_iq};
use crate::gguf::GgmlType;
use crate::gguf::dequant::{f16_at, q3_k_scales, scale_min_k4};
use crate::gguf::iq::{KVALUES_IQ4NL, KVALUES_MXFP4, e8m0_half};
use crate::gguf::types::QK_K;

/// The table of the portable kernels.
pub fn kernels() -> Kernels {
    Kernels {
        level: Level::Portable,
        types: GgmlType::ALL.map(type_kernels),
        quantize_q8,
        quantize_q8k,
        silu_mul,
        exp_sub,
        round_f16,
        dot4_f16: None,
        f16_panels: None,
        dot_f32_f16,
        axpy_f16,
        axpy_q8_0,
        delta_rule: |s, k, q, v, dbs, out| delta_rule_with(dot_f32s, s, k, q, v, dbs, out),
        attention: None,
    }
}

/// The portable kernels of block type `t`: its activation format and dot product, no four-row or
/// packed kernels.
pub fn type_kernels(t: GgmlType) -> TypeKernels {
    let q8 = |dot: Dot<BlockQ8>| {
        TypeKernels::Q8(QuantKernels {
            dot,
            dot4: None,
            dot8: None,
            packed: None,
            tiled: None,
        })
    };
    let q8k = |dot: Dot<BlockQ8K>| {
        TypeKernels::Q8K(QuantKernels {
            dot,
            dot4: None,
            dot8: None,
            packed: None,
            tiled: None,
        })
    };
    match t {
        GgmlType::F32 => TypeKernels::F32(|w, x| dot_f32(GgmlType::F32, w, x)),
        GgmlType::F16 => TypeKernels::F32(|w, x| dot_f32(GgmlType::F16, w, x)),
        GgmlType::BF16 => TypeKernels::F32(|w, x| dot_f32(GgmlType::BF16, w, x)),
        GgmlType::Q4_0 => q8(|w, x| dot_q8(GgmlType::Q4_0, w, x)),
        GgmlType::Q4_1 => q8(|w, x| dot_q8(GgmlType::Q4_1, w, x)),
        GgmlType::Q5_0 => q8(|w, x| dot_q8(GgmlType::Q5_0, w, x)),
        GgmlType::Q5_1 => q8(|w, x| dot_q8(GgmlType::Q5_1, w, x)),
        GgmlType::Q8_0 => q8(|w, x| dot_q8(GgmlType::Q8_0, w, x)),
        GgmlType::Q8_1 => q8(|w, x| dot_q8(GgmlType::Q8_1, w, x)),
        GgmlType::Q2_K => q8k(|w, x| dot_q8k(GgmlType::Q2_K, w, x)),
        GgmlType::Q3_K => q8k(|w, x| dot_q8k(GgmlType::Q3_K, w, x)),
        GgmlType::Q4_K => q8k(|w, x| dot_q8k(GgmlType::Q4_K, w, x)),
        GgmlType::Q5_K => q8k(|w, x| dot_q8k(GgmlType::Q5_K, w, x)),
        GgmlType::Q6_K => q8k(|w, x| dot_q8k(GgmlType::Q6_K, w, x)),
        GgmlType::Q8_K => q8k(|w, x| dot_q8k(GgmlType::Q8_K, w, x)),
        // The i-quants, the ternary types and Q1_0 as llama.cpp's generic kernels, against the
        // activation format llama.cpp gives each (its `vec_dot_type`).
        GgmlType::IQ2_XXS => q8k(portable_iq::dot_iq2_xxs),
        GgmlType::IQ2_XS => q8k(portable_iq::dot_iq2_xs),
        GgmlType::IQ2_S => q8k(portable_iq::dot_iq2_s),
        GgmlType::IQ3_XXS => q8k(portable_iq::dot_iq3_xxs),
        GgmlType::IQ3_S => q8k(portable_iq::dot_iq3_s),
        GgmlType::IQ1_S => q8k(portable_iq::dot_iq1_s),
        GgmlType::IQ1_M => q8k(portable_iq::dot_iq1_m),
        GgmlType::IQ4_NL => q8(|w, x| dot_q8(GgmlType::IQ4_NL, w, x)),
        GgmlType::IQ4_XS => q8k(|w, x| dot_q8k(GgmlType::IQ4_XS, w, x)),
        GgmlType::TQ1_0 => q8k(portable_iq::dot_tq1_0),
        GgmlType::TQ2_0 => q8k(portable_iq::dot_tq2_0),
        GgmlType::MXFP4 => q8(|w, x| dot_q8(GgmlType::MXFP4, w, x)),
        // 128-value blocks, each against four Q8_0 blocks.
        GgmlType::Q1_0 => q8(portable_iq::dot_q1_0),
    }
}

/// IQ4_XS block · Q8_K block, as llama.cpp's generic kernel: per 32 values a 6-bit scale.
fn dot_iq4_xs(wb: &[u8], xb: &BlockQ8K) -> f32 {
    let d4d8 = f16_at(wb, 0) * xb.d;
    let mut h = u16::from_le_bytes([wb[2], wb[3]]);
    let mut sum = 0.0f32;
    for ib in (0..QK_K / 32).step_by(2) {
        let sl = wb[4 + ib / 2];
        let ls1 = ((sl & 0xf) as u16 | ((h << 4) & 0x30)) as i32;
        let ls2 = ((sl >> 4) as u16 | ((h << 2) & 0x30)) as i32;
        h >>= 4;
        for (half, ls) in [(0, ls1), (1, ls2)] {
            let sub = ib + half;
            let qs = &wb[8 + 16 * sub..8 + 16 * sub + 16];
            let q8 = &xb.qs[32 * sub..32 * sub + 32];
            let (mut s1, mut s2) = (0i32, 0i32);
            for j in 0..16 {
                s1 += q8[j] as i32 * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as i32;
                s2 += q8[j + 16] as i32 * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32;
            }
            sum += d4d8 * (ls - 32) as f32 * (s1 + s2) as f32;
        }
    }
    sum
}

fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = ggml_math::silu(*g) * u;
    }
}

fn exp_sub(x: &mut [f32], max: f32) -> f64 {
    x.iter_mut()
        .map(|v| {
            *v = ggml_math::expf(*v - max);
            *v as f64
        })
        .sum()
}

fn round_f16(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
}

fn dot_f32_f16(a: &[f32], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
}

fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(yv, xv)| *yv += a * xv.to_f32());
}

fn dot_f32s(w: &[u8], x: &[f32]) -> f32 {
    dot_f32(GgmlType::F32, w, x)
}

/// `Kernels::delta_rule` with `dot` for its dot products (a level's F32 row kernel), the steps
/// taken one at a time.
pub fn delta_rule_with(
    dot: Dot<f32>,
    s: &mut [f32],
    k: &[f32],
    q: &[f32],
    v: &[f32],
    [decay, beta, scale]: [f32; 3],
    out: &mut [f32],
) {
    let dot = |a: &[f32], b: &[f32]| dot(super::f32_bytes(a), b);
    for (j, row) in s.chunks_exact_mut(k.len()).enumerate() {
        row.iter_mut().for_each(|x| *x *= decay);
        let delta = (v[j] - dot(row, k)) * beta;
        row.iter_mut().zip(k).for_each(|(x, &kv)| *x += kv * delta);
        out[j] = dot(row, q) * scale;
    }
}

/// Quantize 32·k values into k blocks exactly as llama.cpp's `quantize_row_q8_0`/`_q8_1` do:
/// `q = round_half_even(x · 127/max|x|)`, the scale kept as f16 and `s = f16(d · Σq)`. Matching its
/// rounding makes kiln's 8-bit activation error the same as llama.cpp's, not an independent one.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
            sum += *q as i32;
        }
        b.d = half::f16::from_f32(d).to_f32();
        b.s = half::f16::from_f32(d * sum as f32).to_f32();
    }
}

/// One quantized block in GGML's Q8_0 layout (f16 scale, then the 32 bytes): a q8_0 KV cache's
/// storage. `b.d` is already an f16 value, so the conversion is exact.
pub fn pack_q8_0(b: &BlockQ8, out: &mut [u8]) {
    out[..2].copy_from_slice(&half::f16::from_f32(b.d).to_bits().to_le_bytes());
    for (o, &q) in out[2..34].iter_mut().zip(&b.qs) {
        *o = q as u8;
    }
}

/// `y += a · x` for `x` a row of Q8_0 blocks, each value expanded to d·q first (llama.cpp's
/// dequantize-then-`vec_mad` for a q8_0 value cache).
pub fn axpy_q8_0(a: f32, x: &[u8], y: &mut [f32]) {
    for (xb, yb) in x.chunks_exact(34).zip(y.chunks_exact_mut(32)) {
        let d = f16_at(xb, 0);
        for (yv, &q) in yb.iter_mut().zip(&xb[2..34]) {
            *yv += (d * (q as i8) as f32) * a;
        }
    }
}

/// Multiply each run of `n` values (a power of two) by the orthonormal n×n Walsh–Hadamard
/// matrix, its own inverse: the rotation a quantized KV cache stores its rows in. Butterflies,
/// then one scaling by 1/√n.
pub fn hadamard(x: &mut [f32], n: usize) {
    let scale = 1.0 / (n as f32).sqrt();
    for chunk in x.chunks_exact_mut(n) {
        let mut h = 1;
        while h < n {
            for pair in chunk.chunks_exact_mut(2 * h) {
                let (a, b) = pair.split_at_mut(h);
                for (u, v) in a.iter_mut().zip(b) {
                    (*u, *v) = (*u + *v, *u - *v);
                }
            }
            h *= 2;
        }
        chunk.iter_mut().for_each(|v| *v *= scale);
    }
}

/// The value of largest magnitude (the first, on ties: its sign decides Q8_K's scale) and that
/// magnitude.
pub fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Quantize 256·k values into k Q8_K blocks (llama.cpp's `quantize_row_q8_K_ref`).
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, b) in x.chunks_exact(256).zip(out.iter_mut()) {
        let (max, amax) = signed_absmax(xb);
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (j, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[j * 16..j * 16 + 16].iter().map(|&q| q as i16).sum();
        }
        b.sum_pairs();
        b.d = 1.0 / iscale;
    }
}

#[inline]
fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Weight row (unquantized type) · f32 activations.
/// An unquantized weight row · f32 activations. Half-precision weights take their activations
/// rounded to the same format first, as llama.cpp's (its `vec_dot_type` for F16 and BF16): in
/// recurrent models the difference grows (the Qwen3.5 MoE tiny model in F16 moved logits by
/// 1.2 rms without it, 0.001 with it).
pub fn dot_f32(t: GgmlType, w: &[u8], x: &[f32]) -> f32 {
    match t {
        GgmlType::F32 => w
            .chunks_exact(4)
            .zip(x)
            .map(|(b, &v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v)
            .sum(),
        GgmlType::F16 => w
            .chunks_exact(2)
            .zip(x)
            .map(|(b, &v)| f16_at(b, 0) * f16::from_f32(v).to_f32())
            .sum(),
        GgmlType::BF16 => w
            .chunks_exact(2)
            .zip(x)
            .map(|(b, &v)| {
                let w = half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                w.to_f32() * half::bf16::from_f32(v).to_f32()
            })
            .sum(),
        other => unreachable!("{other} takes quantized activations"),
    }
}

/// Weight row (32-block type) · Q8 activations.
pub fn dot_q8(t: GgmlType, w: &[u8], x: &[BlockQ8]) -> f32 {
    let bb = t.block_bytes();
    let mut acc = 0.0f32;
    for (wb, xb) in w.chunks_exact(bb).zip(x) {
        acc += match t {
            GgmlType::Q4_0 => {
                let d = f16_at(wb, 0);
                let qs = &wb[2..18];
                let mut s = 0i32;
                for j in 0..16 {
                    s += ((qs[j] & 0xF) as i32 - 8) * xb.qs[j] as i32;
                    s += ((qs[j] >> 4) as i32 - 8) * xb.qs[j + 16] as i32;
                }
                d * xb.d * s as f32
            }
            GgmlType::Q4_1 => {
                let (d, m) = (f16_at(wb, 0), f16_at(wb, 2));
                let qs = &wb[4..20];
                let mut s = 0i32;
                for j in 0..16 {
                    s += (qs[j] & 0xF) as i32 * xb.qs[j] as i32;
                    s += (qs[j] >> 4) as i32 * xb.qs[j + 16] as i32;
                }
                d * xb.d * s as f32 + m * xb.s
            }
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let (d, m, hq) = if t == GgmlType::Q5_0 {
                    (f16_at(wb, 0), 0.0, 2)
                } else {
                    (f16_at(wb, 0), f16_at(wb, 2), 4)
                };
                let qh = u32::from_le_bytes([wb[hq], wb[hq + 1], wb[hq + 2], wb[hq + 3]]);
                let qs = &wb[hq + 4..hq + 20];
                let mut s = 0i32;
                for j in 0..16 {
                    let lo = (qs[j] & 0xF) as i32 | ((((qh >> j) & 1) as i32) << 4);
                    let hi = (qs[j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) as i32) << 4);
                    s += lo * xb.qs[j] as i32 + hi * xb.qs[j + 16] as i32;
                }
                if t == GgmlType::Q5_0 {
                    // Σ(u − 16)·x, in integers like the signed kernels.
                    let sum: i32 = xb.qs.iter().map(|&q| q as i32).sum();
                    d * xb.d * (s - 16 * sum) as f32
                } else {
                    d * xb.d * s as f32 + m * xb.s
                }
            }
            GgmlType::Q8_0 | GgmlType::Q8_1 => {
                let off = if t == GgmlType::Q8_0 { 2 } else { 4 };
                let d = f16_at(wb, 0);
                let s: i32 = wb[off..off + 32]
                    .iter()
                    .zip(&xb.qs)
                    .map(|(&a, &b)| (a as i8) as i32 * b as i32)
                    .sum();
                d * xb.d * s as f32
            }
            GgmlType::IQ4_NL | GgmlType::MXFP4 => {
                // Nibbles into a 16-level table, as llama.cpp's generic kernels.
                let (d, table) = if t == GgmlType::IQ4_NL {
                    (f16_at(wb, 0), &KVALUES_IQ4NL)
                } else {
                    (e8m0_half(wb[0]), &KVALUES_MXFP4)
                };
                let qs = &wb[wb.len() - 16..];
                let (mut s1, mut s2) = (0i32, 0i32);
                for j in 0..16 {
                    s1 += xb.qs[j] as i32 * table[(qs[j] & 0xf) as usize] as i32;
                    s2 += xb.qs[j + 16] as i32 * table[(qs[j] >> 4) as usize] as i32;
                }
                xb.d * d * (s1 + s2) as f32
            }
            other => unreachable!("{other} is not a 32-block type"),
        };
    }
    acc
}

/// Weight row (K-quant) · Q8_K activations.
pub fn dot_q8k(t: GgmlType, w: &[u8], x: &[BlockQ8K]) -> f32 {
    let bb = t.block_bytes();
    let mut acc = 0.0f32;
    for (wb, xb) in w.chunks_exact(bb).zip(x) {
        acc += match t {
            GgmlType::Q2_K => dot_q2_k(wb, xb),
            GgmlType::Q3_K => dot_q3_k(wb, xb),
            GgmlType::Q4_K => dot_q4_k(wb, xb),
            GgmlType::Q5_K => dot_q5_k(wb, xb),
            GgmlType::Q6_K => dot_q6_k(wb, xb),
            GgmlType::Q8_K => {
                let d = f32_at(wb, 0);
                let s: i32 = wb[4..260]
                    .iter()
                    .zip(&xb.qs)
                    .map(|(&a, &b)| (a as i8) as i32 * b as i32)
                    .sum();
                d * xb.d * s as f32
            }
            GgmlType::IQ4_XS => dot_iq4_xs(wb, xb),
            other => unreachable!("{other} is not a K-quant"),
        };
    }
    acc
}

fn dot_q2_k(w: &[u8], x: &BlockQ8K) -> f32 {
    let scales = &w[0..16];
    let qs = &w[16..80];
    let d = f16_at(w, 80) * x.d;
    let dmin = f16_at(w, 82) * x.d;
    let mut sum_min = 0i32;
    for (j, &sc) in scales.iter().enumerate() {
        sum_min += (sc >> 4) as i32 * x.bsums[j] as i32;
    }
    let mut sum = 0i32;
    let mut is = 0;
    for half in 0..2 {
        let q = &qs[half * 32..half * 32 + 32];
        for (k, shift) in [0, 2, 4, 6].into_iter().enumerate() {
            for part in 0..2 {
                let sc = (scales[is] & 0xF) as i32;
                is += 1;
                let base = half * 128 + k * 32 + part * 16;
                let mut s = 0i32;
                for l in 0..16 {
                    s += ((q[part * 16 + l] >> shift) & 3) as i32 * x.qs[base + l] as i32;
                }
                sum += sc * s;
            }
        }
    }
    d * sum as f32 - dmin * sum_min as f32
}

fn dot_q3_k(w: &[u8], x: &BlockQ8K) -> f32 {
    let hmask = &w[0..32];
    let qs = &w[32..96];
    let scales = q3_k_scales(&w[96..108]);
    let d = f16_at(w, 108) * x.d;
    let mut sum = 0i32;
    let mut is = 0;
    let mut m = 1u8;
    for half in 0..2 {
        let q = &qs[half * 32..half * 32 + 32];
        for (k, shift) in [0, 2, 4, 6].into_iter().enumerate() {
            for part in 0..2 {
                let base = half * 128 + k * 32 + part * 16;
                let mut s = 0i32;
                for l in 0..16 {
                    let i = part * 16 + l;
                    let low = ((q[i] >> shift) & 3) as i32;
                    let high = if hmask[i] & m != 0 { 0 } else { 4 };
                    s += (low - high) * x.qs[base + l] as i32;
                }
                sum += scales[is] as i32 * s;
                is += 1;
            }
            m <<= 1;
        }
    }
    d * sum as f32
}

fn dot_q4_k(w: &[u8], x: &BlockQ8K) -> f32 {
    let d = f16_at(w, 0) * x.d;
    let dmin = f16_at(w, 2) * x.d;
    let scales = &w[4..16];
    let qs = &w[16..144];
    let mut sum = 0i32;
    let mut sum_min = 0i32;
    for j in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * j, scales);
        let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
        let q = &qs[j * 32..j * 32 + 32];
        let xs = &x.qs[j * 64..j * 64 + 64];
        let (mut s1, mut s2) = (0i32, 0i32);
        for l in 0..32 {
            s1 += (q[l] & 0xF) as i32 * xs[l] as i32;
            s2 += (q[l] >> 4) as i32 * xs[32 + l] as i32;
        }
        sum += sc1 as i32 * s1 + sc2 as i32 * s2;
        let b1 = x.bsums[4 * j] as i32 + x.bsums[4 * j + 1] as i32;
        let b2 = x.bsums[4 * j + 2] as i32 + x.bsums[4 * j + 3] as i32;
        sum_min += m1 as i32 * b1 + m2 as i32 * b2;
    }
    d * sum as f32 - dmin * sum_min as f32
}

fn dot_q5_k(w: &[u8], x: &BlockQ8K) -> f32 {
    let d = f16_at(w, 0) * x.d;
    let dmin = f16_at(w, 2) * x.d;
    let scales = &w[4..16];
    let qh = &w[16..48];
    let qs = &w[48..176];
    let mut sum = 0i32;
    let mut sum_min = 0i32;
    for j in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * j, scales);
        let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
        let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
        let q = &qs[j * 32..j * 32 + 32];
        let xs = &x.qs[j * 64..j * 64 + 64];
        let (mut s1, mut s2) = (0i32, 0i32);
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            s1 += ((q[l] & 0xF) as i32 + h1) * xs[l] as i32;
            s2 += ((q[l] >> 4) as i32 + h2) * xs[32 + l] as i32;
        }
        sum += sc1 as i32 * s1 + sc2 as i32 * s2;
        let b1 = x.bsums[4 * j] as i32 + x.bsums[4 * j + 1] as i32;
        let b2 = x.bsums[4 * j + 2] as i32 + x.bsums[4 * j + 3] as i32;
        sum_min += m1 as i32 * b1 + m2 as i32 * b2;
    }
    d * sum as f32 - dmin * sum_min as f32
}

fn dot_q6_k(w: &[u8], x: &BlockQ8K) -> f32 {
    let d = f16_at(w, 208) * x.d;
    let mut sum = 0i32;
    for n in 0..2 {
        let ql = &w[n * 64..n * 64 + 64];
        let qh = &w[128 + n * 32..128 + n * 32 + 32];
        let sc = &w[192 + n * 8..192 + n * 8 + 8];
        let xs = &x.qs[n * 128..n * 128 + 128];
        let mut part = [0i32; 8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            part[is] += q1 * xs[l] as i32;
            part[is + 2] += q2 * xs[l + 32] as i32;
            part[is + 4] += q3 * xs[l + 64] as i32;
            part[is + 6] += q4 * xs[l + 96] as i32;
        }
        for (p, &s) in part.iter().zip(sc) {
            sum += p * (s as i8) as i32;
        }
    }
    d * sum as f32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gguf::dequant::dequantize;

    /// A deterministic pseudo-random byte source (no external RNG needed in unit tests).
    pub(crate) fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    /// Random blocks of type `t` with modest finite f16 scales.
    pub(crate) fn random_row(t: GgmlType, n_values: usize, seed: u64) -> Vec<u8> {
        let mut w = bytes(seed, n_values / t.block_len() * t.block_bytes());
        let scale_offsets: &[usize] = match t {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => &[0, 2],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q6_K => &[208],
            GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ2_S
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ1_S
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
            | GgmlType::Q1_0 => &[0],
            GgmlType::TQ1_0 => &[52],
            GgmlType::TQ2_0 => &[64],
            _ => &[],
        };
        let bb = t.block_bytes();
        for (i, block) in w.chunks_exact_mut(bb).enumerate() {
            for (k, &off) in scale_offsets.iter().enumerate() {
                let v = half::f16::from_f32(0.01 + 0.002 * ((i + k) % 7) as f32);
                block[off..off + 2].copy_from_slice(&v.to_bits().to_le_bytes());
            }
        }
        if t == GgmlType::Q8_K {
            for block in w.chunks_exact_mut(bb) {
                block[0..4].copy_from_slice(&0.01f32.to_le_bytes());
            }
        }
        for block in w.chunks_exact_mut(bb) {
            match t {
                // E8M0 exponents of 2^-17..2^-2, varying by block.
                GgmlType::MXFP4 => block[0] = 112 + block[1] % 16,
                // d = 0.01 in the top nibbles of the four scale words.
                GgmlType::IQ1_M => {
                    let d = half::f16::from_f32(0.01).to_bits();
                    for k in 0..4 {
                        let at = 48 + 2 * k;
                        let sc = u16::from_le_bytes([block[at], block[at + 1]]) & 0x0fff;
                        let v = sc | (((d >> (4 * k)) & 0xf) << 12);
                        block[at..at + 2].copy_from_slice(&v.to_le_bytes());
                    }
                }
                _ => {}
            }
        }
        if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            let vals: Vec<f32> = (0..n_values)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            w = match t {
                GgmlType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                GgmlType::F16 => vals
                    .iter()
                    .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
                    .collect(),
                _ => vals
                    .iter()
                    .flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes())
                    .collect(),
            };
        }
        w
    }

    pub(crate) fn activations(n: usize, seed: u64) -> Vec<f32> {
        bytes(seed, n)
            .iter()
            .map(|&b| (b as f32 - 127.5) / 64.0)
            .collect()
    }

    /// Each dot product agrees with dequantize-then-multiply, up to the 8-bit activation error.
    #[test]
    fn dots_match_dequantized_reference() {
        let n = 512;
        for t in GgmlType::ALL {
            let w = random_row(t, n, t.id() as u64 + 1);
            let x = activations(n, 99);
            let mut wf = vec![0f32; n];
            dequantize(t, &w, &mut wf);
            let exact: f64 = wf.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
            let scale: f64 = wf
                .iter()
                .zip(&x)
                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                .sum();
            let got = match kernels().of(t) {
                TypeKernels::F32(dot) => dot(&w, &x),
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
            };
            let err = (got as f64 - exact).abs();
            assert!(
                err <= 0.01 * scale + 1e-4,
                "{t}: got {got}, exact {exact}, |terms| {scale}"
            );
        }
    }
}
