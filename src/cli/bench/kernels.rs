//! `kiln bench --kernels`: each kind of decode mat-vec (Q/K/V, attention output, gate/up with its
//! activation, down, output head) timed over every layer's own weights in turn, so no weight is
//! served from a cache between its calls: µs a call and the weight bytes read per second, from
//! the wall clock (calls recorded back to back, as decode records them) and from the backend's
//! profile (per dispatch: GPU timestamps, inside one pass where the adapter can; else each
//! dispatch submitted and waited for alone), with the profile's time split by kernel (a mat-vec
//! and the dispatch that quantizes its input, say). Inputs are random; one activation row.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::backend::{Backend, Profile};
use crate::model::{Model, ModelFile};
use crate::sampler::Rng;

/// Time per kernel a profile took: its name, calls and time.
type KernelTimes = Vec<(&'static str, u64, Duration)>;

/// One kind of mat-vec over every layer.
pub struct KernelRow {
    pub case: &'static str,
    /// The weights' types and shapes (rows × columns), distinct ones joined.
    pub weights: String,
    /// Weight bytes one call reads (the mean over the layers).
    pub bytes: f64,
    pub calls: u64,
    pub wall: Duration,
    /// The profile's time and its kernels, with their calls and time.
    pub profiled: Option<(Duration, KernelTimes)>,
}

/// The calls of one case: which layer's weights, and what to run on them.
struct Case<'a> {
    name: &'static str,
    /// Per call: the tensors it reads.
    tensors: Vec<Vec<String>>,
    run: Box<dyn Fn(usize) + 'a>,
}

/// Every case of `model` (loaded from `file`), each timed over `repetitions` passes over the
/// layers after one warm-up pass.
pub fn measure<B: Backend>(
    model: &Model<B>,
    file: &ModelFile,
    repetitions: usize,
) -> Result<Vec<KernelRow>> {
    let layers = model.layer_matrices();
    if layers.is_empty() {
        bail!("--kernels: the model has no layer with its own Q/K/V and a dense feed-forward");
    }
    let b = &model.backend;
    let c = &model.config;
    let tensor = |name: &str| {
        file.tensors
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("--kernels: the model has no tensor '{name}'"))
    };
    // The buffers hold the widest layer's (Gemma 4's global layers are wider than its local ones).
    let widest = |role: &str, len: fn(&crate::tensor::Tensor) -> usize| -> Result<usize> {
        let mut most = 0;
        for m in &layers {
            most = most.max(len(tensor(&format!("blk.{}.{role}.weight", m.layer))?));
        }
        Ok(most)
    };
    let q_len = widest("attn_q", |t| t.n_rows())?;
    let kv_len = widest("attn_k", |t| t.n_rows())?;
    let v_len = widest("attn_v", |t| t.n_rows())?;
    let attn_len = widest("attn_output", |t| t.row_len())?;
    let ffn = (0..c.n_layers).map(|l| c.layer_ff(l)).max().unwrap_or(0);
    let mut rng = Rng::new(7);
    let mut random = |len: usize| -> Result<B::Buffer> {
        let mut buf = b.buffer(len)?;
        let values: Vec<f32> = (0..len)
            .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect();
        b.upload(&mut buf, &values);
        Ok(buf)
    };
    let hidden = random(c.hidden_size)?;
    let attn_out = random(attn_len)?;
    let gated = random(ffn)?;
    let out = std::cell::RefCell::new([
        b.buffer(q_len.max(c.hidden_size).max(ffn))?,
        b.buffer(kv_len.max(ffn))?,
        b.buffer(v_len)?,
        b.buffer(c.vocab_size)?,
    ]);
    // Per layer, the tensors of `roles` a call reads.
    let per_layer = |roles: &[&str]| -> Vec<Vec<String>> {
        let names = |l: usize| {
            roles
                .iter()
                .map(|r| format!("blk.{l}.{r}.weight"))
                .collect()
        };
        layers.iter().map(|m| names(m.layer)).collect()
    };
    let act = model.gate_activation();
    let head = if file.tensors.contains_key("output.weight") {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    let cases: Vec<Case> = vec![
        Case {
            name: "attn_qkv",
            tensors: per_layer(&["attn_q", "attn_k", "attn_v"]),
            run: Box::new(|i| {
                let mut outs = out.borrow_mut();
                let [q, k, v, _] = &mut *outs;
                b.matmul_many(&hidden, &layers[i].qkv, 1, &mut [q, k, v]);
            }),
        },
        Case {
            name: "attn_output",
            tensors: per_layer(&["attn_output"]),
            run: Box::new(|i| b.matmul(&attn_out, layers[i].wo, 1, &mut out.borrow_mut()[0])),
        },
        Case {
            name: "ffn_gate_up",
            tensors: per_layer(&["ffn_gate", "ffn_up"]),
            run: Box::new(|i| {
                let m = &layers[i];
                let mut outs = out.borrow_mut();
                let [g, u, ..] = &mut *outs;
                b.matmul_gated(&hidden, m.gate, m.up, 1, c.layer_ff(m.layer), act, g, u);
            }),
        },
        Case {
            name: "ffn_down",
            tensors: per_layer(&["ffn_down"]),
            run: Box::new(|i| b.matmul(&gated, layers[i].down, 1, &mut out.borrow_mut()[0])),
        },
        Case {
            name: "output",
            tensors: vec![vec![head.to_string()]],
            run: Box::new(|_| {
                b.matmul(&hidden, model.output_matrix(), 1, &mut out.borrow_mut()[3])
            }),
        },
    ];
    // Waits for what was recorded: a read of one value.
    let sync = || {
        let mut one = [0f32];
        b.download(&out.borrow()[0], 0, &mut one);
    };
    let mut rows = Vec::new();
    for case in &cases {
        let calls = case.tensors.len();
        let pass = || (0..calls).for_each(|i| (case.run)(i));
        pass();
        sync();
        let start = Instant::now();
        for _ in 0..repetitions {
            pass();
        }
        sync();
        let wall = start.elapsed();
        b.set_profiling(true);
        for _ in 0..repetitions {
            pass();
        }
        sync();
        let profile = b.profile();
        b.set_profiling(false);
        let mut bytes = 0u64;
        let mut kinds: Vec<String> = Vec::new();
        for name in case.tensors.iter().flatten() {
            let t = tensor(name)?;
            bytes += t.bytes().len() as u64;
            let kind = format!("{} {}×{}", t.dtype, t.n_rows(), t.row_len());
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        rows.push(KernelRow {
            case: case.name,
            weights: kinds.join(", "),
            bytes: bytes as f64 / calls as f64,
            calls: (calls * repetitions) as u64,
            wall,
            profiled: profile.map(|p| by_kernel(&p)),
        });
    }
    Ok(rows)
}

/// A profile's total time and its kernels.
fn by_kernel(p: &Profile) -> (Duration, KernelTimes) {
    let ops: Vec<_> = p.ops.iter().map(|o| (o.name, o.calls, o.time)).collect();
    (ops.iter().map(|o| o.2).sum(), ops)
}

/// The rows as a markdown table, after a line naming the backend.
pub fn markdown(out: &mut impl Write, backend: &str, rows: &[KernelRow]) -> Result<()> {
    writeln!(
        out,
        "kernels on {backend}; µs and GB/s per call, wall clock and profiled\n"
    )?;
    writeln!(
        out,
        "| case | weights | MiB | calls | µs | GB/s | profiled µs | profiled GB/s | kernels (µs a call) |"
    )?;
    writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    )?;
    for r in rows {
        let per_call = |d: Duration| d.as_secs_f64() * 1e6 / r.calls as f64;
        let gbps = |us: f64| r.bytes / (us * 1e3);
        let wall = per_call(r.wall);
        let (prof_us, prof_gbps, kernels) = match &r.profiled {
            Some((total, ops)) => {
                let us = per_call(*total);
                let list: Vec<String> = ops
                    .iter()
                    .map(|(name, calls, t)| {
                        let each = *calls as f64 / r.calls as f64;
                        format!("{name} ×{each:.0} {:.2}", per_call(*t))
                    })
                    .collect();
                (
                    format!("{us:.2}"),
                    format!("{:.1}", gbps(us)),
                    list.join(", "),
                )
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        writeln!(
            out,
            "| {} | {} | {:.3} | {} | {wall:.2} | {:.1} | {prof_us} | {prof_gbps} | {kernels} |",
            r.case,
            r.weights,
            r.bytes / (1 << 20) as f64,
            r.calls,
            gbps(wall),
        )?;
    }
    Ok(())
}
