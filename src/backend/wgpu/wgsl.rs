//! The WGSL kernels, compiled into the binary from `shaders/` (one file per op family), and the
//! small preprocessor that splices them when a pipeline is built: `#include "name"` pastes a
//! shared snippet (once per shader), `#if A || B` / `#else` / `#endif` keep lines by the defines,
//! `{{NAME}}` substitutes a define's value.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// The shader sources, by the name `#include` and `Kernel::file` use.
const SOURCES: [(&str, &str); 26] = [
    ("common", include_str!("../../../shaders/common.wgsl")),
    ("coop", include_str!("../../../shaders/coop.wgsl")),
    ("reduce", include_str!("../../../shaders/reduce.wgsl")),
    ("q8", include_str!("../../../shaders/q8.wgsl")),
    ("pack_q8k", include_str!("../../../shaders/pack_q8k.wgsl")),
    ("trace", include_str!("../../../shaders/trace.wgsl")),
    ("quants", include_str!("../../../shaders/quants.wgsl")),
    ("quants_iq", include_str!("../../../shaders/quants_iq.wgsl")),
    ("matvec", include_str!("../../../shaders/matvec.wgsl")),
    (
        "matvec_rows",
        include_str!("../../../shaders/matvec_rows.wgsl"),
    ),
    (
        "matvec_blocks",
        include_str!("../../../shaders/matvec_blocks.wgsl"),
    ),
    ("matmul", include_str!("../../../shaders/matmul.wgsl")),
    ("norm", include_str!("../../../shaders/norm.wgsl")),
    (
        "elementwise",
        include_str!("../../../shaders/elementwise.wgsl"),
    ),
    ("rope", include_str!("../../../shaders/rope.wgsl")),
    ("embed", include_str!("../../../shaders/embed.wgsl")),
    ("kv", include_str!("../../../shaders/kv.wgsl")),
    ("kv_shift", include_str!("../../../shaders/kv_shift.wgsl")),
    ("attention", include_str!("../../../shaders/attention.wgsl")),
    (
        "attention_coop",
        include_str!("../../../shaders/attention_coop.wgsl"),
    ),
    ("bench", include_str!("../../../shaders/bench.wgsl")),
    ("argmax", include_str!("../../../shaders/argmax.wgsl")),
    ("conv", include_str!("../../../shaders/conv.wgsl")),
    ("delta_net", include_str!("../../../shaders/delta_net.wgsl")),
    ("moe", include_str!("../../../shaders/moe.wgsl")),
    (
        "round_acts",
        include_str!("../../../shaders/round_acts.wgsl"),
    ),
];

fn source(name: &str) -> Result<&'static str> {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::Unsupported(format!("no shader named '{name}'")))
}

/// The WGSL of shader `name` with its includes spliced, conditionals resolved and defines
/// substituted.
pub fn assemble(name: &str, defines: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = String::new();
    let mut included = Vec::new();
    splice(name, defines, &mut included, &mut out)?;
    Ok(out)
}

fn splice<'a>(
    name: &'a str,
    defines: &BTreeMap<&str, String>,
    included: &mut Vec<&'a str>,
    out: &mut String,
) -> Result<()> {
    if included.contains(&name) {
        return Ok(());
    }
    included.push(name);
    let bad = |line: usize, what: &str| {
        Error::Unsupported(format!("shaders/{name}.wgsl:{}: {what}", line + 1))
    };
    // For each open #if: whether its current branch is kept.
    let mut stack: Vec<bool> = Vec::new();
    let active = |stack: &[bool]| stack.iter().all(|&keep| keep);
    for (ln, line) in source(name)?.lines().enumerate() {
        let t = line.trim();
        if let Some(cond) = t.strip_prefix("#if ") {
            let names: Vec<&str> = cond.split("||").map(str::trim).collect();
            if names
                .iter()
                .any(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            {
                return Err(bad(ln, "#if takes define names joined by ||"));
            }
            let value = names.iter().any(|n| defines.contains_key(n));
            stack.push(value);
        } else if t == "#else" {
            let top = stack
                .last_mut()
                .ok_or_else(|| bad(ln, "#else without #if"))?;
            *top = !*top;
        } else if t == "#endif" {
            stack.pop().ok_or_else(|| bad(ln, "#endif without #if"))?;
        } else if !active(&stack) {
            continue;
        } else if let Some(inc) = t.strip_prefix("#include ") {
            let inc = inc.trim().trim_matches('"');
            let inc = SOURCES
                .iter()
                .find(|(n, _)| *n == inc)
                .map(|(n, _)| *n)
                .ok_or_else(|| bad(ln, &format!("no snippet '{inc}'")))?;
            splice(inc, defines, included, out)?;
        } else if t.starts_with("//") {
            // Comments are not spliced (they may name the syntax) and not needed by the compiler.
            continue;
        } else {
            let mut rest = line;
            while let Some(start) = rest.find("{{") {
                let end = rest[start..]
                    .find("}}")
                    .ok_or_else(|| bad(ln, "unclosed {{"))?;
                let key = &rest[start + 2..start + end];
                let value = defines
                    .get(key)
                    .ok_or_else(|| bad(ln, &format!("{{{{{key}}}}} is not defined")))?;
                out.push_str(&rest[..start]);
                out.push_str(value);
                rest = &rest[start + end + 2..];
            }
            out.push_str(rest);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err(bad(0, "#if without #endif"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wgpu::pipelines::{
        BlocksShape, MatvecLayout, matvec_blocks_kernel, matvec_kernel,
    };
    use crate::gguf::GgmlType;

    #[test]
    fn every_shader_assembles_for_every_variant() {
        let mut d = BTreeMap::new();
        // D: the head width the DeltaNet kernel is built for.
        for (k, v) in [
            ("WG", "64"),
            ("SG_ARGS", ""),
            ("SG_LOCALS", ""),
            ("D", "16"),
            ("TRACE_BINDING", "9"),
            ("HEAD_DIM", "p.head_dim"),
            ("GROUP", "p.group"),
        ] {
            d.insert(k, v.to_string());
        }
        // The mat-vec's sizes, without its type flag.
        let matvec = matvec_kernel(GgmlType::F32, 1, false, MatvecLayout::Staged, None);
        d.extend(matvec.defines.into_iter().filter(|(k, _)| *k != "F32"));
        let shape = BlocksShape { wg: 64, rows: 2 };
        let blocks = matvec_blocks_kernel(GgmlType::Q4_K, 1, None, None, false, shape);
        d.extend(
            blocks
                .defines
                .into_iter()
                .filter(|(k, _)| ["RUN_BYTES", "PART_WORDS", "DEC0"].contains(k)),
        );
        for (name, _) in SOURCES {
            let text = assemble(name, &d).unwrap();
            assert!(!text.contains("#if") && !text.contains("{{"), "{name}");
        }
        d.insert("Q4_K", "1".into());
        let q = assemble("matvec", &d).unwrap();
        assert!(q.contains("fn scale_min_k4") && q.contains("fn dq4"));
        assert_eq!(q.matches("fn flat_wg").count(), 1, "common is spliced once");
        d.remove("Q4_K");
        d.insert("Q8_0", "1".into());
        assert!(!assemble("matvec", &d).unwrap().contains("fn scale_min_k4"));
    }
}
