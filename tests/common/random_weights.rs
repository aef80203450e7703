//! Random weights of every block type for op-parity tests and kernel benchmarks: random quants
//! under small positive scales (each type's f16 scale fields set, MXFP4's E8M0 exponent and
//! IQ1_M's scattered scale bits in range), so every kernel sees finite, typical values.
//! (benches/kernels.rs includes this file by path.)

use half::{bf16, f16};
use kiln::gguf::GgmlType;
use kiln::tensor::Tensor;

/// A xorshift generator: the same values on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
}

/// Byte offsets of the f16 scales (and mins) in a block of each quantized type.
fn scale_offsets(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q4_0
        | GgmlType::Q5_0
        | GgmlType::Q8_0
        | GgmlType::IQ4_NL
        | GgmlType::IQ4_XS
        | GgmlType::Q1_0
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S => &[0],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// A random `rows × cols` weight of type `t`: random quants under small positive scales.
pub fn random_weight(t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Tensor {
    let n = rows * cols;
    let bytes: Vec<u8> = match t {
        GgmlType::F32 => rng
            .vec(n, 1.0)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        GgmlType::F16 => (0..n)
            .flat_map(|_| f16::from_f32(rng.f()).to_le_bytes())
            .collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| bf16::from_f32(rng.f()).to_le_bytes())
            .collect(),
        _ => {
            let bb = t.block_bytes();
            let nb = n / t.block_len();
            let mut b: Vec<u8> = (0..nb * bb).map(|_| rng.next() as u8).collect();
            for blk in b.chunks_mut(bb) {
                for &o in scale_offsets(t) {
                    let d = f16::from_f32(0.005 + 0.015 * (rng.f() + 1.0) / 2.0);
                    blk[o..o + 2].copy_from_slice(&d.to_le_bytes());
                }
                if t == GgmlType::MXFP4 {
                    // An E8M0 exponent of 2^-9..2^-2 (halved).
                    blk[0] = 118 + (rng.next() % 8) as u8;
                }
                if t == GgmlType::IQ1_M {
                    // d's f16 bits are the top nibbles of the four scale u16s at 48, low first.
                    let d = f16::from_f32(0.005 + 0.015 * (rng.f() + 1.0) / 2.0).to_bits();
                    for i in 0..4 {
                        let o = 48 + 2 * i + 1;
                        blk[o] = (blk[o] & 0x0f) | ((((d >> (4 * i)) & 0xf) as u8) << 4);
                    }
                }
            }
            b
        }
    };
    Tensor::from_bytes(format!("w.{t}"), t, vec![cols, rows], bytes)
}
