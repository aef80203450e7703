// coop.wgsl — what the kernels on cooperative matrices (matmul.wgsl `main_coop`, attention_coop.wgsl)
// share, included first: the extensions they enable (`COOP`: the hardware's fragments; `COOP_EMU`:
// their emulation in plain WGSL, for adapters without them), and for the emulated builds a 16 × 16
// f32 fragment as the 32 invocations standing for a subgroup hold it and its store into the
// includer's `stage` (f32, row stride `SS`).
#if COOP || COOP_EMU
enable f16;
#endif
#if COOP
enable wgpu_cooperative_matrix;
#endif
#if COOP_EMU
// Invocation l of the 32 holds elements (2t + l / 16, l % 16), t < 8.
alias Frag = array<f32, 8>;

// coopStoreT of the fragment to stage[at..] (row-major, stride SS).
fn frag_store(c: Frag, at: u32, l: u32) {
    for (var t = 0u; t < 8u; t++) {
        stage[at + (2u * t + l / 16u) * SS + l % 16u] = c[t];
    }
}
#endif
