//! `kiln info`: what a model file holds — architecture, size, tensor types, tokenizer, chat
//! template and the configuration kiln will run it with; a GGUF file kiln cannot run (an
//! architecture it does not know, a configuration it refuses) is described from its header alone,
//! with what stops kiln.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::json;

use super::{ModelArgs, OutputFormat};
use crate::gguf::GgufFile;
use crate::model::loader::Source;
use crate::model::recurrent::MAX_CHECKPOINTS;
use crate::model::{ModelConfig, ModelFile};

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,

    /// Also list every GGUF metadata key and value
    #[arg(long)]
    pub metadata: bool,

    /// Also list every tensor with its type and shape
    #[arg(long)]
    pub tensors: bool,

    /// Where a GPU run would place the model's parts (with -ngl other than auto, or under
    /// KILN_WGPU_MAX_MEMORY), and the bytes of weights on each side
    #[command(flatten)]
    pub placement: super::placement::PlacementArgs,

    /// The context the placement leaves room for (0: the model's)
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    pub ctx_size: Option<usize>,

    #[command(flatten)]
    pub cache: super::CacheArgs,
}

/// The facts `kiln info` reports, gathered once for both output formats.
struct Summary {
    name: String,
    format: String,
    parameters: u64,
    file_size: u64,
    tokenizer: String,
    vocab_tokens: Option<usize>,
    chat_template: bool,
}

fn summarize(m: &ModelFile) -> Summary {
    let (format, tokenizer, vocab_tokens, chat_template) = match &m.source {
        Source::Gguf(g) => {
            let md = &g.metadata;
            let model = md.str("tokenizer.ggml.model").ok().flatten();
            let pre = md.str("tokenizer.ggml.pre").ok().flatten();
            let tokenizer = match (model, pre) {
                (Some("gpt2"), Some(pre)) => format!("gpt2 (byte-level BPE, pre-tokenizer {pre})"),
                (Some("gpt2"), None) => "gpt2 (byte-level BPE)".to_string(),
                (Some("llama"), _) => "llama (SentencePiece BPE with byte fallback)".to_string(),
                (Some("gemma4"), _) => {
                    "gemma4 (BPE over ▁-spaced lines with byte fallback)".to_string()
                }
                (Some(other), _) => format!("{other} (not supported)"),
                (None, _) => "none".to_string(),
            };
            let n = md
                .str_array("tokenizer.ggml.tokens")
                .ok()
                .flatten()
                .map(|t| t.len());
            (
                format!("GGUF v{}", g.version),
                tokenizer,
                n,
                md.contains("tokenizer.chat_template"),
            )
        }
        Source::HuggingFace { dir, .. } => {
            let tok = std::fs::read_to_string(dir.join("tokenizer.json"))
                .ok()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok());
            let kind = tok
                .as_ref()
                .and_then(|t| t["model"]["type"].as_str().map(str::to_string));
            let n = tok.as_ref().and_then(|t| {
                let vocab = t["model"]["vocab"].as_object().map(|v| v.len())?;
                let added = t["added_tokens"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter(|x| x["id"].as_u64().is_some_and(|id| id as usize >= vocab))
                            .count()
                    })
                    .unwrap_or(0);
                Some(vocab + added)
            });
            let template = dir.join("chat_template.jinja").is_file()
                || std::fs::read_to_string(dir.join("tokenizer_config.json"))
                    .ok()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                    .is_some_and(|c| !c["chat_template"].is_null());
            (
                "Hugging Face (safetensors)".to_string(),
                match kind {
                    Some(k) => format!("tokenizer.json ({k})"),
                    None => "none (no tokenizer.json)".to_string(),
                },
                n,
                template,
            )
        }
    };
    Summary {
        name: m.display_name(),
        format,
        parameters: m.parameter_count(),
        file_size: m.file_size,
        tokenizer,
        vocab_tokens,
        chat_template,
    }
}

/// What `--backend auto` would run this model on: the GPU adapter it takes, or the CPU.
fn auto_backend() -> String {
    match crate::backend::wgpu::list_adapters()
        .into_iter()
        .find(|a| a.auto)
    {
        Some(a) => format!(
            "GPU {}: {} ({}) with --backend auto",
            a.index, a.name, a.api
        ),
        None => "CPU with --backend auto (no discrete or integrated GPU; see kiln devices)".into(),
    }
}

/// The placement to report: what `-ngl` asks for, or `-ngl auto`'s fit to KILN_WGPU_MAX_MEMORY;
/// None without placement flags or a cap (everything, on a GPU that holds it).
fn planned(m: &ModelFile, args: &InfoArgs) -> Result<Option<crate::backend::split::Placement>> {
    use super::placement::{KvNeeds, plan};
    let cap = crate::backend::wgpu::GpuOptions::from_env()?.max_memory;
    if !args.placement.asks_for_gpu() && cap.is_none() {
        return Ok(None);
    }
    let kv = KvNeeds {
        ctx: super::context_length(args.ctx_size, m.config.context_length),
        types: args.cache.types(),
    };
    Ok(Some(plan(m, &args.placement, kv, cap).0))
}

pub fn run(args: InfoArgs) -> Result<std::process::ExitCode> {
    let path = args.model.local_path()?;
    let m = match ModelFile::open(&path) {
        Ok(m) => m,
        Err(e) => {
            // A GGUF file whose header reads but which kiln cannot run is described anyway.
            return match crate::gguf::GgufFile::open(&path) {
                Ok(g) if g.metadata.str("general.architecture").ok().flatten() == Some("clip") => {
                    super::vision::describe_mmproj(&path, args.format == OutputFormat::Json)
                }
                Ok(g) => describe_unsupported(&g, &e.to_string(), &args),
                Err(_) => Err(e.into()),
            };
        }
    };
    let s = summarize(&m);
    let mix = m.type_mix();
    let backend = auto_backend();
    let placement = planned(&m, &args)?;
    match args.format {
        OutputFormat::Json => {
            let types: serde_json::Map<String, serde_json::Value> = mix
                .iter()
                .map(|(t, (n, bytes))| {
                    (t.name().to_string(), json!({"tensors": n, "bytes": bytes}))
                })
                .collect();
            let mut out = json!({
                "path": m.path,
                "name": s.name,
                "format": s.format,
                "architecture": m.config.arch.name(),
                "parameters": s.parameters,
                "file_size": s.file_size,
                "tensor_count": m.tensors.len(),
                "tensor_types": types,
                "context_length": m.config.context_length,
                "tokenizer": s.tokenizer,
                "vocab_tokens": s.vocab_tokens,
                "chat_template": s.chat_template,
                "backend": backend,
                "config": m.config,
            });
            if let Some(p) = &placement {
                let (gpu, cpu) = crate::model::placement::bytes_by_side(&m, p);
                out["placement"] = json!({
                    "n_gpu_layers": p.gpu_layers,
                    "n_cpu_moe": p.cpu_moe_layers,
                    "description": p.describe(),
                    "gpu_weight_bytes": gpu,
                    "cpu_weight_bytes": cpu,
                });
            }
            if let Some(schedule) = schedule(&m.config) {
                out["schedule"] = json!(schedule);
                out["recurrent_state_bytes"] = json!(m.config.recurrent_state_bytes());
            }
            if args.metadata
                && let Some(g) = m.gguf()
            {
                out["metadata"] = metadata_json(&g.metadata);
            }
            if args.tensors {
                out["tensors"] = m
                    .tensors
                    .values()
                    .map(|t| json!({"name": t.name, "type": t.dtype.name(), "dims": t.dims}))
                    .collect();
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        OutputFormat::Text => {
            let c = &m.config;
            let types: Vec<String> = mix
                .iter()
                .map(|(t, (n, bytes))| format!("{t} ×{n} ({})", human_bytes(*bytes)))
                .collect();
            println!("model          {}", s.name);
            println!("path           {}", m.path.display());
            println!("format         {}", s.format);
            println!("architecture   {}", c.arch.name());
            println!("parameters     {}", human_count(s.parameters));
            println!("file size      {}", human_bytes(s.file_size));
            println!("tensors        {}: {}", m.tensors.len(), types.join(", "));
            println!("context        {} tokens", c.context_length);
            let vocab = s
                .vocab_tokens
                .map(|n| format!(", {n} tokens"))
                .unwrap_or_default();
            println!("tokenizer      {}{vocab}", s.tokenizer);
            println!("backend        {backend}");
            if let Some(p) = &placement {
                let line = super::placement::describe(&m, p);
                println!(
                    "{:<15}{}",
                    "placement",
                    line.trim_start_matches("placement: ")
                );
            }
            println!(
                "chat template  {}",
                if s.chat_template {
                    "yes"
                } else {
                    "no (kiln uses a built-in one)"
                }
            );
            if let Some((file, projector)) = super::vision::projector_beside(&m.path) {
                println!("images         {file} beside it ({projector}; --image)");
            }
            println!("config");
            println!("  vocab_size          {}", c.vocab_size);
            println!("  hidden_size         {}", c.hidden_size);
            println!("  intermediate_size   {}", c.intermediate_size);
            println!("  layers              {}", c.n_layers);
            println!("  heads / kv heads    {} / {}", c.n_heads, c.n_kv_heads);
            println!("  head_dim            {}", c.head_dim);
            if let Some(l) = c.local_attention {
                println!(
                    "  local layers        {} kv heads of {}, RoPE over {}",
                    l.n_kv_heads, l.head_dim, l.rope_dims
                );
            }
            if let Some(widths) = &c.ffn_widths {
                let list: Vec<String> = widths.iter().map(|w| w.to_string()).collect();
                println!("  ffn width by layer  {}", list.join(", "));
            }
            if c.per_layer_embedding > 0 {
                println!(
                    "  per-layer embd      {} per layer, into every block",
                    c.per_layer_embedding
                );
            }
            if let Some(first) = c.first_shared_kv_layer {
                let sources: Vec<String> = (first..c.n_layers)
                    .map(|l| format!("{l}←{}", c.layer_kv_source(l)))
                    .collect();
                println!("  shared KV caches    {}", sources.join(", "));
            }
            println!("  rms_norm_eps        {:e}", c.rms_norm_eps);
            let local = c
                .rope_theta_local
                .map(|t| format!(" (local layers {t})"))
                .unwrap_or_default();
            println!("  rope_theta          {}{local}", c.rope_theta);
            println!("  rope_layout         {:?}", c.rope_layout);
            if let Some(s) = &c.rope_scaling {
                println!("  rope_scaling        {}", describe_scaling(s));
            }
            match (c.sliding_window, c.sliding_window_pattern) {
                (Some(w), _) if c.swa_layers.is_some() => {
                    let global = layers_where(c, |l| !c.layer_is_local(l));
                    println!(
                        "  sliding_window      {w} (global layers: {})",
                        global.join(", ")
                    )
                }
                (Some(w), Some(p)) => {
                    println!(
                        "  sliding_window      {w} (every {} layer global)",
                        ordinal(p)
                    )
                }
                (Some(w), None) => println!("  sliding_window      {w} (all layers)"),
                _ => {}
            }
            let nope = layers_where(c, |l| !c.layer_has_rope(l));
            if !nope.is_empty() {
                println!("  no RoPE in layers   {}", nope.join(", "));
            }
            if (c.attention_scale - 1.0 / (c.head_dim as f32).sqrt()).abs() > 1e-7 {
                println!("  attention_scale     {}", c.attention_scale);
            }
            match (c.attn_logit_softcap, c.final_logit_softcap) {
                (None, None) => {}
                (a, f) => {
                    let cap = |x: Option<f32>| x.map_or("none".to_string(), |v| v.to_string());
                    println!(
                        "  softcaps            attention {}, logits {}",
                        cap(a),
                        cap(f)
                    );
                }
            }
            // Biases and QK-norm that a family takes in the blocks that have them (GLM,
            // Mistral 3) count where any block has them.
            let any_block = |part: &str| m.tensors().any(|t| t.name.ends_with(part));
            println!(
                "  attention_bias      {}",
                c.attention_bias || any_block(".attn_q.bias") || any_block(".attn_qkv.bias")
            );
            println!(
                "  qk_norm             {}",
                c.qk_norm || any_block(".attn_q_norm.weight")
            );
            println!("  tied_embeddings     {}", c.tie_embeddings);
            match &c.moe {
                // The experts' own activation is printed with them.
                Some(m) if m.activation != crate::backend::GateActivation::Silu => {}
                _ => println!("  activation          {:?}", c.activation),
            }
            print_hybrid(c);
            if args.metadata
                && let Some(g) = m.gguf()
            {
                print_metadata(&g.metadata);
            }
            if args.tensors {
                println!("tensors");
                for t in m.tensors.values() {
                    println!("  {:<40} {:<5} {:?}", t.name, t.dtype.name(), t.dims);
                }
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Describe `g`, which kiln cannot run because of `why`.
fn describe_unsupported(
    g: &GgufFile,
    why: &str,
    args: &InfoArgs,
) -> Result<std::process::ExitCode> {
    let prefix = format!("{}: ", g.path.display());
    let why = why.strip_prefix(&prefix).unwrap_or(why);
    let md = &g.metadata;
    let text = |k: &str| md.str(k).ok().flatten().map(str::to_string);
    let arch = text("general.architecture").unwrap_or_else(|| "(none)".into());
    let name = text("general.name").unwrap_or_else(|| {
        g.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let context = md.u64(&format!("{arch}.context_length")).ok().flatten();
    let tokenizer = text("tokenizer.ggml.model");
    let chat_template = md.contains("tokenizer.chat_template");
    let parameters: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
    let file_size = g.map.len() as u64;
    let mut mix: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &g.tensors {
        let e = mix.entry(t.ggml_type.name()).or_insert((0, 0));
        e.0 += 1;
        e.1 += t.nbytes as u64;
    }
    match args.format {
        OutputFormat::Json => {
            let types: serde_json::Map<String, serde_json::Value> = mix
                .iter()
                .map(|(t, (n, b))| (t.to_string(), json!({"tensors": n, "bytes": b})))
                .collect();
            let mut out = json!({
                "path": g.path,
                "name": name,
                "format": format!("GGUF v{}", g.version),
                "architecture": arch,
                "supported": false,
                "unsupported": why,
                "parameters": parameters,
                "file_size": file_size,
                "tensor_count": g.tensors.len(),
                "tensor_types": types,
                "context_length": context,
                "tokenizer": tokenizer,
                "chat_template": chat_template,
            });
            if args.metadata {
                out["metadata"] = metadata_json(md);
            }
            if args.tensors {
                out["tensors"] = g
                    .tensors
                    .iter()
                    .map(|t| json!({"name": t.name, "type": t.ggml_type.name(), "dims": t.dims}))
                    .collect();
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        OutputFormat::Text => {
            let types: Vec<String> = mix
                .iter()
                .map(|(t, (n, b))| format!("{t} ×{n} ({})", human_bytes(*b)))
                .collect();
            println!("model          {name}");
            println!("path           {}", g.path.display());
            println!("format         GGUF v{}", g.version);
            println!("architecture   {arch}");
            println!("runs in kiln   no: {why}");
            println!("parameters     {}", human_count(parameters));
            println!("file size      {}", human_bytes(file_size));
            println!("tensors        {}: {}", g.tensors.len(), types.join(", "));
            if let Some(n) = context {
                println!("context        {n} tokens");
            }
            println!("tokenizer      {}", tokenizer.as_deref().unwrap_or("none"));
            println!(
                "chat template  {}",
                if chat_template { "yes" } else { "no" }
            );
            if args.metadata {
                print_metadata(md);
            }
            if args.tensors {
                println!("tensors");
                for t in &g.tensors {
                    println!("  {:<40} {:<5} {:?}", t.name, t.ggml_type.name(), t.dims);
                }
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Every metadata key and value, for `--metadata --format json`.
fn metadata_json(md: &crate::gguf::Metadata) -> serde_json::Value {
    md.keys()
        .into_iter()
        .map(|k| (k.to_string(), md.to_json(k)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Every metadata key and value, for `--metadata`.
fn print_metadata(md: &crate::gguf::Metadata) {
    println!("metadata");
    for k in md.keys() {
        println!("  {k} = {}", md.display(k));
    }
}

/// "2nd", "3rd", "6th".
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The indices of the layers for which `f` holds, as text.
fn layers_where(c: &ModelConfig, f: impl Fn(usize) -> bool) -> Vec<String> {
    (0..c.n_layers)
        .filter(|&l| f(l))
        .map(|l| l.to_string())
        .collect()
}

/// The block schedule of a hybrid model: "R" for a recurrent (Gated DeltaNet) block, "A" for
/// full attention.
fn schedule(c: &ModelConfig) -> Option<String> {
    c.delta_net.as_ref()?;
    Some(
        (0..c.n_layers)
            .map(|l| if c.layer_is_recurrent(l) { 'R' } else { 'A' })
            .collect(),
    )
}

/// The extra facts of Qwen3.5 and the MoE models: schedule, DeltaNet shapes, partial RoPE,
/// experts, state size.
fn print_hybrid(c: &ModelConfig) {
    if c.rope_dims != c.head_dim || c.rope_sections.is_some() {
        let sections = c
            .rope_sections
            .map(|s| format!(", IMRoPE sections {s:?}"))
            .unwrap_or_default();
        println!(
            "  rotary dims         {} of {} per head{sections}",
            c.rope_dims, c.head_dim
        );
    }
    if c.deepstack_layers > 0 {
        println!(
            "  deepstack layers    {0} (an image's features join the first {0} layers' outputs)",
            c.deepstack_layers
        );
    }
    if let (Some(d), Some(schedule)) = (&c.delta_net, schedule(c)) {
        let attention = layers_where(c, |l| !c.layer_is_recurrent(l));
        println!(
            "  schedule            {schedule} ({} Gated DeltaNet, {} full attention: blocks {})",
            c.n_layers - attention.len(),
            attention.len(),
            attention.join(", ")
        );
        println!(
            "  gated deltanet      {} key heads, {} value heads of {}, conv kernel {}",
            d.n_k_heads, d.n_v_heads, d.head_dim, d.conv_kernel
        );
        println!(
            "  recurrent state     {} per sequence (and per checkpoint, up to {MAX_CHECKPOINTS})",
            human_bytes(c.recurrent_state_bytes() as u64)
        );
    }
    if let Some(m) = &c.moe {
        let shared = match m.shared_ff {
            Some(w) => format!("shared expert of width {w}"),
            // Gemma 4's experts run beside every block's dense MLP.
            None if c.arch == crate::model::Arch::Gemma4 => {
                format!("beside a dense MLP of width {}", c.intermediate_size)
            }
            None => "no shared expert".to_string(),
        };
        let act = match m.activation {
            crate::backend::GateActivation::SwigluOai => ", clamped SwiGLU",
            _ => "",
        };
        let biases = if m.biases { ", with biases" } else { "" };
        println!(
            "  experts             {} ({} per token) of width {}{act}{biases}; {shared}",
            m.n_expert, m.n_used, m.expert_ff
        );
        println!("  routing             {}", describe_routing(m));
        if m.first_moe_layer > 0 {
            println!(
                "  dense blocks        {} (experts from block {})",
                m.first_moe_layer, m.first_moe_layer
            );
        }
    }
    if c.nextn_layers > 0 {
        let use_ = match c.arch {
            crate::model::Arch::Qwen35
            | crate::model::Arch::Qwen35Moe
            | crate::model::Arch::Glm4Moe => "drafts with --spec-type draft-mtp",
            _ => "not run by kiln",
        };
        println!(
            "  mtp blocks          {} (multi-token prediction; {use_})",
            c.nextn_layers
        );
    }
}

/// The router's scores, choice and weights, in words: "sigmoid, selection bias, renormalized, ×2.5".
fn describe_routing(m: &crate::model::config::MoeConfig) -> String {
    let mut parts = vec![
        match m.gating {
            crate::backend::ExpertGating::Softmax => "softmax",
            crate::backend::ExpertGating::Sigmoid => "sigmoid",
        }
        .to_string(),
    ];
    if m.selection_bias {
        parts.push("selection bias".into());
    }
    if m.normalize {
        parts.push("renormalized".into());
    }
    if m.weights_scale != 1.0 {
        parts.push(format!("×{}", m.weights_scale));
    }
    if m.shared_ff.is_some() && !m.shared_gated {
        parts.push("shared expert ungated".into());
    }
    parts.join(", ")
}

fn describe_scaling(s: &crate::model::config::RopeScaling) -> String {
    use crate::model::config::RopeScaling;
    match s {
        RopeScaling::Linear { factor } => format!("linear ×{factor}"),
        // Gemma 4's proportional RoPE: divisors of 1e30 leave pairs unrotated.
        RopeScaling::PerFrequency { divisors } if divisors.iter().any(|&d| d >= 1e20) => {
            let rotated = divisors.iter().filter(|&&d| d < 1e20).count();
            format!(
                "proportional: {rotated} of {} pairs rotate (global layers)",
                divisors.len()
            )
        }
        RopeScaling::PerFrequency { divisors } => {
            let max = divisors.iter().cloned().fold(1.0f32, f32::max);
            format!(
                "per-frequency (Llama 3), {} divisors up to {max}",
                divisors.len()
            )
        }
        RopeScaling::Yarn {
            factor,
            original_context,
            ..
        } => format!("YaRN ×{factor} from {original_context} tokens"),
        RopeScaling::LongRope {
            original_context,
            magnitude,
            ..
        } => format!(
            "LongRoPE: short factors up to a context of {original_context} tokens, long ones \
             past it; magnitude {magnitude}"
        ),
    }
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

pub fn human_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::ordinal;

    #[test]
    fn ordinals_read_as_english() {
        let got: Vec<String> = [1, 2, 3, 4, 6, 11, 12, 13, 21, 22, 112].map(ordinal).into();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "6th", "11th", "12th", "13th", "21st", "22nd", "112th"
            ]
        );
    }
}
