//! The F16 GEMM over weights in panels (`repack/f16.rs`): a tile keeps `G` vectors of rows by
//! `T` tokens of sums in registers and, for each column, converts each vector's weights once and
//! multiplies them by each token's activation broadcast. Every output is one chain of fused
//! multiply-adds in column order from zero, so a tile's results are those of any other tile and of
//! any vector width, bit for bit: a prefill and the decode steps after it agree.
//!
//! The row kernels' tiles it replaced (F16 weights not in panels still take the row kernels)
//! read each weight row once per tile of tokens and ended each output in a horizontal sum; the
//! activations here come in tiles of the kernel's tokens (`PanelCall::x`), so a column's values
//! for the whole tile are one line. Qwen3.5's F16 vision tower, a 768×512 image on 2 threads of a
//! Zen 5, µs per image token: the products other than the down projection 5,460 → 4,620 (about
//! 250 GMAC/s, 90 % of the FMA peak), the down projection 2,850 → 2,460 (217 GMAC/s); the 1B
//! Llama shape in F16, pp64 141 → 226 t/s and tg32 16 → 22 t/s (llama.cpp: 185 and 17-23).
#![allow(clippy::needless_range_loop)] // tiles index parallel arrays with one index
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // ARM has no panel GEMM yet

use std::ops::Range;

use crate::backend::cpu::isa::F32Isa;
use crate::backend::cpu::repack::{Packed, ROWS};

/// What one call computes: row groups `groups` of `p` against `tokens` (whole tiles of `width`
/// from the first), row r of token t written to `out[t·m + r]` (`out` is the whole job's output).
/// The activations, already rounded to f16 (as the row kernels round them), lie in tiles of
/// `width` tokens: token t's value `col` at `x[(t / width)·width·k + col·width + t % width]`, so a
/// tile reads every token's value of a column from one line (and with `width` 1, row after row).
pub struct PanelCall<'a> {
    pub p: &'a Packed,
    pub groups: Range<usize>,
    pub x: &'a [f32],
    pub width: usize,
    pub k: usize,
    pub tokens: Range<usize>,
    pub out: *mut f32,
    pub m: usize,
}

/// The F16 GEMM at one instruction set, and its tile's tokens: the `width` of a call's
/// activations where it has several tokens (1 for one). `run` is unsafe: the call's groups,
/// tokens and output must lie within its buffers.
#[derive(Clone, Copy)]
pub struct PanelGemm {
    pub run: unsafe fn(&PanelCall),
    pub width: usize,
    /// Up to `width` tokens' activations (rows of k values) rounded to f16 into one tile of
    /// that layout: `tile(x, k, width, dst)`; lanes past the tokens are left as they were.
    pub tile: fn(&[f32], usize, usize, &mut [f32]),
}

/// The call in tiles of `G` vectors of rows by up to `T` tokens (`T` the activations' width), or
/// with width 1, `ONE` vectors for each token (independent chains: one alone would wait on each
/// multiply-add's latency).
///
/// # Safety
/// As `PanelGemm::run`, inside a function compiled for `V`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn run_panels<V: F32Isa, const G: usize, const T: usize, const ONE: usize>(
    c: &PanelCall,
) {
    unsafe {
        let per_group = ROWS / V::LANES;
        let vectors = c.groups.start * per_group..c.groups.end * per_group;
        if c.width == 1 {
            for t in c.tokens.clone() {
                let x = c.x.as_ptr().add(t * c.k);
                vectors_of::<V, ONE, 1, 1>(c, vectors.clone(), x, t, 1);
            }
            return;
        }
        debug_assert!(c.width == T && c.tokens.start.is_multiple_of(T));
        let mut t0 = c.tokens.start;
        while t0 < c.tokens.end {
            let n = (c.tokens.end - t0).min(T);
            let (v, x) = (vectors.clone(), c.x.as_ptr().add(t0 * c.k));
            // A short tile computes only its tokens (a verify pass of 2 to 4 rows); others
            // compute the whole tile's lanes and store theirs.
            match n {
                1 => vectors_of::<V, G, 1, T>(c, v, x, t0, n),
                2 => vectors_of::<V, G, 2, T>(c, v, x, t0, n),
                3 => vectors_of::<V, G, 3, T>(c, v, x, t0, n),
                4 => vectors_of::<V, G, 4, T>(c, v, x, t0, n),
                _ => vectors_of::<V, G, T, T>(c, v, x, t0, n),
            }
            t0 += n;
        }
    }
}

/// `N` lanes of the token tile at `x` (width `W`; tokens `t0..t0 + n` stored) against `vectors`,
/// `G` at a time, then the rest in fewer.
#[inline(always)]
unsafe fn vectors_of<V: F32Isa, const G: usize, const N: usize, const W: usize>(
    c: &PanelCall,
    vectors: Range<usize>,
    x: *const f32,
    t0: usize,
    n: usize,
) {
    unsafe {
        let mut v = vectors.start;
        while v < vectors.end {
            let left = vectors.end - v;
            if left >= G {
                tile::<V, G, N, W>(c, v, x, t0, n);
                v += G;
            } else if G > 4 && left >= 4 {
                tile::<V, 4, N, W>(c, v, x, t0, n);
                v += 4;
            } else if G > 2 && left >= 2 {
                tile::<V, 2, N, W>(c, v, x, t0, n);
                v += 2;
            } else {
                tile::<V, 1, N, W>(c, v, x, t0, n);
                v += 1;
            }
        }
    }
}

/// Vectors `v..v + G` of rows (`V::LANES` rows each) by lanes `0..N` of the token tile at `x`
/// (`W` values a column), the first `n` stored as tokens `t0..t0 + n`.
#[inline(always)]
unsafe fn tile<V: F32Isa, const G: usize, const N: usize, const W: usize>(
    c: &PanelCall,
    v: usize,
    x: *const f32,
    t0: usize,
    n: usize,
) {
    unsafe {
        let per_group = ROWS / V::LANES;
        let mut w = [std::ptr::null::<u8>(); G];
        for g in 0..G {
            let (group, part) = ((v + g) / per_group, (v + g) % per_group);
            w[g] = c.p.group(group).as_ptr().add(part * V::LANES * 2);
        }
        let mut acc = [[V::fzero(); N]; G];
        for col in 0..c.k {
            let mut wv = [V::fzero(); G];
            for g in 0..G {
                wv[g] = V::f16s(w[g].add(col * ROWS * 2));
            }
            let xs = x.add(col * W);
            for t in 0..N {
                let xb = V::fsplat(*xs.add(t));
                for g in 0..G {
                    acc[g][t] = V::fmadd(wv[g], xb, acc[g][t]);
                }
            }
        }
        for g in 0..G {
            for t in 0..n.min(N) {
                V::store(c.out.add((t0 + t) * c.m + (v + g) * V::LANES), acc[g][t]);
            }
        }
    }
}
