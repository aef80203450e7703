//! Full (non-causal) attention of many rows from position 0, as the vision towers run it: every
//! query sees every key, so a block of queries' scores are one matrix product with the head's
//! keys (packed transposed once per call), then each row's softmax, then one product with the
//! values. Register tiles of 6 queries by 16 keys (scores) and 4 queries by up to 24 values
//! (weighted sum), compiled for AVX2 (at the AVX-512 level, wider ones in intrinsics:
//! wide/avx512.rs, the same sums), broadcast one operand and stream the other,
//! where the chunked path sums each score across a vector (a 1,536-patch image's tower makes 2.4
//! million scores per head and layer). The softmax is exact over the whole row, as llama.cpp's
//! without flash attention.

use super::super::{CpuBackend, CpuCache};
use super::Shared;

#[cfg(target_arch = "x86_64")]
mod avx512;
use crate::backend::AttentionParams;
#[cfg(target_arch = "x86_64")]
use avx512 as x512;

/// Fewest rows worth packing the keys for.
const WIDE_MIN_ROWS: usize = 64;
/// Queries per task: their scores against every key stay in L2 (1,536 keys: 216 KB). A multiple
/// of both tiles' rows.
const BLOCK_ROWS: usize = 36;
/// Queries a score tile covers: 6 × 2 vectors of sums, the key panel's two and a query value
/// fill AVX2's 16 registers.
const SCORE_ROWS: usize = 6;
/// Queries a value tile covers: 4 × 3 vectors of sums, three of values and a weight.
const VALUE_ROWS: usize = 4;
/// Keys a score tile covers (two AVX2 vectors).
const TILE_KEYS: usize = 16;
/// Keys per pass of the block's tiles: the transposed keys' share (72 values: 72 KB) stays in
/// L2 while every tile of the block uses it.
const SCORE_CHUNK: usize = 256;
/// Values per pass of the block's tiles: their rows (72 values: 18 KB) stay in L1 while every
/// tile and column block of the block uses them.
const VALUE_CHUNK: usize = 64;

thread_local! {
    /// Each worker's room for its block's scores.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The calling thread's packed keys and values, kept between calls (and held until the
    /// thread ends): a tower's layers repack the same 14 MB (1,536 rows of width 1,152), and
    /// fresh pages cost more than the packing.
    static PACKED: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// `block`'s `COPY` for the AVX-512 wrapper, which takes the intrinsics tiles (wide/avx512.rs).
#[cfg(target_arch = "x86_64")]
const AVX512: u8 = 2;

/// a·b + c, fused where the target has it (`F`), else rounded twice.
#[inline(always)]
fn madd<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
    if F { a.mul_add(b, c) } else { a * b + c }
}

/// `s[r][j0..j0 + 16] = (q_r · k_j) · scale` for `R` queries of `hd` values and the 16 keys from
/// `j0`, whose panel `kt` holds them transposed (value c of the 16 keys at `16·c`).
#[inline(always)]
fn score_tile<const F: bool, const R: usize>(
    q: &[&[f32]; R],
    kt: &[f32],
    j0: usize,
    scale: f32,
    s: &mut [&mut [f32]; R],
) {
    let hd = q[0].len();
    let mut acc = [[0f32; TILE_KEYS]; R];
    for c in 0..hd {
        let line: &[f32; TILE_KEYS] = kt[c * TILE_KEYS..][..TILE_KEYS]
            .try_into()
            .expect("a whole tile of keys");
        for r in 0..R {
            let qv = q[r][c];
            for j in 0..TILE_KEYS {
                acc[r][j] = madd::<F>(qv, line[j], acc[r][j]);
            }
        }
    }
    for r in 0..R {
        for (s, a) in s[r][j0..j0 + TILE_KEYS].iter_mut().zip(acc[r]) {
            *s = a * scale;
        }
    }
}

/// `o[r][c0..c0 + W] += Σ_{j in keys} p[r][j] · v_j[c0..c0 + W]`.
#[inline(always)]
fn value_tile<'v, const F: bool, const R: usize, const W: usize>(
    p: &[&mut [f32]; R],
    v: &impl Fn(usize) -> &'v [f32],
    keys: std::ops::Range<usize>,
    c0: usize,
    o: &mut [&mut [f32]; R],
) {
    let mut acc: [[f32; W]; R] =
        std::array::from_fn(|r| o[r][c0..c0 + W].try_into().expect("a whole tile"));
    for j in keys {
        let row: &[f32; W] = v(j)[c0..c0 + W].try_into().expect("a whole tile of values");
        for r in 0..R {
            let w = p[r][j];
            for c in 0..W {
                acc[r][c] = madd::<F>(w, row[c], acc[r][c]);
            }
        }
    }
    for r in 0..R {
        o[r][c0..c0 + W].copy_from_slice(&acc[r]);
    }
}

/// What a block of queries needs besides its rows: the keys in transposed panels of 16 (`npad`
/// keys, padded with zeros), the values, how many keys there are and the scores' scale.
struct Keys<'a, V> {
    kt: &'a [f32],
    npad: usize,
    v: V,
    n: usize,
    scale: f32,
}

/// One block of queries: `q(i)` and `out(i)` are query `i`'s values and output row, `s` room
/// for the block's scores. Tiles of `R` rows (the last of fewer) take every pass.
/// `COPY` only tells the target-feature wrappers' copies apart: each must get its own closures,
/// which take the wrapper's features only where inlined into it.
#[inline(always)]
fn block<'q, 'v, const F: bool, const COPY: u8>(
    backend: &CpuBackend,
    rows: std::ops::Range<usize>,
    q: &impl Fn(usize) -> &'q [f32],
    out: &impl Fn(usize) -> &'q mut [f32],
    keys: &Keys<'_, impl Fn(usize) -> &'v [f32]>,
    s: &mut [f32],
) {
    let Keys {
        kt, npad, n, scale, ..
    } = *keys;
    let hd = q(rows.start).len();
    assert!(rows.len() <= BLOCK_ROWS && s.len() >= rows.len() * npad);
    let base = s.as_mut_ptr();
    let line = |i: usize| -> &mut [f32] {
        // SAFETY: within `s` (asserted); lines of distinct rows do not overlap, and a pass takes
        // each row's line once at a time.
        unsafe { std::slice::from_raw_parts_mut(base.add((i - rows.start) * npad), npad) }
    };
    // Scores, a share of keys at a time for every tile.
    for k0 in (0..npad).step_by(SCORE_CHUNK) {
        let k1 = (k0 + SCORE_CHUNK).min(npad);
        // Loops, not closures: a closure takes the target features of its wrapper (`COPY`) only
        // where inlined into it, and one left out of line runs every product as a call to fmaf.
        let mut i = rows.start;
        while i < rows.end {
            let r = (rows.end - i).min(SCORE_ROWS);
            macro_rules! scores {
                ($r:literal) => {{
                    let qs: [&[f32]; $r] = std::array::from_fn(|t| q(i + t));
                    let mut ss: [&mut [f32]; $r] = std::array::from_fn(|t| line(i + t));
                    #[cfg(target_arch = "x86_64")]
                    if COPY == AVX512 {
                        let mut j0 = k0;
                        while j0 < k1 {
                            let panels = &kt[j0 * hd..];
                            // SAFETY: `block_avx512` runs only on a CPU with AVX-512F; the
                            // panels are whole (npad keys), the queries `hd` values and the
                            // score lines `npad`.
                            let p = ((k1 - j0) / TILE_KEYS).min(2);
                            unsafe {
                                macro_rules! tile {
                                    ($p:literal) => {
                                        x512::score_tile::<$r, $p>(&qs, panels, j0, scale, &mut ss)
                                    };
                                }
                                match p {
                                    1 => tile!(1),
                                    2 => tile!(2),
                                    3 => tile!(3),
                                    _ => tile!(4),
                                }
                            }
                            j0 += p * TILE_KEYS;
                        }
                        i += $r;
                        continue;
                    }
                    for j0 in (k0..k1).step_by(TILE_KEYS) {
                        let panel = &kt[j0 * hd..][..TILE_KEYS * hd];
                        score_tile::<F, $r>(&qs, panel, j0, scale, &mut ss);
                    }
                }};
            }
            match r {
                1 => scores!(1),
                2 => scores!(2),
                3 => scores!(3),
                4 => scores!(4),
                5 => scores!(5),
                _ => scores!(6),
            }
            i += r;
        }
    }
    let mut sums = [0f64; BLOCK_ROWS];
    for i in rows.clone() {
        let valid = &mut line(i)[..n];
        let max = valid.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        sums[i - rows.start] = (backend.kernels.exp_sub)(valid, max);
        out(i).fill(0.0);
    }
    // Weighted values, a share of keys at a time for every tile and column block.
    for k0 in (0..n).step_by(VALUE_CHUNK) {
        let ks = k0..(k0 + VALUE_CHUNK).min(n);
        let mut i = rows.start;
        while i < rows.end {
            let r = (rows.end - i).min(VALUE_ROWS);
            macro_rules! values {
                ($r:literal) => {{
                    let ps: [&mut [f32]; $r] = std::array::from_fn(|t| line(i + t));
                    let mut os: [&mut [f32]; $r] = std::array::from_fn(|t| out(i + t));
                    #[cfg(target_arch = "x86_64")]
                    if COPY == AVX512 {
                        let mut c0 = 0;
                        while c0 < hd {
                            let (v, ks) = (&keys.v, ks.clone());
                            // Up to 4 vectors of 16 a pass, and a last 8 where the rest is odd
                            // eights.
                            let v16 = ((hd - c0) / 16).min(4);
                            // SAFETY: `block_avx512` runs only on a CPU with AVX-512F; value and
                            // output rows hold `hd` values (a multiple of 8), the weight lines
                            // every key's.
                            unsafe {
                                macro_rules! tile {
                                    ($v:literal) => {
                                        x512::value_tile::<$r, $v>(&ps, v, ks, c0, &mut os)
                                    };
                                }
                                match v16 {
                                    0 => tile!(0),
                                    1 => tile!(1),
                                    2 => tile!(2),
                                    3 => tile!(3),
                                    _ => tile!(4),
                                }
                            }
                            c0 += if v16 == 0 { 8 } else { 16 * v16 };
                        }
                        i += $r;
                        continue;
                    }
                    let mut c0 = 0;
                    while c0 < hd {
                        let ks = ks.clone();
                        match hd - c0 {
                            8 => value_tile::<F, $r, 8>(&ps, &keys.v, ks, c0, &mut os),
                            16 => value_tile::<F, $r, 16>(&ps, &keys.v, ks, c0, &mut os),
                            _ => value_tile::<F, $r, 24>(&ps, &keys.v, ks, c0, &mut os),
                        }
                        c0 += (hd - c0).min(24);
                    }
                }};
            }
            match r {
                1 => values!(1),
                2 => values!(2),
                3 => values!(3),
                _ => values!(4),
            }
            i += r;
        }
    }
    for i in rows.clone() {
        let sum = sums[i - rows.start];
        let inv = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
        out(i).iter_mut().for_each(|x| *x *= inv);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_fma<'q, 'v>(
    backend: &CpuBackend,
    rows: std::ops::Range<usize>,
    q: &impl Fn(usize) -> &'q [f32],
    out: &impl Fn(usize) -> &'q mut [f32],
    keys: &Keys<'_, impl Fn(usize) -> &'v [f32]>,
    s: &mut [f32],
) {
    block::<true, 1>(backend, rows, q, out, keys, s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn block_avx512<'q, 'v>(
    backend: &CpuBackend,
    rows: std::ops::Range<usize>,
    q: &impl Fn(usize) -> &'q [f32],
    out: &impl Fn(usize) -> &'q mut [f32],
    keys: &Keys<'_, impl Fn(usize) -> &'v [f32]>,
    s: &mut [f32],
) {
    block::<true, AVX512>(backend, rows, q, out, keys, s)
}

impl CpuBackend {
    /// Whether `attention_wide` takes this call: full attention of at least `WIDE_MIN_ROWS`
    /// rows from position 0 over f32 caches, heads of whole 8-value vectors, no window, soft
    /// cap or sinks.
    pub(super) fn takes_wide(
        p: &AttentionParams,
        k: &CpuCache,
        v: &CpuCache,
        sinks: Option<&[f32]>,
    ) -> bool {
        !p.causal
            && p.start_pos == 0
            && p.rows >= WIDE_MIN_ROWS
            && p.head_dim.is_multiple_of(8)
            && p.window.is_none()
            && p.softcap.is_none()
            && sinks.is_none()
            && matches!((k, v), (CpuCache::F32(_), CpuCache::F32(_)))
    }

    /// Full attention of `p.rows` rows over keys and values 0..rows (see `takes_wide`).
    pub(super) fn attention_wide(
        &self,
        q: &[f32],
        k: &CpuCache,
        v: &CpuCache,
        out: &mut [f32],
        p: &AttentionParams,
    ) {
        let (CpuCache::F32(k), CpuCache::F32(v)) = (k, v) else {
            unreachable!("takes_wide admits f32 caches only")
        };
        let (n, hd) = (p.rows, p.head_dim);
        let kv_width = p.n_kv_heads * hd;
        let npad = n.next_multiple_of(TILE_KEYS);
        // Each KV head's keys in panels of 16, transposed (value c of the panel's keys side by
        // side; past the last key, whatever the buffer held: those scores are never read), and
        // its values as consecutive rows: the tiles read both in order (a value row of the cache
        // is `kv_width` values from the next, which puts a tile's rows in few L1 sets).
        PACKED.with(|packed| {
            let (kt, vs) = &mut *packed.borrow_mut();
            kt.resize(p.n_kv_heads * hd * npad, 0.0);
            vs.resize(p.n_kv_heads * n * hd, 0.0);
            let (kt_out, vs_out) = (Shared(kt.as_mut_ptr()), Shared(vs.as_mut_ptr()));
            self.pool.run(p.n_kv_heads, &|h| {
                // SAFETY: each task writes only its own head's share of each buffer.
                let (kt, vs) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(kt_out.get().add(h * hd * npad), hd * npad),
                        std::slice::from_raw_parts_mut(vs_out.get().add(h * n * hd), n * hd),
                    )
                };
                for j in 0..n {
                    let panel = &mut kt[(j / TILE_KEYS) * TILE_KEYS * hd..][..TILE_KEYS * hd];
                    let key = &k[j * kv_width + h * hd..][..hd];
                    for (c, &x) in key.iter().enumerate() {
                        panel[c * TILE_KEYS + j % TILE_KEYS] = x;
                    }
                    vs[j * hd..][..hd].copy_from_slice(&v[j * kv_width + h * hd..][..hd]);
                }
            });
            self.attend_blocks(q, out, p, kt, vs, npad);
        });
    }

    /// Every (head, block of queries) task of `attention_wide`, over keys packed in `kt` and values
    /// in `vs`.
    fn attend_blocks(
        &self,
        q: &[f32],
        out: &mut [f32],
        p: &AttentionParams,
        kt: &[f32],
        vs: &[f32],
        npad: usize,
    ) {
        let (n, hd) = (p.rows, p.head_dim);
        let q_width = p.n_heads * hd;
        let group = p.n_heads / p.n_kv_heads;
        let blocks = n.div_ceil(BLOCK_ROWS);
        let shared = Shared(out.as_mut_ptr());
        // AVX-512 where the backend runs that level (its 32 registers hold the tiles' sums at
        // twice the width), else AVX2 with FMA where the CPU has them, whatever the level.
        #[cfg(target_arch = "x86_64")]
        let (avx512, fma) = (
            self.kernels.level == crate::backend::cpu::kernels::Level::Avx512Vnni,
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
        );
        self.pool.run(p.n_heads * blocks, &|t| {
            let (h, b) = (t / blocks, t % blocks);
            let kvh = h / group;
            let rows = b * BLOCK_ROWS..((b + 1) * BLOCK_ROWS).min(n);
            let keys = Keys {
                kt: &kt[kvh * hd * npad..][..hd * npad],
                npad,
                v: |j: usize| &vs[(kvh * n + j) * hd..][..hd],
                n,
                scale: p.scale,
            };
            let q = |i: usize| &q[i * q_width + h * hd..][..hd];
            // SAFETY: each (row, head) of the output belongs to exactly one task, and a tile
            // takes each of its rows once.
            let out = |i: usize| unsafe {
                std::slice::from_raw_parts_mut(shared.get().add(i * q_width + h * hd), hd)
            };
            SCORES.with(|s| {
                let mut s = s.borrow_mut();
                if s.len() < BLOCK_ROWS * npad {
                    s.resize(BLOCK_ROWS * npad, 0.0);
                }
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    // SAFETY: the backend runs the AVX-512 level only on a CPU that has it.
                    return unsafe { block_avx512(self, rows, &q, &out, &keys, &mut s) };
                }
                #[cfg(target_arch = "x86_64")]
                if fma {
                    // SAFETY: the CPU has AVX2 and FMA (checked above).
                    return unsafe { block_fma(self, rows, &q, &out, &keys, &mut s) };
                }
                block::<{ cfg!(target_arch = "aarch64") }, 0>(self, rows, &q, &out, &keys, &mut s);
            });
        });
    }
}
