//! Weights repacked at load for the GEMM kernels (`gemm/`). GGML stores each row's blocks
//! one after another; here rows go in groups of 16, and within a group the values of the 16 rows
//! are interleaved four at a time, so one 64-byte load holds four consecutive values (one integer
//! dot product's worth) of each of 16 output rows, and each weight byte is read once per tile of
//! tokens instead of once per token.
//!
//! A group of 16 rows is a sequence of chunks, each holding one block along the row (two where a
//! block's parts do not fill whole 64-byte lines): within a chunk the `sections` one after another,
//! each with its blocks' parts in order, and sections the kernels read side by side interleaved in
//! reading order (`interleave`). So a kernel walking the blocks reads the group front to back as
//! one stream, which the hardware prefetcher follows, and every line load is aligned. (Groups
//! stored section by section, which the kernels read as several streams at once, held one-token
//! matmuls well below memory speed.)
//! Values are stored unsigned ("u", the GGML code as an unsigned number, e.g. 0..15 for 4-bit
//! codes) in these line formats (a "line" is 16 rows × 4 bytes):
//! - nibble lines: byte i of row r holds u[8o + i] in its low and u[8o + 4 + i] in its high nibble,
//!   so one line gives the quads 2o and 2o + 1 of a sub-block;
//! - 2-bit lines (Q2_K, Q3_K): byte i holds u[4q + i] & 3 in bits 2q..2q+1, q = 0..3 (16 values);
//! - Q6_K six-bit lines, three per 16-value sub-block: byte i of line k (k = 0..2) holds u[4k + i]
//!   in bits 0..5 and bits 2k..2k+1 of u[12 + i] in bits 6..7, so quads 0-2 take one mask each and
//!   quad 3 is gathered from the three lines' top bits;
//! - bit masks (the fifth bit of Q5 codes, the third of Q3_K's, Q1_0's signs): one u64 per quad,
//!   bit 4r + i;
//! - Q8_0 lines: the signed bytes as stored, one quad per line.
//!
//! Per-row numbers (f16 scales, integer sub-block scales and minimums) are stored as 16-entry
//! planes (Q4_K/Q5_K minimums as 16 byte pairs, `min_at`), at the head of each chunk. Sizes equal
//! GGML's except for the K-quants whose 6-bit sub-block scales are unpacked to bytes (Q4_K
//! +2.8 %, Q5_K +2.3 %, Q3_K +3.6 %) and the types whose chunk head is padded to a line (Q3_K
//! +1.8 %, Q6_K +1.0 %), so repacking does not grow memory (a row with an odd number of blocks of
//! a two-block-chunk type also gets one block of padding).
//!
//! The original bytes stay the reference: `unpack_row` decodes a packed row back to them, and the
//! tests check that it does for every type.
//!
//! F16 matrices go in groups of 16 rows too, as panels of plain values (`repack/f16.rs`), for the
//! F16 GEMM (`gemm/f16.rs`).

#![allow(clippy::needless_range_loop)] // codes, planes and lines are indexed together

use crate::gguf::GgmlType;
use crate::gguf::dequant::{q3_k_scales, scale_min_k4};

/// Rows per interleaved group.
pub const ROWS: usize = 16;

/// A matrix in the repacked layout.
pub struct Packed {
    pub dtype: GgmlType,
    /// Blocks per row.
    pub blocks: usize,
    /// Bytes per group of 16 rows.
    pub group_bytes: usize,
    data: AlignedBytes,
}

impl Packed {
    /// The bytes of row group `g`.
    #[inline]
    pub fn group(&self, g: usize) -> &[u8] {
        &self.data.as_slice()[g * self.group_bytes..(g + 1) * self.group_bytes]
    }

    /// The number of row groups (the GEMM fetches the next group's weights ahead).
    pub fn groups(&self) -> usize {
        self.data.len / self.group_bytes.max(1)
    }

    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.data.len
    }
}

/// The sections of a block, in storage order, and their sizes in bytes for a group of 16 rows.
pub fn sections(t: GgmlType) -> Option<&'static [usize]> {
    Some(match t {
        // nibble lines, d (IQ4_NL: the same block, its codes index a level table)
        GgmlType::Q4_0 | GgmlType::IQ4_NL => &[256, 32],
        // nibble lines, E8M0 exponent bytes
        GgmlType::MXFP4 => &[256, 16],
        // sign-bit masks (a set bit is +1, a clear one −1), d
        GgmlType::Q1_0 => &[256, 32],
        // nibble lines, d, m
        GgmlType::Q4_1 => &[256, 32, 32],
        // nibble lines, fifth-bit masks, d
        GgmlType::Q5_0 => &[256, 64, 32],
        // nibble lines, fifth-bit masks, d, m
        GgmlType::Q5_1 => &[256, 64, 32, 32],
        // signed byte lines, d
        GgmlType::Q8_0 => &[512, 32],
        // 2-bit lines, scale bytes (GGML's: scale | min << 4), d, dmin
        GgmlType::Q2_K => &[1024, 256, 32, 32],
        // 2-bit lines, third-bit masks, scales (i8, −32..31), d
        GgmlType::Q3_K => &[1024, 512, 256, 32],
        // nibble lines, scales, mins, d, dmin
        GgmlType::Q4_K => &[2048, 128, 128, 32, 32],
        // nibble lines, fifth-bit masks, scales, mins, d, dmin
        GgmlType::Q5_K => &[2048, 512, 128, 128, 32, 32],
        // six-bit lines 0 and 1 of each sub-block, their lines 2, scales (i8), d
        GgmlType::Q6_K => &[2048, 1024, 256, 32],
        // nibble lines, scales (i8, the 6-bit scale − 32), d
        GgmlType::IQ4_XS => &[2048, 128, 32],
        _ => return None,
    })
}

/// Blocks per chunk of the group: two for the 32-value types whose f16 scales are half a line,
/// four for MXFP4, whose exponent bytes are a quarter of one.
pub fn chunk_blocks(t: GgmlType) -> usize {
    match t {
        GgmlType::Q4_0 | GgmlType::IQ4_NL | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::Q1_0 => 2,
        GgmlType::MXFP4 => 4,
        _ => 1,
    }
}

/// How many of the type's first sections hold lines (and their masks), read as one region.
fn line_sections(t: GgmlType) -> usize {
    if interleave(t).is_some() { 2 } else { 1 }
}

/// Bytes at the head of a chunk for its blocks' small parts (sub-block scales and minimums, f16
/// planes), padded so that the lines after them are aligned.
fn head_bytes(t: GgmlType) -> usize {
    let sz = sections(t).unwrap_or(&[]);
    let small: usize = sz.iter().skip(line_sections(t)).sum();
    (small * chunk_blocks(t)).next_multiple_of(64)
}

/// Bytes per block of a chunk's line region.
fn region_bytes(t: GgmlType) -> usize {
    sections(t).map_or(0, |sz| sz.iter().take(line_sections(t)).sum())
}

/// Bytes per chunk of `chunk_blocks(t)` blocks.
pub fn chunk_bytes(t: GgmlType) -> usize {
    head_bytes(t) + region_bytes(t) * chunk_blocks(t)
}

/// Bytes per group of 16 rows of `blocks` blocks.
pub fn group_bytes(t: GgmlType, blocks: usize) -> usize {
    blocks.div_ceil(chunk_blocks(t)) * chunk_bytes(t)
}

/// For types whose first two sections the kernels read side by side (bit masks, Q6_K's high
/// lines), the two are interleaved in reading order: `(a, c)` means units of `a` bytes of
/// section 0 followed by `c` bytes of section 1, the pair taking the place of both.
pub fn interleave(t: GgmlType) -> Option<(usize, usize)> {
    match t {
        // a block's four nibble lines, then its eight quad masks
        GgmlType::Q5_0 | GgmlType::Q5_1 => Some((256, 64)),
        // two 2-bit lines, then their sub-blocks' eight quad masks
        GgmlType::Q3_K => Some((128, 64)),
        // one 32-value sub-block's four nibble lines, then its eight quad masks
        GgmlType::Q5_K => Some((256, 64)),
        // a sub-block's six-bit lines 0 and 1, then its line 2
        GgmlType::Q6_K => Some((128, 64)),
        _ => None,
    }
}

/// Where one block's parts lie in its group.
#[derive(Clone, Copy)]
pub struct BlockPlace {
    /// Offset of each section's part (for interleaved sections, of their shared region).
    base: [usize; 6],
    /// `interleave`'s units, as powers of two.
    unit: Option<(u32, u32)>,
}

impl BlockPlace {
    pub fn new(t: GgmlType, b: usize) -> BlockPlace {
        let sz = sections(t).expect("packable type");
        let per_chunk = chunk_blocks(t);
        let chunk = (b / per_chunk) * chunk_bytes(t);
        let within = b % per_chunk;
        let lines = line_sections(t);
        let mut base = [0; 6];
        // The small parts first, so a kernel reading a block's scales before its lines still
        // moves forward through memory, then the lines.
        let mut start = chunk;
        for s in lines..sz.len() {
            base[s] = start + within * sz[s];
            start += sz[s] * per_chunk;
        }
        let region = chunk + head_bytes(t) + within * region_bytes(t);
        let mut at = region;
        for s in 0..lines {
            base[s] = at;
            at += sz[s];
        }
        let unit = interleave(t).map(|(a, c)| {
            // The two sections share the region.
            base[1] = region;
            (a.trailing_zeros(), c.trailing_zeros())
        });
        BlockPlace { base, unit }
    }

    /// Offset in the group of byte `i` of the block's part of section `s`.
    #[inline(always)]
    pub fn at(&self, s: usize, i: usize) -> usize {
        match self.unit {
            Some((a, c)) if s < 2 => {
                let (a_bytes, c_bytes) = (1 << a, 1 << c);
                let (unit, skip, len) = if s == 0 {
                    (a, 0, a_bytes)
                } else {
                    (c, a_bytes, c_bytes)
                };
                self.base[0] + (i >> unit) * (a_bytes + c_bytes) + skip + (i & (len - 1))
            }
            _ => self.base[s] + i,
        }
    }
}

/// Whether `t` has a repacked layout for a matrix of `rows` rows of `cols` values.
pub fn packable(t: GgmlType, rows: usize, cols: usize) -> bool {
    (sections(t).is_some() || t == GgmlType::F16)
        && rows.is_multiple_of(ROWS)
        && cols.is_multiple_of(t.block_len())
        && rows > 0
}

/// Runs `f(i, chunk)` over the `chunk`-byte pieces of a buffer, possibly in parallel.
pub type ForEachChunk<'a> = &'a dyn Fn(&mut [u8], usize, &(dyn Fn(usize, &mut [u8]) + Sync));

/// Repack `rows` rows of GGML blocks (`data`, row after row), the groups packed through `par`.
/// None when the type has no packed layout or the shape does not fit it (rows not a multiple of
/// 16), or memory runs out.
pub fn pack(
    t: GgmlType,
    data: &[u8],
    rows: usize,
    cols: usize,
    par: ForEachChunk,
) -> Option<Packed> {
    if !packable(t, rows, cols) {
        return None;
    }
    let blocks = cols / t.block_len();
    let row_bytes = blocks * t.block_bytes();
    if data.len() != rows * row_bytes {
        return None;
    }
    let group_bytes = match t {
        GgmlType::F16 => f16::group_bytes(cols),
        _ => group_bytes(t, blocks),
    };
    let mut data_out = AlignedBytes::zeroed(group_bytes * (rows / ROWS))?;
    par(data_out.as_mut_slice(), group_bytes, &|g, out| {
        let rows: [&[u8]; ROWS] =
            std::array::from_fn(|r| &data[(g * ROWS + r) * row_bytes..][..row_bytes]);
        match t {
            GgmlType::F16 => f16::pack_group(&rows, out),
            _ => pack_group(t, &rows, blocks, out),
        }
    });
    Some(Packed {
        dtype: t,
        blocks,
        group_bytes,
        data: data_out,
    })
}

/// One block of one row, decoded to unsigned codes and integer sub-block parameters.
struct Codes {
    u: [u8; 256],
    /// Sub-block scales (K-quants).
    sc: [i8; 16],
    /// Sub-block minimums (Q2_K, Q4_K, Q5_K).
    m: [u8; 16],
    /// f16 bits of the block scale, and of the minimum's scale (K-quants) or the minimum (Q4_1, Q5_1).
    d: u16,
    dmin: u16,
}

impl Codes {
    const ZERO: Codes = Codes {
        u: [0; 256],
        sc: [0; 16],
        m: [0; 16],
        d: 0,
        dmin: 0,
    };
}

/// Encode codes back into one GGML block (the inverse of `decode`).
fn encode(t: GgmlType, c: &Codes, b: &mut [u8]) {
    b.fill(0);
    let put16 = |b: &mut [u8], i: usize, v: u16| b[i..i + 2].copy_from_slice(&v.to_le_bytes());
    match t {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
            put16(b, 0, c.d);
            let mut off = if matches!(t, GgmlType::Q4_0 | GgmlType::Q5_0) {
                2
            } else {
                put16(b, 2, c.dmin);
                4
            };
            if matches!(t, GgmlType::Q5_0 | GgmlType::Q5_1) {
                let mut qh = 0u32;
                for j in 0..32 {
                    qh |= ((c.u[j] >> 4) as u32 & 1) << j;
                }
                b[off..off + 4].copy_from_slice(&qh.to_le_bytes());
                off += 4;
            }
            for j in 0..16 {
                b[off + j] = (c.u[j] & 0xF) | ((c.u[j + 16] & 0xF) << 4);
            }
        }
        GgmlType::Q8_0 => {
            put16(b, 0, c.d);
            b[2..34].copy_from_slice(&c.u[..32]);
        }
        GgmlType::Q1_0 => {
            put16(b, 0, c.d);
            for v in 0..128 {
                b[2 + v / 8] |= c.u[v] << (v % 8);
            }
        }
        GgmlType::IQ4_NL | GgmlType::MXFP4 => {
            let off = if t == GgmlType::MXFP4 {
                b[0] = c.d as u8;
                1
            } else {
                put16(b, 0, c.d);
                2
            };
            for j in 0..16 {
                b[off + j] = (c.u[j] & 0xF) | ((c.u[j + 16] & 0xF) << 4);
            }
        }
        GgmlType::IQ4_XS => {
            put16(b, 0, c.d);
            let mut high = 0u16;
            for (s, &sc) in c.sc.iter().take(8).enumerate() {
                let ls = (sc as i32 + 32) as u8;
                b[4 + s / 2] |= (ls & 0xF) << (4 * (s % 2));
                high |= ((ls >> 4) as u16 & 3) << (2 * s);
            }
            put16(b, 2, high);
            for v in 0..256 {
                let (s, i) = (v / 32, v % 32);
                b[8 + 16 * s + i % 16] |= (c.u[v] & 0xF) << (4 * (i / 16));
            }
        }
        GgmlType::Q2_K => {
            for s in 0..16 {
                b[s] = (c.sc[s] as u8 & 0xF) | (c.m[s] << 4);
            }
            for v in 0..256 {
                let (half, k4, part, l) = (v / 128, (v / 32) % 4, (v / 16) % 2, v % 16);
                b[16 + half * 32 + part * 16 + l] |= (c.u[v] & 3) << (2 * k4);
            }
            put16(b, 80, c.d);
            put16(b, 82, c.dmin);
        }
        GgmlType::Q3_K => {
            for v in 0..256 {
                let (half, k4, part, l) = (v / 128, (v / 32) % 4, (v / 16) % 2, v % 16);
                b[32 + half * 32 + part * 16 + l] |= (c.u[v] & 3) << (2 * k4);
                b[part * 16 + l] |= ((c.u[v] >> 2) & 1) << (half * 4 + k4);
            }
            for (i, &s) in c.sc.iter().enumerate() {
                let q = (s as i32 + 32) as u8;
                if i < 8 {
                    b[96 + i] |= q & 0xF;
                } else {
                    b[96 + i - 8] |= (q & 0xF) << 4;
                }
                b[104 + i % 4] |= ((q >> 4) & 3) << (2 * (i / 4));
            }
            put16(b, 108, c.d);
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            put16(b, 0, c.d);
            put16(b, 2, c.dmin);
            let sc = &mut b[4..16];
            for s in 0..8 {
                let (q, m) = (c.sc[s] as u8, c.m[s]);
                if s < 4 {
                    sc[s] |= q & 63;
                    sc[s + 4] |= m & 63;
                } else {
                    sc[s + 4] |= (q & 0xF) | ((m & 0xF) << 4);
                    sc[s - 4] |= (q >> 4) << 6;
                    sc[s] |= (m >> 4) << 6;
                }
            }
            let qs_at = if t == GgmlType::Q4_K { 16 } else { 48 };
            for j in 0..4 {
                for l in 0..32 {
                    let (lo, hi) = (c.u[64 * j + l], c.u[64 * j + 32 + l]);
                    b[qs_at + 32 * j + l] = (lo & 0xF) | ((hi & 0xF) << 4);
                    if t == GgmlType::Q5_K {
                        b[16 + l] |= ((lo >> 4) & 1) << (2 * j) | ((hi >> 4) & 1) << (2 * j + 1);
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            for n in 0..2 {
                for l in 0..32 {
                    let base = 128 * n + l;
                    let (q1, q2, q3, q4) =
                        (c.u[base], c.u[base + 32], c.u[base + 64], c.u[base + 96]);
                    b[64 * n + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                    b[64 * n + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                    b[128 + 32 * n + l] =
                        (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
                }
            }
            for s in 0..16 {
                b[192 + s] = c.sc[s] as u8;
            }
            put16(b, 208, c.d);
        }
        _ => unreachable!("{t} has no packed layout"),
    }
}

/// Which line format holds a type's codes, for `put_codes`/`get_codes`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lines {
    /// Low four bits as nibble lines.
    Nibbles,
    /// Low two bits as 2-bit lines (16-value sub-blocks).
    TwoBit,
    /// Q6_K's six-bit lines: lines 0 and 1 of each sub-block in section 0, lines 2 in section 1.
    SixBit,
    /// Raw bytes, one quad per line.
    Bytes,
    /// No lines: each code is one bit, kept as the high-bit masks, which come first (Q1_0).
    Empty,
}

impl Lines {
    /// How many sections the lines take, before the high bits' masks.
    fn sections(self) -> usize {
        match self {
            Lines::Empty => 0,
            Lines::SixBit => 2,
            _ => 1,
        }
    }
}

/// How a type's codes are split: the line format of the low bits, and where the high bits go.
fn code_parts(t: GgmlType) -> (Lines, Option<u32>) {
    match t {
        GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q4_K
        | GgmlType::IQ4_NL
        | GgmlType::IQ4_XS
        | GgmlType::MXFP4 => (Lines::Nibbles, None),
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => (Lines::Nibbles, Some(4)),
        GgmlType::Q6_K => (Lines::SixBit, None),
        GgmlType::Q2_K => (Lines::TwoBit, None),
        GgmlType::Q3_K => (Lines::TwoBit, Some(2)),
        GgmlType::Q1_0 => (Lines::Empty, Some(0)),
        _ => (Lines::Bytes, None),
    }
}

/// Where line `k` (0..3) of Q6_K sub-block `s`'s six-bit lines lies: its section and byte offset.
fn six_bit_line(s: usize, k: usize) -> (usize, usize) {
    if k < 2 {
        (0, 128 * s + 64 * k)
    } else {
        (1, 64 * s)
    }
}

/// Where row `r`'s minimum of sub-block `s` lies in a Q4_K/Q5_K block's minimums: as byte pairs
/// (sub-blocks 2i and 2i + 1) per row, which the kernels widen to 16-bit pairs in one step.
fn min_at(s: usize, r: usize) -> usize {
    32 * (s / 2) + 2 * r + s % 2
}

/// Read back row `r`'s codes of block `b` (the inverse of `put_block`).
fn get_block(t: GgmlType, group: &[u8], b: usize, r: usize) -> Codes {
    let sz = sections(t).expect("packable type");
    let place = BlockPlace::new(t, b);
    // Byte i of section s.
    let get = |s: usize, i: usize| group[place.at(s, i)];
    let n = t.block_len();
    let (lines, high_bit) = code_parts(t);
    let mut c = Codes::ZERO;
    for v in 0..n {
        c.u[v] = match lines {
            Lines::Nibbles => {
                let (o, i) = (v / 8, v % 8);
                let byte = get(0, o * 64 + 4 * r + i % 4);
                if i < 4 { byte & 0xF } else { byte >> 4 }
            }
            Lines::TwoBit => {
                let (s, q, i) = (v / 16, (v % 16) / 4, v % 4);
                (get(0, s * 64 + 4 * r + i) >> (2 * q)) & 3
            }
            Lines::SixBit => {
                let (s, q, i) = (v / 16, (v % 16) / 4, v % 4);
                let line = |k: usize| {
                    let (sec, at) = six_bit_line(s, k);
                    get(sec, at + 4 * r + i)
                };
                if q < 3 {
                    line(q) & 0x3F
                } else {
                    (0..3).fold(0, |acc, k| acc | (line(k) >> 6) << (2 * k))
                }
            }
            Lines::Bytes => get(0, (v / 4) * 64 + 4 * r + v % 4),
            Lines::Empty => 0,
        };
    }
    let mut next = lines.sections();
    if let Some(bit) = high_bit {
        for v in 0..n {
            let bit_index = 4 * r + v % 4;
            let byte = get(next, 8 * (v / 4) + bit_index / 8);
            c.u[v] |= ((byte >> (bit_index % 8)) & 1) << bit;
        }
        next += 1;
    }
    let subs = match t {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::IQ4_XS => 8,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q6_K => 16,
        _ => 0,
    };
    if subs > 0 {
        for s in 0..subs {
            let v = get(next, s * 16 + r);
            if t == GgmlType::Q2_K {
                c.sc[s] = (v & 0xF) as i8;
                c.m[s] = v >> 4;
            } else {
                c.sc[s] = v as i8;
            }
        }
        next += 1;
        if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
            for s in 0..subs {
                c.m[s] = get(next, min_at(s, r));
            }
            next += 1;
        }
    }
    c.d = if t == GgmlType::MXFP4 {
        get(next, r) as u16
    } else {
        u16::from_le_bytes([get(next, 2 * r), get(next, 2 * r + 1)])
    };
    next += 1;
    if next < sz.len() {
        c.dmin = u16::from_le_bytes([get(next, 2 * r), get(next, 2 * r + 1)]);
    }
    c
}

fn pack_group(t: GgmlType, rows: &[&[u8]; ROWS], blocks: usize, out: &mut [u8]) {
    let bb = t.block_bytes();
    // Row by row, so the source is read as one sequential stream; the group's output (tens of
    // KB) stays in cache.
    let places: Vec<BlockPlace> = (0..blocks).map(|b| BlockPlace::new(t, b)).collect();
    for (r, row) in rows.iter().enumerate() {
        for (b, place) in places.iter().enumerate() {
            pack_block(t, &row[b * bb..][..bb], r, place, out);
        }
    }
}

#[inline(always)]
fn le32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

#[inline(always)]
fn le64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

#[inline(always)]
fn le128(b: &[u8], i: usize) -> u128 {
    u128::from_le_bytes(b[i..i + 16].try_into().expect("16 bytes"))
}

/// A u128 with 1 in each byte: `c * BYTES` repeats byte c.
const BYTES: u128 = u128::MAX / 0xFF;

/// A nibble-line quad from eight codes held in the low (or high) nibbles of `x`'s bytes: byte i
/// gets code i in its low nibble and code 4 + i in its high one.
#[inline(always)]
fn nibble_quad(x: u64, high: bool) -> [u8; 4] {
    let y = if high { x >> 4 } else { x } & 0x0F0F_0F0F_0F0F_0F0F;
    ((y as u32) | ((y >> 32) as u32) << 4).to_le_bytes()
}

/// Bit `shift` of each of `w`'s four bytes, as four bits.
#[inline(always)]
fn bits4(w: u32, shift: u32) -> u64 {
    ((((w >> shift) & 0x0101_0101) as u64).wrapping_mul(0x0020_4081) >> 21) & 0xF
}

/// A 2-bit-line quad from the four words of codes at `x[at..at + 16]`, each code at bit `shift`
/// of its byte: byte i gets the code of word q, byte i, at bits 2q..2q + 1.
#[inline(always)]
fn two_bit_quad(x: &[u8], at: usize, shift: u32) -> [u8; 4] {
    let mut out = 0u32;
    for q in 0..4 {
        out |= ((le32(x, at + 4 * q) >> shift) & 0x0303_0303) << (2 * q);
    }
    out.to_le_bytes()
}

/// Pack row `r`'s block (`x`, its GGML bytes; `place`, where its parts go) straight into the
/// group's sections with word operations (the packing is part of load time); `put_block` from
/// decoded codes is its reference. Masks are or'ed in, so the output must start zeroed.
fn pack_block(t: GgmlType, x: &[u8], r: usize, place: &BlockPlace, out: &mut [u8]) {
    // Lines are 64 bytes and masks 8, so neither straddles an interleaving unit.
    let put4 = |out: &mut [u8], sec: usize, line: usize, v: [u8; 4]| {
        let i = place.at(sec, 64 * line + 4 * r);
        out[i..i + 4].copy_from_slice(&v);
    };
    // Row r's four bits of quad mask q.
    let or_mask = |out: &mut [u8], sec: usize, q: usize, bits: u64| {
        let i = place.at(sec, 8 * q);
        let m = u64::from_le_bytes(out[i..i + 8].try_into().expect("8 bytes")) | bits << (4 * r);
        out[i..i + 8].copy_from_slice(&m.to_le_bytes());
    };
    let put_f16 = |out: &mut [u8], sec: usize, i: usize| {
        let o = place.at(sec, 2 * r);
        out[o..o + 2].copy_from_slice(&x[i..i + 2]);
    };
    let put_plane = |out: &mut [u8], sec: usize, s: usize, v: u8| {
        out[place.at(sec, 16 * s + r)] = v;
    };
    match t {
        GgmlType::Q4_0 | GgmlType::IQ4_NL | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let q5 = matches!(t, GgmlType::Q5_0 | GgmlType::Q5_1);
            let with_min = matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1);
            let head = if with_min { 4 } else { 2 };
            let qs_at = head + if q5 { 4 } else { 0 };
            for o in 0..4 {
                put4(out, 0, o, nibble_quad(le64(x, qs_at + 8 * (o % 2)), o >= 2));
            }
            if q5 {
                let qh = le32(x, head) as u64;
                for q in 0..8 {
                    or_mask(out, 1, q, (qh >> (4 * q)) & 0xF);
                }
            }
            let d_sec = if q5 { 2 } else { 1 };
            put_f16(out, d_sec, 0);
            if with_min {
                put_f16(out, d_sec + 1, 2);
            }
        }
        GgmlType::Q8_0 => {
            for q in 0..8 {
                put4(out, 0, q, le32(x, 2 + 4 * q).to_le_bytes());
            }
            put_f16(out, 1, 0);
        }
        GgmlType::Q1_0 => {
            // Quad q's four sign bits are the low or high nibble of byte 2 + q / 2.
            for q in 0..32 {
                or_mask(out, 0, q, (x[2 + q / 2] >> (4 * (q % 2))) as u64 & 0xF);
            }
            put_f16(out, 1, 0);
        }
        GgmlType::MXFP4 => {
            for o in 0..4 {
                put4(out, 0, o, nibble_quad(le64(x, 1 + 8 * (o % 2)), o >= 2));
            }
            out[place.at(1, r)] = x[0];
        }
        GgmlType::IQ4_XS => {
            let high = u16::from_le_bytes([x[2], x[3]]);
            for sb in 0..8 {
                for o in 0..4 {
                    let word = le64(x, 8 + 16 * sb + 8 * (o % 2));
                    put4(out, 0, 4 * sb + o, nibble_quad(word, o >= 2));
                }
                let ls = ((x[4 + sb / 2] >> (4 * (sb % 2))) & 0xF)
                    | (((high >> (2 * sb)) & 3) << 4) as u8;
                put_plane(out, 1, sb, (ls as i8).wrapping_sub(32) as u8);
            }
            put_f16(out, 2, 0);
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let q5 = t == GgmlType::Q5_K;
            let (qs_at, s) = if q5 { (48, 1) } else { (16, 0) };
            for sb in 0..8 {
                for o in 0..4 {
                    let word = le64(x, qs_at + 32 * (sb / 2) + 8 * o);
                    put4(out, 0, 4 * sb + o, nibble_quad(word, sb % 2 == 1));
                }
                let (sc, m) = scale_min_k4(sb, &x[4..16]);
                put_plane(out, 1 + s, sb, sc);
                out[place.at(2 + s, min_at(sb, r))] = m;
            }
            if q5 {
                for q in 0..64 {
                    or_mask(out, 1, q, bits4(le32(x, 16 + 4 * (q % 8)), (q / 8) as u32));
                }
            }
            put_f16(out, 3 + s, 0);
            put_f16(out, 4 + s, 2);
        }
        GgmlType::Q6_K => {
            for sb in 0..16 {
                // GGML's sub-block sb: low nibbles in ql, high pairs in qh (see `decode`).
                let (n, k, p) = (sb / 8, (sb % 8) / 2, sb % 2);
                let ql = le128(x, 64 * n + 32 * (k & 1) + 16 * p) >> (4 * (k / 2));
                let qh = le128(x, 128 + 32 * n + 16 * p) >> (2 * k);
                let codes = (ql & (0x0F * BYTES)) | (qh & (0x03 * BYTES)) << 4;
                let quad3 = (codes >> 96) as u32;
                for line in 0..3 {
                    let top = ((quad3 >> (2 * line)) & 0x0303_0303) << 6;
                    let v = ((codes >> (32 * line)) as u32 | top).to_le_bytes();
                    let (sec, at) = six_bit_line(sb, line);
                    put4(out, sec, at / 64, v);
                }
                put_plane(out, 2, sb, x[192 + sb]);
            }
            put_f16(out, 3, 208);
        }
        GgmlType::Q2_K | GgmlType::Q3_K => {
            let q3 = t == GgmlType::Q3_K;
            let qs_at = if q3 { 32 } else { 16 };
            let mut scales = [0u8; 16];
            if q3 {
                for (s, v) in scales.iter_mut().zip(q3_k_scales(&x[96..108])) {
                    *s = v as u8;
                }
            } else {
                scales.copy_from_slice(&x[..16]);
            }
            for sb in 0..16 {
                let (half, k4, part) = (sb / 8, (sb % 8) / 2, sb % 2);
                let at = qs_at + 32 * half + 16 * part;
                put4(out, 0, sb, two_bit_quad(x, at, 2 * k4 as u32));
                if q3 {
                    for q in 0..4 {
                        let w = le32(x, 16 * part + 4 * q);
                        or_mask(out, 1, 4 * sb + q, bits4(w, (4 * half + k4) as u32));
                    }
                }
                put_plane(out, if q3 { 2 } else { 1 }, sb, scales[sb]);
            }
            if q3 {
                put_f16(out, 3, 108);
            } else {
                put_f16(out, 2, 80);
                put_f16(out, 3, 82);
            }
        }
        _ => unreachable!("{t} has no packed layout"),
    }
}

/// Row `row` of a packed matrix, back in GGML blocks (`out` holds one row's bytes).
pub fn unpack_row(p: &Packed, row: usize, out: &mut [u8]) {
    let t = p.dtype;
    let bb = t.block_bytes();
    let group = p.group(row / ROWS);
    if t == GgmlType::F16 {
        return f16::unpack_row(group, row % ROWS, out);
    }
    for (b, block) in out.chunks_exact_mut(bb).enumerate().take(p.blocks) {
        encode(t, &get_block(t, group, b, row % ROWS), block);
    }
}

mod f16;
mod memory;

use memory::AlignedBytes;

#[cfg(test)]
pub(crate) mod tests;
