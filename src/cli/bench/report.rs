//! `kiln bench`'s report: llama-bench's markdown table, CSV and JSON (every sample, the
//! placement, the profile), and the per-op profile tables of `--profile`.

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use super::{Row, TestKind, mean_sd};
use crate::backend::Profile;
use crate::model::ModelFile;
use crate::model::arch::KvCacheTypes;

pub(super) struct Report<'a> {
    pub file: &'a ModelFile,
    pub model_type: String,
    pub backend: String,
    pub read_bw: Option<f64>,
    /// What `read_bw` measured: this machine's memory read, or the GPU's copy bandwidth.
    pub bw_kind: &'static str,
    pub rows: Vec<Row>,
}

impl Report<'_> {
    fn model_size(&self) -> u64 {
        self.file
            .tensors
            .values()
            .map(|t| t.bytes().len() as u64)
            .sum()
    }

    pub(super) fn json_rows(&self) -> Vec<serde_json::Value> {
        self.rows
            .iter()
            .map(|r| {
                let ts = r.samples_ts();
                let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
                let (avg_ns, sd_ns) = mean_sd(&ns);
                let (avg_ts, sd_ts) = mean_sd(&ts);
                json!({
                    "build": format!("kiln {}", env!("CARGO_PKG_VERSION")),
                    "model_filename": self.file.path,
                    "model_type": self.model_type,
                    "model_size": self.model_size(),
                    "model_n_params": self.file.parameter_count(),
                    "backends": self.backend,
                    "n_threads": r.threads,
                    "n_gpu_layers": r.placement.map_or(0, |p| p.0),
                    "n_cpu_moe": r.placement.map_or(0, |p| p.1),
                    "type_k": r.cache.k.name(),
                    "type_v": r.cache.v.name(),
                    "n_prompt": if r.test.kind == TestKind::Prompt { r.test.n } else { 0 },
                    "n_gen": if r.test.kind == TestKind::Generate { r.test.n } else { 0 },
                    "n_depth": r.test.depth,
                    "test": r.test.name(),
                    "avg_ns": avg_ns as u64,
                    "stddev_ns": sd_ns as u64,
                    "avg_ts": avg_ts,
                    "stddev_ts": sd_ts,
                    "samples_ns": r.samples_ns,
                    "samples_ts": ts,
                    "weights_gbps": r.weight_gbps,
                    "read_bandwidth_gbps": self.read_bw,
                    "roofline_fraction": r.weight_gbps.zip(self.read_bw).map(|(w, b)| w / b),
                    "spec_type": r.speculation.map(|(kind, _)| kind),
                    "draft_tokens": r.speculation.map(|(_, c)| c.drafted),
                    "draft_accepted": r.speculation.map(|(_, c)| c.accepted),
                    "verify_passes": r.speculation.map(|(_, c)| c.passes),
                    "profile": r.profile.as_ref().map(|p| json!({
                        "ops": p.ops.iter().map(|o| json!({
                            "op": o.name,
                            "calls": o.calls,
                            "ns": o.time.as_nanos() as u64,
                        })).collect::<Vec<_>>(),
                        "counters": p.counters.iter().map(|(n, v)| json!({"name": n, "count": v}))
                            .collect::<Vec<_>>(),
                    })),
                })
            })
            .collect()
    }

    pub(super) fn csv(&self, out: &mut impl Write) -> Result<()> {
        let cols = [
            "model_filename",
            "model_type",
            "model_size",
            "model_n_params",
            "backends",
            "n_threads",
            "n_gpu_layers",
            "n_cpu_moe",
            "type_k",
            "type_v",
            "n_prompt",
            "n_gen",
            "n_depth",
            "test",
            "avg_ns",
            "stddev_ns",
            "avg_ts",
            "stddev_ts",
            "weights_gbps",
            "read_bandwidth_gbps",
            "roofline_fraction",
        ];
        writeln!(out, "{}", cols.join(","))?;
        for r in self.json_rows() {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| match &r[*c] {
                    serde_json::Value::Null => "\"\"".to_string(),
                    serde_json::Value::String(s) => format!("\"{}\"", s.replace('"', "\"\"")),
                    other => format!("\"{other}\""),
                })
                .collect();
            writeln!(out, "{}", cells.join(","))?;
        }
        Ok(())
    }

    pub(super) fn markdown(&self, out: &mut impl Write) -> Result<()> {
        let size = format!("{:.2} MiB", self.model_size() as f64 / (1u64 << 20) as f64);
        let params = format!("{:.2} M", self.file.parameter_count() as f64 / 1e6);
        let roof = self.read_bw.is_some();
        // As llama-bench: the cache types get columns only when one is not the default.
        let types = self.rows.iter().any(|r| r.cache != KvCacheTypes::default());
        let mut header = format!(
            "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |",
            "model", "size", "params", "backend", "threads"
        );
        let mut rule = format!(
            "| {} | {}: | {}: | {} | {}: |",
            "-".repeat(30),
            "-".repeat(9),
            "-".repeat(9),
            "-".repeat(10),
            "-".repeat(6),
        );
        // As llama-bench: -ngl on a GPU, -ncmoe when any row keeps experts on the CPU.
        let ngl = self.rows.iter().any(|r| r.placement.is_some());
        let ncmoe = self
            .rows
            .iter()
            .any(|r| r.placement.is_some_and(|p| p.1 > 0));
        if ngl {
            header.push_str(&format!(" {:>3} |", "ngl"));
            rule.push_str(&format!(" {}: |", "-".repeat(2)));
        }
        if ncmoe {
            header.push_str(&format!(" {:>5} |", "ncmoe"));
            rule.push_str(&format!(" {}: |", "-".repeat(4)));
        }
        if types {
            header.push_str(&format!(" {:<6} | {:<6} |", "type_k", "type_v"));
            rule.push_str(&format!(" {} | {} |", "-".repeat(6), "-".repeat(6)));
        }
        header.push_str(&format!(" {:>15} | {:>20} |", "test", "t/s"));
        rule.push_str(&format!(" {}: | {}: |", "-".repeat(14), "-".repeat(19)));
        if roof {
            header.push_str(&format!(" {:>12} | {:>9} |", "weights GB/s", "of read BW"));
            rule.push_str(&format!(" {}: | {}: |", "-".repeat(11), "-".repeat(8)));
        }
        writeln!(out, "{header}")?;
        writeln!(out, "{rule}")?;
        // llama-bench's short backend name; the footer has the whole description.
        let whole = if self.backend.starts_with("GPU") {
            "GPU"
        } else {
            "CPU"
        };
        let n_layers = self.file.config.n_layers;
        for r in &self.rows {
            let short = match r.placement {
                None => whole,
                Some((0, _)) => "CPU",
                Some((l, 0)) if l > n_layers => "GPU",
                Some(_) => "GPU+CPU",
            };
            let (mean, sd) = mean_sd(&r.samples_ts());
            let mut line = format!(
                "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |",
                self.model_type, size, params, short, r.threads,
            );
            let (layers, experts) = r.placement.unwrap_or_default();
            if ngl {
                line.push_str(&format!(" {layers:>3} |"));
            }
            if ncmoe {
                line.push_str(&format!(" {experts:>5} |"));
            }
            if types {
                line.push_str(&format!(" {:<6} | {:<6} |", r.cache.k, r.cache.v));
            }
            line.push_str(&format!(
                " {:>15} | {:>20} |",
                r.test.name(),
                format!("{mean:.2} ± {sd:.2}")
            ));
            if let Some(bw) = self.read_bw {
                let (g, f) = match r.weight_gbps {
                    Some(g) => (format!("{g:.1}"), format!("{:.0} %", 100.0 * g / bw)),
                    None => (String::new(), String::new()),
                };
                line.push_str(&format!(" {g:>12} | {f:>9} |"));
            }
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
        let mut footer = format!(
            "build: kiln {} ({})",
            env!("CARGO_PKG_VERSION"),
            self.backend
        );
        if let Some(bw) = self.read_bw {
            let kind = self.bw_kind;
            footer.push_str(&format!("; measured {kind} bandwidth {bw:.1} GB/s"));
        }
        writeln!(out, "{footer}")?;
        for r in &self.rows {
            if let Some((kind, c)) = r.speculation {
                writeln!(
                    out,
                    "{} t={}: {kind}, {} of {} drafted tokens kept ({:.0} %) in {} verify passes, \
                     {:.2} tokens a pass",
                    r.test.name(),
                    r.threads,
                    c.accepted,
                    c.drafted,
                    100.0 * c.accepted as f64 / c.drafted.max(1) as f64,
                    c.passes,
                    (c.passes + c.accepted) as f64 / c.passes.max(1) as f64,
                )?;
            }
        }
        for r in &self.rows {
            if let Some(p) = &r.profile {
                profile_table(out, r, p)?;
            }
        }
        Ok(())
    }
}

/// Where one test's time went: per op, its calls and time per token and its share of the run.
fn profile_table(out: &mut impl Write, r: &Row, p: &Profile) -> Result<()> {
    let tokens = (r.test.n * r.samples_ns.len()) as f64;
    let total_ns: u64 = r.samples_ns.iter().sum();
    let mut ops: Vec<_> = p.ops.iter().collect();
    ops.sort_by_key(|o| std::cmp::Reverse(o.time));
    writeln!(out)?;
    writeln!(
        out,
        "profile: {} t={} (per token)",
        r.test.name(),
        r.threads
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| {:<20} | {:>8} | {:>10} | {:>6} |",
        "op", "calls", "µs", "share"
    )?;
    writeln!(
        out,
        "| {} | {}: | {}: | {}: |",
        "-".repeat(20),
        "-".repeat(7),
        "-".repeat(9),
        "-".repeat(5)
    )?;
    let mut line = |name: &str, calls: f64, ns: f64| {
        writeln!(
            out,
            "| {:<20} | {:>8.1} | {:>10.1} | {:>5.1}% |",
            name,
            calls / tokens,
            ns / tokens / 1e3,
            100.0 * ns / total_ns as f64
        )
    };
    let mut accounted = 0.0;
    for o in ops {
        let ns = o.time.as_nanos() as f64;
        accounted += ns;
        line(o.name, o.calls as f64, ns)?;
    }
    line("(outside ops)", 0.0, total_ns as f64 - accounted)?;
    if !p.counters.is_empty() {
        writeln!(out)?;
        for (name, n) in &p.counters {
            writeln!(out, "{name}: {:.1} per token", *n as f64 / tokens)?;
        }
    }
    Ok(())
}
