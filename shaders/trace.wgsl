// trace.wgsl — the TRACE variants' record of their memory accesses (snippet): each invocation
// writes the code of every access it makes, in program order, to the trace buffer bound last;
// src/backend/wgpu/trace.rs says what the codes mean and reads them. The kernel's parameters
// (`p`) hold the grid's invocation count, `trace_threads`; the kernel sets `trace_thread`.

@group(0) @binding({{TRACE_BINDING}}) var<storage, read_write> trace: array<u32>;
var<private> trace_seq: u32;
var<private> trace_thread: u32;

// The access this invocation makes next (0xffffffff: none), as the trace's next entry.
fn record(code: u32) {
    let i = trace_seq * p.trace_threads + trace_thread;
    if (i < arrayLength(&trace)) {
        trace[i] = code;
    }
    trace_seq += 1u;
}
