//! Checks of the kernels that need no GPU: every weight type's kernels and every KV-cache and
//! attention variant parse and validate as wgpu runs them, and the IQ2 sign table the decoders
//! compute is the CPU's.

use super::buffers::MATRIX_TYPES;
use super::device::Coop;
use super::pipelines::{
    ActRounding, BlocksShape, Kernel, MatvecLayout, add_rms_norm_kernel, assemble,
    attention_kernel, attention_packing_kernel, attention_prefill_coop_kernel,
    attention_prefill_kernel, attention_reduce_kernel, attention_reduce_packed_kernel,
    blocks_matvec_reads, blocks_mix, coop_reads, defines, embed_kernel, kv_move_halves_kernel,
    kv_move_kernel, kv_rope_kernel, matmul_coop_kernel, matmul_kernel, matvec_blocks_kernel,
    matvec_kernel, matvec_rope_kv_kernel, quantize_q8k_kernel, rms_norm_kernel, rope_kernel,
    rope_kv_kernel, round_acts_half_kernel, round_acts_kernel, store_kernel, with_attention_shape,
    with_attention_v2, with_gated_packing, with_norm_add,
};
use crate::backend::{CacheType, GateActivation};
use crate::gguf::GgmlType;

/// The mat-vec (staged and direct), prefill (tiled and lavapipe's) and embedding kernels of every
/// weight type are valid WGSL to naga's parser and validator, as wgpu runs them, with subgroup
/// operations and (the GPU kernels) without: a decoder's error shows here without a GPU.
#[test]
fn weight_kernels_validate_for_every_type() {
    for t in MATRIX_TYPES {
        // The kernel, and whether it runs without subgroup operations too (lavapipe's need them).
        let kernels = [
            (matvec_kernel(t, 1, true, MatvecLayout::Staged, None), true),
            (
                matvec_kernel(t, 3, false, MatvecLayout::Direct { rows: 2 }, None),
                false,
            ),
            (matmul_kernel(t, 1, None, true, false), true),
            (matmul_kernel(t, 1, None, false, true), false),
            (embed_kernel(t), true),
        ];
        // The staged mat-vecs rounding x themselves, one weight and two.
        if let Some(r) = ActRounding::of(t) {
            for n in [1, 2] {
                let k = matvec_kernel(t, n, true, MatvecLayout::Staged, Some(r));
                for subgroups in [true, false] {
                    validate(&k, subgroups, &format!("{t} rounding "));
                }
            }
        }
        // The per-type mat-vec: rounding x, not, and (K-quants) taking packed Q8_K blocks; three
        // weights and the gated pair.
        if blocks_matvec_reads(t, 256) {
            let int_dot = matches!(t, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
            for (n, gate) in [(1, None), (3, None), (2, Some(GateActivation::Silu))] {
                let inputs = [(ActRounding::of(t), false), (None, false), (None, true)];
                for (r, idot) in inputs.into_iter().filter(|&(_, i)| int_dot || !i) {
                    let shape = BlocksShape { wg: 128, rows: 2 };
                    let k = matvec_blocks_kernel(t, n, gate, r, idot, shape);
                    for subgroups in [true, false] {
                        validate(&k, subgroups, &format!("{t} per-type "));
                    }
                    // The gated pair packing its output (integer-dot mat-vecs only); one weight
                    // with the norm after it as its epilogue, in workgroups of 64 and of 256, as
                    // each type takes x by default.
                    if gate.is_some() && idot {
                        for subgroups in [true, false] {
                            validate(&with_gated_packing(k.clone()), subgroups, "gated packed ");
                        }
                    }
                    if n == 1 && (idot || !int_dot) {
                        for wg in [64, 256] {
                            let shape = BlocksShape { wg, rows: 2 };
                            let k = with_norm_add(matvec_blocks_kernel(t, 1, None, r, idot, shape));
                            for subgroups in [true, false] {
                                validate(&k, subgroups, "with the norm ");
                            }
                        }
                    }
                }
            }
            // With RoPE and the KV append as the epilogue: one to three projections, every pair
            // of the caches it writes.
            let r = ActRounding::of(t).filter(|_| !int_dot);
            let shape = BlocksShape { wg: 64, rows: 2 };
            for roles in [&[0, 1, 2][..], &[0, 1], &[2]] {
                for caches in [
                    (CacheType::F16, CacheType::F32),
                    (CacheType::F32, CacheType::F16),
                ] {
                    let k = matvec_rope_kv_kernel(t, roles, r, int_dot, shape, caches, None);
                    validate(
                        &k,
                        true,
                        &format!("{t} per-type with RoPE and the KV append "),
                    );
                    // With the value projection (or key and value) of another K-quant family.
                    for other in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
                        if roles.len() == 3 && int_dot && blocks_mix(t, other) {
                            for at in [1, 2] {
                                let k = matvec_rope_kv_kernel(
                                    t,
                                    roles,
                                    None,
                                    true,
                                    shape,
                                    caches,
                                    Some((other, at)),
                                );
                                validate(&k, true, &format!("{t} mixed with {other} "));
                            }
                        }
                    }
                }
            }
        }
        for (k, without) in &kernels {
            for subgroups in [true, false].into_iter().take(1 + *without as usize) {
                validate(k, subgroups, &format!("{t} "));
            }
        }
    }
}

/// The cooperative-matrix GEMM, on the hardware's fragments and emulated, for every weight type
/// it takes, one to three weights and the gated pair, tiles of 64 and 128 activation rows, f32
/// and f16 activations, validates; the hardware variant also
/// compiles to SPIR-V, as wgpu's Vulkan backend compiles it (no adapter in CI has cooperative
/// matrices: this and the emulated build's runs are its checks there).
#[test]
fn cooperative_matmul_validates_and_compiles_to_spirv() {
    for t in MATRIX_TYPES.into_iter().filter(|&t| coop_reads(t)) {
        let shapes = [(1, None), (3, None), (2, Some(GateActivation::GeluTanh))];
        for ((n, gated), rows) in shapes.into_iter().flat_map(|s| [(s, 64), (s, 128)]) {
            for half in [false, true] {
                for coop in [Coop::Hardware { subgroup: 32 }, Coop::Emulated] {
                    let k = matmul_coop_kernel(t, n, gated, n != 3, coop, (rows, half));
                    validate(&k, true, &format!("{t} cooperative {rows} rows "));
                }
                let coop = Coop::Hardware { subgroup: 64 };
                let k = matmul_coop_kernel(t, n, gated, true, coop, (rows, half));
                let ops = fragment_ops(&k, &format!("{t} cooperative"));
                // 128 rows: two more activation fragments a step, four more outputs.
                let want = if rows == 128 { [6, 8, 8] } else { [4, 4, 4] };
                assert_eq!(
                    ops, want,
                    "{t} {rows} rows: fragment loads, stores, multiply-adds"
                );
            }
        }
    }
}

/// The fragments' loads, stores and multiply-adds (OpCooperativeMatrixLoadKHR, -StoreKHR,
/// -MulAddKHR) in the SPIR-V that `k` (a kernel on cooperative matrices) compiles to, as wgpu's
/// Vulkan backend compiles it, after naga's validation.
fn fragment_ops(k: &Kernel, what: &str) -> [usize; 3] {
    use wgpu::naga;
    let src = assemble(k.file, &defines(k, true)).unwrap();
    let module = naga::front::wgsl::parse_str(&src)
        .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&src)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&src)));
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: k.entry.to_string(),
    };
    let words = naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .unwrap_or_else(|e| panic!("{what} to SPIR-V: {e}"));
    let mut ops = [0; 3];
    let mut at = 5;
    while at < words.len() {
        let (len, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        if let Some(i) = (4457..=4459).position(|o| o == op) {
            ops[i] += 1;
        }
        at += len.max(1);
    }
    ops
}

/// The prefill attention on cooperative matrices, on the hardware's fragments (subgroups of 32
/// and 64) and emulated, for heads of 64, 128 and 256 values in groups of 1 to 8, validates; the
/// hardware variant compiles to SPIR-V with the fragment operations the WGSL writes: the scores'
/// query and key loads, multiply-add and store, and the same for P·V.
#[test]
fn cooperative_prefill_attention_validates_and_compiles_to_spirv() {
    for shape in [(64, 1), (128, 4), (256, 8)] {
        for coop in [Coop::Hardware { subgroup: 32 }, Coop::Emulated] {
            validate(&attention_prefill_coop_kernel(coop, shape), true, "");
        }
        let k = attention_prefill_coop_kernel(Coop::Hardware { subgroup: 64 }, shape);
        let ops = fragment_ops(&k, &format!("cooperative attention {shape:?}"));
        assert_eq!(
            ops,
            [4, 2, 2],
            "{shape:?}: fragment loads, stores, multiply-adds"
        );
    }
}

/// Every variant of the KV-cache and attention kernels (and the activation rounding of the
/// matmuls) is valid WGSL, with and without subgroup operations.
#[test]
fn cache_and_attention_kernels_validate() {
    let mut all = Vec::new();
    for k in CacheType::ALL {
        all.push(store_kernel(k));
        all.push(kv_rope_kernel(k));
        for v in CacheType::ALL {
            all.push(attention_kernel(k, v, false));
            all.push(attention_kernel(k, v, true));
            all.push(attention_packing_kernel(k, v, false));
            all.push(attention_packing_kernel(k, v, true));
            // Built for a layer's head size and group: heads of 64-512 values, groups of 1-16.
            for shape in [(64, 4), (96, 3), (128, 8), (256, 1), (512, 16)] {
                all.push(with_attention_shape(attention_kernel(k, v, true), shape));
                all.push(with_attention_shape(
                    attention_packing_kernel(k, v, false),
                    shape,
                ));
            }
            // v2, for f32 and f16 caches, subgroups of 8 (lavapipe) and 32 (NVIDIA), workgroups
            // of 64 and 128.
            if ![k, v].contains(&CacheType::Q8_0) {
                for ((head_dim, group), subgroup, invocations) in [
                    ((64usize, 4usize), 8usize, 64),
                    ((96, 3), 32, 128),
                    ((128, 8), 32, 64),
                ] {
                    let registers = ((head_dim / 2).div_ceil(subgroup), group.min(8));
                    for packing in [false, true] {
                        let kernel = if packing {
                            attention_packing_kernel(k, v, true)
                        } else {
                            attention_kernel(k, v, true)
                        };
                        let shaped = with_attention_shape(kernel, (head_dim, group));
                        all.push(with_attention_v2(shaped, invocations, subgroup, registers));
                    }
                }
            }
            all.push(attention_reduce_kernel());
            all.push(attention_reduce_packed_kernel());
            all.push(attention_prefill_kernel(k, v));
            all.push(rope_kv_kernel(k, v));
        }
    }
    all.extend([
        kv_move_kernel(),
        kv_move_halves_kernel(),
        rope_kernel(),
        round_acts_kernel(),
        round_acts_half_kernel(),
        quantize_q8k_kernel(),
    ]);
    for packed in [false, true] {
        all.extend([
            rms_norm_kernel(false, packed),
            rms_norm_kernel(true, packed),
            add_rms_norm_kernel(packed),
        ]);
    }
    for k in &all {
        for subgroups in [false, true] {
            validate(k, subgroups, "");
        }
    }
}

/// `k` assembled (with or without subgroup operations) passes naga's parser and validator and
/// has its entry point; a failure names the kernel after `what`.
fn validate(k: &Kernel, subgroups: bool, what: &str) {
    use wgpu::naga;
    let what = format!("{what}{} {:?} subgroups {subgroups}", k.entry, k.defines);
    let src = assemble(k.file, &defines(k, subgroups)).unwrap();
    let module = naga::front::wgsl::parse_str(&src)
        .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&src)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&src)));
    assert!(
        module.entry_points.iter().any(|e| e.name == k.entry),
        "{what}: no entry point"
    );
}

/// The WGSL decoders compute the IQ2 sign table (bits 0..6 of i and their parity in bit 7)
/// rather than bind it: that is llama.cpp's ksigns_iq2xs, which the CPU decodes with.
#[test]
fn computed_iq2_signs_are_the_cpu_table() {
    for (i, &s) in crate::gguf::iq::KSIGNS_IQ2XS.iter().enumerate() {
        assert_eq!(s as u32, i as u32 | (i.count_ones() & 1) << 7, "ksigns {i}");
    }
}
