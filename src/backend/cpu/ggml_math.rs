//! Elementwise functions exactly as llama.cpp's CPU backend evaluates them, so kiln's activations
//! round as llama.cpp's do: its vectorized `expf` (used by SiLU and softmax) and its f16 GELU table.

use std::sync::OnceLock;

use half::f16;

/// Σ v² with the squares in f32 and the sum in f64, as llama.cpp's norms take it, but in eight
/// interleaved sums: one chain of dependent f64 adds over a 2048-value row took 1.5 % of a 1B
/// prompt. f64 carries 29 bits more than the f32 mean made from it: the order can change that
/// mean only where it falls within 2^-29 of a rounding boundary.
pub fn sum_of_squares(x: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&v| (v * v) as f64).sum();
    for chunk in chunks {
        for (s, &v) in lanes.iter_mut().zip(chunk) {
            *s += (v * v) as f64;
        }
    }
    lanes.iter().sum::<f64>() + tail
}

const fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// ggml's `ggml_v_expf` (the AVX-512 variant, which this scalar code reproduces bit for bit): a
/// degree-5 polynomial in the reduced argument, scaled by 2^n. Within about 1.5 ulp of exp.
#[inline]
pub fn expf(x: f32) -> f32 {
    let r = f(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6).mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scalef(j, n as i32)
}

/// j · 2^n (AVX-512's `scalef`; exact where the result is a normal number, which is all that
/// reaches kiln's outputs). The power is split so neither factor leaves the f32 range; the SIMD
/// version splits it the same way.
fn scalef(j: f32, n: i32) -> f32 {
    let half = n >> 1;
    j * pow2(half) * pow2(n - half)
}

/// 2^n for −126 ≤ n ≤ 127, built from its exponent bits.
fn pow2(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// The constants of `expf`, for the SIMD version.
pub const EXPF_CONSTANTS: [u32; 9] = [
    0x4b40_0000,
    0x3fb8_aa3b,
    0x35bf_be8e,
    0x3f31_7200,
    0x3c07_2010,
    0x3d2b_9f17,
    0x3e2a_af33,
    0x3eff_fedb,
    0x3f7f_fff6,
];

/// SiLU as llama.cpp's `ggml_v_silu`: x / (1 + expf(−x)).
pub fn silu(x: f32) -> f32 {
    x / (1.0 + expf(-x))
}

/// llama.cpp's `ggml_vec_sigmoid_f32`: 1 / (1 + expf(−v)) with the C library's expf.
pub fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// llama.cpp's softplus: v above 20, else ln(1 + e^v).
pub fn softplus(v: f32) -> f32 {
    if v > 20.0 { v } else { (1.0 + v.exp()).ln() }
}

/// llama.cpp's GELU table: GELU-tanh of every f16 value, rounded to f16 (kept here as f32).
fn gelu_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                let x = f16::from_bits(bits).to_f32();
                let g = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh());
                f16::from_f32(g).to_f32()
            })
            .collect()
    })
}

/// GELU-tanh of x whose f16 rounding is `half` (llama.cpp looks it up there; exact outside ±10).
#[inline]
fn gelu_looked_up(table: &[f32], x: f32, half: f16) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        table[half.to_bits() as usize]
    }
}

/// GELU-tanh as llama.cpp evaluates it: looked up by the f16 rounding of x in a table of f16
/// results (exact outside ±10).
pub fn gelu(x: f32) -> f32 {
    gelu_looked_up(gelu_table(), x, f16::from_f32(x))
}

/// `gelu` of every value of `x`, in place: the f16 roundings are taken a chunk at a time (half's
/// slice conversion, F16C where the CPU has it), not one call per value.
pub fn gelu_slice(x: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let table = gelu_table();
    let mut halves = [f16::ZERO; 256];
    for chunk in x.chunks_mut(256) {
        let halves = &mut halves[..chunk.len()];
        halves.convert_from_f32_slice(chunk);
        for (v, &h) in chunk.iter_mut().zip(halves.iter()) {
            *v = gelu_looked_up(table, *v, h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expf_is_within_two_ulp_of_exp() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (expf(x), x.exp());
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(ulp <= 2, "expf({x}) = {got}, exp = {want}");
            x += 0.137;
        }
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(-200.0), 0.0);
        assert!(silu(3.0) > 2.8 && silu(-3.0) < 0.0);
        assert!((gelu(1.0) - 0.841).abs() < 2e-3 && gelu(-20.0) == 0.0 && gelu(20.0) == 20.0);
    }

    /// The slice form gives each value `gelu`'s bits, across chunks and tails.
    #[test]
    fn gelu_slice_gives_each_values_gelu() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.0271).collect();
        let mut ys = xs.clone();
        gelu_slice(&mut ys);
        for (x, y) in xs.iter().zip(&ys) {
            assert_eq!(y.to_bits(), gelu(*x).to_bits(), "gelu({x})");
        }
    }
}
