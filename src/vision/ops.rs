//! The vision towers' operations that the `Backend` trait does not have yet, on the host: layer
//! norm with a bias, RMSNorm, GELU and the 2-D vision RoPEs. Each rounds as llama.cpp's CPU
//! backend does (f64 sums in the norms, its f16 GELU table), so that kiln's embeddings agree with
//! llama.cpp's to float rounding. (Attention runs on the backend: `vit::Buffers::attend`.)
//!
//! The matrix products, which are nearly all of a tower's work, run on the backend; these run
//! between them, on its buffers in place where they are the host's memory (the CPU's), else on
//! rows read back from it.

use rayon::prelude::*;

use crate::backend::cpu::ggml_math::gelu_slice;

/// LayerNorm of each row of `x` (rows of `w.len()` values), in place: (x − mean) / √(var + eps)
/// · w + b, as llama.cpp's `ggml_norm` then `ggml_mul` and `ggml_add`.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    x.par_chunks_mut(w.len()).for_each(|row| {
        let (mean, scale) = mean_and_scale(row, eps);
        for ((v, &wi), &bi) in row.iter_mut().zip(w).zip(b) {
            *v = (*v - mean) * scale * wi + bi;
        }
    });
}

/// `layer_norm` of `src` into `dst` (of the same length), the same values.
pub fn layer_norm_into(src: &[f32], dst: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    dst.par_chunks_mut(w.len())
        .zip(src.par_chunks(w.len()))
        .for_each(|(row, from)| {
            let (mean, scale) = mean_and_scale(from, eps);
            for (((v, &x), &wi), &bi) in row.iter_mut().zip(from).zip(w).zip(b) {
                *v = (x - mean) * scale * wi + bi;
            }
        });
}

/// A row's mean and 1 / √(variance + eps), the sums in f64 as llama.cpp's `ggml_norm` takes them
/// (of the values, then of the squared differences from the mean, each rounded to f32 first) but
/// in eight partial sums, which the compiler keeps in one vector register: one sum through 1,152
/// values waits on each addition in turn.
fn mean_and_scale(row: &[f32], eps: f32) -> (f32, f32) {
    let sum = sum_f64(row, |v| v as f64);
    let mean = sum as f32 / row.len() as f32;
    let squares = sum_f64(row, |v| {
        let d = v - mean;
        (d * d) as f64
    });
    let variance = (squares / row.len() as f64) as f32;
    (mean, 1.0 / (variance + eps).sqrt())
}

/// Σ f(v) over `row` in eight partial sums (value i into sum i mod 8), then those in order.
#[inline(always)]
fn sum_f64(row: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(tail) {
        *lane += f(v);
    }
    lanes.iter().sum()
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
    x.par_chunks_mut(4096).for_each(gelu_slice);
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

/// The widest attention head the towers take (Qwen3.5's and SigLIP's are 72; the GPU kernels take
/// up to 512).
pub const MAX_HEAD: usize = 256;

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
    fn a_grid_at_its_size_is_unchanged() {
        let grid: Vec<f32> = (0..18).map(|i| i as f32).collect();
        assert_eq!(resample_grid(&grid, 3, 2, 3, 3), grid);
        let wide = resample_grid(&grid, 3, 2, 5, 3);
        // Corners stay where they were; the midpoint of the first row is its middle cell.
        assert_eq!(&wide[..2], &grid[..2]);
        assert_eq!(&wide[4..6], &grid[2..4]);
        assert_eq!(&wide[8..10], &grid[4..6]);
    }
}
