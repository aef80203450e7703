//! NEON elementwise kernels: the F32/F16 weight-row dot products, attention's f16 and q8_0
//! helpers, f16 rounding, activation quantization to 8 bits (the portable quantizers' values),
//! and SiLU and softmax's exponentials with llama.cpp's `expf` lane for lane.
#![allow(clippy::needless_range_loop)] // lanes are indexed in step with their inputs

use std::arch::aarch64::*;

use super::{f16, load_f16x4, load_s8, round_f16x4};
use crate::backend::cpu::ggml_math::{self, EXPF_CONSTANTS};
use crate::backend::cpu::kernels::{BlockQ8, BlockQ8K};
use crate::backend::cpu::portable;

/// f32 weights stored as little-endian bytes (possibly unaligned) · f32 activations.
pub fn dot_f32_bytes(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 4).min(x.len());
    // SAFETY: every load reads 16 bytes inside `w` and four values inside `x` (i + 8 ≤ n).
    unsafe {
        let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut i = 0;
        while i + 8 <= n {
            let w0 = vreinterpretq_f32_u8(vld1q_u8(w.as_ptr().add(4 * i)));
            let w1 = vreinterpretq_f32_u8(vld1q_u8(w.as_ptr().add(4 * i + 16)));
            s0 = vfmaq_f32(s0, w0, vld1q_f32(x.as_ptr().add(i)));
            s1 = vfmaq_f32(s1, w1, vld1q_f32(x.as_ptr().add(i + 4)));
            i += 8;
        }
        let mut sum = vaddvq_f32(vaddq_f32(s0, s1));
        for j in i..n {
            let b = &w[4 * j..4 * j + 4];
            sum += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x[j];
        }
        sum
    }
}

/// f16 weights stored as little-endian bytes · f32 activations.
pub fn dot_f16_bytes(w: &[u8], x: &[f32]) -> f32 {
    dot_f16::<false>(w, x)
}

/// An F16 weight row · activations rounded to f16 first, as llama.cpp multiplies F16 weights.
pub fn dot_f16_weights(w: &[u8], x: &[f32]) -> f32 {
    dot_f16::<true>(w, x)
}

#[inline(always)]
fn dot_f16<const ROUND_X: bool>(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: every load reads 8 bytes inside `w` and four values inside `x` (i + 8 ≤ n).
    unsafe {
        let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut i = 0;
        while i + 8 <= n {
            let w0 = load_f16x4(w.as_ptr().add(2 * i));
            let w1 = load_f16x4(w.as_ptr().add(2 * i + 8));
            let (mut x0, mut x1) = (
                vld1q_f32(x.as_ptr().add(i)),
                vld1q_f32(x.as_ptr().add(i + 4)),
            );
            if ROUND_X {
                (x0, x1) = (round_f16x4(x0), round_f16x4(x1));
            }
            s0 = vfmaq_f32(s0, w0, x0);
            s1 = vfmaq_f32(s1, w1, x1);
            i += 8;
        }
        let mut sum = vaddvq_f32(vaddq_f32(s0, s1));
        for j in i..n {
            let xj = if ROUND_X {
                half::f16::from_f32(x[j]).to_f32()
            } else {
                x[j]
            };
            sum += f16(w, 2 * j) * xj;
        }
        sum
    }
}

/// Σ a·b with b in f16 (attention scores against the key cache).
pub fn dot_f32_f16(a: &[f32], b: &[half::f16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: f16 is two bytes; `dot_f16_bytes` reads only the first n of them.
    let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u8, 2 * n) };
    dot_f16_bytes(bytes, &a[..n])
}

/// y += a·x with x in f16 (attention output from the value cache).
pub fn axpy_f16(alpha: f32, x: &[half::f16], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let xp = x.as_ptr() as *const u8;
    // SAFETY: each step reads 8 bytes of `x` and writes four values of `y` below n.
    unsafe {
        let mut i = 0;
        while i + 4 <= n {
            let yv = vld1q_f32(y.as_ptr().add(i));
            vst1q_f32(
                y.as_mut_ptr().add(i),
                vfmaq_n_f32(yv, load_f16x4(xp.add(2 * i)), alpha),
            );
            i += 4;
        }
        for j in i..n {
            y[j] += alpha * x[j].to_f32();
        }
    }
}

/// y += a·x with x a row of Q8_0 blocks, each value expanded to d·q first.
pub fn axpy_q8_0(alpha: f32, x: &[u8], y: &mut [f32]) {
    for (xb, yb) in x.chunks_exact(34).zip(y.chunks_exact_mut(32)) {
        // SAFETY: the block holds 32 bytes after its scale and `yb` 32 values.
        unsafe {
            let d = vdupq_n_f32(f16(xb, 0));
            let q = [load_s8(xb.as_ptr().add(2)), load_s8(xb.as_ptr().add(18))];
            for (h, &qh) in q.iter().enumerate() {
                let wide = [vmovl_s8(vget_low_s8(qh)), vmovl_high_s8(qh)];
                for (k, &w16) in wide.iter().enumerate() {
                    let words = [vmovl_s16(vget_low_s16(w16)), vmovl_high_s16(w16)];
                    for (l, &w32) in words.iter().enumerate() {
                        let p = yb.as_mut_ptr().add(16 * h + 8 * k + 4 * l);
                        let v = vmulq_f32(d, vcvtq_f32_s32(w32));
                        vst1q_f32(p, vfmaq_n_f32(vld1q_f32(p), v, alpha));
                    }
                }
            }
        }
    }
}

/// Round each value to the nearest f16 (kept as f32).
pub fn round_f16(x: &mut [f32]) {
    let n = x.len();
    let mut i = 0;
    // SAFETY: each step reads and writes four values below n.
    unsafe {
        while i + 4 <= n {
            let p = x.as_mut_ptr().add(i);
            vst1q_f32(p, round_f16x4(vld1q_f32(p)));
            i += 4;
        }
    }
    for v in &mut x[i..] {
        *v = half::f16::from_f32(*v).to_f32();
    }
}

/// `portable::quantize_q8`, vectorized; the same values.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        // SAFETY: `xb` holds 32 values, read four at a time.
        unsafe {
            let v: [float32x4_t; 8] = std::array::from_fn(|i| vld1q_f32(xb.as_ptr().add(4 * i)));
            let m = v
                .iter()
                .fold(vdupq_n_f32(0.0), |m, &vi| vmaxq_f32(m, vabsq_f32(vi)));
            let amax = vmaxvq_f32(m);
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mut sum = vdupq_n_s32(0);
            let mut q = [0i32; 32];
            for (i, &vi) in v.iter().enumerate() {
                let qi = vcvtnq_s32_f32(vmulq_n_f32(vi, id));
                sum = vaddq_s32(sum, qi);
                vst1q_s32(q.as_mut_ptr().add(4 * i), qi);
            }
            for (dst, &v) in b.qs.iter_mut().zip(&q) {
                *dst = v as i8;
            }
            b.d = half::f16::from_f32(d).to_f32();
            b.s = half::f16::from_f32(d * vaddvq_s32(sum) as f32).to_f32();
        }
    }
}

/// `portable::quantize_q8k`, vectorized; the same values.
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, b) in x.chunks_exact(256).zip(out.iter_mut()) {
        let (max, amax) = portable::signed_absmax(xb);
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        // SAFETY: `xb` holds 256 values, read four at a time.
        unsafe {
            let mut q = [0i32; 16];
            for g in 0..16 {
                let mut sum = vdupq_n_s32(0);
                for i in 0..4 {
                    let v = vld1q_f32(xb.as_ptr().add(16 * g + 4 * i));
                    let qi = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(v, iscale)), vdupq_n_s32(127));
                    sum = vaddq_s32(sum, qi);
                    vst1q_s32(q.as_mut_ptr().add(4 * i), qi);
                }
                for (dst, &v) in b.qs[16 * g..16 * g + 16].iter_mut().zip(&q) {
                    *dst = v as i8;
                }
                b.bsums[g] = vaddvq_s32(sum) as i16;
            }
        }
        b.sum_pairs();
        b.d = 1.0 / iscale;
    }
}

/// llama.cpp's `expf`, four lanes at a time: the same fused operations as the scalar
/// `ggml_math::expf`, lane for lane.
#[inline(always)]
unsafe fn expf4(x: float32x4_t) -> float32x4_t {
    unsafe {
        let c = |i: usize| vdupq_n_f32(f32::from_bits(EXPF_CONSTANTS[i]));
        let r = c(0);
        let z = vfmaq_f32(r, x, c(1));
        let n = vsubq_f32(z, r);
        let b = vfmsq_f32(vfmsq_f32(x, n, c(3)), n, c(2));
        let u = vmulq_f32(b, b);
        let j = vfmaq_f32(
            vfmaq_f32(vdupq_n_f32(1.0), c(8), b),
            vfmaq_f32(vfmaq_f32(c(7), c(6), b), vfmaq_f32(c(5), c(4), b), u),
            u,
        );
        // scalef(j, n) as j · 2^(n>>1) · 2^(n − (n>>1)), with |n| ≤ 192 clamped.
        let ni = vcvtnq_s32_f32(vmaxq_f32(
            vminq_f32(n, vdupq_n_f32(192.0)),
            vdupq_n_f32(-192.0),
        ));
        let h = vshrq_n_s32(ni, 1);
        let pow2 =
            |e: int32x4_t| vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(e, vdupq_n_s32(127)), 23));
        let res = vmulq_f32(vmulq_f32(j, pow2(h)), pow2(vsubq_s32(ni, h)));
        // |n| > 192: 0 below, infinity above.
        let big = vcagtq_f32(n, vdupq_n_f32(192.0));
        let alt = vreinterpretq_f32_u32(vandq_u32(
            vcgtq_f32(n, vdupq_n_f32(0.0)),
            vreinterpretq_u32_f32(vdupq_n_f32(f32::INFINITY)),
        ));
        vbslq_f32(big, alt, res)
    }
}

/// gate[i] = silu(gate[i]) · up[i], with llama.cpp's `expf`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let mut i = 0;
    // SAFETY: each step reads and writes four values below n.
    unsafe {
        while i + 4 <= n {
            let x = vld1q_f32(gate.as_ptr().add(i));
            let e = expf4(vnegq_f32(x));
            let s = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0), e));
            vst1q_f32(
                gate.as_mut_ptr().add(i),
                vmulq_f32(s, vld1q_f32(up.as_ptr().add(i))),
            );
            i += 4;
        }
    }
    for k in i..n {
        gate[k] = ggml_math::silu(gate[k]) * up[k];
    }
}

/// x[i] = expf(x[i] − max) with llama.cpp's `expf`; returns Σ in f64.
pub fn exp_sub(x: &mut [f32], max: f32) -> f64 {
    let n = x.len();
    let mut sum = 0.0f64;
    let mut i = 0;
    // SAFETY: each step reads and writes four values below n.
    unsafe {
        let m = vdupq_n_f32(max);
        while i + 4 <= n {
            let p = x.as_mut_ptr().add(i);
            let e = expf4(vsubq_f32(vld1q_f32(p), m));
            vst1q_f32(p, e);
            sum += vaddvq_f32(e) as f64;
            i += 4;
        }
    }
    for v in &mut x[i..] {
        *v = ggml_math::expf(*v - max);
        sum += *v as f64;
    }
    sum
}
