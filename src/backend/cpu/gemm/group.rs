//! How one GEMM call walks a group of 16 repacked rows (`repack.rs`): `run_group` takes the
//! call's tokens in tiles (8 with AVX-512, 4 with AVX2 and NEON, 1 to 4 for decode and verify
//! passes) and the row in spans, and fetches weights ahead of the kernels; `Tile` is where a
//! kernel (`Kernel`, the types' kernels in `mod.rs`) finds its operands.
#![allow(clippy::needless_range_loop)] // tiles index parallel arrays with one index

use std::ops::Range;

use super::super::isa::Isa;
use crate::backend::cpu::kernels::{ActBlock, GroupCall};
use crate::backend::cpu::repack::{self, BlockPlace, ROWS, chunk_blocks, chunk_bytes};

/// Where one tile's operands are: the group's sections, the rows of this part (the group's 16
/// rows in registers of `LANES`), and per token its activation blocks and, for Q8 activations,
/// their integer sums.
pub(crate) struct Tile<A, const T: usize> {
    /// Where each section starts in the group's first chunk.
    pub sec: [*const u8; 6],
    pub blocks: usize,
    /// log2 of the blocks per chunk (one or two), and the chunk's size.
    pub chunk_shift: u32,
    pub chunk_bytes: usize,
    /// Byte offset of this part's rows in a line.
    pub line: usize,
    /// Index of this part's first row in a plane.
    pub lane: usize,
    /// Bit offset of this part's rows in a quad mask.
    pub shift: usize,
    pub x: [*const A; T],
    pub xsum: [*const i32; T],
    /// Where the span's first chunk starts, and how far ahead of the block it computes the
    /// kernel fetches weights into L1 (`fetch_ahead`; 0 for none).
    pub start: *const u8,
    pub ahead: usize,
}

impl<A, const T: usize> Tile<A, T> {
    /// Byte `i` of block `b`'s part of section `s`, whose parts are `size` bytes.
    #[inline(always)]
    pub unsafe fn at(&self, s: usize, size: usize, b: usize, i: usize) -> *const u8 {
        let chunk = b >> self.chunk_shift;
        let within = b & ((1 << self.chunk_shift) - 1);
        unsafe { self.sec[s].add(chunk * self.chunk_bytes + within * size + i) }
    }

    /// The quad mask at byte `i` of block `b`'s part of section `s` (`size` bytes per block),
    /// for this part's rows.
    #[inline(always)]
    pub(super) unsafe fn mask(&self, s: usize, size: usize, b: usize, i: usize) -> u64 {
        unsafe { (self.at(s, size, b, i) as *const u64).read_unaligned() >> self.shift }
    }

    /// Fetches into L1 one block's worth of weights `ahead` bytes past the start of block `b`'s,
    /// so that the block that far on does not wait for memory when its turn comes.
    #[inline(always)]
    pub unsafe fn fetch_ahead(&self, b: usize) {
        if self.ahead == 0 {
            return;
        }
        let per_block = self.chunk_bytes >> self.chunk_shift;
        let within = b & ((1 << self.chunk_shift) - 1);
        let at = (b >> self.chunk_shift) * self.chunk_bytes + within * per_block + self.ahead;
        let mut i = 0;
        while i < per_block {
            // Past the group's end near its last blocks: a prefetch never faults, and the
            // address is only computed (`wrapping_add`), not dereferenced.
            unsafe { prefetch(self.start.wrapping_add(at + i)) };
            i += 64;
        }
    }

    /// Token `t`'s activation block `b`.
    #[inline(always)]
    pub unsafe fn x(&self, t: usize, b: usize) -> &A {
        unsafe { &*self.x[t].add(b) }
    }
}

/// One weight type's kernel: `acc[t] += ` the tile's rows · token t, over all blocks.
pub(crate) trait Kernel<A> {
    unsafe fn run<V: Isa, const T: usize>(tile: &Tile<A, T>, acc: &mut [V::F; T]);
}

/// Values of K per span of a GEMM call over several tiles: every token tile passes over one span
/// of the group's 16 rows (a few KB of weights, which stay in L1) before the next, and the next
/// span's weights are fetched while it does (a down projection's whole rows, 100+ KB, would not
/// stay in L1 between tiles).
const SPAN_VALUES: usize = 1024;

/// How far ahead, in bytes of the group, a call of one token tile (generation, a verify pass)
/// fetches the weights it will compute next (`Tile::fetch_ahead`): the hardware prefetcher alone
/// kept the cores waiting on memory, more so the more tokens a line's loads were spread over.
/// (1B shape, Q4_K_M, 2 threads, AVX-512, medians of 7 in 4 alternating runs, ms without / with
/// 8 KB: decode 22.8 / 19.1, a 4-row verify pass 35.6 / 21.0 (8 rows 56.8 / 23.9); 2 KB 24.4,
/// 4 KB 22.0, 6 KB 21.8 for the 4 rows; AVX2, decode 15.4 / 13.0 and 4 rows 42.3 / 25.1.) Not
/// measured on ARM, which keeps the hardware's alone.
const FETCH_AHEAD: usize = if cfg!(target_arch = "x86_64") {
    8192
} else {
    0
};

#[inline(always)]
pub(crate) unsafe fn run_group<V: Isa, A: ActBlock, K: Kernel<A>, const TILE: usize>(
    c: &GroupCall<A>,
) {
    unsafe {
        let base = c.p.group(c.group).as_ptr();
        let dtype = c.p.dtype;
        let n_sec = repack::sections(dtype).map_or(0, |s| s.len());
        let first = BlockPlace::new(dtype, 0);
        let mut sec = [base; 6];
        for (s, p) in sec.iter_mut().enumerate().take(n_sec) {
            *p = base.add(first.at(s, 0));
        }
        // The chunk sizes, looked up once here: per tile they cost a share of a prefill.
        let (per_chunk, bytes_per_chunk) = (chunk_blocks(dtype), chunk_bytes(dtype));
        // One span for a single tile (generation, a verify pass); spans of whole chunks
        // otherwise.
        let single = c.tokens.len() <= TILE;
        let ahead = if single { FETCH_AHEAD } else { 0 };
        let span = if single {
            c.p.blocks
        } else {
            (SPAN_VALUES / dtype.block_len()).next_multiple_of(per_chunk)
        };
        let skip = |b: usize| (b / per_chunk) * bytes_per_chunk;
        let tiles = c.tokens.len().div_ceil(TILE) * (ROWS / V::LANES);
        let mut b0 = 0;
        while b0 < c.p.blocks {
            let blocks = b0..(b0 + span).min(c.p.blocks);
            let at = SpanWeights {
                sec: sec.map(|p| p.add(skip(b0))),
                chunk_shift: per_chunk.trailing_zeros(),
                chunk_bytes: bytes_per_chunk,
                start: base.add(skip(b0)),
                ahead,
            };
            // The weights the next span reads (the next group's first span after the last one),
            // fetched a share per tile while this span computes, so that the next span's first
            // tile does not wait for memory. (1B shape, Q6_K, 2 threads, pp128: 466 t/s without,
            // 533-540 with.) Not for a call of one token tile (decode, a verify pass): its one
            // span is the whole row, and the burst of a whole group's prefetches there cost more
            // than it saved (1B shape, Q4_K_M, 2 threads, 8 alternating rounds: a 4-row verify
            // pass 1.52 decode steps without, 1.69 with); its kernel fetches a steady distance
            // ahead instead (`FETCH_AHEAD`).
            let next = if blocks.end < c.p.blocks {
                let end = (blocks.end + span).min(c.p.blocks);
                Some((base.add(skip(blocks.end)), skip(end) - skip(blocks.end)))
            } else if tiles > 1 && c.tokens.len() > TILE && c.group + 1 < c.p.groups() {
                let bytes = skip(span.min(c.p.blocks));
                Some((base.add(c.p.group_bytes), bytes.min(c.p.group_bytes)))
            } else {
                None
            };
            let share = next.map_or(0, |(_, bytes)| bytes.div_ceil(tiles).next_multiple_of(64));
            let mut fetched = 0;
            for h in 0..ROWS / V::LANES {
                let mut t0 = c.tokens.start;
                while t0 < c.tokens.end {
                    if let Some((at, bytes)) = next {
                        let end = (fetched + share).min(bytes);
                        while fetched < end {
                            prefetch(at.add(fetched));
                            fetched += 64;
                        }
                    }
                    let n = (c.tokens.end - t0).min(TILE);
                    // A short tile computes only its tokens: a verify pass of 2 or 3 rows (or a
                    // tile of 4 and 2) would otherwise pay for a whole tile.
                    let b = blocks.clone();
                    match n {
                        1 => tile::<V, A, K, 1>(c, &at, h, t0, 1, b),
                        2 if TILE > 2 => tile::<V, A, K, 2>(c, &at, h, t0, 2, b),
                        3 if TILE > 3 => tile::<V, A, K, 3>(c, &at, h, t0, 3, b),
                        4 if TILE > 4 => tile::<V, A, K, 4>(c, &at, h, t0, 4, b),
                        _ => tile::<V, A, K, TILE>(c, &at, h, t0, n, b),
                    }
                    t0 += n;
                }
            }
            b0 = blocks.end;
        }
    }
}

/// Where a span's weights are (`Tile`'s fields of the same names).
struct SpanWeights {
    sec: [*const u8; 6],
    chunk_shift: u32,
    chunk_bytes: usize,
    start: *const u8,
    ahead: usize,
}

/// `n` tokens from `t0` (padded to `T` by repeating the last one) against half `h` of the group,
/// over `blocks` (whose weights are at `at`). A span after the first adds to the outputs the
/// spans before it left, so each output's float operations run in the same order as in one span.
#[inline(always)]
unsafe fn tile<V: Isa, A: ActBlock, K: Kernel<A>, const T: usize>(
    c: &GroupCall<A>,
    at: &SpanWeights,
    h: usize,
    t0: usize,
    n: usize,
    blocks: Range<usize>,
) {
    unsafe {
        let mut x = [c.x.as_ptr(); T];
        let mut xsum = [c.xsum.as_ptr(); T];
        // Activation blocks per weight block (four for Q1_0's 128 values, else one).
        let first = blocks.start * (c.p.dtype.block_len() / A::LEN);
        for t in 0..T {
            let tok = t0 + t.min(n - 1);
            x[t] = c.x.as_ptr().add(tok * c.stride + first);
            if !c.xsum.is_empty() {
                xsum[t] = c.xsum.as_ptr().add(tok * c.stride + first);
            }
        }
        let tile = Tile {
            sec: at.sec,
            blocks: blocks.len(),
            chunk_shift: at.chunk_shift,
            chunk_bytes: at.chunk_bytes,
            line: h * 4 * V::LANES,
            lane: h * V::LANES,
            shift: h * 4 * V::LANES,
            x,
            xsum,
            start: at.start,
            ahead: at.ahead,
        };
        let mut acc = [V::fzero(); T];
        if blocks.start > 0 {
            for t in 0..n {
                acc[t] = V::loadf(c.out.add((t0 + t) * c.m + h * V::LANES));
            }
        }
        K::run::<V, T>(&tile, &mut acc);
        for t in 0..n {
            V::store(c.out.add((t0 + t) * c.m + h * V::LANES), acc[t]);
        }
    }
}

/// Where the next weights are read from: fetch the 64-byte line at `p` into L1.
#[inline(always)]
unsafe fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
    }
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{p}]", p = in(reg) p, options(nostack, preserves_flags, readonly))
    }
}
