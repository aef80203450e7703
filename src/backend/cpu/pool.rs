//! A spinning thread pool for the CPU backend's many small parallel steps. A rayon fork-join
//! costs ~16 µs on this class of machine because its workers sleep between jobs; a decode step of
//! a small model runs ~150 of them per token. Here workers spin on a job counter between jobs (as
//! llama.cpp's pool polls) and park only after ~1 ms without work, so an idle kiln (a chat waiting
//! for input) uses no CPU.
//!
//! A job is `n` tasks claimed through an atomic counter by the calling thread and the workers
//! alike; `run` returns when every task has finished and no worker can still touch the job.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_millis(1);

/// The current job, lifetime-erased: valid only while `run` is inside its call.
#[derive(Clone, Copy)]
struct JobRef {
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
}

// SAFETY: the pointee is `Sync`, and `run` keeps it alive until no worker can reach it.
unsafe impl Send for JobRef {}

struct Shared {
    /// Bumped once per job; workers watch it.
    generation: AtomicUsize,
    job: Mutex<Option<JobRef>>,
    /// The next task index to claim.
    next: AtomicUsize,
    /// Tasks finished in the current job.
    done: AtomicUsize,
    /// Workers that have entered the current job and not yet left it.
    active: AtomicUsize,
    /// Set when a task panicked; `run` re-raises it on the calling thread.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Parked workers wait here for a new generation.
    wake_lock: Mutex<()>,
    wake: Condvar,
}

pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One job at a time.
    running: Mutex<()>,
}

impl SpinPool {
    /// A pool of `threads` threads in all: the caller plus `threads − 1` workers.
    pub fn new(threads: usize) -> std::io::Result<SpinPool> {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: Mutex::new(None),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            wake_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = Vec::new();
        for i in 1..threads.max(1) {
            let shared = shared.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("kiln-cpu-{i}"))
                    .spawn(move || worker(&shared))?,
            );
        }
        Ok(SpinPool {
            shared,
            workers,
            running: Mutex::new(()),
        })
    }

    /// Run `f(0..n)` across the pool; returns when all calls have returned.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n == 0 {
            return;
        }
        if n == 1 || self.workers.is_empty() {
            (0..n).for_each(f);
            return;
        }
        let _one_job = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY (lifetime erasure): the job is cleared and no worker is inside it when `run`
        // returns (see the waits below), so `f` outlives every use.
        let job = JobRef {
            f: unsafe {
                std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
            },
            n,
        };
        // The counters are reset before the job is published: a worker late from the previous
        // job (it saw that generation but entered after `run` stopped waiting for it) may read
        // the new job at once, and a task it claims must not have its `done` wiped by a reset
        // that comes after (that lost count left `run` spinning forever).
        s.next.store(0, Ordering::SeqCst);
        s.done.store(0, Ordering::SeqCst);
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        s.generation.fetch_add(1, Ordering::SeqCst);
        {
            let _g = s.wake_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        work_on(s, job);
        while s.done.load(Ordering::Acquire) < n {
            std::hint::spin_loop();
        }
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // A worker that read the job but found no task left may still hold it; wait it out.
        while s.active.load(Ordering::Acquire) > 0 {
            std::hint::spin_loop();
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a CPU kernel task panicked");
        }
    }

    /// Run `f(i, chunk)` over the `chunk`-sized pieces of `data` (the last may be shorter).
    pub fn for_each_chunk<T: Send>(
        &self,
        data: &mut [T],
        chunk: usize,
        f: &(dyn Fn(usize, &mut [T]) + Sync),
    ) {
        let len = data.len();
        let base = SendPtr(data.as_mut_ptr());
        self.run(len.div_ceil(chunk.max(1)), &|i| {
            let start = i * chunk;
            let end = (start + chunk).min(len);
            // SAFETY: tasks get disjoint ranges of `data`, which outlives `run`.
            let piece =
                unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
            f(i, piece)
        });
    }
}

/// A raw pointer tasks may share to touch disjoint parts of one buffer.
struct SendPtr<T>(*mut T);
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// Through a method, so closures capture the wrapper rather than the raw pointer.
    fn get(&self) -> *mut T {
        self.0
    }
}

/// Claim and run tasks of `job` until none are left.
fn work_on(s: &Shared, job: JobRef) {
    loop {
        let i = s.next.fetch_add(1, Ordering::AcqRel);
        if i >= job.n {
            return;
        }
        // SAFETY: `run` keeps the closure alive while tasks of this job remain unfinished.
        let f = unsafe { &*job.f };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).is_err() {
            s.panicked.store(true, Ordering::SeqCst);
        }
        s.done.fetch_add(1, Ordering::AcqRel);
    }
}

fn worker(s: &Shared) {
    let mut seen = s.generation.load(Ordering::Acquire);
    loop {
        // Spin for a new job, then park.
        let start = Instant::now();
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            if start.elapsed() > SPIN {
                let guard = s.wake_lock.lock().unwrap_or_else(|e| e.into_inner());
                if s.generation.load(Ordering::Acquire) == seen
                    && !s.shutdown.load(Ordering::Acquire)
                {
                    let _unused = s
                        .wake
                        .wait_timeout(guard, Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner());
                }
            } else {
                std::hint::spin_loop();
            }
        }
        seen = s.generation.load(Ordering::Acquire);
        s.active.fetch_add(1, Ordering::AcqRel);
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            work_on(s, job);
        }
        s.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self
                .shared
                .wake_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_exactly_once() {
        let pool = SpinPool::new(3).unwrap();
        for n in [0, 1, 2, 7, 100, 1000] {
            let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                "n = {n}"
            );
        }
        let mut data = vec![0usize; 103];
        pool.for_each_chunk(&mut data, 10, &|i, c| c.iter_mut().for_each(|v| *v = i));
        assert!(data.iter().enumerate().all(|(k, &v)| v == k / 10));
        // After parking, work still arrives.
        std::thread::sleep(Duration::from_millis(20));
        let sum = AtomicUsize::new(0);
        pool.run(50, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 49 * 50 / 2);
    }
}
