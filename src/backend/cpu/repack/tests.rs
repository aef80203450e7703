//! Tests of the repacked layout, and the test-only reference packer they check the fast one
//! against: blocks decoded to codes (`decode`) and written by `put_block`.

use super::*;
use crate::backend::cpu::portable::tests::random_row;

/// `pack` run serially.
pub(crate) fn pack_serial(t: GgmlType, data: &[u8], rows: usize, cols: usize) -> Option<Packed> {
    pack(t, data, rows, cols, &|out, chunk, f| {
        out.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c))
    })
}

/// Packing then unpacking gives back every row's bytes, for every packed type.
#[test]
fn unpack_inverts_pack() {
    for t in GgmlType::ALL {
        if sections(t).is_none() && t != GgmlType::F16 {
            continue;
        }
        let (rows, cols) = (32, 512);
        let data: Vec<u8> = (0..rows)
            .flat_map(|r| random_row(t, cols, 1000 + r as u64 + t.id() as u64))
            .collect();
        let p = pack_serial(t, &data, rows, cols).expect("packable");
        let rb = data.len() / rows;
        assert!(
            p.bytes() <= data.len() * 1055 / 1000,
            "{t}: {} bytes",
            p.bytes()
        );
        let mut back = vec![0u8; rb];
        for r in 0..rows {
            unpack_row(&p, r, &mut back);
            assert_eq!(back, data[r * rb..(r + 1) * rb], "{t} row {r}");
        }
    }
    assert!(
        pack_serial(GgmlType::Q4_K, &[0; 144 * 8], 8, 256).is_none(),
        "8 rows"
    );
    assert!(pack_serial(GgmlType::F16, &[0; 2 * 8 * 32], 8, 32).is_none());
    assert!(pack_serial(GgmlType::F32, &[0; 4 * 16 * 32], 16, 32).is_none());
}

/// The word-level packer writes exactly what packing the decoded codes writes.
#[test]
fn fast_packing_equals_packing_the_codes() {
    for t in GgmlType::ALL {
        if sections(t).is_none() {
            continue;
        }
        let blocks = 512 / t.block_len();
        let rows: Vec<Vec<u8>> = (0..ROWS as u64)
            .map(|r| random_row(t, 512, 7 * r + t.id() as u64))
            .collect();
        let refs: [&[u8]; ROWS] = std::array::from_fn(|r| rows[r].as_slice());
        let n = group_bytes(t, blocks);
        let (mut fast, mut slow) = (vec![0u8; n], vec![0u8; n]);
        pack_group(t, &refs, blocks, &mut fast);
        pack_group_reference(t, &refs, blocks, &mut slow);
        assert!(fast == slow, "{t}");
    }
}

fn le16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// Decode one GGML block into codes (the inverse of `encode`); every field `t` uses is written.
fn decode(t: GgmlType, b: &[u8], c: &mut Codes) {
    match t {
        GgmlType::Q4_0 | GgmlType::IQ4_NL | GgmlType::Q4_1 | GgmlType::MXFP4 => {
            let off = match t {
                GgmlType::Q4_1 => 4,
                GgmlType::MXFP4 => 1,
                _ => 2,
            };
            c.d = if t == GgmlType::MXFP4 {
                b[0] as u16
            } else {
                le16(b, 0)
            };
            if t == GgmlType::Q4_1 {
                c.dmin = le16(b, 2);
            }
            for j in 0..16 {
                c.u[j] = b[off + j] & 0xF;
                c.u[j + 16] = b[off + j] >> 4;
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let off = if t == GgmlType::Q5_0 { 2 } else { 4 };
            c.d = le16(b, 0);
            if t == GgmlType::Q5_1 {
                c.dmin = le16(b, 2);
            }
            let qh = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
            for j in 0..16 {
                c.u[j] = (b[off + 4 + j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
                c.u[j + 16] = (b[off + 4 + j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            }
        }
        GgmlType::Q8_0 => {
            c.d = le16(b, 0);
            c.u[..32].copy_from_slice(&b[2..34]);
        }
        GgmlType::Q1_0 => {
            c.d = le16(b, 0);
            for v in 0..128 {
                c.u[v] = (b[2 + v / 8] >> (v % 8)) & 1;
            }
        }
        GgmlType::Q2_K => {
            c.d = le16(b, 80);
            c.dmin = le16(b, 82);
            for s in 0..16 {
                c.sc[s] = (b[s] & 0xF) as i8;
                c.m[s] = b[s] >> 4;
            }
            for v in 0..256 {
                let (half, k4, part, l) = (v / 128, (v / 32) % 4, (v / 16) % 2, v % 16);
                c.u[v] = (b[16 + half * 32 + part * 16 + l] >> (2 * k4)) & 3;
            }
        }
        GgmlType::Q3_K => {
            c.d = le16(b, 108);
            c.sc = q3_k_scales(&b[96..108]);
            for v in 0..256 {
                let (half, k4, part, l) = (v / 128, (v / 32) % 4, (v / 16) % 2, v % 16);
                let low = (b[32 + half * 32 + part * 16 + l] >> (2 * k4)) & 3;
                let high = (b[part * 16 + l] >> (half * 4 + k4)) & 1;
                c.u[v] = low | (high << 2);
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            c.d = le16(b, 0);
            c.dmin = le16(b, 2);
            for s in 0..8 {
                let (sc, m) = scale_min_k4(s, &b[4..16]);
                c.sc[s] = sc as i8;
                c.m[s] = m;
            }
            let (qs, qh) = if t == GgmlType::Q4_K {
                (&b[16..144], None)
            } else {
                (&b[48..176], Some(&b[16..48]))
            };
            for j in 0..4 {
                for l in 0..32 {
                    let q = qs[32 * j + l];
                    c.u[64 * j + l] = q & 0xF;
                    c.u[64 * j + 32 + l] = q >> 4;
                    if let Some(qh) = qh {
                        c.u[64 * j + l] |= ((qh[l] >> (2 * j)) & 1) << 4;
                        c.u[64 * j + 32 + l] |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            c.d = le16(b, 208);
            for s in 0..16 {
                c.sc[s] = b[192 + s] as i8;
            }
            for n in 0..2 {
                let (ql, qh) = (&b[64 * n..], &b[128 + 32 * n..]);
                for l in 0..32 {
                    let base = 128 * n + l;
                    c.u[base] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
                    c.u[base + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                    c.u[base + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    c.u[base + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
        GgmlType::IQ4_XS => {
            c.d = le16(b, 0);
            let high = le16(b, 2);
            for s in 0..8 {
                let ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) as i32
                    | (((high >> (2 * s)) & 3) << 4) as i32;
                c.sc[s] = (ls - 32) as i8;
                for i in 0..16 {
                    c.u[32 * s + i] = b[8 + 16 * s + i] & 0xF;
                    c.u[32 * s + 16 + i] = b[8 + 16 * s + i] >> 4;
                }
            }
        }
        _ => unreachable!("{t} has no packed layout"),
    }
}

/// Write the 16 rows' codes of one block into the group's sections.
fn put_block(t: GgmlType, codes: &[Codes; ROWS], b: usize, out: &mut [u8]) {
    let sz = sections(t).expect("packable type");
    let place = BlockPlace::new(t, b);
    let n = t.block_len();
    let (lines, high_bit) = code_parts(t);
    // Byte i of section s.
    let mut put = |s: usize, i: usize, v: u8| out[place.at(s, i)] = v;
    // Low bits.
    match lines {
        Lines::Nibbles => {
            for o in 0..n / 8 {
                for (r, c) in codes.iter().enumerate() {
                    for i in 0..4 {
                        let v = (c.u[8 * o + i] & 0xF) | ((c.u[8 * o + 4 + i] & 0xF) << 4);
                        put(0, o * 64 + 4 * r + i, v);
                    }
                }
            }
        }
        Lines::TwoBit => {
            for s in 0..n / 16 {
                for (r, c) in codes.iter().enumerate() {
                    for i in 0..4 {
                        let v = (0..4)
                            .fold(0, |acc, q| acc | ((c.u[16 * s + 4 * q + i] & 3) << (2 * q)));
                        put(0, s * 64 + 4 * r + i, v);
                    }
                }
            }
        }
        Lines::SixBit => {
            for s in 0..n / 16 {
                for (r, c) in codes.iter().enumerate() {
                    let sub = &c.u[16 * s..16 * s + 16];
                    for k in 0..3 {
                        let (sec, at) = six_bit_line(s, k);
                        for i in 0..4 {
                            let v = sub[4 * k + i] | ((sub[12 + i] >> (2 * k)) & 3) << 6;
                            put(sec, at + 4 * r + i, v);
                        }
                    }
                }
            }
        }
        Lines::Bytes => {
            for q in 0..n / 4 {
                for (r, c) in codes.iter().enumerate() {
                    for i in 0..4 {
                        put(0, q * 64 + 4 * r + i, c.u[4 * q + i]);
                    }
                }
            }
        }
        Lines::Empty => {}
    }
    let mut next = lines.sections();
    // High bits as masks.
    if let Some(bit) = high_bit {
        for q in 0..n / 4 {
            let mut m = 0u64;
            for (r, c) in codes.iter().enumerate() {
                for i in 0..4 {
                    m |= (((c.u[4 * q + i] >> bit) & 1) as u64) << (4 * r + i);
                }
            }
            for (i, v) in m.to_le_bytes().into_iter().enumerate() {
                put(next, 8 * q + i, v);
            }
        }
        next += 1;
    }
    // Sub-block scales and minimums (K-quants).
    let subs = match t {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::IQ4_XS => 8,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q6_K => 16,
        _ => 0,
    };
    if subs > 0 {
        for s in 0..subs {
            for (r, c) in codes.iter().enumerate() {
                let v = if t == GgmlType::Q2_K {
                    (c.sc[s] as u8) | (c.m[s] << 4)
                } else {
                    c.sc[s] as u8
                };
                put(next, s * 16 + r, v);
            }
        }
        next += 1;
        if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
            for s in 0..subs {
                for (r, c) in codes.iter().enumerate() {
                    put(next, min_at(s, r), c.m[s]);
                }
            }
            next += 1;
        }
    }
    // f16 planes: d, then the minimum (scale) where the type has one.
    for (r, c) in codes.iter().enumerate() {
        let [lo, hi] = c.d.to_le_bytes();
        if t == GgmlType::MXFP4 {
            put(next, r, lo); // an exponent byte
        } else {
            put(next, 2 * r, lo);
            put(next, 2 * r + 1, hi);
        }
    }
    next += 1;
    if next < sz.len() {
        for (r, c) in codes.iter().enumerate() {
            let [lo, hi] = c.dmin.to_le_bytes();
            put(next, 2 * r, lo);
            put(next, 2 * r + 1, hi);
        }
    }
}

/// `put_block` by way of decoded codes: the reference for `pack_block`.
fn pack_group_reference(t: GgmlType, rows: &[&[u8]; ROWS], blocks: usize, out: &mut [u8]) {
    let bb = t.block_bytes();
    let mut codes = [Codes::ZERO; ROWS];
    for b in 0..blocks {
        for (c, row) in codes.iter_mut().zip(rows) {
            decode(t, &row[b * bb..][..bb], c);
        }
        put_block(t, &codes, b, out);
    }
}
