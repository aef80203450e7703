//! Reference decoders of the i-quants (IQ1–IQ4), the ternary types (TQ1_0, TQ2_0), MXFP4 and Q1_0:
//! GGML blocks to f32, value for value as llama.cpp's `dequantize_row_*` computes them (the same
//! f32 operations in the same order, so results are bit-identical to llama.cpp and gguf-py). The
//! grids are llama.cpp's, in `iq_tables.rs`. Byte layouts (offsets within a block):
//! - IQ2_XXS (66 B): d f16, then per 32 values 8 bytes: 4 grid indices, and a u32 whose bits
//!   0..28 are four 7-bit sign indices and 28..32 the scale.
//! - IQ2_XS (74 B): d, 32 u16 (9-bit grid index, 7-bit sign index), 8 scale bytes (4 bits per 16).
//! - IQ2_S (82 B): d, 64 grid-index low bytes, 32 sign bytes, 8 high-bit bytes, 8 scale bytes.
//! - IQ3_XXS (98 B): d, 64 grid indices (4 values each), then per 32 values a u32 as IQ2_XXS's.
//! - IQ3_S (110 B): d, 64 index low bytes, 8 high-bit bytes, 32 sign bytes, 4 scale bytes.
//! - IQ1_S (50 B): d, 32 index low bytes, 8 u16 (3 index bits × 4, 3 scale bits, delta sign).
//! - IQ1_M (56 B): 32 index low bytes, 16 bytes of (3 index bits, delta sign) × 2, 8 bytes of
//!   3-bit scales whose top nibbles of the four u16 are d.
//! - IQ4_NL (18 B, 32 values): d, 16 bytes of nibbles into a 16-value non-linear table.
//! - IQ4_XS (136 B): d, u16 of scale high bits, 4 bytes of scale low nibbles, 128 bytes of nibbles.
//! - TQ1_0 (54 B): 48 bytes of 5 trits each (base 3, scaled to 0..255), 4 bytes of 4 trits, d.
//! - TQ2_0 (66 B): 64 bytes of 2-bit values (value − 1), d.
//! - MXFP4 (17 B, 32 values): an E8M0 exponent, 16 bytes of E2M1 nibbles.
//! - Q1_0 (18 B, 128 values): d, then one bit per value (+d or −d).
#![allow(clippy::needless_range_loop)] // block decoders index several arrays with one index

// The grids are re-exported for the CPU's integer kernels, which index the same tables.
pub use super::iq_tables::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use super::types::{GgmlType, QK_K};

/// IQ4_NL's and IQ4_XS's 16 levels.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];
/// MXFP4's E2M1 levels, doubled (the exponent is halved to match).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
/// IQ1_S's and IQ1_M's shift of the grid values.
pub const IQ1_DELTA: f32 = 0.125;

/// `KSIGNS_IQ2XS` with each sign bit spread to a byte, 0xFF (−1) where set and 1 where not
/// (llama.cpp's `keven_signs_q2xs`): the SIMD kernels multiply or `sign` by it.
pub static KSIGNS_BYTES: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let mut j = 0;
        while j < 8 {
            let byte: u64 = if (KSIGNS_IQ2XS[i] >> j) & 1 != 0 {
                0xFF
            } else {
                1
            };
            t[i] |= byte << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16_at(b, i)).to_f32()
}

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

#[inline]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Byte j of a grid entry.
#[inline]
fn grid8(entry: u64, j: usize) -> f32 {
    ((entry >> (8 * j)) & 0xFF) as u8 as f32
}

#[inline]
fn grid4(entry: u32, j: usize) -> f32 {
    ((entry >> (8 * j)) & 0xFF) as u8 as f32
}

/// +1 or −1 by bit j of `signs`.
#[inline]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & (1 << j) != 0 { -1.0 } else { 1.0 }
}

/// MXFP4's scale: 2^(e − 127), halved (ggml's `GGML_E8M0_TO_FP32_HALF`).
#[inline]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// Whether `dequantize_block` of this module decodes `t`.
pub fn decodes(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ2_S
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0
            | GgmlType::MXFP4
            | GgmlType::Q1_0
    )
}

/// Decode one block of `t` (one of the types `decodes` names) into `y`.
pub fn dequantize_block(t: GgmlType, x: &[u8], y: &mut [f32]) {
    match t {
        GgmlType::IQ2_XXS => iq2_xxs(x, y),
        GgmlType::IQ2_XS => iq2_xs(x, y),
        GgmlType::IQ2_S => iq2_s(x, y),
        GgmlType::IQ3_XXS => iq3_xxs(x, y),
        GgmlType::IQ3_S => iq3_s(x, y),
        GgmlType::IQ1_S => iq1_s(x, y),
        GgmlType::IQ1_M => iq1_m(x, y),
        GgmlType::IQ4_NL => iq4_nl(x, y),
        GgmlType::IQ4_XS => iq4_xs(x, y),
        GgmlType::TQ1_0 => tq1_0(x, y),
        GgmlType::TQ2_0 => tq2_0(x, y),
        GgmlType::MXFP4 => mxfp4(x, y),
        GgmlType::Q1_0 => q1_0(x, y),
        other => unreachable!("{other} is not an i-quant"),
    }
}

fn iq2_xxs(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    for ib in 0..QK_K / 32 {
        let q = 2 + 8 * ib;
        let aux = u32_at(x, q + 4);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
        for l in 0..4 {
            let grid = IQ2XXS_GRID[x[q + l] as usize];
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = db * grid8(grid, j) * sign(signs, j);
            }
        }
    }
}

fn iq2_xs(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    for ib in 0..QK_K / 32 {
        let sc = x[66 + ib];
        let db = [
            d * (0.5 + (sc & 0xf) as f32) * 0.25,
            d * (0.5 + (sc >> 4) as f32) * 0.25,
        ];
        for l in 0..4 {
            let q = u16_at(x, 2 + 2 * (4 * ib + l));
            let grid = IQ2XS_GRID[(q & 511) as usize];
            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = db[l / 2] * grid8(grid, j) * sign(signs, j);
            }
        }
    }
}

fn iq2_s(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    let (qs, signs, qh, scales) = (2, 2 + QK_K / 8, 2 + QK_K / 4, 2 + QK_K / 4 + QK_K / 32);
    for ib in 0..QK_K / 32 {
        let sc = x[scales + ib];
        let db = [
            d * (0.5 + (sc & 0xf) as f32) * 0.25,
            d * (0.5 + (sc >> 4) as f32) * 0.25,
        ];
        for l in 0..4 {
            let index =
                x[qs + 4 * ib + l] as usize | (((x[qh + ib] as usize) << (8 - 2 * l)) & 0x300);
            let grid = IQ2S_GRID[index];
            let s = x[signs + 4 * ib + l];
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = db[l / 2] * grid8(grid, j) * sign(s, j);
            }
        }
    }
}

fn iq3_xxs(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    let scales_and_signs = 2 + QK_K / 4;
    for ib in 0..QK_K / 32 {
        let aux = u32_at(x, scales_and_signs + 4 * ib);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        let qs = 2 + 8 * ib;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let g1 = IQ3XXS_GRID[x[qs + 2 * l] as usize];
            let g2 = IQ3XXS_GRID[x[qs + 2 * l + 1] as usize];
            for j in 0..4 {
                y[32 * ib + 8 * l + j] = db * grid4(g1, j) * sign(signs, j);
                y[32 * ib + 8 * l + j + 4] = db * grid4(g2, j) * sign(signs, j + 4);
            }
        }
    }
}

fn iq3_s(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    let (qs, qh, signs, scales) = (2, 2 + QK_K / 4, 2 + QK_K / 4 + QK_K / 32, 106);
    for ib in 0..QK_K / 32 {
        let sc = x[scales + ib / 2];
        let db = d * (1 + 2 * if ib % 2 == 0 { sc & 0xf } else { sc >> 4 }) as f32;
        let h = x[qh + ib] as usize;
        for l in 0..4 {
            let i1 = x[qs + 8 * ib + 2 * l] as usize | ((h << (8 - 2 * l)) & 256);
            let i2 = x[qs + 8 * ib + 2 * l + 1] as usize | ((h << (7 - 2 * l)) & 256);
            let (g1, g2) = (IQ3S_GRID[i1], IQ3S_GRID[i2]);
            let s = x[signs + 4 * ib + l];
            for j in 0..4 {
                y[32 * ib + 8 * l + j] = db * grid4(g1, j) * sign(s, j);
                y[32 * ib + 8 * l + j + 4] = db * grid4(g2, j) * sign(s, j + 4);
            }
        }
    }
}

/// Value j of an IQ1 grid entry (−1, 0 or 1).
#[inline]
fn grid1(entry: u64, j: usize) -> f32 {
    ((entry >> (8 * j)) as u8 as i8) as f32
}

fn iq1_s(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    for ib in 0..QK_K / 32 {
        let qh = u16_at(x, 2 + QK_K / 8 + 2 * ib);
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        let delta = if qh & 0x8000 != 0 {
            -IQ1_DELTA
        } else {
            IQ1_DELTA
        };
        for l in 0..4 {
            let index = x[2 + 4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
            let grid = IQ1S_GRID[index];
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = dl * (grid1(grid, j) + delta);
            }
        }
    }
}

fn iq1_m(x: &[u8], y: &mut [f32]) {
    let (qs, qh, scales) = (0, QK_K / 8, QK_K / 8 + QK_K / 16);
    let sc = |i: usize| u16_at(x, scales + 2 * i);
    let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
    let d = half::f16::from_bits(bits).to_f32();
    for ib in 0..QK_K / 32 {
        let s = sc(ib / 2);
        let dl1 = d * (2 * ((s >> (6 * (ib % 2))) & 0x7) + 1) as f32;
        let dl2 = d * (2 * ((s >> (6 * (ib % 2) + 3)) & 0x7) + 1) as f32;
        let (h0, h1) = (x[qh + 2 * ib] as usize, x[qh + 2 * ib + 1] as usize);
        let q = qs + 4 * ib;
        let index = [
            x[q] as usize | ((h0 << 8) & 0x700),
            x[q + 1] as usize | ((h0 << 4) & 0x700),
            x[q + 2] as usize | ((h1 << 8) & 0x700),
            x[q + 3] as usize | ((h1 << 4) & 0x700),
        ];
        let delta = |h: usize, bit: usize| {
            if h & bit != 0 { -IQ1_DELTA } else { IQ1_DELTA }
        };
        let deltas = [
            delta(h0, 0x08),
            delta(h0, 0x80),
            delta(h1, 0x08),
            delta(h1, 0x80),
        ];
        for l in 0..4 {
            let dl = if l < 2 { dl1 } else { dl2 };
            let grid = IQ1S_GRID[index[l]];
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = dl * (grid1(grid, j) + deltas[l]);
            }
        }
    }
}

fn iq4_nl(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    for j in 0..16 {
        let q = x[2 + j];
        y[j] = d * KVALUES_IQ4NL[(q & 0xf) as usize] as f32;
        y[j + 16] = d * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
    }
}

fn iq4_xs(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    let scales_h = u16_at(x, 2);
    for ib in 0..QK_K / 32 {
        let lo = (x[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
        let hi = ((scales_h >> (2 * ib)) & 3) as u8;
        let dl = d * ((lo | (hi << 4)) as i32 - 32) as f32;
        for j in 0..16 {
            let q = x[8 + 16 * ib + j];
            y[32 * ib + j] = dl * KVALUES_IQ4NL[(q & 0xf) as usize] as f32;
            y[32 * ib + j + 16] = dl * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
        }
    }
}

/// A trit stored base-3 scaled to a byte, times 3^n, back to −1, 0 or 1.
#[inline]
fn trit(byte: u8, pow3: u8) -> f32 {
    let q = byte.wrapping_mul(pow3);
    ((((q as u16) * 3) >> 8) as i16 - 1) as f32
}

fn tq1_0(x: &[u8], y: &mut [f32]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let d = f16_at(x, 52);
    let mut o = 0;
    // 32 bytes × 5 trits, 16 bytes × 5 trits, then 4 bytes × 4 trits.
    for (start, len, trits) in [(0, 32, 5), (32, 16, 5), (48, 4, 4)] {
        for n in 0..trits {
            for m in 0..len {
                y[o] = trit(x[start + m], POW3[n]) * d;
                o += 1;
            }
        }
    }
}

fn tq2_0(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 64);
    for j in (0..64).step_by(32) {
        for l in 0..4 {
            for m in 0..32 {
                let q = ((x[j + m] >> (2 * l)) & 3) as i32;
                y[4 * j + 32 * l + m] = (q - 1) as f32 * d;
            }
        }
    }
}

fn mxfp4(x: &[u8], y: &mut [f32]) {
    let d = e8m0_half(x[0]);
    for j in 0..16 {
        let q = x[1 + j];
        y[j] = KVALUES_MXFP4[(q & 0xf) as usize] as f32 * d;
        y[j + 16] = KVALUES_MXFP4[(q >> 4) as usize] as f32 * d;
    }
}

fn q1_0(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    for j in 0..128 {
        y[j] = if (x[2 + j / 8] >> (j % 8)) & 1 != 0 {
            d
        } else {
            -d
        };
    }
}
