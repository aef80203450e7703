//! The vision towers' operations that the `Backend` trait does not have yet, on the host: layer
//! norm with a bias, RMSNorm, GELU, the 2-D vision RoPE, and full (bidirectional) softmax attention. Each
//! rounds as llama.cpp's CPU backend does (f64 sums in the norm, its `expf` in the softmax, its
//! f16 GELU table), so that kiln's embeddings agree with llama.cpp's to float rounding.
//!
//! The matrix products, which are nearly all of a tower's work, run on the backend; these run
//! between them on rows read back from it.

use rayon::prelude::*;

use crate::backend::cpu::ggml_math::{expf, gelu};

/// LayerNorm of each row of `x` (rows of `w.len()` values), in place: (x − mean) / √(var + eps)
/// · w + b, as llama.cpp's `ggml_norm` then `ggml_mul` and `ggml_add`.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let width = w.len();
    x.par_chunks_mut(width).for_each(|row| {
        let sum: f64 = row.iter().map(|&v| v as f64).sum();
        let mean = sum as f32 / width as f32;
        let mut squares = 0f64;
        for v in row.iter_mut() {
            *v -= mean;
            squares += (*v * *v) as f64;
        }
        let variance = (squares / width as f64) as f32;
        let scale = 1.0 / (variance + eps).sqrt();
        for ((v, &wi), &bi) in row.iter_mut().zip(w).zip(b) {
            *v = *v * scale * wi + bi;
        }
    });
}

/// RMSNorm of each row of `x` (rows of `width` values), in place: x / √(mean(x²) + eps), times
/// `w` where given, as llama.cpp's `ggml_rms_norm` (squares summed in f64) then `ggml_mul`.
pub fn rms_norm(x: &mut [f32], width: usize, w: Option<&[f32]>, eps: f32) {
    x.par_chunks_mut(width).for_each(|row| {
        let squares: f64 = row.iter().map(|&v| (v * v) as f64).sum();
        let mean = (squares / width as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        match w {
            Some(w) => row
                .iter_mut()
                .zip(w)
                .for_each(|(v, &wi)| *v = *v * scale * wi),
            None => row.iter_mut().for_each(|v| *v *= scale),
        }
    });
}

/// Gemma 4's 2-D vision RoPE (llama.cpp's `clip_graph_gemma4v`: two NEOX rotations of half the
/// head each): in every head of width `d`, the pairs (i, i + d/4), i < d/4, turn by the patch's
/// column `pos[r].0` times θ^i, and the pairs (d/2 + i, d/2 + i + d/4) by its row `pos[r].1`
/// times θ^i, θ = base^(−4/d), built by repeated f32 multiplication as ggml's cache. `x` holds
/// rows of `stride` values whose first `heads × d` are rotated.
pub fn neox_rope_2d(
    x: &mut [f32],
    stride: usize,
    heads: usize,
    d: usize,
    pos: &[(u32, u32)],
    base: f32,
) {
    let quarter = d / 4;
    let theta_scale = base.powf(-2.0 / (d / 2) as f32);
    x.par_chunks_mut(stride)
        .zip(pos)
        .for_each(|(row, &(px, py))| {
            let angles = |p: u32| {
                let mut theta = p as f32;
                (0..quarter)
                    .map(|_| {
                        let cs = (theta.cos(), theta.sin());
                        theta *= theta_scale;
                        cs
                    })
                    .collect::<Vec<_>>()
            };
            let (ax, ay) = (angles(px), angles(py));
            for head in row[..heads * d].chunks_exact_mut(d) {
                for (half, cs) in [(0, &ax), (d / 2, &ay)] {
                    for (i, &(c, s)) in cs.iter().enumerate() {
                        let (a, b) = (head[half + i], head[half + i + quarter]);
                        head[half + i] = a * c - b * s;
                        head[half + i + quarter] = a * s + b * c;
                    }
                }
            }
        });
}

/// GELU (tanh approximation, through llama.cpp's f16 table) of every value.
pub fn gelu_in_place(x: &mut [f32]) {
    x.par_iter_mut().for_each(|v| *v = gelu(*v));
}

/// The vision RoPE of Qwen2-VL and later (llama.cpp's `GGML_ROPE_TYPE_VISION` with four equal
/// sections): every head of width `d` rotates the pairs (i, i + d/2); pair i < d/4 by the
/// patch's row `pos[r].0` times θ^i, the others by its column `pos[r].1` times θ^(i − d/4),
/// θ = 10000^(−4/d). `x` holds rows of `stride` values, one per patch, whose first `heads × d`
/// are rotated. The angles are built by repeated f32 multiplication, as llama.cpp builds its
/// cache.
pub fn vision_rope(x: &mut [f32], stride: usize, heads: usize, d: usize, pos: &[(u32, u32)]) {
    let half = d / 2;
    let quarter = d / 4;
    let theta_scale = 10000f32.powf(-2.0 / half as f32);
    x.par_chunks_mut(stride)
        .zip(pos)
        .for_each(|(row, &(py, px))| {
            let mut cos_sin = vec![(0f32, 0f32); half];
            let (mut theta_y, mut theta_x) = (py as f32, px as f32);
            for (i, cs) in cos_sin.iter_mut().enumerate() {
                if i == quarter {
                    theta_x = px as f32;
                }
                let theta = if i < quarter { theta_y } else { theta_x };
                *cs = (theta.cos(), theta.sin());
                theta_y *= theta_scale;
                theta_x *= theta_scale;
            }
            for head in row[..heads * d].chunks_exact_mut(d) {
                for (i, &(c, s)) in cos_sin.iter().enumerate() {
                    let (x0, x1) = (head[i], head[i + half]);
                    head[i] = x0 * c - x1 * s;
                    head[i + half] = x0 * s + x1 * c;
                }
            }
        });
}

/// Bidirectional softmax attention over `n` rows of fused Q, K, V (`qkv`: per row Q, K and V of
/// `heads × d` each): `out` gets per row the heads' softmax(scale · q·kᵀ) · V, side by side.
/// Each head's keys and values are gathered into rows of their own first, and the dot products
/// run in eight interleaved sums, which the compiler turns into vector code.
pub fn attention(qkv: &[f32], n: usize, heads: usize, d: usize, scale: f32, out: &mut [f32]) {
    let width = heads * d;
    // Per head: its keys, then its values, n rows of d each.
    let gathered: Vec<Vec<f32>> = (0..heads)
        .into_par_iter()
        .map(|h| {
            let mut kv = vec![0f32; 2 * n * d];
            for r in 0..n {
                for part in 0..2 {
                    let at = r * 3 * width + (part + 1) * width + h * d;
                    kv[part * n * d + r * d..][..d].copy_from_slice(&qkv[at..at + d]);
                }
            }
            kv
        })
        .collect();
    const ROWS: usize = 8; // query rows per task
    let tasks: Vec<(usize, usize)> = (0..heads)
        .flat_map(|h| (0..n.div_ceil(ROWS)).map(move |b| (h, b * ROWS)))
        .collect();
    let results: Vec<(usize, usize, Vec<f32>)> = tasks
        .into_par_iter()
        .map_init(
            || vec![0f32; n],
            |scores, (h, first)| {
                let (keys, values) = gathered[h].split_at(n * d);
                let last = (first + ROWS).min(n);
                let mut acc = vec![0f32; (last - first) * d];
                let queries = (first..last).map(|i| {
                    let at = i * 3 * width + h * d;
                    &qkv[at..at + d]
                });
                for (q, acc) in queries.zip(acc.chunks_exact_mut(d)) {
                    attend_one(q, keys, values, scale, scores, acc);
                }
                (h, first, acc)
            },
        )
        .collect();
    for (h, first, acc) in results {
        for (i, a) in (first..).zip(acc.chunks_exact(d)) {
            out[i * width + h * d..][..d].copy_from_slice(a);
        }
    }
}

/// The widest head the host attention is meant for (Qwen3.5's and SigLIP's are 72).
pub const MAX_HEAD: usize = 256;

/// One query's softmax(scale · q·kᵀ) · V into `acc`, `scores` scratch of a value per key: on x86
/// with AVX2 and FMA compiled for them (vector dot products, and `expf`'s fused multiply-adds as
/// instructions instead of library calls); the same arithmetic either way.
fn attend_one(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    scores: &mut [f32],
    acc: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features were just detected.
        return unsafe { attend_one_avx2(q, keys, values, scale, scores, acc) };
    }
    attend_one_body(q, keys, values, scale, scores, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_one_avx2(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    scores: &mut [f32],
    acc: &mut [f32],
) {
    attend_one_body(q, keys, values, scale, scores, acc)
}

#[inline(always)]
fn attend_one_body(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    scores: &mut [f32],
    acc: &mut [f32],
) {
    let d = q.len();
    let mut max = f32::NEG_INFINITY;
    for (s, k) in scores.iter_mut().zip(keys.chunks_exact(d)) {
        *s = dot(q, k) * scale;
        max = max.max(*s);
    }
    let mut total = 0f64;
    for s in scores.iter_mut() {
        *s = expf(*s - max);
        total += *s as f64;
    }
    let inv = (1.0 / total) as f32;
    for (&p, v) in scores.iter().zip(values.chunks_exact(d)) {
        let p = p * inv;
        for (a, &vv) in acc.iter_mut().zip(v) {
            *a += p * vv;
        }
    }
}

/// Σ a·b in eight interleaved f32 sums (vectorizable).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Bilinear resampling with aligned corners of a `side × side` grid of `width`-value vectors
/// (row-major: `grid[(y · side + x) · width ..]`) to `gw × gh`, as llama.cpp's
/// `ggml_interpolate` with `GGML_SCALE_MODE_BILINEAR | GGML_SCALE_FLAG_ALIGN_CORNERS`.
pub fn resample_grid(grid: &[f32], side: usize, width: usize, gw: usize, gh: usize) -> Vec<f32> {
    let scale = |out: usize| {
        if out > 1 && side > 1 {
            (out - 1) as f32 / (side - 1) as f32
        } else {
            out as f32 / side as f32
        }
    };
    let (sf0, sf1) = (scale(gw), scale(gh));
    let mut out = vec![0f32; gw * gh * width];
    for i1 in 0..gh {
        let y = i1 as f32 / sf1;
        let y0 = (y.floor() as i64).clamp(0, side as i64 - 1) as usize;
        let y1 = (y.floor() as i64 + 1).clamp(0, side as i64 - 1) as usize;
        let dy = (y - y0 as f32).clamp(0.0, 1.0);
        for i0 in 0..gw {
            let x = i0 as f32 / sf0;
            let x0 = (x.floor() as i64).clamp(0, side as i64 - 1) as usize;
            let x1 = (x.floor() as i64 + 1).clamp(0, side as i64 - 1) as usize;
            let dx = (x - x0 as f32).clamp(0.0, 1.0);
            let at = |yy: usize, xx: usize| &grid[(yy * side + xx) * width..][..width];
            let (a, b, c, e) = (at(y0, x0), at(y0, x1), at(y1, x0), at(y1, x1));
            let dst = &mut out[(i1 * gw + i0) * width..][..width];
            for k in 0..width {
                dst[k] = a[k] * (1.0 - dx) * (1.0 - dy)
                    + b[k] * dx * (1.0 - dy)
                    + c[k] * (1.0 - dx) * dy
                    + e[k] * dx * dy;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_norm_gives_zero_mean_unit_variance_before_the_affine() {
        let mut x: Vec<f32> = (0..16)
            .map(|i| (i as f32 * 0.7).sin() * 3.0 + 1.0)
            .collect();
        layer_norm(&mut x, &[1.0; 8], &[0.0; 8], 1e-6);
        for row in x.chunks(8) {
            let mean: f32 = row.iter().sum::<f32>() / 8.0;
            let var: f32 = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 8.0;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                "{mean} {var}"
            );
        }
    }

    #[test]
    fn rope_at_the_origin_is_the_identity_and_keeps_norms() {
        let orig: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
        let mut x = orig.clone();
        vision_rope(&mut x, 16, 2, 8, &[(0, 0)]);
        assert_eq!(x, orig);
        vision_rope(&mut x, 16, 2, 8, &[(3, 5)]);
        assert_ne!(x, orig);
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((norm(&x) - norm(&orig)).abs() < 1e-3);
    }

    #[test]
    fn attention_over_one_key_returns_its_value_and_a_grid_at_its_size_is_unchanged() {
        let qkv = [0.3, -1.0, 2.0, 0.5, 7.0, -3.0];
        let mut out = [0f32; 2];
        attention(&qkv, 1, 1, 2, 0.7, &mut out);
        assert_eq!(out, [7.0, -3.0]);
        let grid: Vec<f32> = (0..18).map(|i| i as f32).collect();
        assert_eq!(resample_grid(&grid, 3, 2, 3, 3), grid);
        let wide = resample_grid(&grid, 3, 2, 5, 3);
        // Corners stay where they were; the midpoint of the first row is its middle cell.
        assert_eq!(&wide[..2], &grid[..2]);
        assert_eq!(&wide[4..6], &grid[2..4]);
        assert_eq!(&wide[8..10], &grid[4..6]);
    }
}
