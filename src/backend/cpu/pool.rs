//! A spinning thread pool for the CPU backend's many small parallel steps. A rayon fork-join wakes
//! workers that sleep between jobs, a cost a small model's token pays at each of the ~150 parallel
//! steps it takes. Here workers spin on a job counter between jobs (as
//! llama.cpp's pool polls) and park only after ~1 ms without work, so an idle kiln (a chat waiting
//! for input) uses no CPU.
//!
//! A job is `n` tasks claimed through an atomic counter by the calling thread and the workers
//! alike; `run` returns when every task has finished and no worker can still touch the job.
//! `run_split` builds on it for passes that stream memory (a generated token's matmuls): one
//! contiguous share of the range per thread, with stealing at the end instead of fixed tasks.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// Whether `run` measures how long threads wait at the ends of jobs (`kiln bench --profile`).
    timing: AtomicBool,
    /// While timing: when the first thread found the current job's tasks all claimed, in
    /// nanoseconds since `epoch` plus one (zero: not yet).
    first_idle: AtomicU64,
    epoch: Instant,
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
    /// Parallel jobs run (for `kiln bench --profile`).
    jobs: AtomicUsize,
    /// While timing: nanoseconds from the first thread running out of tasks to the job's end,
    /// summed over jobs (a thread's time lost to the job's uneven end).
    idle_ns: AtomicU64,
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
            timing: AtomicBool::new(false),
            first_idle: AtomicU64::new(0),
            epoch: Instant::now(),
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
            jobs: AtomicUsize::new(0),
            idle_ns: AtomicU64::new(0),
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
        self.jobs.fetch_add(1, Ordering::Relaxed);
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
        s.first_idle.store(0, Ordering::SeqCst);
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
        let first_idle = s.first_idle.load(Ordering::Acquire);
        if first_idle != 0 {
            let ended = s.nanos_since_epoch();
            self.idle_ns
                .fetch_add(ended.saturating_sub(first_idle), Ordering::Relaxed);
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

    /// Parallel jobs run since the last `reset_stats`.
    pub fn jobs(&self) -> u64 {
        self.jobs.load(Ordering::Relaxed) as u64
    }

    /// Microseconds a thread waited at the ends of jobs since the last `reset_stats`, while
    /// timing was on.
    pub fn idle_us(&self) -> u64 {
        self.idle_ns.load(Ordering::Relaxed) / 1000
    }

    /// Zero the counters and turn the measurement of job ends on or off.
    pub fn reset_stats(&self, timing: bool) {
        self.jobs.store(0, Ordering::Relaxed);
        self.idle_ns.store(0, Ordering::Relaxed);
        self.shared.timing.store(timing, Ordering::Relaxed);
    }

    /// Run `f` over the items `0..n` in contiguous pieces of at most `grain` items, for passes
    /// that stream memory: each thread walks its own share of the range front to back (one
    /// stream for the hardware prefetcher), and a thread that runs out steals the back half of
    /// the largest share left, so threads finish within about one piece of each other instead of
    /// one task of a fixed split.
    pub fn run_split(&self, n: usize, grain: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        let grain = grain.max(1);
        let threads = self.workers.len() + 1;
        if threads == 1 || n <= grain || n > u32::MAX as usize {
            let mut i = 0;
            while i < n {
                f(i..(i + grain).min(n));
                i += grain;
            }
            return;
        }
        let shares: Vec<Share> = (0..threads)
            .map(|t| Share::new(n * t / threads, n * (t + 1) / threads))
            .collect();
        self.run(threads, &|own| {
            let share = &shares[own];
            loop {
                while let Some(piece) = share.take_front(grain) {
                    f(piece);
                }
                // Out of work: steal the back half of the fullest share into this one.
                let Some(victim) = shares.iter().max_by_key(|s| s.left()) else {
                    return;
                };
                match victim.take_back_half() {
                    Some(stolen) => share.refill(stolen),
                    None if victim.left() == 0 => return,
                    None => {}
                }
            }
        });
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

/// One thread's share of a `run_split` range: the items `front..back` not yet taken, packed in
/// one word so that the owner taking from the front and a thief taking from the back never both
/// get an item. On its own cache line: the owner updates it every piece.
#[repr(align(128))]
struct Share(AtomicU64);

impl Share {
    fn new(front: usize, back: usize) -> Share {
        Share(AtomicU64::new(pack(front, back)))
    }

    fn left(&self) -> usize {
        let (front, back) = unpack(self.0.load(Ordering::Acquire));
        back - front
    }

    /// The next `grain` items (fewer at the end), if any are left.
    fn take_front(&self, grain: usize) -> Option<Range<usize>> {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            let (front, back) = unpack(cur);
            if front == back {
                return None;
            }
            let end = (front + grain).min(back);
            match self.0.compare_exchange_weak(
                cur,
                pack(end, back),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(front..end),
                Err(now) => cur = now,
            }
        }
    }

    /// The back half of the items left (the last one when one is left).
    fn take_back_half(&self) -> Option<Range<usize>> {
        let cur = self.0.load(Ordering::Acquire);
        let (front, back) = unpack(cur);
        if front == back {
            return None;
        }
        let mid = front + (back - front) / 2;
        self.0
            .compare_exchange(cur, pack(front, mid), Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| mid..back)
    }

    /// Give an emptied share new items (only its owner does; no thief takes from an empty one).
    fn refill(&self, items: Range<usize>) {
        self.0
            .store(pack(items.start, items.end), Ordering::Release);
    }
}

fn pack(front: usize, back: usize) -> u64 {
    ((front as u64) << 32) | back as u64
}

fn unpack(v: u64) -> (usize, usize) {
    ((v >> 32) as usize, (v & 0xffff_ffff) as usize)
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

impl Shared {
    /// Never zero, so that zero can mean "not yet".
    fn nanos_since_epoch(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }
}

/// Claim and run tasks of `job` until none are left.
fn work_on(s: &Shared, job: JobRef) {
    loop {
        let i = s.next.fetch_add(1, Ordering::AcqRel);
        if i >= job.n {
            if s.timing.load(Ordering::Relaxed) {
                let now = s.nanos_since_epoch();
                let _ = s
                    .first_idle
                    .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
            }
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

    #[test]
    fn run_split_covers_every_item_once() {
        let pool = SpinPool::new(3).unwrap();
        for (n, grain) in [(0, 4), (1, 4), (3, 4), (4, 4), (5, 1), (100, 3), (1000, 7)] {
            let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run_split(n, grain, &|items| {
                assert!(!items.is_empty() && items.len() <= grain, "{items:?}");
                // Uneven work, so that threads run out early and steal.
                if items.start < n / 3 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                for i in items {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(
                counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                "n = {n}, grain = {grain}"
            );
        }
    }

    #[test]
    fn a_share_gives_each_item_to_one_taker() {
        let share = Share::new(10, 20);
        assert_eq!(share.take_front(3), Some(10..13));
        assert_eq!(share.take_back_half(), Some(16..20));
        assert_eq!(share.left(), 3);
        assert_eq!(share.take_front(5), Some(13..16));
        assert_eq!(share.take_front(5), None);
        assert_eq!(share.take_back_half(), None);
        share.refill(30..31);
        assert_eq!(share.take_back_half(), Some(30..31));
        assert_eq!(share.take_front(1), None);
    }
}
