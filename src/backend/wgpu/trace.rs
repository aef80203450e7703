//! The memory access patterns of the matmul kernels, measured on whatever adapter runs the tests
//! (lavapipe in CI). A kernel's `TRACE` variant writes the word address of every global load
//! (and, for the prefill kernel, every workgroup-memory access) each invocation makes, in program
//! order, to a buffer; the tests group invocations into 32-wide subgroups by their index in the
//! workgroup (as NVIDIA forms warps; the kernels' accesses do not depend on the adapter's
//! subgroup width) and count, per subgroup-wide access:
//! - global loads: the 128-byte lines touched against the fewest lines its distinct bytes could
//!   fill (on a GPU each line is one L1 request);
//! - workgroup memory: the passes its banks need (32 banks of 4 bytes; distinct words in one bank
//!   take a pass each) against the fewest its distinct words could take.

use std::collections::HashSet;

use super::WgpuBackend;
use super::buffers::bind;
use crate::backend::CoreOps;
use crate::backend::wgpu::{AdapterChoice, GpuOptions};
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

/// A trace entry: bits 28.. say which buffer (0-2: weights 0-2, 3: x read as f32, 4: x read as
/// vec4, 7: weight 0 read 8 bytes at a time, the address being the vector's first word), bits
/// 0..28 the word. `NONE`: no load.
const NONE: u32 = u32::MAX;
const X_SCALAR: u32 = 3;
const X_VEC4: u32 = 4;
const SHARED_WORD: u32 = 5;
const SHARED_VEC4: u32 = 6;
const WEIGHT_PAIR: u32 = 7;
const BANKS: u64 = 32;
const WARP: usize = 32;
const LINE: u64 = 128;

/// Lines touched and the minimum, summed over subgroup-wide loads, for weights and activations.
#[derive(Debug, Default, Clone, Copy)]
struct Lines {
    weight_touched: u64,
    weight_min: u64,
    x_touched: u64,
    x_min: u64,
    loads: u64,
    shared_passes: u64,
    shared_min: u64,
}

impl Lines {
    fn efficiency(&self) -> f64 {
        (self.weight_min + self.x_min) as f64 / (self.weight_touched + self.x_touched) as f64
    }
    fn weight_efficiency(&self) -> f64 {
        self.weight_min as f64 / self.weight_touched as f64
    }
    fn x_efficiency(&self) -> f64 {
        self.x_min as f64 / self.x_touched.max(1) as f64
    }
    fn shared_efficiency(&self) -> f64 {
        self.shared_min as f64 / self.shared_passes.max(1) as f64
    }
}

/// Count lines per subgroup-wide load in a trace of `threads` invocations.
fn count_lines(trace: &[u32], threads: usize) -> Lines {
    let mut out = Lines::default();
    for seq in trace.chunks_exact(threads) {
        for warp in seq.chunks(WARP) {
            // Per buffer class (weights, x): lines touched and distinct bytes.
            let mut lines: [HashSet<(u32, u64)>; 2] = Default::default();
            let mut units: [HashSet<(u32, u64)>; 2] = Default::default();
            let mut bytes = [0u64; 2];
            let mut shared: HashSet<u64> = HashSet::new();
            for &code in warp.iter().filter(|&&c| c != NONE) {
                let tag = code >> 28;
                let word = (code & 0x0fff_ffff) as u64;
                if tag == SHARED_WORD || tag == SHARED_VEC4 {
                    let n = if tag == SHARED_VEC4 { 4 } else { 1 };
                    shared.extend(word..word + n);
                    continue;
                }
                let (class, buffer, size) = match tag {
                    X_SCALAR => (1, X_SCALAR, 4),
                    X_VEC4 => (1, X_SCALAR, 16),
                    WEIGHT_PAIR => (0, 0, 8),
                    t => (0, t, 4),
                };
                let first = word * 4;
                for l in first / LINE..=(first + size - 1) / LINE {
                    lines[class].insert((buffer, l));
                }
                if units[class].insert((buffer, first)) {
                    bytes[class] += size;
                }
            }
            if !shared.is_empty() {
                let mut per_bank = [0u64; BANKS as usize];
                for w in &shared {
                    per_bank[(w % BANKS) as usize] += 1;
                }
                out.shared_passes += per_bank.iter().max().copied().unwrap_or(0);
                out.shared_min += (shared.len() as u64).div_ceil(BANKS);
            }
            for class in 0..2 {
                if lines[class].is_empty() {
                    continue;
                }
                let touched = lines[class].len() as u64;
                let min = bytes[class].div_ceil(LINE);
                out.loads += 1;
                if class == 0 {
                    out.weight_touched += touched;
                    out.weight_min += min;
                } else {
                    out.x_touched += touched;
                    out.x_min += min;
                }
            }
        }
    }
    out
}

/// The adapter, with the kernels GPUs get even where it is a software one.
fn backend() -> Option<WgpuBackend> {
    let options = GpuOptions {
        hardware_kernels: true,
        ..GpuOptions::default()
    };
    match WgpuBackend::open(AdapterChoice::Best, options) {
        Ok(Some(b)) => Some(b),
        other => {
            assert!(
                std::env::var_os("KILN_REQUIRE_GPU").is_none_or(|v| v != "1"),
                "KILN_REQUIRE_GPU=1 but there is no usable GPU adapter: {:?}",
                other.err()
            );
            None
        }
    }
}

/// A weight of `rows × cols` of type `t` with random bytes (the trace does not look at values).
fn weight(t: GgmlType, rows: usize, cols: usize) -> Tensor {
    let bytes_per_row = cols / t.block_len() * t.block_bytes();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let bytes = (0..rows * bytes_per_row)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Keep f16 fields finite: no byte with the exponent's top bits all set.
            (state as u8) & 0x7b
        })
        .collect();
    Tensor::from_bytes(format!("w.{t}"), t, vec![cols, rows], bytes)
}

/// Run a traced dispatch of `kernel` with `params` (whose last word the trace's invocation count
/// takes) and return the trace.
fn run_traced(
    b: &WgpuBackend,
    kernel: super::pipelines::Kernel,
    mut params: Vec<u32>,
    buffers: &[&super::buffers::DeviceBuf],
    groups: [u32; 3],
    threads_per_group: usize,
) -> (Vec<u32>, usize) {
    let threads = (groups[0] * groups[1]) as usize * threads_per_group;
    let max_loads = 2048;
    let mut trace = b.buffer(threads * max_loads).unwrap();
    b.upload(&mut trace, &vec![f32::from_bits(NONE); threads * max_loads]);
    if let Some(last) = params.last_mut() {
        *last = threads as u32;
    }
    let mut bound: Vec<_> = buffers.iter().map(|d| bind(d)).collect();
    bound.push(bind(&trace.dev));
    b.run(&kernel.traced(), &params, &bound, groups);
    let mut raw = vec![0f32; threads * max_loads];
    b.download(&trace, 0, &mut raw);
    assert!(b.take_error().is_none());
    let codes: Vec<u32> = raw.iter().map(|v| v.to_bits()).collect();
    assert!(
        codes[(max_loads - 1) * threads..]
            .iter()
            .all(|&c| c == NONE),
        "the trace overflowed"
    );
    (codes, threads)
}

/// The trace of one mat-vec of `w` (one activation row).
fn trace_matvec(b: &WgpuBackend, w: &Tensor) -> (Vec<u32>, usize) {
    let gw = b.weight(w).unwrap();
    let m = gw.matrix().unwrap();
    let x = b.buffer(m.cols).unwrap();
    let out = b.buffer(m.rows).unwrap();
    let kernel = b.matvec_kernel_of(m, 1, None);
    let wg = kernel.defines.get("WG").map_or(Ok(64), |w| w.parse());
    let (params, groups) = b.matvec_call_rows(m, [m.rows, 0, 0], [0; 3], None, 1, [0; 3]);
    let buffers = [&x.dev, &m.parts[0].dev, &out.dev];
    run_traced(b, kernel, params.to_vec(), &buffers, groups, wg.unwrap())
}

/// The trace of the prefill kernel over `w` for `n` activation rows.
fn trace_matmul(b: &WgpuBackend, w: &Tensor, n: usize) -> (Vec<u32>, usize) {
    let gw = b.weight(w).unwrap();
    let m = gw.matrix().unwrap();
    let x = b.buffer(n * m.cols).unwrap();
    let out = b.buffer(n * m.rows).unwrap();
    let kernel = b.matmul_kernel_of(m, 1, None);
    let (params, groups) = b.matmul_call(m, n, [m.rows, 0, 0], [m.rows, 0, 0], [0; 3], None);
    let buffers = [&x.dev, &m.parts[0].dev, &out.dev];
    run_traced(b, kernel, params, &buffers, groups, 128)
}

/// Every block type's mat-vec reads every word of its weight and nothing past it; the staged
/// kernel (matvec.wgsl) reads whole lines of weights: per subgroup-wide load at least 0.75 of the
/// lines it touches are needed for its bytes, and all loads together touch at most 12 lines per
/// KiB of weights (8 is every line once; a workgroup stages one row, so the line two rows share
/// is loaded by both). 64 rows of 2048 values (the 1B shape's width); the figures print with
/// `--nocapture`.
///
/// The per-type kernel (matvec_blocks.wgsl: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) is reported, not held
/// to the line bounds: its 16 invocations of a block read the block's scales as one broadcast
/// word and its quants as 4- or 8-byte pieces of blocks 18-210 bytes apart, 0.21-0.57 of the
/// lines per load, most of them L1 hits. On an H200 it decoded the 1B shape (Q4_K_M) at 383
/// tokens/s against 268 for the staged kernel (8 rounds each), whose loads score 1.00.
///
/// x is reported, not held to the bound: an invocation reads its run's four vec4s of x, 64 bytes
/// apart across a subgroup (0.25), from a vector of a few KiB that every workgroup reads and L1
/// holds. On an H200 that layout decoded the 1B shape at 241 tokens/s against 230 for four
/// values an invocation with consecutive vec4s of x (x at 1.00), the decoders' per-run work
/// counting for more than x's lines.
#[test]
fn matvec_loads_touch_few_lines() {
    let Some(b) = backend() else { return };
    let mut report = String::new();
    let mut worst = (f64::MAX, 0.0f64);
    for t in super::buffers::MATRIX_TYPES {
        let w = weight(t, 64, 2048);
        let (trace, threads) = trace_matvec(&b, &w);
        let words = w.bytes().len().div_ceil(4) as u64;
        let mut read = HashSet::new();
        for &code in trace.iter().filter(|&&c| c != NONE) {
            let (tag, word) = (code >> 28, (code & 0x0fff_ffff) as u64);
            match tag {
                0 => read.insert(word),
                WEIGHT_PAIR => read.insert(word) | read.insert(word + 1),
                _ => false,
            };
        }
        assert!(
            read.len() as u64 == words && read.iter().all(|&w| w < words),
            "{t}: the mat-vec reads {} distinct words of the weight's {words}, up to word {:?}",
            read.len(),
            read.iter().max()
        );
        let l = count_lines(&trace, threads);
        let per_kib = l.weight_touched as f64 / (w.bytes().len() as f64 / 1024.0);
        let per_type = super::pipelines::blocks_matvec_reads(t, 2048);
        report += &format!(
            "{t:>5}: efficiency {:.2} (weights {:.2}, x {:.2}), {per_kib:.1} lines per KiB of weights{}\n",
            l.efficiency(),
            l.weight_efficiency(),
            l.x_efficiency(),
            if per_type { " (per-type kernel)" } else { "" },
        );
        if !per_type {
            worst = (worst.0.min(l.weight_efficiency()), worst.1.max(per_kib));
        }
    }
    eprintln!("{report}");
    assert!(worst.0 >= 0.75 && worst.1 <= 12.0, "{report}");
}

/// The prefill kernel's workgroup memory: every store and read of its tiles is a single pass
/// for its subgroup (no two lanes' words in one bank), and its activation loads read whole
/// lines. A 64 × 256 tile of 64 activation rows (the weights' types with 4-byte-aligned blocks:
/// other types' decoders take a second load on some lanes only, which the trace cannot line up
/// by position; the tiles do not depend on the type). The figures print with `--nocapture`.
#[test]
fn prefill_tiles_have_no_bank_conflicts() {
    let Some(b) = backend() else { return };
    let mut report = String::new();
    for t in [GgmlType::F16, GgmlType::Q4_K] {
        let w = weight(t, 64, 256);
        let (trace, threads) = trace_matmul(&b, &w, 64);
        let l = count_lines(&trace, threads);
        report += &format!(
            "{t:>5}: workgroup memory {:.2} (passes {} for a minimum {}), global loads: weights {:.2}, x {:.2}\n",
            l.shared_efficiency(),
            l.shared_passes,
            l.shared_min,
            l.weight_efficiency(),
            l.x_efficiency(),
        );
        assert!(
            l.shared_passes == l.shared_min && l.x_efficiency() == 1.0,
            "{report}"
        );
    }
    eprintln!("{report}");
}
