//! Per-operation timing for `kiln bench --profile`: each backend op opens a `span` that, while
//! profiling is on, adds its wall time to that op's entry. Off, a span costs one relaxed load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::backend::{OpTime, Profile};

#[derive(Default)]
pub struct Profiler {
    on: AtomicBool,
    ops: Mutex<Vec<OpTime>>,
}

/// Times one op from its creation to its drop.
pub struct Span<'a> {
    profiler: &'a Profiler,
    name: &'static str,
    start: Instant,
}

impl Profiler {
    pub fn set(&self, on: bool) {
        if on {
            self.lock().clear();
        }
        self.on.store(on, Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// A span for op `name`, or None when profiling is off.
    pub fn span(&self, name: &'static str) -> Option<Span<'_>> {
        self.is_on().then(|| Span {
            profiler: self,
            name,
            start: Instant::now(),
        })
    }

    pub fn profile(&self, counters: Vec<(&'static str, u64)>) -> Profile {
        Profile {
            ops: self.lock().clone(),
            counters,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OpTime>> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        let time = self.start.elapsed();
        let mut ops = self.profiler.lock();
        match ops.iter_mut().find(|o| o.name == self.name) {
            Some(o) => {
                o.calls += 1;
                o.time += time;
            }
            None => ops.push(OpTime {
                name: self.name,
                calls: 1,
                time,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_add_up_only_while_on() {
        let p = Profiler::default();
        drop(p.span("a"));
        assert!(p.profile(vec![]).ops.is_empty());
        p.set(true);
        for _ in 0..3 {
            let _s = p.span("a");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(p.span("b"));
        p.set(false);
        drop(p.span("a"));
        let prof = p.profile(vec![]);
        let names: Vec<_> = prof.ops.iter().map(|o| (o.name, o.calls)).collect();
        assert_eq!(names, [("a", 3), ("b", 1)]);
        assert!(prof.ops[0].time >= std::time::Duration::from_millis(3));
        p.set(true);
        assert!(p.profile(vec![]).ops.is_empty(), "turning on clears");
    }
}
