//! Attention against an f16 value cache, in two passes: llama.cpp rounds the normalized softmax
//! weights to f16 before it multiplies them with the values, and normalizing needs the whole
//! row's maximum and sum. The first pass keeps every chunk's exp(score − its maximum) (the
//! chunked path's `chunk_weights`); the row's softmax follows from the chunks' maxima and sums
//! (`normalize`); the second pass weighs each chunk, rounds it and multiplies it with its values.
//! Rounding each chunk's own exponentials in one pass, as kiln did before, left Gemma 3's logits
//! 0.31 rms from llama.cpp's goldens (f16 cache); rounding the normalized weights, 0.23.

use super::{Call, SCRATCH, SPLIT, Scratch, Shared, Weights, at_least};
use crate::backend::cpu::{CpuBackend, ggml_math};

impl Call<'_> {
    /// Per query and chunk (`max`, `sum` and `factors` chunk by chunk, `nq` queries each), the
    /// factor that turns the chunk's exp(score − its maximum) into softmax weights:
    /// exp(max_c − M) / S, where M is the row's largest score (or its sink) and S the sum over
    /// the chunks, in order, of sum_c · exp(max_c − M), plus exp(sink − M). The chunk holding
    /// M gets 1/S itself, so its weights are llama.cpp's exp(score − M) · (1/S).
    fn normalize(&self, kvh: usize, max: &[f32], sum: &[f64], nq: usize, factors: &mut [f32]) {
        let nc = max.len() / nq;
        for qi in 0..nq {
            let sink = self.sinks.map(|s| s[kvh * self.group + qi % self.group]);
            let of = |c: usize| c * nq + qi;
            let m = (0..nc)
                .map(|c| max[of(c)])
                .chain(sink)
                .fold(f32::NEG_INFINITY, f32::max);
            let scale = |mc: f32| {
                if mc == f32::NEG_INFINITY {
                    0.0
                } else {
                    ggml_math::expf(mc - m)
                }
            };
            let mut total = sink.map_or(0.0, |s| scale(s) as f64);
            for c in 0..nc {
                factors[of(c)] = scale(max[of(c)]);
                total += sum[of(c)] * factors[of(c)] as f64;
            }
            let inv = if total > 0.0 {
                (1.0 / total) as f32
            } else {
                0.0
            };
            for c in 0..nc {
                factors[of(c)] *= inv;
            }
        }
    }

    /// Each query's row of a chunk's block (`sc.s`'s layout) times its factor, rounded to f16,
    /// over the columns `cols`.
    fn weigh(&self, block: &mut [f32], factors: &[f32], cols: std::ops::Range<usize>) {
        for (row, &f) in block.chunks_exact_mut(self.chunk).zip(factors) {
            let w = &mut row[cols.clone()];
            w.iter_mut().for_each(|x| *x *= f);
            (self.kernels.round_f16)(w);
        }
    }

    /// The f16 value cache's two passes for the queries of rows `rows` (in `sc.q`): every
    /// chunk's weights kept, the row's softmax from their maxima and sums, then each chunk
    /// weighed, rounded and multiplied with its values, the chunks' outputs added in order into
    /// `out` (a row of `hd` per query).
    pub(super) fn exact_rows(
        &self,
        sc: &mut Scratch,
        kvh: usize,
        rows: std::ops::Range<usize>,
        out: &mut [f32],
    ) {
        let (hd, c, nq) = (self.hd(), self.chunk, rows.len() * self.group);
        let chunks = self.chunks(&rows);
        let nc = chunks.len();
        sc.size(nq, nc, c, hd);
        let Scratch {
            q,
            k,
            v,
            s,
            acc,
            max,
            sum,
        } = sc;
        let mut cols = Vec::with_capacity(nc);
        for (b, ci) in chunks.clone().enumerate() {
            let w = Weights {
                s: &mut s[b * nq * c..(b + 1) * nq * c],
                max: &mut max[b * nq..(b + 1) * nq],
                sum: &mut sum[b * nq..(b + 1) * nq],
            };
            cols.push(self.chunk_weights(q, k, kvh, rows.clone(), ci, w));
        }
        let mut factors = vec![0f32; nc * nq];
        self.normalize(kvh, &max[..nc * nq], &sum[..nc * nq], nq, &mut factors);
        let out = &mut out[..nq * hd];
        out.fill(0.0);
        for (b, ci) in chunks.enumerate() {
            let block = &mut s[b * nq * c..(b + 1) * nq * c];
            self.weigh(block, &factors[b * nq..(b + 1) * nq], cols[b].clone());
            self.chunk_values(v, block, kvh, ci * c, cols[b].clone(), nq, acc);
            out.iter_mut()
                .zip(&acc[..nq * hd])
                .for_each(|(o, &a)| *o += a);
        }
    }
}

impl CpuBackend {
    /// `attention_split` for an f16 value cache, in `exact_rows`' two passes: tasks per (KV
    /// head, chunk) for the weights, the rows' softmax, tasks again to weigh the chunks and
    /// multiply their values, then each head's chunks added in order.
    pub(super) fn attention_split_exact(
        &self,
        call: &Call,
        chunks: std::ops::Range<usize>,
        out: &mut [f32],
    ) {
        let (p, g, hd, c) = (call.p, call.group, call.hd(), call.chunk);
        let nc = chunks.len();
        let tasks = p.n_kv_heads * nc;
        // Per (KV head, chunk): its columns; per (KV head, chunk, query of the group): its
        // maximum, sum, weights and weighted values.
        let slots = tasks * g;
        SPLIT.with(|b| {
            let b = &mut *b.borrow_mut();
            let cols = at_least(&mut b.cols, tasks);
            let maxes = at_least(&mut b.max, slots);
            let sums = at_least(&mut b.sum, slots);
            let blocks = at_least(&mut b.weights, slots * c);
            let shared = (
                Shared(cols.as_mut_ptr()),
                Shared(maxes.as_mut_ptr()),
                Shared(sums.as_mut_ptr()),
                Shared(blocks.as_mut_ptr()),
            );
            self.pool.run(tasks, &|t| {
                let (kvh, ci) = (t / nc, chunks.start + t % nc);
                SCRATCH.with(|sc| {
                    let mut sc = sc.borrow_mut();
                    let sc = &mut *sc;
                    call.load_queries(kvh, 0..1, &mut sc.q);
                    // SAFETY: task t alone writes column range t and slots t·g..(t + 1)·g.
                    let w = unsafe {
                        Weights {
                            s: std::slice::from_raw_parts_mut(shared.3.get().add(t * g * c), g * c),
                            max: std::slice::from_raw_parts_mut(shared.1.get().add(t * g), g),
                            sum: std::slice::from_raw_parts_mut(shared.2.get().add(t * g), g),
                        }
                    };
                    let r = call.chunk_weights(&sc.q, &mut sc.k, kvh, 0..1, ci, w);
                    // SAFETY: as above.
                    unsafe { shared.0.get().add(t).write((r.start, r.end)) };
                });
            });
            let factors = at_least(&mut b.factors, slots);
            for kvh in 0..p.n_kv_heads {
                let head = kvh * nc * g..(kvh + 1) * nc * g;
                let (max, sum) = (&maxes[head.clone()], &sums[head.clone()]);
                call.normalize(kvh, max, sum, g, &mut factors[head]);
            }
            let accs = at_least(&mut b.acc, slots * hd);
            let shared = (Shared(blocks.as_mut_ptr()), Shared(accs.as_mut_ptr()));
            self.pool.run(tasks, &|t| {
                let (kvh, ci) = (t / nc, chunks.start + t % nc);
                // SAFETY: task t alone owns block t and accumulators t·g..(t + 1)·g.
                let (block, acc) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(shared.0.get().add(t * g * c), g * c),
                        std::slice::from_raw_parts_mut(shared.1.get().add(t * g * hd), g * hd),
                    )
                };
                let cols = cols[t].0..cols[t].1;
                call.weigh(block, &factors[t * g..(t + 1) * g], cols.clone());
                SCRATCH.with(|sc| {
                    let v = &mut sc.borrow_mut().v;
                    call.chunk_values(v, block, kvh, ci * c, cols, g, acc);
                });
            });
            out[..p.n_heads * hd].fill(0.0);
            for (t, acc) in accs.chunks_exact(g * hd).enumerate() {
                let kvh = t / nc;
                let o = &mut out[kvh * g * hd..(kvh + 1) * g * hd];
                o.iter_mut().zip(acc).for_each(|(o, &a)| *o += a);
            }
        });
    }
}
