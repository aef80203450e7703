//! Reference decoders: GGML blocks to f32, value for value as llama.cpp's `dequantize_row_*` and the
//! `gguf` Python package compute them (same operation order, no fused multiply-add, so results are
//! bit-identical). The fast CPU kernels are tested against these.
#![allow(clippy::needless_range_loop)] // block kernels index several arrays with one index

use super::types::{GgmlType, QK_K};
use half::{bf16, f16};

#[inline]
pub fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

#[inline]
fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Decode `out.len()` values from `data`, which must hold exactly that many values of type `t`.
///
/// # Panics
/// When `data` and `out` disagree in size: callers size both from a validated tensor.
pub fn dequantize(t: GgmlType, data: &[u8], out: &mut [f32]) {
    let bl = t.block_len();
    let bb = t.block_bytes();
    assert_eq!(
        out.len() % bl,
        0,
        "{t}: {} values is not whole blocks",
        out.len()
    );
    assert_eq!(
        data.len(),
        out.len() / bl * bb,
        "{t}: byte count does not match"
    );
    for (block, y) in data.chunks_exact(bb).zip(out.chunks_exact_mut(bl)) {
        dequantize_block(t, block, y);
    }
}

/// Decode one block of type `t` into `y` (`t.block_len()` values).
pub fn dequantize_block(t: GgmlType, x: &[u8], y: &mut [f32]) {
    match t {
        GgmlType::F32 => y[0] = f32_at(x, 0),
        GgmlType::F16 => y[0] = f16_at(x, 0),
        GgmlType::BF16 => y[0] = bf16::from_bits(u16::from_le_bytes([x[0], x[1]])).to_f32(),
        GgmlType::Q4_0 => {
            let d = f16_at(x, 0);
            let qs = &x[2..18];
            for j in 0..16 {
                y[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
                y[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
            }
        }
        GgmlType::Q4_1 => {
            let d = f16_at(x, 0);
            let m = f16_at(x, 2);
            let qs = &x[4..20];
            for j in 0..16 {
                y[j] = d * (qs[j] & 0x0F) as f32 + m;
                y[j + 16] = d * (qs[j] >> 4) as f32 + m;
            }
        }
        GgmlType::Q5_0 => {
            let d = f16_at(x, 0);
            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
            let qs = &x[6..22];
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) as u8;
                let h1 = ((qh >> (j + 16)) & 1) as u8;
                y[j] = d * (((qs[j] & 0x0F) | (h0 << 4)) as i32 - 16) as f32;
                y[j + 16] = d * (((qs[j] >> 4) | (h1 << 4)) as i32 - 16) as f32;
            }
        }
        GgmlType::Q5_1 => {
            let d = f16_at(x, 0);
            let m = f16_at(x, 2);
            let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
            let qs = &x[8..24];
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) as u8;
                let h1 = ((qh >> (j + 16)) & 1) as u8;
                y[j] = d * ((qs[j] & 0x0F) | (h0 << 4)) as f32 + m;
                y[j + 16] = d * ((qs[j] >> 4) | (h1 << 4)) as f32 + m;
            }
        }
        GgmlType::Q8_0 => {
            let d = f16_at(x, 0);
            for j in 0..32 {
                y[j] = (x[2 + j] as i8) as f32 * d;
            }
        }
        GgmlType::Q8_1 => {
            let d = f16_at(x, 0);
            for j in 0..32 {
                y[j] = (x[4 + j] as i8) as f32 * d;
            }
        }
        GgmlType::Q2_K => dequant_q2_k(x, y),
        GgmlType::Q3_K => dequant_q3_k(x, y),
        GgmlType::Q4_K => dequant_q4_k(x, y),
        GgmlType::Q5_K => dequant_q5_k(x, y),
        GgmlType::Q6_K => dequant_q6_k(x, y),
        GgmlType::Q8_K => {
            let d = f32_at(x, 0);
            for j in 0..QK_K {
                y[j] = d * (x[4 + j] as i8) as f32;
            }
        }
        other => super::iq::dequantize_block(other, x, y),
    }
}

/// Unpack the eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block (llama.cpp's `get_scale_min_k4`).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Unpack the sixteen signed 6-bit scales of a Q3_K block (already offset by -32).
#[inline]
pub fn q3_k_scales(packed: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, s) in out.iter_mut().enumerate() {
        let low = if i < 8 {
            packed[i] & 0x0F
        } else {
            packed[i - 8] >> 4
        };
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        *s = ((low | (high << 4)) as i8) - 32;
    }
    out
}

fn dequant_q2_k(x: &[u8], y: &mut [f32]) {
    let scales = &x[0..16];
    let qs = &x[16..80];
    let d = f16_at(x, 80);
    let dmin = f16_at(x, 82);
    let mut is = 0;
    let mut out = 0;
    for half in 0..2 {
        let q = &qs[half * 32..half * 32 + 32];
        for shift in [0, 2, 4, 6] {
            for part in 0..2 {
                let sc = scales[is];
                is += 1;
                let dl = d * (sc & 0xF) as f32;
                let ml = dmin * (sc >> 4) as f32;
                for l in 0..16 {
                    y[out] = dl * ((q[part * 16 + l] >> shift) & 3) as f32 - ml;
                    out += 1;
                }
            }
        }
    }
}

fn dequant_q3_k(x: &[u8], y: &mut [f32]) {
    let hmask = &x[0..32];
    let qs = &x[32..96];
    let scales = q3_k_scales(&x[96..108]);
    let d_all = f16_at(x, 108);
    let mut is = 0;
    let mut out = 0;
    let mut m = 1u8;
    for half in 0..2 {
        let q = &qs[half * 32..half * 32 + 32];
        for shift in [0, 2, 4, 6] {
            for part in 0..2 {
                let dl = d_all * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let i = part * 16 + l;
                    let low = ((q[i] >> shift) & 3) as i32;
                    let high = if hmask[i] & m != 0 { 0 } else { 4 };
                    y[out] = dl * (low - high) as f32;
                    out += 1;
                }
            }
            m <<= 1;
        }
    }
}

fn dequant_q4_k(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    let min = f16_at(x, 2);
    let scales = &x[4..16];
    let qs = &x[16..144];
    for j in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * j, scales);
        let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let q = &qs[j * 32..j * 32 + 32];
        for l in 0..32 {
            y[j * 64 + l] = d1 * (q[l] & 0xF) as f32 - m1;
            y[j * 64 + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

fn dequant_q5_k(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 0);
    let min = f16_at(x, 2);
    let scales = &x[4..16];
    let qh = &x[16..48];
    let qs = &x[48..176];
    for j in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * j, scales);
        let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
        let q = &qs[j * 32..j * 32 + 32];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[j * 64 + l] = d1 * ((q[l] & 0xF) + h1) as f32 - m1;
            y[j * 64 + 32 + l] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
        }
    }
}

fn dequant_q6_k(x: &[u8], y: &mut [f32]) {
    let d = f16_at(x, 208);
    for n in 0..2 {
        let ql = &x[n * 64..n * 64 + 64];
        let qh = &x[128 + n * 32..128 + n * 32 + 32];
        let sc = &x[192 + n * 8..192 + n * 8 + 8];
        let y = &mut y[n * 128..n * 128 + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}
