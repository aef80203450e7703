//! Per-op parity of the GPU backend with the CPU backend on random inputs, at llama.cpp's
//! test-backend-ops thresholds: NMSE = Σ(cpu − gpu)² / Σ cpu² ≤ 5e-4 for attention, ≤ 1e-6 for
//! the rest, and matmuls at 1e-7 (the GPU rounds their activations as the CPU does). Every weight type, odd sizes (rows not a multiple of a workgroup's),
//! split weights and a 262144-row output; the reductions with and without subgroup operations.
//! Skips without a GPU adapter unless KILN_REQUIRE_GPU=1.

use crate::common;

use common::gpu::{gpu, gpu_kernel_variants, gpu_matmul_variants, gpu_with};
use common::random_weights::{Rng, random_weight};
use kiln::backend::cpu::{CpuBackend, CpuCache};
use kiln::backend::wgpu::{CoopChoice, GpuOptions, WgpuBackend};
use kiln::backend::{
    AttentionParams, Backend, CacheType, CoreOps, DeltaNetParams, ExpertGating, ExpertMatmulParams,
    GateActivation, KvAppend, MoeOps, MoeRouteParams, Profile, RecurrentOps, RopeLayout,
};
use kiln::gguf::GgmlType;
use kiln::tensor::Tensor;

const ATTENTION_NMSE: f64 = 5e-4;
/// Matmuls are held far tighter than test-backend-ops holds them: the GPU rounds each matmul's
/// activations as the CPU does (Q8_0 or Q8_K blocks, f16, bf16), so only the order of float sums
/// remains (NMSE ~1e-13), and for Q4_1/Q5_1 the CPU's f16-rounded activation sums (~1e-8).
/// Without the rounding, 8-bit activations alone put it near 1e-5.
const MATMUL_NMSE: f64 = 1e-7;
const OTHER_NMSE: f64 = 1e-6;

/// The weight types the GPU reads.
const TYPES: [GgmlType; 26] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::Q1_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

fn nmse(want: &[f32], got: &[f32]) -> f64 {
    assert_eq!(want.len(), got.len());
    let num: f64 = want
        .iter()
        .zip(got)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|&a| (a as f64).powi(2)).sum();
    num / den.max(1e-30)
}

fn check(what: &str, want: &[f32], got: &[f32], limit: f64) {
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what}: non-finite GPU output"
    );
    let e = nmse(want, got);
    assert!(e <= limit, "{what}: NMSE {e:e} > {limit:e}");
}

fn upload<B: Backend>(b: &B, values: &[f32]) -> B::Buffer {
    let mut buf = b.buffer(values.len()).unwrap();
    b.upload(&mut buf, values);
    buf
}

fn download<B: Backend>(b: &B, buf: &B::Buffer, len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    b.download(buf, 0, &mut out);
    if let Some(e) = b.take_error() {
        panic!("{}: {e}", b.describe());
    }
    out
}

fn matmul<B: Backend>(b: &B, w: &Tensor, x: &[f32], n: usize) -> Vec<f32> {
    let wt = b.weight(w).unwrap();
    let m = w.n_rows();
    let xb = upload(b, x);
    let mut out = b.buffer(n * m).unwrap();
    b.matmul(&xb, &wt, n, &mut out);
    download(b, &out, n * m)
}

fn cpu() -> CpuBackend {
    CpuBackend::new(2).unwrap()
}

/// Every type as mat-vec and tiled, with the kernels of the adapter and (on a software one) of
/// hardware GPUs; mat-vec rows longer than a staged span (5000 values) too.
#[test]
fn matmul_every_type_matches_the_cpu() {
    let c = cpu();
    for g in gpu_matmul_variants() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        // 67 rows: not a multiple of any workgroup's; 1 row runs as mat-vec, 5 and 37 as tiles.
        for t in TYPES {
            for (k, ns) in [(256, &[1, 5, 37][..]), (5120, &[1][..])] {
                let w = random_weight(t, 67, k, &mut rng);
                for &n in ns {
                    let x = rng.vec(n * k, 1.0);
                    let what = format!("matmul {t} {n}×{k} · (67×{k})ᵀ on {}", g.describe());
                    check(
                        &what,
                        &matmul(&c, &w, &x, n),
                        &matmul(&g, &w, &x, n),
                        MATMUL_NMSE,
                    );
                }
            }
        }
    }
}

fn matmul_many<B: Backend>(b: &B, ws: &[Tensor], x: &[f32], n: usize) -> Vec<Vec<f32>> {
    let wts: Vec<B::Weight> = ws.iter().map(|w| b.weight(w).unwrap()).collect();
    let refs: Vec<&B::Weight> = wts.iter().collect();
    let xb = upload(b, x);
    let mut outs: Vec<B::Buffer> = ws
        .iter()
        .map(|w| b.buffer(n * w.n_rows()).unwrap())
        .collect();
    let mut out_refs: Vec<&mut B::Buffer> = outs.iter_mut().collect();
    b.matmul_many(&xb, &refs, n, &mut out_refs);
    outs.iter()
        .zip(ws)
        .map(|(o, w)| download(b, o, n * w.n_rows()))
        .collect()
}

#[test]
fn matmul_many_matches_the_cpu() {
    use GgmlType::{Q4_K, Q6_K, Q8_0};
    let c = cpu();
    // One type; V of another (Q4_K_M's Q6_K: Q and K fused); K of another (Q and V fused).
    let mixes = [[Q8_0; 3], [Q4_K; 3], [Q4_K, Q4_K, Q6_K], [Q8_0, Q4_K, Q8_0]];
    for (g, types) in gpu_matmul_variants()
        .iter()
        .flat_map(|g| mixes.map(|m| (g, m)))
    {
        let mut rng = Rng(17);
        // Q, K, V shapes (one dispatch at decode), and gate/up.
        let qkv = [
            random_weight(types[0], 40, 256, &mut rng),
            random_weight(types[1], 24, 256, &mut rng),
            random_weight(types[2], 24, 256, &mut rng),
        ];
        for (ws, n) in [(&qkv[..], 1), (&qkv[..], 3), (&qkv[..2], 2), (&qkv[..], 20)] {
            let x = rng.vec(n * 256, 1.0);
            let (want, got) = (matmul_many(&c, ws, &x, n), matmul_many(g, ws, &x, n));
            for (i, (w, o)) in want.iter().zip(&got).enumerate() {
                check(
                    &format!("matmul_many {types:?} n={n} output {i}"),
                    w,
                    o,
                    MATMUL_NMSE,
                );
            }
        }
    }
}

/// `matmul_gated` of `n` rows: act(x · Gᵀ) · (x · Uᵀ).
fn matmul_gated<B: Backend>(
    b: &B,
    (gate, up): (&Tensor, &Tensor),
    x: &[f32],
    n: usize,
    act: GateActivation,
) -> Vec<f32> {
    let (g, u) = (b.weight(gate).unwrap(), b.weight(up).unwrap());
    let width = gate.n_rows();
    let xb = upload(b, x);
    let (mut go, mut uo) = (b.buffer(n * width).unwrap(), b.buffer(n * width).unwrap());
    b.matmul_gated(&xb, &g, &u, n, width, act, &mut go, &mut uo);
    download(b, &go, n * width)
}

/// The feed-forward's gate and up mat-vecs with the gated activation as their epilogue (one
/// dispatch at decode) give what the CPU's separate ops give, for both activations, with and
/// without subgroups; and for several rows (separate ops on the GPU too).
#[test]
fn gated_matmul_matches_the_cpu() {
    let no_subgroups = GpuOptions {
        no_subgroups: true,
        ..GpuOptions::default()
    };
    let Some(g_wg) = gpu_with(no_subgroups) else {
        return;
    };
    let c = cpu();
    let mut rng = Rng(19);
    let variants = gpu_matmul_variants();
    let mut cases: Vec<(GgmlType, &WgpuBackend)> = Vec::new();
    for g in &variants {
        cases.extend([GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K].map(|t| (t, g)));
    }
    cases.push((GgmlType::Q4_K, &g_wg));
    for (t, g) in cases {
        let (gate, up) = (
            random_weight(t, 72, 512, &mut rng),
            random_weight(t, 72, 512, &mut rng),
        );
        for act in [
            GateActivation::Silu,
            GateActivation::GeluTanh,
            GateActivation::SwigluOai,
        ] {
            for n in [1, 3] {
                let x = rng.vec(n * 512, 1.0);
                check(
                    &format!("matmul_gated {t} {act:?} n={n}"),
                    &matmul_gated(&c, (&gate, &up), &x, n, act),
                    &matmul_gated(g, (&gate, &up), &x, n, act),
                    MATMUL_NMSE,
                );
            }
        }
    }
}

/// The cooperative-matrix GEMM rounds each weight and activation to f16 (a relative error up to
/// 2⁻¹¹ each, ~2⁻¹¹/√3 on average) before it sums their products in f32: on random values an
/// NMSE near 2 · (2⁻¹¹)² / 3 ≈ 1.6e-7. Measured on lavapipe (emulated): 3e-8 where the weights
/// are exact in f16 (ternary, MXFP4) and 6e-8-1.1e-7 for the others; 2e-14 for F16 weights,
/// whose activations the CPU rounds to f16 too. llama.cpp's f16 coopmat tiles round the same;
/// its test-backend-ops holds matmuls to 5e-4. A wrong fragment or tile index gives ~1.
const COOP_NMSE: f64 = 1e-6;

/// The prefill GEMM on cooperative matrices (`KILN_WGPU_COOP`), in its emulated build, which
/// runs every line of it but the fragment operations on any adapter with f16 shaders (lavapipe
/// in CI; on the hardware's fragments with `KILN_WGPU_COOP=1`, as `scripts/gpu-device/run.sh`
/// runs it), against the CPU, with tiles of 64 and of 128 activation rows: every weight type it
/// takes, rows that fill no tile (67 weight rows; 9, 37 and 70 activation rows, or 9, 70 and 130
/// for the tiles of 128, whose rows come out in two halves), rows of 2304 values, rows whose
/// width is no multiple of 4 (whose activations come as f32, the others' as f16), two and three
/// weights in one dispatch, and the gated pair; and it is the kernel that ran.
#[test]
fn cooperative_matmul_matches_the_cpu() {
    let hardware = std::env::var_os("KILN_WGPU_COOP").is_some_and(|v| v == "1");
    for tile_rows in [64, 128] {
        let Some(g) = gpu_with(GpuOptions {
            coop: if hardware {
                CoopChoice::On
            } else {
                CoopChoice::Emulate
            },
            coop_rows: Some(tile_rows),
            ..GpuOptions::default()
        }) else {
            return;
        };
        cooperative_matmul_case(&g, tile_rows);
    }
}

fn cooperative_matmul_case(g: &WgpuBackend, tile_rows: u32) {
    let c = cpu();
    let mut rng = Rng(23);
    g.set_profiling(true);
    use GgmlType::{Q4_0, Q4_K, Q6_K, Q8_0};
    // Every type with tiles of 64 rows; the decoders are the same with 128, which change only
    // how activation rows are tiled, so three types there (an emulated run is slow).
    let coop_types: Vec<GgmlType> = match tile_rows {
        128 => vec![Q4_0, Q4_K, Q8_0],
        _ => TYPES
            .into_iter()
            .filter(|t| !matches!(t, GgmlType::F32 | GgmlType::BF16))
            .collect(),
    };
    let ns = if tile_rows == 128 {
        [9, 70, 130]
    } else {
        [9, 37, 70]
    };
    let long_rows = [(2304, Q4_K, 9), (2304, Q6_K, ns[2])];
    for (k, t, n) in coop_types
        .iter()
        .flat_map(|&t| ns.map(|n| (256, t, n)))
        .chain(long_rows)
    {
        let w = random_weight(t, 67, k, &mut rng);
        let x = rng.vec(n * k, 1.0);
        let what = format!("cooperative matmul ({tile_rows}) {t} {n}×{k} · (67×{k})ᵀ");
        check(
            &what,
            &matmul(&c, &w, &x, n),
            &matmul(g, &w, &x, n),
            COOP_NMSE,
        );
    }
    let w = random_weight(GgmlType::F16, 67, 250, &mut rng);
    let x = rng.vec(37 * 250, 1.0);
    let (want, got) = (matmul(&c, &w, &x, 37), matmul(g, &w, &x, 37));
    check(
        &format!("cooperative matmul ({tile_rows}) F16 37×250"),
        &want,
        &got,
        COOP_NMSE,
    );
    for types in [[Q8_0; 3], [Q4_K, Q4_K, Q6_K]] {
        let ws = [
            random_weight(types[0], 40, 256, &mut rng),
            random_weight(types[1], 24, 256, &mut rng),
            random_weight(types[2], 24, 256, &mut rng),
        ];
        let x = rng.vec(ns[2] * 256, 1.0);
        let (want, got) = (
            matmul_many(&c, &ws, &x, ns[2]),
            matmul_many(g, &ws, &x, ns[2]),
        );
        for (i, (w, o)) in want.iter().zip(&got).enumerate() {
            let what = format!("cooperative ({tile_rows}) {types:?} output {i}");
            check(&what, w, o, COOP_NMSE);
        }
    }
    let (gate, up) = (
        random_weight(Q4_K, 72, 512, &mut rng),
        random_weight(Q4_K, 72, 512, &mut rng),
    );
    for act in [GateActivation::Silu, GateActivation::GeluTanh] {
        for n in [9, ns[2]] {
            let x = rng.vec(n * 512, 1.0);
            check(
                &format!("cooperative ({tile_rows}) gated {act:?} n={n}"),
                &matmul_gated(&c, (&gate, &up), &x, n, act),
                &matmul_gated(g, (&gate, &up), &x, n, act),
                COOP_NMSE,
            );
        }
    }
    let p = g.profile().unwrap();
    let calls = |name: &str| dispatches(&p, name);
    // The types × 3 and 2 long rows, F16, one dispatch for the Q8_0 triple and two for the
    // Q4_K_M one, 4 gated.
    let want = coop_types.len() * 3 + 2 + 1 + 3 + 4;
    assert_eq!(calls("matmul_coop") as usize, want, "{:?}", p.ops);
    assert_eq!(calls("matmul"), 0, "{:?}", p.ops);
    // Each took its activations rounded to f16 by the pass before it, but the F16 rows of 250
    // values (no multiple of 4), which take them as f32.
    assert_eq!(calls("round_acts_half") as usize, want - 1, "{:?}", p.ops);
    assert_eq!(calls("round_acts"), 1, "{:?}", p.ops);
    let wide = g.describe().contains("in tiles of 128 rows");
    assert_eq!(wide, tile_rows == 128, "{}", g.describe());
}

/// The prefill attention on cooperative matrices (`KILN_WGPU_COOP`, f16 caches), emulated as
/// the GEMM is above (on the hardware's fragments with `KILN_WGPU_COOP=1`), against the CPU:
/// heads of 64, 128 and 256 values in groups of 1 to 16, several blocks of 16 query rows and
/// partial ones, tiles of 64 keys (the last partial), windows starting inside a tile, a soft cap,
/// sinks, a call that sees itself whole; it is the kernel that ran for each of them, and heads of
/// 96 and f32 caches keep the tiled SIMT kernel. Its f16 probabilities move the NMSE by about
/// (2⁻¹¹)² / 3 against the CPU's f32 ones; the test-backend-ops threshold holds.
#[test]
fn cooperative_prefill_attention_matches_the_cpu() {
    use CacheType::{F16, F32};
    let hardware = std::env::var_os("KILN_WGPU_COOP").is_some_and(|v| v == "1");
    let Some(g) = gpu_with(GpuOptions {
        coop: if hardware {
            CoopChoice::On
        } else {
            CoopChoice::Emulate
        },
        ..GpuOptions::default()
    }) else {
        return;
    };
    let case = attn_case;
    let coop_cases = vec![
        case((F16, F16), (4, 2), 0, 9, 64, None),
        case((F16, F16), (4, 2), 40, 70, 256, None),
        case((F16, F16), (8, 2), 100, 50, 128, Some(70)),
        case((F16, F16), (16, 1), 0, 33, 64, None),
        case((F16, F16), (3, 3), 130, 17, 128, Some(3)),
        AttnCase {
            softcap: Some(0.75),
            ..case((F16, F16), (4, 2), 40, 70, 64, Some(16))
        },
        AttnCase {
            sinks: true,
            ..case((F16, F16), (8, 2), 40, 70, 64, Some(16))
        },
        AttnCase {
            causal: false,
            ..case((F16, F16), (4, 2), 10, 40, 64, None)
        },
    ];
    let simt_cases = vec![
        case((F16, F16), (4, 2), 2, 20, 96, None),
        case((F32, F16), (4, 2), 0, 9, 64, None),
    ];
    g.set_profiling(true);
    compare_attention(&g, &coop_cases);
    compare_attention(&g, &simt_cases);
    let p = g.profile().unwrap();
    let coop = dispatches(&p, "attention_prefill_coop");
    assert_eq!(coop as usize, coop_cases.len(), "{:?}", p.ops);
    let simt = dispatches(&p, "attention_prefill");
    assert_eq!(simt as usize, simt_cases.len(), "{:?}", p.ops);
    assert!(
        g.describe().contains("prefill and attention"),
        "{}",
        g.describe()
    );
}

/// The dispatches of kernel `name` a profile counted.
fn dispatches(p: &Profile, name: &str) -> u64 {
    p.ops
        .iter()
        .filter(|o| o.name == name)
        .map(|o| o.calls)
        .sum()
}

fn embed<B: Backend>(b: &B, table: &Tensor, ids: &[u32], scale: f32) -> Vec<f32> {
    let w = b.weight(table).unwrap();
    let len = ids.len() * table.row_len();
    let mut out = b.buffer(len).unwrap();
    b.embed(&w, ids, scale, &mut out);
    download(b, &out, len)
}

#[test]
fn embedding_lookup_every_type_matches_the_cpu() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    let mut rng = Rng(5);
    let ids = [0, 39, 17, 17, 3];
    for t in TYPES {
        let table = random_weight(t, 40, 256, &mut rng);
        for scale in [1.0, 2.5] {
            let what = format!("embed {t} ×{scale}");
            check(
                &what,
                &embed(&c, &table, &ids, scale),
                &embed(&g, &table, &ids, scale),
                OTHER_NMSE,
            );
        }
    }
}

/// The grid i-quants' decoders give the CPU's values bit for bit (an embedding lookup at scale 1
/// is the decoder alone): the WGSL computes their scale products in the reference's order.
#[test]
fn grid_iquants_decode_bit_exactly() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    let mut rng = Rng(6);
    let ids: Vec<u32> = (0..16).collect();
    use GgmlType::{IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS};
    for t in [IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M] {
        let table = random_weight(t, 16, 512, &mut rng);
        let (want, got) = (embed(&c, &table, &ids, 1.0), embed(&g, &table, &ids, 1.0));
        if let Some(i) = (0..want.len()).find(|&i| want[i].to_bits() != got[i].to_bits()) {
            panic!("{t} value {i}: CPU {} GPU {}", want[i], got[i]);
        }
    }
}

/// A 262144-row output (Gemma 3's vocabulary: more workgroups than one grid dimension holds),
/// with the weight split into parts by a lowered binding limit, at decode and prefill sizes;
/// and an embedding lookup that reads rows from several parts.
#[test]
fn split_weights_and_a_262144_row_output_match_the_cpu() {
    let c = cpu();
    let mut rng = Rng(99);
    let w = random_weight(GgmlType::Q8_0, 262144, 32, &mut rng);
    assert!(
        w.bytes().len() > 2 * (3 << 20),
        "the weight must split in 3+"
    );
    for hardware_kernels in [false, true] {
        let options = GpuOptions {
            max_binding: Some(3 << 20),
            hardware_kernels,
            ..GpuOptions::default()
        };
        let Some(g) = gpu_with(options) else { return };
        for n in [1, 9] {
            let x = rng.vec(n * 32, 1.0);
            let what = format!(
                "matmul Q8_0 {n}×32 · (262144×32)ᵀ in parts on {}",
                g.describe()
            );
            check(
                &what,
                &matmul(&c, &w, &x, n),
                &matmul(&g, &w, &x, n),
                MATMUL_NMSE,
            );
        }
        let ids = [0, 262143, 100000, 200000, 5];
        check(
            "embed from parts",
            &embed(&c, &w, &ids, 1.0),
            &embed(&g, &w, &ids, 1.0),
            OTHER_NMSE,
        );
    }
}

/// RMSNorm (alone, into a buffer, after a residual add), RoPE (both layouts), residual and bias
/// adds, gated activations and row copies.
fn elementwise_ops<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, Vec<f32>)> {
    let mut results = Vec::new();
    // RMSNorm: 7 rows of 80 (not a multiple of the workgroup).
    let x = rng.vec(7 * 80, 3.0);
    let w = Tensor::from_f32("norm", vec![80], &rng.vec(80, 1.0));
    let wt = b.weight(&w).unwrap();
    let mut xb = upload(b, &x);
    b.rms_norm(&mut xb, &wt, 7, 1e-6);
    results.push(("rms_norm".into(), download(b, &xb, x.len())));
    let src = upload(b, &x);
    let mut out = b.buffer(x.len()).unwrap();
    b.rms_norm_into(&src, &wt, 7, 80, 1e-6, &mut out);
    results.push(("rms_norm_into".into(), download(b, &out, x.len())));
    // A residual add and the next norm: the sum stays in the residual stream.
    let mut stream = upload(b, &x);
    let block = upload(b, &rng.vec(x.len(), 3.0));
    b.add_rms_norm_into(&mut stream, &block, &wt, 7, 80, 1e-6, &mut out);
    results.push(("add_rms_norm_into".into(), download(b, &out, x.len())));
    results.push((
        "add_rms_norm_into: stream".into(),
        download(b, &stream, x.len()),
    ));

    // RoPE: 3 rows × 4 heads of 16, both pairings.
    let table: Vec<f32> = (0..3 * 8)
        .flat_map(|i| {
            let a = i as f32 * 0.37;
            [a.cos(), a.sin()]
        })
        .collect();
    let tb = upload(b, &table);
    for layout in [RopeLayout::Interleaved, RopeLayout::Neox] {
        let x = rng.vec(3 * 4 * 16, 1.0);
        let mut xb = upload(b, &x);
        b.rope_partial(&mut xb, &tb, 3, 4, 16, 16, layout);
        results.push((format!("rope {layout:?}"), download(b, &xb, x.len())));
    }

    let n = 1000;
    let (a, y) = (rng.vec(n, 12.0), rng.vec(n, 2.0));
    let yb = upload(b, &y);
    let mut ab = upload(b, &a);
    b.add(&mut ab, &yb, n);
    results.push(("add".into(), download(b, &ab, n)));

    let bias = Tensor::from_f32("bias", vec![40], &rng.vec(40, 1.0));
    let bt = b.weight(&bias).unwrap();
    let mut ab = upload(b, &a);
    b.add_bias(&mut ab, &bt, 25);
    results.push(("add_bias".into(), download(b, &ab, n)));

    for act in [GateActivation::Silu, GateActivation::GeluTanh] {
        let mut ab = upload(b, &a);
        b.gated_activation(&mut ab, &yb, n, act);
        results.push((format!("{act:?}"), download(b, &ab, n)));
    }
    // gpt-oss's clamped SwiGLU, with gate and up both well past its clamp of ±7.
    let wide_up = upload(b, &rng.vec(n, 12.0));
    let mut ab = upload(b, &a);
    b.gated_activation(&mut ab, &wide_up, n, GateActivation::SwigluOai);
    results.push(("SwigluOai".into(), download(b, &ab, n)));

    // Each of 25 rows of 40 times its own factor (Mistral 3's query temperature).
    let factors = upload(b, &rng.vec(25, 2.0));
    let mut ab = upload(b, &a);
    b.scale_rows(&mut ab, &factors, 25, 40);
    results.push(("scale_rows".into(), download(b, &ab, n)));

    let src = upload(b, &a);
    let mut dst = upload(b, &rng.vec(6 * 40, 1.0));
    b.copy_rows(&src, 5, &mut dst, 0, 3, 40);
    b.copy_rows(&src, 9, &mut dst, 4, 2, 40);
    results.push(("copy_rows".into(), download(b, &dst, 6 * 40)));
    results
}

fn compare_elementwise(g: &WgpuBackend) {
    let want = elementwise_ops(&cpu(), &mut Rng(3));
    let got = elementwise_ops(g, &mut Rng(3));
    for ((what, w), (_, o)) in want.iter().zip(&got) {
        check(what, w, o, OTHER_NMSE);
    }
}

struct AttnCase {
    k: CacheType,
    v: CacheType,
    start_pos: usize,
    rows: usize,
    head_dim: usize,
    window: Option<usize>,
    /// Query heads and KV heads.
    heads: (usize, usize),
    /// Soft cap of the scores (Gemma 2).
    softcap: Option<f32>,
    /// A sink logit per query head (gpt-oss).
    sinks: bool,
    /// False: every row sees the whole call (an image span Gemma 3 attends to both ways).
    causal: bool,
}

/// A causal case over caches of types `k` and `v` with `heads` (query, KV), no soft cap or sinks.
fn attn_case(
    (k, v): (CacheType, CacheType),
    heads: (usize, usize),
    start_pos: usize,
    rows: usize,
    head_dim: usize,
    window: Option<usize>,
) -> AttnCase {
    AttnCase {
        k,
        v,
        start_pos,
        rows,
        head_dim,
        window,
        heads,
        softcap: None,
        sinks: false,
        causal: true,
    }
}

/// Key and value caches of `len` values, stored in the rotations models use for heads of
/// `head_dim` (none for f32 and f16).
fn caches<B: Backend>(
    b: &B,
    len: usize,
    (k, v): (CacheType, CacheType),
    head_dim: usize,
) -> (B::Cache, B::Cache) {
    (
        b.cache(len, k, k.key_rotation(head_dim)).unwrap(),
        b.cache(len, v, v.value_rotation(head_dim)).unwrap(),
    )
}

/// Fill K and V caches with random rows for positions 0..start_pos + rows, then attend.
fn attention<B: Backend>(b: &B, c: &AttnCase, rng: &mut Rng) -> Vec<f32> {
    let (n_heads, n_kv) = c.heads;
    let kv_width = n_kv * c.head_dim;
    let ctx = c.start_pos + c.rows + 3;
    let (mut kc, mut vc) = caches(b, ctx * kv_width, (c.k, c.v), c.head_dim);
    let total = c.start_pos + c.rows;
    let k = upload(b, &rng.vec(total * kv_width, 1.0));
    let v = upload(b, &rng.vec(total * kv_width, 1.0));
    b.store_rows(&k, &mut kc, 0, total, kv_width);
    b.store_rows(&v, &mut vc, 0, total, kv_width);
    let q_len = c.rows * n_heads * c.head_dim;
    let q = upload(b, &rng.vec(q_len, 1.0));
    let mut out = b.buffer(q_len).unwrap();
    let p = AttentionParams {
        start_pos: c.start_pos,
        rows: c.rows,
        n_heads,
        n_kv_heads: n_kv,
        head_dim: c.head_dim,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
        window: c.window,
        softcap: c.softcap,
        causal: c.causal,
    };
    // Sinks of std ~1.7 against scores of std ~1: some heads' sinks outweigh every key.
    let sinks = c.sinks.then(|| {
        let values = rng.vec(n_heads, 3.0);
        b.weight(&Tensor::from_f32("sinks", vec![n_heads], &values))
            .unwrap()
    });
    b.attention(&q, &kc, &vc, &mut out, &p, sinks.as_ref());
    download(b, &out, q_len)
}

/// Decode attention at position 19 over caches of 40 positions shared by two layouts of query
/// heads (4 and 8 over the same 2 KV heads of 64 values), the caches readied at load for the
/// second (`prepare_attention`): the outputs, in order.
fn attention_two_shapes<B: Backend>(b: &B) -> Vec<Vec<f32>> {
    let mut rng = Rng(77);
    let (kv_width, positions) = (2 * 64, 20);
    let (mut kc, mut vc) = caches(b, 40 * kv_width, (CacheType::F16, CacheType::F16), 64);
    let k = upload(b, &rng.vec(positions * kv_width, 1.0));
    let v = upload(b, &rng.vec(positions * kv_width, 1.0));
    b.store_rows(&k, &mut kc, 0, positions, kv_width);
    b.store_rows(&v, &mut vc, 0, positions, kv_width);
    b.prepare_attention(&kc, &vc, 64, 8, 2);
    let mut outs = Vec::new();
    for n_heads in [4, 8] {
        let q = upload(b, &rng.vec(n_heads * 64, 1.0));
        let mut out = b.buffer(n_heads * 64).unwrap();
        let p = AttentionParams {
            start_pos: positions - 1,
            rows: 1,
            n_heads,
            n_kv_heads: 2,
            head_dim: 64,
            scale: 0.125,
            window: None,
            softcap: None,
            causal: true,
        };
        b.attention(&q, &kc, &vc, &mut out, &p, None);
        outs.push(download(b, &out, n_heads * 64));
    }
    outs
}

/// The decode attention built for a layer's head size and group at load serves its shape, and a
/// cache that another shape reads too (its pipeline looked up rather than the cache's); a store or an attention
/// call whose positions overrun its caches, which the trusted kernels would write or read past,
/// is an error that says so.
#[test]
fn attention_serves_a_second_shape_and_checks_its_sizes() {
    // Fused, the decode kernel that also combines its splits and packs its output; unfused, the
    // plain one.
    let hardware = |unfused| GpuOptions {
        hardware_kernels: true,
        unfused,
        ..GpuOptions::default()
    };
    let Some(g) = gpu_with(hardware(false)) else {
        return;
    };
    let want = attention_two_shapes(&cpu());
    for b in [&g, &gpu_with(hardware(true)).unwrap()] {
        let got = attention_two_shapes(b);
        for (i, (w, o)) in want.iter().zip(&got).enumerate() {
            check(&format!("attention shape {i}"), w, o, ATTENTION_NMSE);
        }
    }
    let (mut kc, vc) = caches(&g, 8 * 64, (CacheType::F32, CacheType::F32), 64);
    let q = upload(&g, &[0.5; 64]);
    g.store_rows(&q, &mut kc, 8, 1, 64);
    let e = g.take_error().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("values 512..576 of a cache of 512"), "{e}");
    let mut out = g.buffer(64).unwrap();
    let p = AttentionParams {
        start_pos: 8,
        rows: 1,
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 64,
        scale: 0.125,
        window: None,
        softcap: None,
        causal: true,
    };
    g.attention(&q, &kc, &vc, &mut out, &p, None);
    let e = g.take_error().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("caches 512 and 512; it needs 64 and 576"), "{e}");
}

fn compare_attention(g: &WgpuBackend, cases: &[AttnCase]) {
    compare_attention_within(g, cases, ATTENTION_NMSE);
}

fn compare_attention_within(g: &WgpuBackend, cases: &[AttnCase], limit: f64) {
    let c = cpu();
    for (i, case) in cases.iter().enumerate() {
        let seed = 1000 + i as u64;
        let what = format!(
            "attention k {} v {} pos {} rows {} head_dim {} window {:?} heads {:?} softcap {:?} \
             sinks {} causal {}",
            case.k,
            case.v,
            case.start_pos,
            case.rows,
            case.head_dim,
            case.window,
            case.heads,
            case.softcap,
            case.sinks,
            case.causal
        );
        check(
            &what,
            &attention(&c, case, &mut Rng(seed)),
            &attention(g, case, &mut Rng(seed)),
            limit,
        );
    }
}

fn attention_cases() -> Vec<AttnCase> {
    use CacheType::{F16, F32};
    let case = |k, v, start_pos, rows, head_dim, window| {
        attn_case((k, v), (4, 2), start_pos, rows, head_dim, window)
    };
    vec![
        // Prefill (tiled over keys), every cache-type pair.
        case(F32, F32, 0, 9, 64, None),
        case(F16, F16, 0, 9, 64, None),
        case(F32, F16, 2, 5, 8, None),
        case(F16, F32, 2, 5, 8, None),
        // Decode: the key range split over workgroups and reduced.
        case(F16, F16, 300, 1, 64, None),
        case(F32, F32, 200, 1, 256, None),
        // Sliding windows, decode and prefill.
        case(F16, F16, 300, 1, 64, Some(100)),
        case(F16, F16, 70, 6, 64, Some(3)),
        // The tiled prefill over several blocks of 16 query rows and tiles of 64 keys (the last
        // of each partial), wide heads, and a window that starts inside a tile.
        case(F16, F16, 40, 70, 256, None),
        case(F32, F16, 100, 50, 128, Some(70)),
    ]
}

/// The q8_0 cache, alone and beside f16 and f32: keys rotated in runs of 64, 128 and 256 (the
/// largest power of two dividing the head), values in runs of 64, none for heads of 32 or 96;
/// decode split and reduced, the tiled prefill, windows.
fn q8_0_attention_cases() -> Vec<AttnCase> {
    use CacheType::{F16, F32, Q8_0};
    let case = |k, v, start_pos, rows, head_dim, window| {
        attn_case((k, v), (4, 2), start_pos, rows, head_dim, window)
    };
    vec![
        case(Q8_0, Q8_0, 300, 1, 64, None),
        case(Q8_0, Q8_0, 200, 1, 256, None),
        case(Q8_0, Q8_0, 130, 1, 128, Some(100)),
        case(Q8_0, F16, 90, 1, 64, None),
        case(F16, Q8_0, 90, 1, 64, None),
        case(Q8_0, F32, 5, 1, 32, None),
        case(F32, Q8_0, 5, 1, 96, None),
        case(Q8_0, Q8_0, 0, 9, 64, None),
        case(Q8_0, Q8_0, 40, 70, 256, None),
        case(Q8_0, F16, 100, 50, 128, Some(70)),
        case(F16, Q8_0, 2, 20, 96, None),
        case(Q8_0, Q8_0, 70, 6, 32, Some(3)),
    ]
}

/// The GQA-folded kernel (a workgroup per KV head for up to 8 of its query heads): one query head
/// per KV head, 3:1 (SmolLM2), 7:1 (Qwen2.5), 8:1 and the 12:1 and 16:1 groups that take two
/// workgroups; decode over long contexts (up to 16 splits, the last tile of each partial) and
/// windows; prefill rows where the tiled kernel does not apply (heads not a multiple of 32).
fn gqa_attention_cases() -> Vec<AttnCase> {
    use CacheType::{F16, F32, Q8_0};
    let case = attn_case;
    vec![
        case((F32, F32), (1, 1), 50, 1, 64, None),
        case((F16, F16), (4, 4), 300, 1, 128, None),
        case((F16, F16), (9, 3), 260, 1, 64, None),
        case((F16, F32), (8, 1), 700, 1, 64, Some(500)),
        case((Q8_0, Q8_0), (14, 2), 1000, 1, 64, None),
        case((F16, F16), (16, 1), 2100, 1, 64, None),
        case((Q8_0, F16), (12, 4), 129, 1, 256, None),
        case((F16, Q8_0), (24, 2), 400, 1, 96, None),
        case((F32, F32), (16, 2), 3, 5, 48, None),
        case((F16, F32), (6, 2), 9, 7, 24, Some(4)),
        // Heads of 512 (Gemma 4's global layers): 4 query heads per workgroup, 8 dimensions per
        // invocation; decode split and reduced, prefill through this kernel (the tiled one
        // stops at 256), windowed, q8_0 caches (keys rotated in two runs of 256); and heads of
        // 320 against a q8_0 value cache.
        case((F16, F16), (16, 2), 300, 1, 512, None),
        case((F32, F32), (8, 1), 40, 6, 512, None),
        case((F16, F32), (6, 2), 200, 1, 512, Some(150)),
        case((Q8_0, Q8_0), (8, 2), 150, 1, 512, None),
        case((Q8_0, Q8_0), (4, 1), 30, 4, 512, Some(20)),
        case((F16, Q8_0), (5, 1), 20, 3, 320, None),
    ]
}

/// Soft-capped scores (Gemma 2: `cap · tanh(s / cap)` before the softmax), with a cap small
/// enough to bite on these scores (std ~1): the tiled prefill (with a window), the GQA-folded
/// kernel's prefill rows, decode split and reduced, and a q8_0 cache.
fn softcap_attention_cases() -> Vec<AttnCase> {
    use CacheType::{F16, F32, Q8_0};
    let case = |kv, heads, start_pos, rows, head_dim, window| AttnCase {
        softcap: Some(0.75),
        ..attn_case(kv, heads, start_pos, rows, head_dim, window)
    };
    vec![
        case((F32, F32), (4, 2), 40, 70, 64, Some(16)),
        case((F16, F16), (4, 2), 0, 9, 32, None),
        case((F32, F32), (4, 2), 3, 5, 48, Some(4)),
        case((F32, F32), (4, 2), 300, 1, 64, None),
        case((F16, F32), (8, 2), 700, 1, 64, Some(500)),
        case((Q8_0, Q8_0), (4, 2), 200, 1, 128, None),
    ]
}

/// Sinks (gpt-oss: a logit per query head in the softmax's denominator): the tiled prefill, the
/// GQA-folded kernel's prefill rows, decode in one split and split and reduced, with windows and a
/// q8_0 cache.
fn sink_attention_cases() -> Vec<AttnCase> {
    use CacheType::{F16, F32, Q8_0};
    let case = |kv, heads, start_pos, rows, head_dim, window| AttnCase {
        sinks: true,
        ..attn_case(kv, heads, start_pos, rows, head_dim, window)
    };
    vec![
        case((F32, F32), (8, 2), 40, 70, 64, Some(16)),
        case((F16, F16), (4, 2), 0, 9, 32, None),
        case((F32, F32), (8, 2), 3, 5, 48, Some(4)),
        case((F32, F32), (8, 2), 5, 1, 64, None),
        case((F32, F32), (4, 2), 300, 1, 64, None),
        case((F16, F32), (8, 2), 700, 1, 64, Some(128)),
        case((Q8_0, Q8_0), (8, 2), 200, 1, 64, None),
    ]
}

/// A context shift on random caches (`total` rows; drop `keep..keep + discard`, move the rest
/// down, re-rotate their keys back by `discard` positions), then one decode step of attention over
/// what is left: it reads every moved key and value.
fn shifted_attention<B: Backend>(
    b: &B,
    ty: CacheType,
    layout: RopeLayout,
    (head_dim, rot_dims): (usize, usize),
    rng: &mut Rng,
) -> Vec<f32> {
    let (n_heads, n_kv) = (4, 2);
    let (total, keep, discard) = (300, 5, 147);
    let moved = total - keep - discard;
    let kv_width = n_kv * head_dim;
    let (mut kc, mut vc) = caches(b, total * kv_width, (ty, ty), head_dim);
    b.store_rows(
        &upload(b, &rng.vec(total * kv_width, 1.0)),
        &mut kc,
        0,
        total,
        kv_width,
    );
    b.store_rows(
        &upload(b, &rng.vec(total * kv_width, 1.0)),
        &mut vc,
        0,
        total,
        kv_width,
    );
    let table: Vec<f32> = (0..rot_dims / 2)
        .flat_map(|i| {
            let angle = -(discard as f32) * 10000f32.powf(-2.0 * i as f32 / rot_dims as f32);
            [angle.cos(), angle.sin()]
        })
        .collect();
    b.move_cache_rows(&mut kc, keep + discard, keep, moved, kv_width);
    b.move_cache_rows(&mut vc, keep + discard, keep, moved, kv_width);
    b.rope_cache(
        &mut kc,
        &upload(b, &table),
        keep,
        moved,
        n_kv,
        head_dim,
        rot_dims,
        layout,
    );
    let q_len = n_heads * head_dim;
    let q = upload(b, &rng.vec(q_len, 2.0));
    let mut out = b.buffer(q_len).unwrap();
    let p = AttentionParams {
        start_pos: keep + moved - 1,
        rows: 1,
        n_heads,
        n_kv_heads: n_kv,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window: None,
        softcap: None,
        causal: true,
    };
    b.attention(&q, &kc, &vc, &mut out, &p, None);
    download(b, &out, q_len)
}

/// A step's fused RoPE and KV append (`rope_store_kv`) into caches that already hold three rows,
/// then attention over them: the rotated queries, and the attention output.
fn rope_store_attention<B: Backend>(
    b: &B,
    (k_ty, v_ty, layout, head_dim, rot_dims): (CacheType, CacheType, RopeLayout, usize, usize),
    rng: &mut Rng,
) -> (Vec<f32>, Vec<f32>) {
    let (n_heads, n_kv, start, rows) = (4, 2, 3, 5);
    let kv_width = n_kv * head_dim;
    let (mut kc, mut vc) = caches(b, 16 * kv_width, (k_ty, v_ty), head_dim);
    for cache in [&mut kc, &mut vc] {
        let earlier = upload(b, &rng.vec(start * kv_width, 1.0));
        b.store_rows(&earlier, cache, 0, start, kv_width);
    }
    let table: Vec<f32> = (0..rows)
        .flat_map(|r| {
            (0..rot_dims / 2).flat_map(move |i| {
                let angle = (start + r) as f32 * 10000f32.powf(-2.0 * i as f32 / rot_dims as f32);
                [angle.cos(), angle.sin()]
            })
        })
        .collect();
    // A NoPE layer (rot_dims 0) still binds a table, which it does not read.
    let table = if table.is_empty() {
        vec![1.0, 0.0]
    } else {
        table
    };
    let q_len = rows * n_heads * head_dim;
    // Large queries make the softmax sharp, so a wrongly rotated key moves the output far.
    let mut q = upload(b, &rng.vec(q_len, 8.0));
    let mut k = upload(b, &rng.vec(rows * kv_width, 1.0));
    let v = upload(b, &rng.vec(rows * kv_width, 1.0));
    let p = KvAppend {
        rows,
        n_heads,
        n_kv_heads: n_kv,
        head_dim,
        rot_dims,
        layout,
        dst_row: start,
    };
    b.rope_store_kv(&mut q, &mut k, &v, &upload(b, &table), &mut kc, &mut vc, &p);
    let mut out = b.buffer(q_len).unwrap();
    let params = AttentionParams {
        start_pos: start,
        rows,
        n_heads,
        n_kv_heads: n_kv,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window: None,
        softcap: None,
        causal: true,
    };
    b.attention(&q, &kc, &vc, &mut out, &params, None);
    (download(b, &q, q_len), download(b, &out, q_len))
}

/// The fused RoPE and KV append leaves the queries and caches as the CPU's separate ops do, for
/// f32, f16 and q8_0 caches (mixed too), both pair layouts, full and partial rotation.
#[test]
fn rope_and_kv_append_match_the_cpu() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    let types = [
        (CacheType::F32, CacheType::F32),
        (CacheType::F16, CacheType::F16),
        (CacheType::F16, CacheType::F32),
        (CacheType::Q8_0, CacheType::Q8_0),
        (CacheType::Q8_0, CacheType::F16),
        (CacheType::F32, CacheType::Q8_0),
    ];
    for (k_ty, v_ty) in types {
        for layout in [RopeLayout::Neox, RopeLayout::Interleaved] {
            // Full, partial (Qwen3.5) and no rotation (SmolLM3's NoPE layers).
            for (head_dim, rot_dims) in [(64, 64), (32, 8), (64, 0)] {
                let what = format!(
                    "RoPE + KV append, {k_ty}/{v_ty} caches, {layout:?}, {rot_dims} of {head_dim} rotated"
                );
                let seed = 91 + rot_dims as u64;
                let shape = (k_ty, v_ty, layout, head_dim, rot_dims);
                let (want_q, want) = rope_store_attention(&c, shape, &mut Rng(seed));
                let (got_q, got) = rope_store_attention(&g, shape, &mut Rng(seed));
                check(&format!("{what}: queries"), &want_q, &got_q, OTHER_NMSE);
                check(&format!("{what}: attention"), &want, &got, ATTENTION_NMSE);
            }
        }
    }
}

/// The context-shift ops (`move_cache_rows`, `rope_cache`) on the GPU leave the caches as the
/// CPU's do (the CPU's are checked against keys rotated afresh in tests/context_shift.rs); a q8_0
/// cache's keys are expanded, rotated back from the Hadamard rotation, RoPE'd and stored again.
#[test]
fn context_shift_ops_match_the_cpu() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    for ty in [CacheType::F32, CacheType::F16, CacheType::Q8_0] {
        for layout in [RopeLayout::Neox, RopeLayout::Interleaved] {
            // (head size, rotated dims): whole heads, and partial RoPE (GLM-4.5, Phi-4-mini).
            let dims: &[(usize, usize)] = if ty == CacheType::Q8_0 {
                &[(64, 64), (128, 128), (96, 96), (128, 96)]
            } else {
                &[(64, 64), (8, 8), (64, 40)]
            };
            for &(head_dim, rot) in dims {
                let what = format!(
                    "shifted attention, {ty} cache, {layout:?}, heads of {head_dim} rotated over {rot}"
                );
                let seed = 77 + head_dim as u64;
                check(
                    &what,
                    &shifted_attention(&c, ty, layout, (head_dim, rot), &mut Rng(seed)),
                    &shifted_attention(&g, ty, layout, (head_dim, rot), &mut Rng(seed)),
                    ATTENTION_NMSE,
                );
            }
        }
    }
}

/// The bytes of a cache in GGML's layout, on either backend.
fn cpu_cache_bytes(c: &CpuCache) -> Vec<u8> {
    match c {
        CpuCache::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuCache::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuCache::Q8_0 { blocks, .. } => blocks.clone(),
    }
}

/// Rows that exercise a Q8_0 block's rounding: ties (with amax 127 the quants are the values, so
/// x.5 rounds to even), a scale halfway between two f16 values (amax/127 = 1 + 2⁻¹¹: to even,
/// 1.0), an all-zero block, a scale in f16's subnormals (71 units of 2⁻²⁴) and one past its range (infinity).
fn q8_0_rounding_rows(width: usize) -> Vec<f32> {
    let ties = [
        127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5, 126.5, -126.5,
    ];
    let mut blocks: Vec<Vec<f32>> = Vec::new();
    blocks.push(
        (0..32)
            .map(|i| ties.get(i).copied().unwrap_or(i as f32 - 16.5))
            .collect(),
    );
    blocks.push(
        (0..32)
            .map(|i| if i == 5 { -127.06201 } else { i as f32 })
            .collect(),
    );
    blocks.push(vec![0.0; 32]);
    blocks.push((0..32).map(|i| (i as f32 - 13.0) * 3e-5).collect());
    blocks.push((0..32).map(|i| (i as f32 - 3.0) * 4e5).collect());
    blocks.push(
        (0..32)
            .map(|i| if i % 2 == 0 { 1e-3 } else { -1e-3 })
            .collect(),
    );
    let mut rows: Vec<f32> = blocks.concat();
    rows.resize(rows.len().next_multiple_of(width), 0.25);
    rows
}

/// A q8_0 cache on the GPU holds exactly the CPU's blocks: each run of `rotation` values
/// Hadamard-rotated, then quantized as llama.cpp's quantize_row_q8_0 (round half to even, the
/// scale f16(amax / 127) rounded to nearest even). Stores over rows that start and end inside a
/// 256-value span and a scale word (rows of 96 values: 3 blocks), rotations 1 to 256, crafted
/// rounding cases; then context-shift moves, which copy blocks exactly (halves of scale words
/// included).
#[test]
fn q8_0_cache_holds_the_cpus_blocks() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    for (width, rotation) in [
        (96, 1),
        (32, 1),
        (128, 64),
        (128, 128),
        (512, 256),
        (64, 64),
    ] {
        let rows = 23;
        let len = rows * width;
        let mut rng = Rng(5 + width as u64 + rotation as u64);
        let mut kc = c.cache(len, CacheType::Q8_0, rotation).unwrap();
        let mut kg = g.cache(len, CacheType::Q8_0, rotation).unwrap();
        let crafted = q8_0_rounding_rows(width);
        let stores = [
            (0, rng.vec(3 * width, 1.0)),
            (3, rng.vec(5 * width, 4.0)),
            (8, crafted.clone()),
            (8 + crafted.len() / width, rng.vec(width, 0.01)),
        ];
        for (row, x) in &stores {
            let n = x.len() / width;
            c.store_rows(&upload(&c, x), &mut kc, *row, n, width);
            g.store_rows(&upload(&g, x), &mut kg, *row, n, width);
        }
        let what = format!("q8_0 store, rows of {width}, rotation {rotation}");
        let want = cpu_cache_bytes(&kc);
        let got = g.cache_bytes(&kg).unwrap();
        assert_eq!(want.len(), got.len(), "{what}");
        if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
            panic!(
                "{what}: byte {i} (block {}, byte {}) is {} on the GPU, {} on the CPU",
                i / 34,
                i % 34,
                got[i],
                want[i]
            );
        }
        // Moves down (a context shift) and up, overlapping.
        for (src, dst, n) in [(9, 2, 12), (1, 4, 9)] {
            c.move_cache_rows(&mut kc, src, dst, n, width);
            g.move_cache_rows(&mut kg, src, dst, n, width);
            assert_eq!(
                cpu_cache_bytes(&kc),
                g.cache_bytes(&kg).unwrap(),
                "{what}: rows {src}.. moved to {dst}.."
            );
        }
    }
}

/// A q8_0 cache needs whole blocks, and rotations the kernels take; bad ones are errors.
#[test]
fn bad_q8_0_caches_are_refused_on_the_gpu() {
    let Some(g) = gpu() else { return };
    for (len, rotation) in [(100, 1), (64 * 32, 48), (64 * 32, 512), (96, 64)] {
        let e = g.cache(len, CacheType::Q8_0, rotation).err();
        assert!(
            e.is_some(),
            "a q8_0 cache of {len} in rotations of {rotation}"
        );
    }
}

#[test]
fn norms_rope_and_elementwise_ops_match_the_cpu() {
    let Some(g) = gpu() else { return };
    compare_elementwise(&g);
}

#[test]
fn attention_matches_the_cpu() {
    // Software and GPU kernel choices alike (a GPU splits decode keys 16 at a time), and the
    // decode kernel reading its head size and group from its parameters
    // (`KILN_WGPU_ATTN_CONST=0`) instead of built for them.
    let parameters = gpu_with(GpuOptions {
        attention_parameters: true,
        hardware_kernels: true,
        ..GpuOptions::default()
    });
    for g in gpu_kernel_variants().into_iter().chain(parameters) {
        compare_attention(&g, &attention_cases());
        compare_attention(&g, &gqa_attention_cases());
    }
}

/// The decode attention v2 (`KILN_WGPU_ATTN_V2=1`: each subgroup walks keys of its own and writes
/// its part as a split) on every attention case, fused reduce and separate, with a GPU's split
/// sizes and a software adapter's, in workgroups of 64 and (fused) of 128; where the adapter has
/// one subgroup size of at most 32 (lavapipe's 8, NVIDIA's 32), the f32 and f16 caches' decode
/// rows must take it.
#[test]
fn attention_v2_matches_the_cpu() {
    let v2 = |hardware_kernels, separate_reduce, invocations| GpuOptions {
        attention_v2: true,
        attention_v2_invocations: Some(invocations),
        hardware_kernels,
        separate_reduce,
        ..GpuOptions::default()
    };
    let Some(g) = gpu_with(v2(true, false, 64)) else {
        return;
    };
    let others = [
        v2(true, true, 64),
        v2(false, false, 64),
        v2(true, false, 128),
    ]
    .map(|o| gpu_with(o).unwrap());
    for (i, g) in std::iter::once(g).chain(others).enumerate() {
        g.set_profiling(true);
        compare_attention(&g, &attention_cases());
        compare_attention(&g, &gqa_attention_cases());
        compare_attention(&g, &softcap_attention_cases());
        compare_attention(&g, &sink_attention_cases());
        let p = g.profile().unwrap();
        let v2_calls = dispatches(&p, "attention_v2") + dispatches(&p, "attention_v2_packed");
        let described = g.describe();
        let single = ["8", "16", "32"]
            .iter()
            .any(|s| described.contains(&format!("subgroups {s}-{s}")));
        assert!(!single || v2_calls > 0, "{described}: {:?}", p.ops);
        // The first and the last (a GPU's kernels, fused) also combine and pack their splits in
        // v2's workgroups where the output feeds an integer-dot mat-vec (rows of 256 values).
        let packed = dispatches(&p, "attention_v2_packed");
        let fused = i == 0 || i == 3;
        assert!(!single || !fused || packed > 0, "{described}: {:?}", p.ops);
    }
}

#[test]
fn softcapped_attention_matches_the_cpu() {
    let Some(g) = gpu() else { return };
    compare_attention(&g, &softcap_attention_cases());
}

#[test]
fn attention_with_sinks_matches_the_cpu() {
    for g in gpu_kernel_variants() {
        compare_attention(&g, &sink_attention_cases());
    }
}

/// Non-causal calls (an image span Gemma 3 sees whole): the tiled prefill kernel over several
/// blocks of rows, the GQA-folded kernel (heads not a multiple of 32), q8_0 caches, a window.
#[test]
fn non_causal_attention_matches_the_cpu() {
    use CacheType::{F16, F32, Q8_0};
    let case = |kv, heads, start_pos, rows, head_dim, window| AttnCase {
        causal: false,
        ..attn_case(kv, heads, start_pos, rows, head_dim, window)
    };
    let cases = [
        case((F16, F16), (4, 2), 40, 70, 64, None),
        case((F32, F32), (4, 2), 0, 9, 64, None),
        case((Q8_0, Q8_0), (4, 2), 3, 20, 64, None),
        case((F32, F16), (4, 2), 100, 50, 128, Some(70)),
        case((F32, F32), (16, 2), 3, 5, 48, None),
        case((F16, F32), (6, 2), 9, 7, 24, Some(4)),
    ];
    for g in gpu_kernel_variants() {
        compare_attention(&g, &cases);
    }
}

#[test]
fn q8_0_attention_matches_the_cpu() {
    // Software and GPU kernel choices alike (a GPU splits decode keys 16 at a time).
    for g in gpu_kernel_variants() {
        compare_attention(&g, &q8_0_attention_cases());
    }
}

/// Far inside the limit above: the GPU's q8_0 attention takes the CPU's arithmetic (the query
/// rotated and quantized to 8 bits, integer block dot products, the values expanded and the
/// output rotated back), so where no f16 rounding enters (the GPU does not round probabilities
/// to f16 for an f16 value cache) the two agree to float rounding, about 1e-13 on lavapipe. An
/// unquantized query, say, is 1e-5 away: within 5e-4, but not here.
#[test]
fn q8_0_attention_takes_the_cpus_arithmetic() {
    let Some(g) = gpu() else { return };
    let cases: Vec<AttnCase> = q8_0_attention_cases()
        .into_iter()
        .filter(|c| c.k != CacheType::F16 && c.v != CacheType::F16)
        .collect();
    compare_attention_within(&g, &cases, 1e-9);
}

/// The workgroup-memory reductions, which adapters without subgroup operations run.
#[test]
fn reductions_without_subgroups_match_the_cpu() {
    let options = GpuOptions {
        no_subgroups: true,
        ..GpuOptions::default()
    };
    let Some(g) = gpu_with(options) else { return };
    compare_elementwise(&g);
    compare_attention(&g, &attention_cases()[4..7]);
    compare_attention(&g, &q8_0_attention_cases()[..4]);
    compare_attention(&g, &gqa_attention_cases());
    let mut rng = Rng(11);
    let w = random_weight(GgmlType::Q6_K, 67, 512, &mut rng);
    for n in [1, 2] {
        let x = rng.vec(n * 512, 1.0);
        check(
            &format!("matmul Q6_K {n}×512 without subgroups"),
            &matmul(&cpu(), &w, &x, n),
            &matmul(&g, &w, &x, n),
            MATMUL_NMSE,
        );
    }
}

/// Greedy decoding's argmax on the device: the first of equal maxima, as the host's.
#[test]
fn argmax_on_the_device_matches_the_host() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(8);
    for n in [1, 255, 262144] {
        let mut x = rng.vec(n, 30.0);
        if n > 300 {
            x[1000] = 99.0;
            x[70000] = 99.0;
        }
        let want = x
            .iter()
            .enumerate()
            .fold(0, |b, (i, &v)| if v > x[b] { i } else { b });
        let buf = upload(&g, &x);
        assert_eq!(g.argmax(&buf, n), Some(want as u32), "n = {n}");
    }
}

/// A verify pass's argmax on the device, a row at a time: each row's first of equal maxima, as
/// the host's; a row with no largest value (all -inf) leaves the choice to the host.
#[test]
fn argmax_of_each_row_on_the_device_matches_the_host() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(9);
    for (n, rows) in [(1, 3), (255, 5), (151936, 9)] {
        let mut x = rng.vec(n * rows, 30.0);
        for r in 0..rows {
            // Ties in some rows, at places that differ from row to row.
            if n > 300 && r % 2 == 0 {
                x[r * n + 100 * r + 7] = 99.0;
                x[r * n + 70000 - r] = 99.0;
            }
        }
        let want: Vec<u32> = x.chunks_exact(n).map(first_largest).collect();
        let buf = upload(&g, &x);
        assert_eq!(
            g.argmax_rows(&buf, n, rows).as_ref(),
            Some(&want),
            "n = {n}, rows = {rows}"
        );
        // The first row alone, as decoding asks.
        assert_eq!(g.argmax(&buf, n), Some(want[0]), "n = {n}");
    }
    let mut x = rng.vec(2 * 300, 1.0);
    x[300..].fill(f32::NEG_INFINITY);
    assert_eq!(g.argmax_rows(&upload(&g, &x), 300, 2), None);
}

/// The index of the first of `row`'s largest values.
fn first_largest(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .fold(0, |b, (i, &v)| if v > row[b] { i } else { b }) as u32
}

// ---- Hybrid recurrent and mixture-of-experts ops (Qwen3.5) ----

/// One result of an op: its name, its values and the NMSE it is held to.
type Outcome = (String, Vec<f32>, f64);

pub(crate) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Partial RoPE, the sigmoid gates, the convolution step carried across calls, the DeltaNet
/// recurrence (prefill then decode, from zero and from a random state, heads narrower and wider
/// than a workgroup), routing (with exact ties) and the weighted sum of experts.
fn recurrent_and_moe_ops<B: Backend>(b: &B, rng: &mut Rng) -> Vec<Outcome> {
    let mut results: Vec<Outcome> = Vec::new();
    let mut push = |what: String, v: Vec<f32>| results.push((what, v, OTHER_NMSE));

    // Partial RoPE: 3 rows × 4 heads of 32, rotating 8 (Qwen3.5's tiny files) or all 32.
    for rot in [8, 32] {
        let table: Vec<f32> = (0..3 * rot / 2)
            .flat_map(|i| {
                let a = i as f32 * 0.41;
                [a.cos(), a.sin()]
            })
            .collect();
        let tb = upload(b, &table);
        for layout in [RopeLayout::Neox, RopeLayout::Interleaved] {
            let x = rng.vec(3 * 4 * 32, 1.0);
            let mut xb = upload(b, &x);
            b.rope_partial(&mut xb, &tb, 3, 4, 32, rot, layout);
            push(
                format!("rope_partial {rot}/32 {layout:?}"),
                download(b, &xb, x.len()),
            );
        }
    }

    // Sigmoid gates: elementwise, one per row, one per 16 values.
    for gate_width in [48, 1, 3] {
        let (rows, width) = (5, 48);
        let x = rng.vec(rows * width, 2.0);
        let gate = upload(b, &rng.vec(rows * gate_width, 4.0));
        let mut xb = upload(b, &x);
        b.mul_sigmoid(&mut xb, &gate, rows, width, gate_width);
        push(
            format!("mul_sigmoid gate width {gate_width}"),
            download(b, &xb, x.len()),
        );
    }

    // Convolution step: 70 channels (not a multiple of a workgroup), K = 4, a prefill of 9, a
    // decode step, then 2 tokens (shorter than the state).
    let (k, ch) = (4, 70);
    let taps = Tensor::from_f32("conv", vec![k, ch], &rng.vec(k * ch, 1.0));
    let kernel = b.weight(&taps).unwrap();
    let mut state = upload(b, &rng.vec((k - 1) * ch, 1.0));
    for rows in [9, 1, 2] {
        let x = upload(b, &rng.vec(rows * ch, 2.0));
        let mut out = b.buffer(rows * ch).unwrap();
        b.conv_step(&x, &kernel, &mut state, &mut out, rows, ch);
        push(
            format!("conv_step {rows} rows"),
            download(b, &out, rows * ch),
        );
        push(
            format!("conv state after {rows} rows"),
            download(b, &state, (k - 1) * ch),
        );
    }

    // Gated DeltaNet: 2 key heads, 4 value heads (tiled mapping), heads of 16 and 96.
    for (d, random_state) in [(16, false), (96, true)] {
        let (n_k, n_v) = (2, 4);
        let width = (2 * n_k + n_v) * d;
        let a = Tensor::from_f32(
            "ssm_a",
            vec![n_v],
            &rng.vec(n_v, 1.0)
                .iter()
                .map(|v| -(v * 2.0).exp())
                .collect::<Vec<_>>(),
        );
        let dt = Tensor::from_f32("ssm_dt", vec![n_v], &rng.vec(n_v, 1.0));
        let (a, dt) = (b.weight(&a).unwrap(), b.weight(&dt).unwrap());
        let s0 = if random_state {
            rng.vec(n_v * d * d, 0.5)
        } else {
            vec![0.0; n_v * d * d]
        };
        let mut state = upload(b, &s0);
        for rows in [7, 1] {
            let qkv = upload(b, &rng.vec(rows * width, 1.0));
            let alpha = upload(b, &rng.vec(rows * n_v, 3.0));
            let beta = upload(b, &rng.vec(rows * n_v, 3.0));
            let mut out = b.buffer(rows * n_v * d).unwrap();
            let p = DeltaNetParams {
                rows,
                n_k_heads: n_k,
                n_v_heads: n_v,
                head_dim: d,
                eps: 1e-6,
            };
            b.gated_delta_net(&qkv, &alpha, &beta, &a, &dt, &mut state, &mut out, &p);
            push(
                format!("gated_delta_net d={d} {rows} rows"),
                download(b, &out, rows * n_v * d),
            );
            push(
                format!("gated_delta_net d={d} state after {rows} rows"),
                download(b, &state, n_v * d * d),
            );
        }
    }

    // Routing: 6 rows of 40 experts, 4 used; the last row all equal (ties to the lower index).
    // Softmax renormalized (Qwen3 MoE), and sigmoid with a selection bias, unnormalized and
    // scaled, then normalized (GLM-4.5).
    let (rows, n_exp, n_used) = (6, 40, 4);
    let mut logits = rng.vec(rows * n_exp, 3.0);
    logits[(rows - 1) * n_exp..].fill(0.5);
    let lb = upload(b, &logits);
    let selection_bias = Tensor::from_f32("exp_probs_b", vec![n_exp], &rng.vec(n_exp, 0.5));
    let selection_bias = b.weight(&selection_bias).unwrap();
    let mut sel = b.buffer(rows * n_used).unwrap();
    let mut wts = b.buffer(rows * n_used).unwrap();
    let softmax = MoeRouteParams {
        rows,
        n_expert: n_exp,
        n_used,
        gating: ExpertGating::Softmax,
        normalize: true,
        scale: 1.0,
    };
    let sigmoid = MoeRouteParams {
        gating: ExpertGating::Sigmoid,
        normalize: false,
        scale: 2.5,
        ..softmax
    };
    let sigmoid_normalized = MoeRouteParams {
        normalize: true,
        ..sigmoid
    };
    for (what, p, bias) in [
        ("sigmoid, biased", &sigmoid, Some(&selection_bias)),
        (
            "sigmoid, biased, normalized",
            &sigmoid_normalized,
            Some(&selection_bias),
        ),
        // Last: the expert bias below reads these choices.
        ("softmax", &softmax, None),
    ] {
        b.moe_route(&lb, bias, p, &mut sel, &mut wts);
        results.push((
            format!("moe_route {what} selected"),
            download(b, &sel, rows * n_used),
            0.0,
        ));
        results.push((
            format!("moe_route {what} weights"),
            download(b, &wts, rows * n_used),
            OTHER_NMSE,
        ));
    }

    // Each slot's expert's bias (gpt-oss), on the routing's choices: 40 experts' rows of 24.
    let width = 24;
    let bias = Tensor::from_f32("bias", vec![n_exp * width], &rng.vec(n_exp * width, 1.0));
    let bias = b.weight(&bias).unwrap();
    let mut x = upload(b, &rng.vec(rows * n_used * width, 1.0));
    b.add_expert_bias(&mut x, &bias, &sel, rows * n_used, width);
    results.push((
        "add_expert_bias".into(),
        download(b, &x, rows * n_used * width),
        OTHER_NMSE,
    ));

    // The weighted sum of 3 experts' rows of 40 for 5 tokens.
    let (rows, n_used, width) = (5, 3, 40);
    let y = upload(b, &rng.vec(rows * n_used * width, 2.0));
    let w = upload(b, &rng.vec(rows * n_used, 1.0));
    let mut out = b.buffer(rows * width).unwrap();
    b.moe_combine(&y, &w, rows, n_used, width, &mut out);
    results.push((
        "moe_combine".into(),
        download(b, &out, rows * width),
        OTHER_NMSE,
    ));
    results
}

/// Expert matmuls of every weight type: shared and per-slot inputs, a fused gate/up layout
/// (stride and row offset), decode (1 token) and prefill (9 tokens) sizes.
fn expert_matmuls<B: Backend>(b: &B, types: &[GgmlType], rng: &mut Rng) -> Vec<Outcome> {
    let mut results = Vec::new();
    let (k_in, stride, n_exp, n_used) = (256, 24, 5, 2);
    for &t in types {
        let w = random_weight(t, n_exp * stride, k_in, rng);
        let mut stacked = w.clone();
        stacked.dims = vec![k_in, stride, n_exp];
        let wt = b.weight(&stacked).unwrap();
        for tokens in [1, 9] {
            // Token t uses experts (3t + 2j) mod 5.
            let selected: Vec<f32> = (0..tokens * n_used)
                .map(|s| ((3 * (s / n_used) + 2 * (s % n_used)) % n_exp) as f32)
                .collect();
            let sel = upload(b, &selected);
            for per_slot_input in [false, true] {
                for (expert_rows, row_offset) in [(stride, 0), (stride / 2, stride / 2)] {
                    let n_in = if per_slot_input {
                        tokens * n_used
                    } else {
                        tokens
                    };
                    let x = upload(b, &rng.vec(n_in * k_in, 1.0));
                    let p = ExpertMatmulParams {
                        rows: tokens,
                        n_used,
                        per_slot_input,
                        expert_rows,
                        expert_stride: stride,
                        row_offset,
                    };
                    let len = tokens * n_used * expert_rows;
                    let mut out = b.buffer(len).unwrap();
                    b.expert_matmul(&x, &wt, &sel, &mut out, &p);
                    results.push((
                        format!(
                            "expert_matmul {t} {tokens} tokens per-slot {per_slot_input} rows {expert_rows}+{row_offset}"
                        ),
                        download(b, &out, len),
                        MATMUL_NMSE,
                    ));
                }
            }
        }
    }
    results
}

fn compare(want: &[Outcome], got: &[Outcome]) {
    for ((what, w, limit), (_, o, _)) in want.iter().zip(got) {
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        eprintln!(
            "{what}: max |Δ| {:.2e} (of values up to {scale:.2}), NMSE {:.1e}",
            max_abs_diff(w, o),
            nmse(w, o)
        );
        if *limit == 0.0 {
            assert_eq!(w, o, "{what}");
        } else {
            check(what, w, o, *limit);
        }
    }
}

#[test]
fn recurrent_and_moe_ops_match_the_cpu() {
    for g in gpu_kernel_variants() {
        compare(
            &recurrent_and_moe_ops(&cpu(), &mut Rng(21)),
            &recurrent_and_moe_ops(&g, &mut Rng(21)),
        );
        compare(
            &expert_matmuls(&cpu(), &TYPES, &mut Rng(22)),
            &expert_matmuls(&g, &TYPES, &mut Rng(22)),
        );
    }
}

/// The recurrent and MoE ops' workgroup-memory reductions (no subgroups), and an expert weight split into
/// parts by a lowered binding limit.
#[test]
fn recurrent_and_moe_ops_without_subgroups_and_split_experts_match_the_cpu() {
    let options = GpuOptions {
        no_subgroups: true,
        max_binding: Some(4096),
        ..GpuOptions::default()
    };
    let Some(g) = gpu_with(options) else { return };
    compare(
        &recurrent_and_moe_ops(&cpu(), &mut Rng(23)),
        &recurrent_and_moe_ops(&g, &mut Rng(23)),
    );
    let types = [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16];
    compare(
        &expert_matmuls(&cpu(), &types, &mut Rng(24)),
        &expert_matmuls(&g, &types, &mut Rng(24)),
    );
}

/// Float weights whose rows are not a multiple of 16 values (Qwen3.5 MoE's hidden size of 40):
/// padded on the device, as matmul (mat-vec and tiled), embedding and expert matmul inputs.
#[test]
fn float_weights_of_odd_widths_match_the_cpu() {
    let c = cpu();
    let variants = gpu_kernel_variants();
    let mut rng = Rng(25);
    for (t, g) in [GgmlType::F32, GgmlType::F16, GgmlType::BF16]
        .into_iter()
        .flat_map(|t| variants.iter().map(move |g| (t, g)))
    {
        let w = random_weight(t, 67, 40, &mut rng);
        for n in [1, 7] {
            let x = rng.vec(n * 40, 1.0);
            check(
                &format!("matmul {t} {n}×40"),
                &matmul(&c, &w, &x, n),
                &matmul(g, &w, &x, n),
                MATMUL_NMSE,
            );
        }
        let ids = [3, 0, 66];
        check(
            &format!("embed {t} rows of 40"),
            &embed(&c, &w, &ids, 1.5),
            &embed(g, &w, &ids, 1.5),
            OTHER_NMSE,
        );
    }
}

/// A decode block's chain as the integer-dot mat-vecs see it (the hardware kernels): norms write
/// their output as packed Q8_K blocks too, which the Q/K/V group (Q4_K and Q6_K, two dispatches)
/// and the gated pair read instead of quantizing again; the gated pair writes its output as
/// packed blocks too, which the down projection reads; a write to the normed row after its norm
/// (`add`) makes the blocks stale, so the next mat-vec quantizes afresh. Against the CPU.
fn norm_then_matvecs<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, Vec<f32>)> {
    use GgmlType::{Q4_K, Q6_K};
    let dim = 512;
    let norm = b
        .weight(&Tensor::from_f32("norm", vec![dim], &rng.vec(dim, 1.0)))
        .unwrap();
    let qkv = [
        random_weight(Q4_K, 40, dim, rng),
        random_weight(Q4_K, 24, dim, rng),
        random_weight(Q6_K, 24, dim, rng),
    ];
    let qkv: Vec<B::Weight> = qkv.iter().map(|w| b.weight(w).unwrap()).collect();
    // Two blocks of gated outputs, each completed by many workgroups.
    let ffn = 512;
    let (gate, up) = (
        b.weight(&random_weight(Q4_K, ffn, dim, rng)).unwrap(),
        b.weight(&random_weight(Q4_K, ffn, dim, rng)).unwrap(),
    );
    let down = b.weight(&random_weight(Q6_K, dim, ffn, rng)).unwrap();
    let head = b.weight(&random_weight(Q6_K, 96, dim, rng)).unwrap();
    let x = upload(b, &rng.vec(dim, 3.0));
    let mut residual = upload(b, &rng.vec(dim, 3.0));
    let later = upload(b, &rng.vec(dim, 1.0));
    let mut normed = b.buffer(dim).unwrap();
    let mut outs: Vec<B::Buffer> = [40, 24, 24].map(|n| b.buffer(n).unwrap()).into();
    let (mut g, mut u) = (b.buffer(ffn).unwrap(), b.buffer(ffn).unwrap());
    let mut ffn_out = b.buffer(dim).unwrap();
    let mut logits = b.buffer(96).unwrap();
    let mut results = Vec::new();

    b.rms_norm_into(&x, &norm, 1, dim, 1e-6, &mut normed);
    let refs: Vec<&B::Weight> = qkv.iter().collect();
    let mut out_refs: Vec<&mut B::Buffer> = outs.iter_mut().collect();
    b.matmul_many(&normed, &refs, 1, &mut out_refs);
    for (i, (o, n)) in outs.iter().zip([40, 24, 24]).enumerate() {
        results.push((format!("qkv {i} after rms_norm_into"), download(b, o, n)));
    }
    b.add_rms_norm_into(&mut residual, &x, &norm, 1, dim, 1e-6, &mut normed);
    b.matmul_gated(
        &normed,
        &gate,
        &up,
        1,
        ffn,
        GateActivation::Silu,
        &mut g,
        &mut u,
    );
    b.matmul(&g, &down, 1, &mut ffn_out);
    results.push(("gated after add_rms_norm_into".into(), download(b, &g, ffn)));
    results.push((
        "down after the gated pair".into(),
        download(b, &ffn_out, dim),
    ));
    b.rms_norm(&mut residual, &norm, 1, 1e-6);
    b.add(&mut residual, &later, dim);
    b.matmul(&residual, &head, 1, &mut logits);
    results.push(("head after rms_norm, add".into(), download(b, &logits, 96)));
    results
}

#[test]
fn norms_feed_the_integer_dot_mat_vecs_as_the_cpu() {
    let Some(g) = common::gpu::gpu_int_dot() else {
        return;
    };
    let c = cpu();
    let (want, got) = (
        norm_then_matvecs(&c, &mut Rng(23)),
        norm_then_matvecs(&g, &mut Rng(23)),
    );
    for ((what, w), (_, o)) in want.iter().zip(&got) {
        check(what, w, o, MATMUL_NMSE);
    }
}

/// Projections whose output a residual add and norm take next, as decode runs them (the GPU
/// records each norm in the epilogue of the mat-vec before it): a norm after a Q4_K projection;
/// a Q6_K projection of that norm's output and a norm after it, which keeps a dispatch of its
/// own (its mat-vec reads the packed blocks the fused norm would write); a projection of that.
/// Rows of `dim` values.
fn projections_then_norms<B: Backend>(b: &B, rng: &mut Rng, dim: usize) -> Vec<(String, Vec<f32>)> {
    use GgmlType::{Q4_K, Q6_K};
    let norm = b
        .weight(&Tensor::from_f32("norm", vec![dim], &rng.vec(dim, 1.0)))
        .unwrap();
    let w1 = b.weight(&random_weight(Q4_K, dim, dim, rng)).unwrap();
    let w2 = b.weight(&random_weight(Q6_K, dim, dim, rng)).unwrap();
    let a = upload(b, &rng.vec(dim, 1.0));
    let mut residual = upload(b, &rng.vec(dim, 3.0));
    let mut bufs: Vec<B::Buffer> = (0..5).map(|_| b.buffer(dim).unwrap()).collect();
    let [o, h, o2, h2, o3] = &mut bufs[..] else {
        unreachable!()
    };
    b.matmul(&a, &w1, 1, o);
    b.add_rms_norm_into(&mut residual, o, &norm, 1, dim, 1e-6, h);
    b.matmul(h, &w2, 1, o2);
    b.add_rms_norm_into(&mut residual, o2, &norm, 1, dim, 1e-6, h2);
    b.matmul(h2, &w1, 1, o3);
    vec![
        ("the norm after a projection".into(), download(b, h, dim)),
        ("a projection of it".into(), download(b, o2, dim)),
        ("the norm after that".into(), download(b, h2, dim)),
        ("the residual stream".into(), download(b, &residual, dim)),
        (
            "a projection of the second norm".into(),
            download(b, o3, dim),
        ),
    ]
}

/// `projections_then_norms` against the CPU, and on rows of 2048 (eight passes of each
/// invocation's sum, eight blocks) bit for bit what the norms give as dispatches of their own
/// (`KILN_WGPU_FUSE_NORM=0`).
#[test]
fn norms_after_projections_match_the_cpu() {
    let Some(g) = common::gpu::gpu_int_dot() else {
        return;
    };
    let c = cpu();
    g.set_profiling(true);
    let got = projections_then_norms(&g, &mut Rng(29), 512);
    let p = g.profile().unwrap();
    let want = projections_then_norms(&c, &mut Rng(29), 512);
    for ((what, w), (_, o)) in want.iter().zip(&got) {
        check(what, w, o, MATMUL_NMSE);
    }
    assert_eq!(calls(&p, "matvec_norm"), 1, "{:?}", p.ops);
    assert_eq!(calls(&p, "add_rms_norm"), 1, "{:?}", p.ops);

    let separate = gpu_with(GpuOptions {
        hardware_kernels: true,
        separate_norm: true,
        ..GpuOptions::default()
    })
    .unwrap();
    g.set_profiling(true);
    separate.set_profiling(true);
    let fused = projections_then_norms(&g, &mut Rng(31), 2048);
    let want = projections_then_norms(&separate, &mut Rng(31), 2048);
    for ((what, w), (_, o)) in want.iter().zip(&fused) {
        assert!(w == o, "{what}: fused differs from the norm dispatches");
    }
    let (p, q) = (g.profile().unwrap(), separate.profile().unwrap());
    assert_eq!(calls(&p, "matvec_norm"), 1, "{:?}", p.ops);
    assert_eq!(calls(&q, "matvec_norm"), 0, "{:?}", q.ops);
    assert_eq!(calls(&q, "add_rms_norm"), 2, "{:?}", q.ops);
}

/// How many dispatches of kernel `name` a profile counted.
pub(crate) fn calls(p: &Profile, name: &str) -> u64 {
    p.ops.iter().find(|o| o.name == name).map_or(0, |o| o.calls)
}

/// One causal decode row at `start_pos` over `heads` (query, KV) of `head_dim`.
fn decode_row(
    start_pos: usize,
    (n_heads, n_kv_heads): (usize, usize),
    head_dim: usize,
) -> AttentionParams {
    AttentionParams {
        start_pos,
        rows: 1,
        n_heads,
        n_kv_heads,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window: None,
        softcap: None,
        causal: true,
    }
}

/// Random keys and values for the first `rows` rows of both caches.
fn fill_caches<B: Backend>(
    b: &B,
    caches: [&mut B::Cache; 2],
    rows: usize,
    width: usize,
    rng: &mut Rng,
) {
    for cache in caches {
        let earlier = upload(b, &rng.vec(rows * width, 1.0));
        b.store_rows(&earlier, cache, 0, rows, width);
    }
}

/// A decode step's attention (the key range split over workgroups) and the output mat-vec `w`
/// after it, as the integer-dot mat-vecs see it: the attention's splits are combined (by the
/// workgroup that completes each block, or by a reduce) into its output, written as packed Q8_K
/// blocks too, which the mat-vec reads instead of quantizing again. f16 and q8_0 caches (whose
/// values are rotated back before the reduce); `heads` (query, KV) of `head_dim`, whose workgroups
/// may cover parts of blocks (heads of 96); at `start_pos` (300: many splits; 3: one, whose part
/// the workgroup that completes a block reduces and packs as several). Per cache type: the
/// attention's output and the mat-vec's.
fn attention_then_matvec<B: Backend>(
    b: &B,
    w: &Tensor,
    (n_heads, n_kv): (usize, usize),
    head_dim: usize,
    start_pos: usize,
    rng: &mut Rng,
) -> Vec<[Vec<f32>; 2]> {
    let width = n_heads * head_dim;
    let kv_width = n_kv * head_dim;
    let w = b.weight(w).unwrap();
    let mut results = Vec::new();
    for ty in [CacheType::F16, CacheType::Q8_0] {
        let (mut kc, mut vc) = caches(b, (start_pos + 4) * kv_width, (ty, ty), head_dim);
        fill_caches(b, [&mut kc, &mut vc], start_pos + 1, kv_width, rng);
        let q = upload(b, &rng.vec(width, 1.0));
        let mut out = b.buffer(width).unwrap();
        let p = decode_row(start_pos, (n_heads, n_kv), head_dim);
        b.attention(&q, &kc, &vc, &mut out, &p, None);
        let mut o = b.buffer(48).unwrap();
        b.matmul(&out, &w, 1, &mut o);
        results.push([download(b, &out, width), download(b, &o, 48)]);
    }
    results
}

/// The attention against the CPU's; the mat-vec against the CPU's over the GPU's attention output
/// (which the packed blocks must be: a value a hair from a rounding boundary may round either
/// way after two attentions that differ in their last bits).
/// With the splits combined in the attention, from one split too, and by a reduce of their own
/// (`KILN_WGPU_ATTN_REDUCE=1`; one split there writes the output and the mat-vec quantizes it).
#[test]
fn attention_feeds_the_integer_dot_mat_vec_as_the_cpu() {
    let c = cpu();
    for (separate_reduce, kernel, start_pos) in [
        (false, "attention_packed", 300),
        (false, "attention_packed", 3),
        (true, "attention_reduce_packed", 300),
    ] {
        let Some(g) = common::gpu::gpu_with(GpuOptions {
            hardware_kernels: true,
            separate_reduce,
            ..GpuOptions::default()
        }) else {
            return;
        };
        for (heads, head_dim) in [((8, 2), 64), ((8, 8), 96)] {
            let width = heads.0 * head_dim;
            let w = random_weight(GgmlType::Q4_K, 48, width, &mut Rng(31));
            let want = attention_then_matvec(&c, &w, heads, head_dim, start_pos, &mut Rng(29));
            g.set_profiling(true);
            let got = attention_then_matvec(&g, &w, heads, head_dim, start_pos, &mut Rng(29));
            let profile = g.profile().unwrap();
            g.set_profiling(false);
            let pairs = ["f16", "q8_0"].iter().zip(want.iter().zip(&got));
            for (ty, ([want_attn, _], [attn, out])) in pairs {
                let what = format!("{kernel} at {start_pos}, heads {heads:?} of {head_dim}, {ty}");
                check(
                    &format!("{what}: attention"),
                    want_attn,
                    attn,
                    ATTENTION_NMSE,
                );
                check(
                    &format!("{what}: mat-vec after it"),
                    &matmul(&c, &w, attn, 1),
                    out,
                    MATMUL_NMSE,
                );
            }
            assert_eq!(calls(&profile, kernel), 2, "{:?}", profile.ops);
            assert_eq!(calls(&profile, "quantize_q8k"), 0, "{:?}", profile.ops);
        }
    }
}

/// One split (4 keys): the attention's own workgroups reduce its part and pack the output, the
/// same bits as the kernel that writes the output alone (`KILN_WGPU_ATTN_REDUCE=1`, after which
/// the mat-vec quantizes it), since one part's weight is e^0 = 1; and so the mat-vec after it.
#[test]
fn one_split_packed_by_the_attention_is_the_output_written_alone() {
    let runs: Vec<_> = [false, true]
        .into_iter()
        .filter_map(|separate_reduce| {
            common::gpu::gpu_with(GpuOptions {
                hardware_kernels: true,
                separate_reduce,
                ..GpuOptions::default()
            })
        })
        .map(|g| {
            let w = random_weight(GgmlType::Q4_K, 48, 512, &mut Rng(31));
            attention_then_matvec(&g, &w, (8, 2), 64, 3, &mut Rng(29))
        })
        .collect();
    let [fused, alone] = &runs[..] else { return };
    // Per cache type, the attention's output and the mat-vec's after it (from the packed blocks,
    // or from the quantizing dispatch's).
    for (a, b) in fused.iter().flatten().zip(alone.iter().flatten()) {
        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

/// One decode row's Q/K/V projections with RoPE and the KV append (`qkv_rope_store`, or where the
/// backend does not fuse them `matmul_many` and `rope_store_kv`) into caches that hold three rows
/// already, then attention over them: whether it fused, the rotated queries, the attention output,
/// and the caches.
#[allow(clippy::type_complexity)]
fn qkv_rope_store_attention<B: Backend>(
    b: &B,
    types: [GgmlType; 3],
    (k_ty, v_ty, layout, head_dim, rot_dims): (CacheType, CacheType, RopeLayout, usize, usize),
    rng: &mut Rng,
) -> (bool, Vec<f32>, Vec<f32>, [B::Cache; 2]) {
    // Two blocks a row, so a run's place in a row counts.
    let (n_heads, n_kv, start, dim) = (4, 2, 3, 512);
    let kv_width = n_kv * head_dim;
    let q_len = n_heads * head_dim;
    let (mut kc, mut vc) = caches(b, 16 * kv_width, (k_ty, v_ty), head_dim);
    fill_caches(b, [&mut kc, &mut vc], start, kv_width, rng);
    let table: Vec<f32> = (0..rot_dims / 2)
        .flat_map(|i| {
            let angle = start as f32 * 10000f32.powf(-2.0 * i as f32 / rot_dims as f32);
            [angle.cos(), angle.sin()]
        })
        .chain([1.0, 0.0])
        .collect();
    let table = upload(b, &table);
    let ws: Vec<B::Weight> = types
        .iter()
        .zip([q_len, kv_width, kv_width])
        .map(|(&t, rows)| b.weight(&random_weight(t, rows, dim, rng)).unwrap())
        .collect();
    // Large activations make the queries, and so the softmax, sharp: a wrongly rotated or
    // misplaced key moves the output far.
    let x = upload(b, &rng.vec(dim, 4.0));
    let (mut q, mut k, mut v) = (
        b.buffer(q_len).unwrap(),
        b.buffer(kv_width).unwrap(),
        b.buffer(kv_width).unwrap(),
    );
    let p = KvAppend {
        rows: 1,
        n_heads,
        n_kv_heads: n_kv,
        head_dim,
        rot_dims,
        layout,
        dst_row: start,
    };
    let ws = [&ws[0], &ws[1], &ws[2]];
    let fused = b.qkv_rope_store(
        &x,
        ws,
        [&mut q, &mut k, &mut v],
        &table,
        &mut kc,
        &mut vc,
        &p,
    );
    if !fused {
        b.matmul_many(&x, &ws, 1, &mut [&mut q, &mut k, &mut v]);
        b.rope_store_kv(&mut q, &mut k, &v, &table, &mut kc, &mut vc, &p);
    }
    let mut out = b.buffer(q_len).unwrap();
    let params = decode_row(start, (n_heads, n_kv), head_dim);
    b.attention(&q, &kc, &vc, &mut out, &params, None);
    (
        fused,
        download(b, &q, q_len),
        download(b, &out, q_len),
        [kc, vc],
    )
}

/// Row `row` of an f32 or f16 cache of rows of `width`, from its bytes.
fn cache_row(bytes: &[u8], ty: CacheType, row: usize, width: usize) -> Vec<f32> {
    let size = if ty == CacheType::F16 { 2 } else { 4 };
    bytes[row * width * size..(row + 1) * width * size]
        .chunks(size)
        .map(|b| match b {
            [a, b] => half::f16::from_le_bytes([*a, *b]).to_f32(),
            _ => f32::from_le_bytes(b.try_into().unwrap()),
        })
        .collect()
}

/// The decode mat-vecs with RoPE and the KV append as their epilogue leave the queries and caches
/// as the CPU's separate ops do: projections of one type in one dispatch or in two and three
/// (integer-dot K-quants of two families in one), integer-dot and float kernels, f32 and f16
/// caches, full, partial and no rotation. Rotate-half pairs and q8_0 caches are not fused, and
/// run as before.
#[test]
fn qkv_mat_vecs_rope_and_append_as_the_cpu() {
    use CacheType::{F16, F32, Q8_0 as Q8};
    use GgmlType::{Q4_K, Q6_K, Q8_0};
    let c = cpu();
    // Weight types, cache types, head width, rotated values, whether the GPU fuses.
    let cases = [
        ([Q4_K, Q4_K, Q6_K], (F16, F16), 64, 64, true),
        ([Q4_K, Q4_K, Q4_K], (F32, F16), 64, 32, true),
        ([Q6_K, Q4_K, Q4_K], (F16, F32), 128, 128, true),
        ([Q8_0, Q8_0, Q8_0], (F32, F32), 64, 0, true),
        ([Q4_K, Q4_K, Q6_K], (Q8, F16), 64, 64, false),
    ];
    for (int_dot, g) in [common::gpu::gpu_int_dot(), common::gpu::gpu_float_matvecs()]
        .into_iter()
        .zip([true, false])
        .filter_map(|(g, int_dot)| Some((int_dot, g?)))
    {
        for (i, (types, (k_ty, v_ty), head_dim, rot_dims, fuses)) in cases.into_iter().enumerate() {
            for layout in [RopeLayout::Interleaved, RopeLayout::Neox] {
                let what = format!(
                    "{types:?}, {k_ty}/{v_ty} caches, {layout:?}, {rot_dims} of {head_dim} rotated"
                );
                let shape = (k_ty, v_ty, layout, head_dim, rot_dims);
                let seed = 131 + i as u64;
                let (cpu_fused, want_q, want, want_caches) =
                    qkv_rope_store_attention(&c, types, shape, &mut Rng(seed));
                g.set_profiling(true);
                let (fused, got_q, got, got_caches) =
                    qkv_rope_store_attention(&g, types, shape, &mut Rng(seed));
                let profile = g.profile().unwrap();
                g.set_profiling(false);
                assert!(!cpu_fused);
                let fuses = fuses && layout == RopeLayout::Interleaved;
                assert_eq!(fused, fuses, "{what}: fused");
                let unfused = calls(&profile, "rope_kv");
                assert_eq!(unfused, (!fuses) as u64, "{what}: {:?}", profile.ops);
                // A dispatch per run of one type, but one for Q4_K with Q6_K on integer dots.
                let runs = 1 + types.windows(2).filter(|w| w[0] != w[1]).count() as u64;
                let mixes = int_dot && types.iter().all(|t| matches!(t, Q4_K | Q6_K));
                let dispatches = match (fuses, mixes) {
                    (false, _) => 0,
                    (true, true) => 1,
                    (true, false) => runs,
                };
                let fused_calls = calls(&profile, "matvec_rope_kv");
                assert_eq!(fused_calls, dispatches, "{what}: {:?}", profile.ops);
                check(&format!("{what}: queries"), &want_q, &got_q, MATMUL_NMSE);
                check(&format!("{what}: attention"), &want, &got, ATTENTION_NMSE);
                // The step's keys and values, row 3 of the caches (q8_0 ones: the attention).
                for ((name, ty), (w, o)) in [("keys", k_ty), ("values", v_ty)]
                    .into_iter()
                    .zip(want_caches.iter().zip(&got_caches))
                    .filter(|((_, ty), _)| *ty != CacheType::Q8_0)
                {
                    let (w, o) = (cpu_cache_bytes(w), g.cache_bytes(o).unwrap());
                    let width = 2 * head_dim;
                    check(
                        &format!("{what}: {name}"),
                        &cache_row(&w, ty, 3, width),
                        &cache_row(&o, ty, 3, width),
                        MATMUL_NMSE,
                    );
                }
                // The step's keys and values, row 3 of the caches (q8_0 ones: the attention).
                for ((name, ty), (w, o)) in [("keys", k_ty), ("values", v_ty)]
                    .into_iter()
                    .zip(want_caches.iter().zip(&got_caches))
                    .filter(|((_, ty), _)| *ty != CacheType::Q8_0)
                {
                    let (w, o) = (cpu_cache_bytes(w), g.cache_bytes(o).unwrap());
                    let width = 2 * head_dim;
                    check(
                        &format!("{what}: {name}"),
                        &cache_row(&w, ty, 3, width),
                        &cache_row(&o, ty, 3, width),
                        MATMUL_NMSE,
                    );
                }
            }
        }
    }
}

/// The error `call` leaves on `g`, which must have none before it.
fn error_of(g: &WgpuBackend, call: impl FnOnce()) -> String {
    assert!(g.take_error().is_none(), "an error left by the case before");
    call();
    g.take_error().map(|e| e.to_string()).unwrap_or_default()
}

/// Every kernel runs trusted (no bounds checks in the shader), so every op checks the buffers it
/// binds first: each call here is given one buffer a value (or a row) short of what it reaches,
/// and must fail with an error that names the op and that buffer, having dispatched nothing.
#[test]
fn trusted_kernels_refuse_short_buffers() {
    let Some(g) = gpu() else {
        return;
    };
    let buf = |len: usize| g.buffer(len).unwrap();
    let vector = |len: usize| {
        g.weight(&Tensor::from_f32("v", vec![len], &vec![0.5; len]))
            .unwrap()
    };
    let matrix = |rows: usize, cols: usize| {
        let w = Tensor::from_f32("w", vec![cols, rows], &vec![0.25; rows * cols]);
        g.weight(&w).unwrap()
    };
    let (w64, w32x64) = (vector(64), matrix(32, 64));
    let mut cases: Vec<(&str, String)> = Vec::new();
    let mut case = |wanted: &'static str, e: String| cases.push((wanted, e));

    case(
        "add: 63 values in y where 64 are needed",
        error_of(&g, || g.add(&mut buf(64), &buf(63), 64)),
    );
    case(
        "add_bias: 127 values in x where 128 are needed",
        error_of(&g, || g.add_bias(&mut buf(127), &w64, 2)),
    );
    case(
        "scale_rows: 1 values in scales where 2 are needed",
        error_of(&g, || g.scale_rows(&mut buf(128), &buf(1), 2, 64)),
    );
    case(
        "gated_activation: 63 values in up",
        error_of(&g, || {
            g.gated_activation(&mut buf(64), &buf(63), 64, GateActivation::Silu)
        }),
    );
    case(
        "copy_rows: 191 values in the source where 192 are needed",
        error_of(&g, || g.copy_rows(&buf(191), 1, &mut buf(128), 0, 2, 64)),
    );
    case(
        "rms_norm: 127 values in x where 128 are needed",
        error_of(&g, || g.rms_norm(&mut buf(127), &w64, 2, 1e-6)),
    );
    case(
        "rms_norm_into: 127 values in out",
        error_of(&g, || {
            g.rms_norm_into(&buf(128), &w64, 2, 64, 1e-6, &mut buf(127))
        }),
    );
    case(
        "add_rms_norm_into: 127 values in y",
        error_of(&g, || {
            g.add_rms_norm_into(&mut buf(128), &buf(127), &w64, 2, 64, 1e-6, &mut buf(128))
        }),
    );
    case(
        "rope: 63 values in the table where 64 are needed",
        error_of(&g, || {
            g.rope_partial(&mut buf(256), &buf(63), 2, 2, 64, 32, RopeLayout::Neox)
        }),
    );
    case(
        "rope: 66 rotated values of heads of 64",
        error_of(&g, || {
            g.rope_partial(&mut buf(256), &buf(132), 2, 2, 64, 66, RopeLayout::Neox)
        }),
    );
    case(
        "mul_sigmoid: 3 values in the gate where 4 are needed",
        error_of(&g, || g.mul_sigmoid(&mut buf(128), &buf(3), 2, 64, 2)),
    );
    case(
        "embed: 127 values in out where 128 are needed",
        error_of(&g, || g.embed(&matrix(4, 64), &[0, 3], 1.0, &mut buf(127))),
    );
    case(
        "matmul: 127 values in the input where 128 are needed",
        error_of(&g, || g.matmul(&buf(127), &w32x64, 2, &mut buf(64))),
    );
    case(
        "matmul: 63 values in the output where 64 are needed",
        error_of(&g, || g.matmul(&buf(128), &w32x64, 2, &mut buf(63))),
    );
    case(
        "matmul_many: 31 values in an output where 32 are needed",
        error_of(&g, || {
            g.matmul_many(
                &buf(64),
                &[&w32x64, &w32x64],
                1,
                &mut [&mut buf(32), &mut buf(31)],
            )
        }),
    );
    case(
        "matmul_gated: 31 values in the up output",
        error_of(&g, || {
            let (mut gate, mut up) = (buf(32), buf(31));
            g.matmul_gated(
                &buf(64),
                &w32x64,
                &w32x64,
                1,
                32,
                GateActivation::Silu,
                &mut gate,
                &mut up,
            )
        }),
    );
    let taps = g
        .weight(&Tensor::from_f32("taps", vec![4, 16], &[0.1; 64]))
        .unwrap();
    case(
        "conv_step: 47 values in the state where 48 are needed",
        error_of(&g, || {
            g.conv_step(&buf(32), &taps, &mut buf(47), &mut buf(32), 2, 16)
        }),
    );
    let dn = DeltaNetParams {
        rows: 2,
        n_k_heads: 1,
        n_v_heads: 2,
        head_dim: 16,
        eps: 1e-6,
    };
    case(
        "gated_delta_net: 511 values in the state where 512 are needed",
        error_of(&g, || {
            let (a, dt) = (vector(2), vector(2));
            g.gated_delta_net(
                &buf(128),
                &buf(4),
                &buf(4),
                &a,
                &dt,
                &mut buf(511),
                &mut buf(64),
                &dn,
            )
        }),
    );
    let route = MoeRouteParams {
        rows: 2,
        n_expert: 8,
        n_used: 2,
        gating: ExpertGating::Softmax,
        normalize: true,
        scale: 1.0,
    };
    case(
        "moe_route: 15 values in the logits where 16 are needed",
        error_of(&g, || {
            g.moe_route(&buf(15), None, &route, &mut buf(4), &mut buf(4))
        }),
    );
    let experts = {
        let mut w = Tensor::from_f32("experts", vec![64, 32 * 4], &vec![0.25; 4 * 32 * 64]);
        w.dims = vec![64, 32, 4];
        g.weight(&w).unwrap()
    };
    let slots = ExpertMatmulParams {
        rows: 1,
        n_used: 2,
        per_slot_input: false,
        expert_rows: 32,
        expert_stride: 32,
        row_offset: 0,
    };
    case(
        "expert_matmul: 63 values in out where 64 are needed",
        error_of(&g, || {
            g.expert_matmul(
                &buf(64),
                &experts,
                &upload(&g, &[0.0, 3.0]),
                &mut buf(63),
                &slots,
            )
        }),
    );
    case(
        "add_expert_bias: 1 values in selected where 2 are needed",
        error_of(&g, || g.add_expert_bias(&mut buf(64), &w64, &buf(1), 2, 32)),
    );
    case(
        "moe_combine: 191 values in y where 192 are needed",
        error_of(&g, || {
            g.moe_combine(&buf(191), &buf(6), 2, 3, 32, &mut buf(64))
        }),
    );
    let kv = |rows: usize| caches(&g, rows * 64, (CacheType::F16, CacheType::F32), 64);
    let append = KvAppend {
        rows: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 64,
        rot_dims: 64,
        layout: RopeLayout::Interleaved,
        dst_row: 4,
    };
    // A step's RoPE and append with queries of `q_len` values into caches of `rows` rows.
    let append_into = |q_len: usize, rows: usize| {
        error_of(&g, || {
            let (mut kc, mut vc) = kv(rows);
            let (mut q, mut k, v, table) = (buf(q_len), buf(64), buf(64), buf(64));
            g.rope_store_kv(&mut q, &mut k, &v, &table, &mut kc, &mut vc, &append)
        })
    };
    case(
        "rope_store_kv: 256 values in the key cache where 320 are needed",
        append_into(128, 4),
    );
    case(
        "rope_store_kv: 127 values in the queries where 128 are needed",
        append_into(127, 8),
    );
    case(
        "move_cache_rows: 128 values in the cache, counted in 32-bit words, where 160 are needed",
        error_of(&g, || {
            // An f16 cache of 4 rows of 64 holds 128 words; rows 3..5 reach word 160.
            g.move_cache_rows(&mut kv(4).0, 1, 3, 2, 64)
        }),
    );
    case(
        "rope_cache: 256 values in the cache where 320 are needed",
        error_of(&g, || {
            g.rope_cache(&mut kv(4).0, &buf(64), 3, 2, 1, 64, 64, RopeLayout::Neox)
        }),
    );
    for (wanted, e) in &cases {
        assert!(e.contains(wanted), "wanted {wanted:?}, got {e:?}");
    }
    // And the same calls with the sizes they need run without one (a sample of the above).
    let e = error_of(&g, || {
        g.add(&mut buf(64), &buf(64), 64);
        g.moe_combine(&buf(192), &buf(6), 2, 3, 32, &mut buf(64));
        g.move_cache_rows(&mut kv(5).0, 1, 3, 2, 64);
        g.rope_cache(&mut kv(5).0, &buf(64), 3, 2, 1, 64, 64, RopeLayout::Neox);
    });
    assert!(e.is_empty(), "{e}");
}
