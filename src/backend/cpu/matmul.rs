//! How the CPU schedules a matmul pass: the input quantized once into the activation format of
//! the weights' type (kernels.rs), then every weight's rows in one parallel pass over the pool
//! (one fork-join for Q, K and V together). Repacked weights run on their GEMM kernels, the rest
//! on the row kernels. One token streams the weights in per-thread shares (`SpinPool::run_split`);
//! more tokens go in tiles whose activations stay in cache while weight rows pass over them.

use std::cell::RefCell;
use std::ops::Range;

use super::gemm::f16::PanelCall;
use super::kernels::{
    ActBlock, ActFormat, BlockQ8, BlockQ8K, DECODED_BLOCK, Dot, Dot4, Dot8, GroupCall,
    PackedKernel, Tiled, TiledCall,
};
use super::{CpuBackend, CpuWeight, SharedOut, repack};

thread_local! {
    static Q8_SCRATCH: RefCell<Vec<BlockQ8>> = const { RefCell::new(Vec::new()) };
    static Q8K_SCRATCH: RefCell<Vec<BlockQ8K>> = const { RefCell::new(Vec::new()) };
    /// Σ of each Q8 block's values (the GEMM kernels' offset correction).
    static XSUM_SCRATCH: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    /// 16 weight rows decoded for the GEMM (`Tiled`).
    static DECODED_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Tokens from which a type with a decoded GEMM takes it instead of its row kernels: below, the
/// decoding of 16 rows costs more than the GEMM saves. (1B shape, 2 threads, t/s decoded / rows:
/// IQ2_XXS 8 tokens 110 / 120, 9 tokens 112 / 101, 16 tokens 186 / 126; IQ3_S 90 / 95, 91 / 74.)
pub(super) const TILED_MIN_TOKENS: usize = 9;

/// The per-thread buffer a pass quantizes its input into, kept between passes.
trait Scratch: ActBlock {
    fn with<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;
}

impl Scratch for BlockQ8 {
    fn with<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R {
        Q8_SCRATCH.with(|s| f(&mut s.borrow_mut()))
    }
}

impl Scratch for BlockQ8K {
    fn with<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R {
        Q8K_SCRATCH.with(|s| f(&mut s.borrow_mut()))
    }
}

thread_local! {
    /// The calling thread's activations rounded to f16 for the F16 GEMM, kept between calls.
    static ROUNDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Activation rows per tile: a tile of quantized activations stays in cache while each weight row
/// of a chunk is multiplied against it.
const ROW_TILE: usize = 16;

/// The F16 panel GEMM's tasks (`f16_panel_pass`): 96 rows (their weights stay in L2 while the
/// task's tokens pass) by 60 tokens (five tiles of twelve).
const PANEL_GROUPS: usize = 6;
const PANEL_TOKENS: usize = 60;

/// Bytes of weights a generation thread streams between checks for its share of a matmul pass
/// (`SpinPool::run_split`).
const STREAM_PIECE: usize = 64 << 10;

/// Tokens per block of a GEMM over `tokens` tokens: as many as keep their activations (`stride`
/// blocks of `A` each) within 768 KB of the L2 cache (1-2 MB a core on current x86 and ARM
/// cores, and a group's weights pass through it too), a multiple of the AVX-512 tile of 8, with
/// the blocks made even: every block streams the weights from memory once, so a short last block
/// would pay a whole stream for a few tokens. (1B shape, Q6_K, 2 threads, pp128: 256 KB and
/// uneven blocks 374-384 t/s, 768 KB 410-418.)
pub(super) fn packed_token_block<A>(stride: usize, tokens: usize) -> usize {
    const L2_BUDGET: usize = 768 << 10;
    let most = (L2_BUDGET / (stride * std::mem::size_of::<A>()).max(1))
        .next_multiple_of(8)
        .max(8);
    let blocks = tokens.div_ceil(most).max(1);
    tokens.div_ceil(blocks).next_multiple_of(8).clamp(8, most)
}

/// The profile name of a matmul by the weight's role, from its tensor name.
pub(super) fn matmul_name(w: &CpuWeight) -> &'static str {
    let name = w.tensor.name.as_str();
    [
        ("attn_q.weight", "matmul attn_qkv"),
        ("attn_output.weight", "matmul attn_output"),
        ("ffn_gate.weight", "matmul ffn_gate_up"),
        ("ffn_down.weight", "matmul ffn_down"),
        ("output.weight", "matmul output"),
        ("token_embd.weight", "matmul output"),
    ]
    .iter()
    .find(|(suffix, _)| name.ends_with(suffix))
    .map_or("matmul other", |&(_, op)| op)
}

/// Where each of several item lists starts when they are numbered as one.
fn list_starts(lens: impl Iterator<Item = usize>) -> Vec<usize> {
    lens.scan(0, |at, len| {
        let start = *at;
        *at += len;
        Some(start)
    })
    .collect()
}

/// The list (index into `starts`) and the index within it of item `item` of the joined lists.
fn locate(starts: &[usize], item: usize) -> (usize, usize) {
    let list = starts.partition_point(|&s| s <= item) - 1;
    (list, item - starts[list])
}

/// One weight's share of a row-kernel pass: its rows, where they go, and its kernels.
struct Job<'a, A> {
    w: &'a CpuWeight,
    out: SharedOut,
    dot: Dot<A>,
    dot4: Option<Dot4<A>>,
    dot8: Option<Dot8<A>>,
    tiled: Option<Tiled<A>>,
}

impl CpuBackend {
    /// Weight rows per parallel task of a pass over several activation rows.
    pub(super) fn row_chunk(&self, m: usize) -> usize {
        m.div_ceil(self.threads * 8)
            .clamp(1, 256)
            .next_multiple_of(4)
            .min(m.max(1))
    }

    /// Whether weights of type `t` are repacked at load (the CPU has GEMM kernels for it).
    pub(super) fn packs(&self, t: crate::gguf::GgmlType) -> bool {
        let panels = t == crate::gguf::GgmlType::F16 && self.kernels.f16_panels.is_some();
        self.repack && (panels || self.kernels.of(t).packs())
    }

    /// A pass of one token, which reads each weight byte once, at memory speed: each thread
    /// streams a contiguous share of the items (rows or row groups) of all the lists (`lens`
    /// items each, of at most `item_bytes` bytes), in pieces of ~`STREAM_PIECE` bytes so that the
    /// threads finish together (a task start costs a stream restart, so pieces must not be many
    /// separate tasks); `f(list, items)` runs each piece's items of each list.
    fn stream_one_token(
        &self,
        lens: &[usize],
        item_bytes: usize,
        f: &(dyn Fn(usize, Range<usize>) + Sync),
    ) {
        let starts = list_starts(lens.iter().copied());
        let total = lens.iter().sum();
        let grain = (STREAM_PIECE / item_bytes.max(1)).max(1);
        self.pool.run_split(total, grain, &|items| {
            let mut i = items.start;
            while i < items.end {
                let (list, first) = locate(&starts, i);
                let n = (items.end - i).min(lens[list] - first);
                f(list, first..first + n);
                i += n;
            }
        });
    }

    /// Matmuls of one input by weights that take the same activation format: the input is
    /// quantized once and all the weights' rows run in one parallel pass (two when some weights
    /// are repacked and some are not).
    pub(super) fn matmul_group(
        &self,
        x: &[f32],
        ws: &[&CpuWeight],
        rows: usize,
        outs: &mut [&mut Vec<f32>],
    ) {
        let k = ws[0].cols;
        let x = &x[..rows * k];
        let outs: Vec<SharedOut> = ws
            .iter()
            .zip(outs.iter_mut())
            .map(|(w, o)| SharedOut(o[..rows * w.rows].as_mut_ptr()))
            .collect();
        let jobs: Vec<(&CpuWeight, SharedOut)> = ws.iter().copied().zip(outs).collect();
        match self.kernels.of(ws[0].tensor.dtype).format() {
            ActFormat::F32 => {
                let (panels, plain): (Vec<_>, Vec<_>) =
                    jobs.iter().copied().partition(|(w, _)| w.packed.is_some());
                if !panels.is_empty() {
                    self.f16_panel_pass(x, k, rows, &panels);
                }
                if !plain.is_empty() {
                    self.f32_format_pass(x, k, rows, &plain);
                }
            }
            ActFormat::Q8 => self.quantized_pass::<BlockQ8>(x, k, rows, &jobs),
            ActFormat::Q8K => self.quantized_pass::<BlockQ8K>(x, k, rows, &jobs),
        }
    }

    /// A pass over weights whose kernels take f32 activations and are not in panels (F32, BF16,
    /// F16 without a panel GEMM or with rows not in groups of 16): F16 weights over several rows
    /// take the activations rounded to f16 once (as the one-row kernel rounds them) and the
    /// four-token kernel; the rest their row kernels.
    fn f32_format_pass(&self, x: &[f32], k: usize, rows: usize, jobs: &[(&CpuWeight, SharedOut)]) {
        let is_f16 = |w: &CpuWeight| w.tensor.dtype == crate::gguf::GgmlType::F16;
        let dot4_f16 = self
            .kernels
            .dot4_f16
            .filter(|_| rows >= 4 && jobs.iter().all(|(w, _)| is_f16(w)));
        let jobs: Vec<Job<f32>> = jobs
            .iter()
            .map(|&(w, out)| Job {
                w,
                out,
                dot: self.kernels.dot_f32(w.tensor.dtype),
                dot4: dot4_f16,
                dot8: None,
                tiled: None,
            })
            .collect();
        if dot4_f16.is_none() {
            return self.run_jobs(&jobs, rows, x, k);
        }
        // Into a buffer kept between calls: a tower's activations are tens of MB, and
        // fresh pages cost the kernel's zeroing on every call.
        ROUNDED.with(|rounded| {
            let mut rounded = rounded.borrow_mut();
            rounded.clear();
            rounded.extend_from_slice(x);
            self.pool
                .for_each_chunk(&mut rounded[..], k, &|_, row| (self.kernels.round_f16)(row));
            self.run_jobs(&jobs, rows, &rounded, k)
        });
    }

    /// F16 weights in panels (`gemm/f16.rs`): the activations rounded to f16 once, then the
    /// panel GEMM in tasks of `PANEL_GROUPS` row groups by `PANEL_TOKENS` tokens, or for one
    /// token, each thread streaming its share of all the weights' groups.
    fn f16_panel_pass(&self, x: &[f32], k: usize, rows: usize, jobs: &[(&CpuWeight, SharedOut)]) {
        let gemm = self
            .kernels
            .f16_panels
            .expect("F16 weights are in panels only where the panel GEMM runs them");
        // One token's activations row after row; several tokens' in the kernel's tiles.
        let width = if rows == 1 { 1 } else { gemm.width };
        ROUNDED.with(|rounded| {
            let mut rounded = rounded.borrow_mut();
            rounded.resize(rows.next_multiple_of(width) * k, 0.0);
            self.pool
                .for_each_chunk(&mut rounded[..], width * k, &|tile, dst| {
                    let tokens = &x[tile * width * k..((tile + 1) * width).min(rows) * k];
                    if width == 1 {
                        dst.copy_from_slice(tokens);
                        return (self.kernels.round_f16)(dst);
                    }
                    // Lanes past the last token keep what the buffer held: their sums are
                    // never stored.
                    (gemm.tile)(tokens, k, width, dst)
                });
            let acts = &rounded[..];
            let call = |ji: usize, groups: Range<usize>, tokens: Range<usize>| {
                let (w, out) = &jobs[ji];
                let call = PanelCall {
                    p: w.packed.as_ref().expect("packed job"),
                    groups,
                    x: acts,
                    width,
                    k,
                    tokens,
                    out: out.get(),
                    m: w.rows,
                };
                // SAFETY: the call covers groups of this job and tokens within `rows` (from a
                // whole tile), whose outputs no other call writes; the activations hold the
                // tiles of `rows` tokens and the output `rows × m` values.
                unsafe { (gemm.run)(&call) }
            };
            let groups_of = |ji: usize| jobs[ji].0.rows / repack::ROWS;
            if rows == 1 {
                let lens: Vec<usize> = (0..jobs.len()).map(groups_of).collect();
                let largest = jobs.iter().map(|(w, _)| w.cols * 2 * repack::ROWS).max();
                let stream = |ji, groups| call(ji, groups, 0..1);
                return self.stream_one_token(&lens, largest.unwrap_or(1), &stream);
            }
            let task_tokens = PANEL_TOKENS.next_multiple_of(width);
            let tasks: Vec<(usize, usize, usize)> = (0..jobs.len())
                .flat_map(|ji| {
                    (0..groups_of(ji))
                        .step_by(PANEL_GROUPS)
                        .flat_map(move |g0| {
                            (0..rows).step_by(task_tokens).map(move |t0| (ji, g0, t0))
                        })
                })
                .collect();
            self.pool.run(tasks.len(), &|task| {
                let (ji, g0, t0) = tasks[task];
                let groups = g0..(g0 + PANEL_GROUPS).min(groups_of(ji));
                call(ji, groups, t0..(t0 + task_tokens).min(rows));
            });
        });
    }

    /// A pass over weights of a quantized format `A`: the input quantized into the thread's
    /// scratch, the repacked weights on their GEMM kernels, the others on the row kernels.
    fn quantized_pass<A: Scratch>(
        &self,
        x: &[f32],
        k: usize,
        rows: usize,
        jobs: &[(&CpuWeight, SharedOut)],
    ) {
        let quantize = A::quantizer(&self.kernels);
        A::with(|s| {
            let nb = k / A::LEN;
            s.resize(rows * nb, A::default());
            self.pool
                .for_each_chunk(&mut s[..], nb, &|r, q| quantize(&x[r * k..(r + 1) * k], q));
            let (packed, plain): (Vec<_>, Vec<_>) =
                jobs.iter().copied().partition(|(w, _)| w.packed.is_some());
            if !packed.is_empty() {
                XSUM_SCRATCH.with(|xs| {
                    let mut xs = xs.borrow_mut();
                    xs.clear();
                    if A::SUMS {
                        xs.resize(rows * nb, 0);
                        let q = &s[..];
                        self.pool.for_each_chunk(&mut xs[..], nb, &|r, sums| {
                            for (sum, b) in sums.iter_mut().zip(&q[r * nb..]) {
                                *sum = b.sum();
                            }
                        });
                    }
                    self.run_packed(&packed, rows, s, nb, &xs);
                });
            }
            let plain: Vec<Job<A>> = plain
                .into_iter()
                .map(|(w, out)| {
                    let kernels = A::kernels(self.kernels.of(w.tensor.dtype))
                        .expect("weights of one pass share an activation format");
                    Job {
                        w,
                        out,
                        dot: kernels.dot,
                        dot4: kernels.dot4,
                        dot8: kernels.dot8,
                        tiled: kernels.tiled,
                    }
                })
                .collect();
            self.run_jobs(&plain, rows, s, nb);
        })
    }

    /// For each job, `out[i·m + r] = dot(W row r, activation row i)`; the rows of all jobs are
    /// split across the pool in one parallel pass; one activation row streams them in per-thread
    /// shares (`run_split`). Within a task of several rows, activation rows go in tiles that stay
    /// in cache while each weight row of the task's chunk passes over them, four rows at a time
    /// where a four-row kernel exists.
    fn run_jobs<A: Sync>(&self, jobs: &[Job<A>], rows: usize, acts: &[A], act_stride: usize) {
        if jobs.is_empty() {
            return;
        }
        let total: usize = jobs.iter().map(|j| j.w.rows).sum();
        let act = |i: usize| &acts[i * act_stride..(i + 1) * act_stride];
        if rows == 1 {
            let lens: Vec<usize> = jobs.iter().map(|j| j.w.rows).collect();
            let largest = jobs.iter().map(|j| j.w.tensor.row_bytes()).max();
            let stream = |ji: usize, rows: Range<usize>| {
                let Job { w, out, dot, .. } = &jobs[ji];
                for r in rows {
                    let v = dot(w.row(r), act(0));
                    // SAFETY: each row r of a job's output is written once (its item is taken
                    // once), and r < m, the output's length for one activation row.
                    unsafe { *out.get().add(r) = v };
                }
            };
            return self.stream_one_token(&lens, largest.unwrap_or(1), &stream);
        }
        if rows >= TILED_MIN_TOKENS && jobs.iter().any(|j| tiles(j).is_some()) {
            let (tiled, plain): (Vec<&Job<A>>, Vec<&Job<A>>) =
                jobs.iter().partition(|j| tiles(j).is_some());
            self.run_tiled(&tiled, rows, acts, act_stride);
            let plain: Vec<Job<A>> = plain
                .into_iter()
                .map(|j| Job { tiled: None, ..*j })
                .collect();
            return self.run_jobs(&plain, rows, acts, act_stride);
        }
        let chunk = self.row_chunk(total);
        let tasks: Vec<(usize, usize, usize)> = jobs
            .iter()
            .enumerate()
            .flat_map(|(ji, j)| {
                (0..j.w.rows)
                    .step_by(chunk)
                    .map(move |r0| (ji, r0, (r0 + chunk).min(j.w.rows)))
            })
            .collect();
        self.pool.run(tasks.len(), &|t| {
            let (ji, r0, r1) = tasks[t];
            let Job {
                w,
                out,
                dot,
                dot4,
                dot8,
                ..
            } = &jobs[ji];
            let m = w.rows;
            // SAFETY: each (i, r) of a job's output is written by exactly one task (r is in this
            // task's chunk) and i·m + r < rows·m ≤ that output's length.
            let put = |i: usize, r: usize, v: f32| unsafe { *out.get().add(i * m + r) = v };
            for t0 in (0..rows).step_by(ROW_TILE) {
                let t1 = (t0 + ROW_TILE).min(rows);
                for r in r0..r1 {
                    let wrow = w.row(r);
                    // A kernel's activation rows from `i`: the tile's last one repeated past its
                    // end.
                    let last = t1 - 1;
                    let from = |i: usize| move |k: usize| act((i + k).min(last));
                    // A type whose block decoding costs more than its products (one with an
                    // eight-row kernel: the grid i-quants) takes a short tail as one padded call,
                    // which decodes each block once: a verify pass of 2, 3 or 6 rows. (1B shape,
                    // IQ3_S, 2 threads, ms: 2 rows 93 → 61, 3 rows 139 → 62, 6 rows 152 → 79;
                    // Q4_K's row kernels padded, 2 rows 43 → 58, so not for them.)
                    let pad = dot8.is_some();
                    let mut i = t0;
                    if let Some(dot8) = dot8 {
                        while i + 8 <= t1 || (pad && t1 - i > 4) {
                            let v = dot8(wrow, std::array::from_fn(from(i)));
                            for (k, &vk) in v.iter().take(t1 - i).enumerate() {
                                put(i + k, r, vk);
                            }
                            i = (i + 8).min(t1);
                        }
                    }
                    if let Some(dot4) = dot4 {
                        while i + 4 <= t1 || (pad && t1 - i >= 2) {
                            let v = dot4(wrow, std::array::from_fn(from(i)));
                            for (k, &vk) in v.iter().take(t1 - i).enumerate() {
                                put(i + k, r, vk);
                            }
                            i = (i + 4).min(t1);
                        }
                    }
                    for i in i..t1 {
                        put(i, r, dot(wrow, act(i)));
                    }
                }
            }
        });
    }

    /// The decoded-GEMM jobs of a pass (`Tiled`): tasks of a few groups of 16 rows, each group
    /// decoded once into the thread's scratch and multiplied by every token, in blocks whose
    /// activations stay in L2.
    fn run_tiled<A: Sync>(&self, jobs: &[&Job<A>], rows: usize, acts: &[A], stride: usize) {
        let token_block = packed_token_block::<A>(stride, rows);
        let groups: usize = jobs.iter().map(|j| j.w.rows / repack::ROWS).sum();
        let chunk = groups.div_ceil(self.threads * 4).max(1);
        let mut tasks = Vec::new();
        for (ji, j) in jobs.iter().enumerate() {
            let n = j.w.rows / repack::ROWS;
            tasks.extend(
                (0..n)
                    .step_by(chunk)
                    .map(|g0| (ji, g0, (g0 + chunk).min(n))),
            );
        }
        self.pool.run(tasks.len(), &|i| {
            let (ji, g0, g1) = tasks[i];
            let job = jobs[ji];
            let Some(tiled) = tiles(job) else { return };
            let w = job.w;
            let blocks = w.cols / 256;
            with_decoded_scratch(blocks * DECODED_BLOCK, |buf| {
                for g in g0..g1 {
                    let rows16: [&[u8]; 16] = std::array::from_fn(|r| w.row(g * repack::ROWS + r));
                    // SAFETY: the rows are whole blocks of the type the decoder is for, and
                    // `buf` holds a decoded block for each.
                    unsafe { (tiled.decode)(&rows16, buf) };
                    for t0 in (0..rows).step_by(token_block) {
                        let call = TiledCall {
                            decoded: buf,
                            blocks,
                            factor: tiled.factor,
                            x: acts,
                            stride,
                            tokens: t0..(t0 + token_block).min(rows),
                            // In bounds: the output holds `rows × w.rows` values.
                            out: unsafe { job.out.get().add(g * repack::ROWS) },
                            m: w.rows,
                        };
                        // SAFETY: the call covers this task's group and tokens within `rows`,
                        // whose outputs no other call writes; the activations hold `rows ×
                        // stride` blocks.
                        unsafe { (tiled.gemm)(&call) }
                    }
                }
            });
        });
    }

    /// The repacked weights' share of a pass, every (group, token) written once: for one token,
    /// the groups of all weights streamed in per-thread shares (`run_split`); for more, tasks of a
    /// few row groups each over blocks of tokens whose activations stay in L2.
    fn run_packed<A: ActBlock>(
        &self,
        jobs: &[(&CpuWeight, SharedOut)],
        rows: usize,
        acts: &[A],
        stride: usize,
        xsum: &[i32],
    ) {
        let kernels: Vec<PackedKernel<A>> = jobs
            .iter()
            .map(|(w, _)| {
                A::kernels(self.kernels.of(w.tensor.dtype))
                    .and_then(|k| k.packed)
                    .expect("weights are packed only where a GEMM kernel runs them")
            })
            .collect();
        let token_block = packed_token_block::<A>(stride, rows);
        let token_blocks = rows.div_ceil(token_block);
        let groups: usize = jobs.iter().map(|(w, _)| w.rows / repack::ROWS).sum();
        let call = |ji: usize, group: usize, tokens: Range<usize>| {
            let (w, out) = &jobs[ji];
            let p = w.packed.as_ref().expect("packed job");
            let call = GroupCall {
                p,
                group,
                x: acts,
                stride,
                xsum,
                tokens,
                // In bounds: the output holds `rows × w.rows` values.
                out: unsafe { out.get().add(group * repack::ROWS) },
                m: w.rows,
            };
            // SAFETY: the call covers rows of one group and tokens within `rows`, whose outputs
            // no other call writes, and the activations hold `rows × stride` blocks.
            unsafe { kernels[ji](&call) }
        };
        if rows == 1 {
            let lens: Vec<usize> = jobs.iter().map(|(w, _)| w.rows / repack::ROWS).collect();
            let largest = jobs
                .iter()
                .filter_map(|(w, _)| w.packed.as_ref().map(|p| p.group_bytes))
                .max();
            let stream =
                |ji: usize, groups: Range<usize>| groups.for_each(|group| call(ji, group, 0..1));
            return self.stream_one_token(&lens, largest.unwrap_or(1), &stream);
        }
        // Prefill: each thread walks its own contiguous share of (token block, group) items, so
        // the group a kernel call fetches ahead is the one its thread runs next, and threads that
        // run out steal half of the largest share left, so they end within a group of each other.
        // (1B shape, IQ4_XS, 2 threads, pp128: tasks of a quarter of the groups left threads
        // waiting 64 µs a token at job ends; tasks of a sixteenth, 23 µs, but the groups
        // fetched ahead at task ends went to the other thread.)
        let starts = list_starts(jobs.iter().map(|(w, _)| w.rows / repack::ROWS));
        self.pool.run_split(token_blocks * groups, 1, &|items| {
            for item in items {
                let (tb, (ji, group)) = (item / groups, locate(&starts, item % groups));
                call(
                    ji,
                    group,
                    tb * token_block..((tb + 1) * token_block).min(rows),
                );
            }
        });
    }
}

/// `f` with the thread's buffer for 16 decoded rows, `len` bytes.
pub(super) fn with_decoded_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    DECODED_SCRATCH.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.resize(len, 0);
        f(&mut buf[..len])
    })
}

/// The decoded GEMM of a job, where its type has one and its rows come in whole groups of 16.
fn tiles<A>(j: &Job<A>) -> Option<Tiled<A>> {
    j.tiled
        .filter(|_| j.w.rows.is_multiple_of(repack::ROWS) && j.w.cols.is_multiple_of(256))
}
