//! Continuous batching across threads: each sequence (a server slot, a line of a parallel batch)
//! generates on a thread of its own with its own `Session`, and its forward calls meet here.
//! A call waits until every seated sequence has one waiting (or `MAX_WAIT` has passed), then the
//! thread that completes the set runs them all as one batched forward pass
//! (`Model::forward_batch`), reading the weights once for every sequence's rows, and hands each
//! its logits. A sequence that starts joins at the next step with its prefill; one that finishes
//! leaves its seat at once, and the others stop waiting for it.
//!
//! A call moves its session's KV cache here and gets it back with its logits, so no thread holds
//! a reference into another's session. Everything else a session does (sampling, checkpoints of a
//! recurrent state) stays on its own thread.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::arch::{BatchSeq, KvCache, KvCacheTypes, Model, RowInputs, Scratch};
use crate::backend::Backend;
use crate::error::{Error, Result};

/// The longest a waiting call waits for a seated sequence that has not called yet (it may be
/// compiling a grammar, or stuck): after it, the step runs without that sequence.
const MAX_WAIT: Duration = Duration::from_millis(50);

/// One sequence's forward call.
pub struct Call<B: Backend> {
    pub ids: Vec<u32>,
    pub start_pos: usize,
    pub cache: KvCache<B>,
    /// Explicit RoPE positions (after an image under multi-axis RoPE).
    pub positions: Option<Vec<[u32; 3]>>,
    /// Rows whose inputs are embeddings: the first such row, the image's embeddings, and where
    /// this call's rows start in them (in values).
    pub embedded: Option<(usize, Arc<Vec<f32>>, usize)>,
    pub bidirectional: bool,
    /// Every row's logits (a verify pass), else the last row's.
    pub all_rows: bool,
}

/// What a call gets back: its cache, and its logits or what went wrong.
pub struct Answer<B: Backend> {
    pub cache: KvCache<B>,
    pub logits: Result<Vec<f32>>,
}

/// Throughput figures of the steps run so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchStats {
    pub steps: usize,
    /// Sequences and rows over all steps.
    pub calls: usize,
    pub rows: usize,
}

struct State<B: Backend> {
    /// Sequences that hold a seat: they will call again before they leave.
    seated: usize,
    pending: Vec<(u64, Call<B>, Instant)>,
    answers: HashMap<u64, Answer<B>>,
    /// A step is running (its thread has the scratch).
    running: bool,
    /// When the last step ended: the sequences it answered call again soon after, so a call
    /// made while it ran waits for them from then on, not from when it was made.
    last_step_end: Instant,
    scratch: Option<Scratch<B>>,
    next_ticket: u64,
    stats: BatchStats,
}

pub struct Batcher<'m, B: Backend> {
    model: &'m Model<B>,
    rows: usize,
    state: Mutex<State<B>>,
    wake: Condvar,
}

/// A sequence's seat: while it is held, steps wait for the sequence's next call. Dropping it
/// (also when its thread unwinds) frees it.
pub struct Seat<'b, 'm, B: Backend> {
    batcher: &'b Batcher<'m, B>,
}

impl<B: Backend> Drop for Seat<'_, '_, B> {
    fn drop(&mut self) {
        let mut st = self.batcher.lock();
        st.seated -= 1;
        drop(st);
        // The others may have been waiting for this sequence alone.
        self.batcher.wake.notify_all();
    }
}

impl<'m, B: Backend> Batcher<'m, B> {
    /// A batcher whose steps take up to `rows` rows in one forward call (more are split).
    pub fn new(model: &'m Model<B>, rows: usize) -> Result<Batcher<'m, B>> {
        let rows = rows.max(1);
        Ok(Batcher {
            model,
            rows,
            state: Mutex::new(State {
                seated: 0,
                pending: Vec::new(),
                answers: HashMap::new(),
                running: false,
                last_step_end: Instant::now(),
                scratch: Some(model.new_scratch(rows)?),
                next_ticket: 0,
                stats: BatchStats::default(),
            }),
            wake: Condvar::new(),
        })
    }

    pub fn model(&self) -> &'m Model<B> {
        self.model
    }

    /// The most rows one call may carry.
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn stats(&self) -> BatchStats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        // A thread that panicked while holding the lock left the state consistent (every
        // change is made whole under it).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a seat for a sequence about to generate.
    pub fn seat(&self) -> Seat<'_, 'm, B> {
        self.lock().seated += 1;
        Seat { batcher: self }
    }

    /// Run `call` with the other sequences' calls of the same step; blocks until it is done.
    pub fn forward(&self, call: Call<B>) -> Answer<B> {
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.pending.push((ticket, call, Instant::now()));
        self.wake.notify_all();
        loop {
            if let Some(answer) = st.answers.remove(&ticket) {
                return answer;
            }
            let oldest = st.pending.first().map(|p| p.2.max(st.last_step_end));
            match oldest {
                Some(t0) if !st.running => {
                    let waited = t0.elapsed();
                    if st.pending.len() >= st.seated || waited >= MAX_WAIT {
                        st = self.step(st);
                        continue;
                    }
                    st = self
                        .wake
                        .wait_timeout(st, MAX_WAIT - waited)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                _ => st = self.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// Run every pending call (in forward calls of at most `rows` rows), with the lock released
    /// meanwhile, and post the answers.
    fn step<'s>(&'s self, mut st: MutexGuard<'s, State<B>>) -> MutexGuard<'s, State<B>> {
        let calls: Vec<_> = st.pending.drain(..).map(|(t, c, _)| (t, c)).collect();
        let mut scratch = st
            .scratch
            .take()
            .expect("the scratch is here when no step runs");
        st.running = true;
        st.stats.steps += 1;
        st.stats.calls += calls.len();
        st.stats.rows += calls.iter().map(|c| c.1.ids.len()).sum::<usize>();
        drop(st);
        // What a call's cache was, to give it an empty one if the step panics with it.
        let shapes: Vec<_> = calls
            .iter()
            .map(|(t, c)| (*t, c.cache.ctx, c.cache.types))
            .collect();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut answers = Vec::with_capacity(calls.len());
            let mut group = Vec::new();
            let mut rows = 0;
            for call in calls {
                if rows + call.1.ids.len() > self.rows && !group.is_empty() {
                    answers.extend(self.run_group(std::mem::take(&mut group), &mut scratch));
                    rows = 0;
                }
                rows += call.1.ids.len();
                group.push(call);
            }
            if !group.is_empty() {
                answers.extend(self.run_group(group, &mut scratch));
            }
            (answers, scratch)
        }));
        let (answers, scratch) = match run {
            Ok(done) => done,
            Err(_) => self.after_panic(&shapes),
        };
        let mut st = self.lock();
        st.answers.extend(answers);
        st.scratch = Some(scratch);
        st.running = false;
        st.last_step_end = Instant::now();
        self.wake.notify_all();
        st
    }

    /// A step that panicked took its calls' caches and the scratch with it: each call gets an
    /// error and an empty cache of its shape (its session then starts over), the batcher a new
    /// scratch. Where even that cannot be had, the process cannot go on.
    fn after_panic(
        &self,
        shapes: &[(u64, usize, KvCacheTypes)],
    ) -> (Vec<(u64, Answer<B>)>, Scratch<B>) {
        let fresh = || -> Result<_> {
            let answers = shapes
                .iter()
                .map(|&(ticket, ctx, types)| {
                    let answer = Answer {
                        cache: self.model.new_cache(ctx, types)?,
                        logits: Err(Error::Unsupported(
                            "a batched forward call failed (a bug in kiln: please report it)"
                                .into(),
                        )),
                    };
                    Ok((ticket, answer))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((answers, self.model.new_scratch(self.rows)?))
        };
        match fresh() {
            Ok(done) => done,
            Err(e) => {
                eprintln!("kiln: cannot recover from a failed batched forward call: {e}");
                std::process::abort()
            }
        }
    }

    /// One forward call over `group`; each call's answer.
    fn run_group(
        &self,
        group: Vec<(u64, Call<B>)>,
        scratch: &mut Scratch<B>,
    ) -> Vec<(u64, Answer<B>)> {
        let m = self.model;
        let (tickets, mut calls): (Vec<u64>, Vec<Call<B>>) = group.into_iter().unzip();
        let mut logits = Vec::new();
        let done = {
            let mut seqs: Vec<BatchSeq<B>> = calls
                .iter_mut()
                .map(|c| BatchSeq {
                    ids: &c.ids,
                    start_pos: c.start_pos,
                    inputs: RowInputs {
                        embedded: c.embedded.as_ref().map(|(first, e, from)| {
                            let n = (c.ids.len() - first) * m.config.embedding_width();
                            (*first, &e[*from..*from + n])
                        }),
                        positions: c.positions.as_deref(),
                        bidirectional: c.bidirectional,
                    },
                    all_rows: c.all_rows,
                    cache: &mut c.cache,
                })
                .collect();
            m.forward_batch(&mut seqs, scratch, &mut logits)
        };
        let failure = match done {
            Err(e) => Some(e.to_string()),
            Ok(()) => m.backend.take_error().map(|e| e.to_string()),
        };
        let vocab = m.config.vocab_size;
        let mut at = 0;
        tickets
            .into_iter()
            .zip(calls)
            .map(|(ticket, c)| {
                let n = if c.all_rows { c.ids.len() } else { 1 } * vocab;
                let logits = match &failure {
                    Some(e) => Err(Error::Unsupported(format!("a batched forward call: {e}"))),
                    None => Ok(logits[at..at + n].to_vec()),
                };
                at += n;
                let answer = Answer {
                    cache: c.cache,
                    logits,
                };
                (ticket, answer)
            })
            .collect()
    }
}
