//! Issue #24's oracle on real weights: the real test models written in every ftype by
//! llama-quantize with an importance matrix, and llama.cpp's greedy goldens on each (f16 KV cache),
//! as `scripts/reference/requantized_goldens.py` makes them: `KILN_REQUANTIZED_DIR/<model>/`
//! holds `<FTYPE>.gguf` and `golden-<FTYPE>.json` per ftype. They are 60–400 MB each and need
//! llama.cpp to make, so they are not fixtures: ignored tests read them.
//!
//! The acceptance line is "a model file in every ftype within the golden rule", so per ftype the
//! models are tried in name order until one passes; each report is printed. The ternary ftypes
//! are reported, not judged: on these real models (trained without ternary weights) llama.cpp
//! breaks the rule against its own golden under every other setting tried. On Qwen2.5-0.5B's
//! TQ1_0 (the closest of the three), its AVX2 build misses 3 of 525 checks (worst 1.40) and flips
//! 2 argmaxes of margin ≥ 0.5; with an f32 KV cache, 3 (2.30) and 1; with flash attention, 3
//! (1.26) and 2. kiln misses none and flips 1. On Gemma 3 with an f32 cache it misses 388 of 600.

use std::path::PathBuf;

use super::golden_run::{QUANTIZED, check_model};
use kiln::backend::Backend;
use kiln::model::{Model, ModelFile};

/// Issue #24's ftypes that the golden rule can judge on real weights.
pub const FTYPES: [&str; 12] = [
    "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ3_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
    "IQ1_S", "IQ1_M", "Q2_K_S",
];
/// The ternary ftypes: run and reported.
pub const TERNARY: [&str; 2] = ["TQ1_0", "TQ2_0"];

/// The models' directories, in name order.
fn model_dirs() -> Vec<PathBuf> {
    let root = std::env::var_os("KILN_REQUANTIZED_DIR").map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "set KILN_REQUANTIZED_DIR to a directory with one subdirectory per model, each filled \
             by scripts/reference/requantized_goldens.py"
        )
    });
    let entries = std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let mut dirs: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "{}: no model directories", root.display());
    dirs
}

/// Per ftype, the first model whose file passes the golden README's rule for quantized models
/// on the backend `load` gives; panics listing the ftypes no model passes, or has no file for.
pub fn every_ftype_passes_on<B: Backend>(load: impl Fn(&ModelFile) -> Model<B>, backend: &str) {
    let dirs = model_dirs();
    let mut failed = Vec::new();
    for ftype in FTYPES.iter().chain(&TERNARY) {
        let mut passed = false;
        for dir in &dirs {
            let (file, gold) = (
                dir.join(format!("{ftype}.gguf")),
                dir.join(format!("golden-{ftype}.json")),
            );
            if !(file.is_file() && gold.is_file()) {
                continue;
            }
            let text = std::fs::read_to_string(&gold).unwrap();
            let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
            let entry = golden["models"]
                .as_object()
                .unwrap()
                .values()
                .next()
                .unwrap();
            let model = load(&ModelFile::open(&file).unwrap());
            let report = check_model(&model, entry, &QUANTIZED);
            let what = format!("{} on {backend}", file.display());
            eprintln!("{}", report.summary(&what));
            if report.within_rule() {
                passed = true;
                break;
            }
        }
        if !passed && !TERNARY.contains(ftype) {
            failed.push(ftype);
        }
    }
    assert!(
        failed.is_empty(),
        "{backend}: no model file within the rule (or none there) for {failed:?}"
    );
}
