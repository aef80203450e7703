//! Every block type llama.cpp's quantizer writes beyond the legacy and K-quants, in a forward pass
//! against llama.cpp: tests/fixtures/models/llama-mixed-quants.gguf holds one Llama layer per type
//! (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0, IQ4_NL, IQ4_XS, MXFP4,
//! Q1_0; the embedding and tied output Q4_0), written by llama-quantize from random weights that
//! move the logits in every layer (tests/fixtures/make_mixed_quants.py), with llama.cpp's
//! teacher-forced goldens at an f32 KV cache, judged by `RANDOM_QUANTIZED` (golden_run.rs: what
//! float-order noise does to this model against what a wrong kernel does). Weights repacked for
//! the GEMM kernels and as the file holds them.

use crate::common;

use common::golden_run::{RANDOM_QUANTIZED, check_model_with};
use kiln::backend::CacheType;
use kiln::backend::cpu::CpuBackend;
use kiln::model::arch::KvCacheTypes;
use kiln::model::{Model, ModelFile};

pub const FILE: &str = "llama-mixed-quants.gguf";

#[test]
fn every_quant_type_matches_llama_cpp() {
    let golden = common::golden("llama-cpp-mixed-quants.json");
    let mf = ModelFile::open(&common::fixture(&format!("models/{FILE}"))).unwrap();
    let cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    for repack in [true, false] {
        let backend = CpuBackend::new(2).unwrap().with_repacking(repack);
        let model = Model::load(&mf, backend).unwrap();
        let what = format!("{FILE} (repacked: {repack})");
        let report = check_model_with(&model, &golden["models"][FILE], &RANDOM_QUANTIZED, cache);
        eprintln!("{}", report.summary(&what));
        report.assert_all(&what);
        assert_eq!(report.steps, 80, "{what}: every golden step checked");
    }
}

/// Issue #24's ftypes on real weights: a file of each within the golden README's rule for
/// quantized models (common/requantized.rs). The files are made locally, so this runs on request.
#[test]
#[ignore = "needs KILN_REQUANTIZED_DIR, filled by scripts/reference/requantized_goldens.py"]
fn requantized_real_models_match_llama_cpp() {
    common::requantized::every_ftype_passes_on(
        |mf| Model::load(mf, CpuBackend::new(2).unwrap()).unwrap(),
        "the CPU",
    );
}
