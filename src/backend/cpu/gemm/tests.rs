//! Tests of the GEMM kernels over repacked weights: each instruction set against the portable dot
//! products, and tile sizes against one token.

use super::*;
use crate::backend::cpu::kernels::tests::every_level;
use crate::backend::cpu::kernels::{GroupCall, Kernels, TypeKernels};
use crate::backend::cpu::portable::tests::{activations, random_row};
use crate::backend::cpu::portable::{self, quantize_q8, quantize_q8k};
use crate::backend::cpu::portable_iq;
use crate::backend::cpu::repack::{Packed, ROWS, tests::pack_serial};

/// The GEMM kernels of type `t` in a level's table: (against Q8_0 blocks, against Q8_K blocks).
fn kernels_of(
    table: &Kernels,
    t: GgmlType,
) -> (
    Option<PackedKernel<BlockQ8>>,
    Option<PackedKernel<BlockQ8K>>,
) {
    match table.of(t) {
        TypeKernels::Q8(k) => (k.packed, None),
        TypeKernels::Q8K(k) => (None, k.packed),
        _ => (None, None),
    }
}

/// Run `kernel` over all groups of `p` for `tokens`, into an `n × m` output.
#[allow(clippy::too_many_arguments)]
fn run<A>(
    kernel: PackedKernel<A>,
    p: &Packed,
    x: &[A],
    stride: usize,
    xsum: &[i32],
    n: usize,
    tokens: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let m = out.len() / n;
    for group in 0..m / ROWS {
        let call = GroupCall {
            p,
            group,
            x,
            stride,
            xsum,
            tokens: tokens.clone(),
            out: out[group * ROWS..].as_mut_ptr(),
            m,
        };
        // SAFETY: the ISA was detected; the output holds n × m values.
        unsafe { kernel(&call) }
    }
}

/// K-quant blocks at their largest codes, scales and minimums against the largest
/// activations: the sums the kernels keep in 16 bits without VNNI reach their bound here (a
/// Q5_K sub-block would not fit), and every instruction set still agrees with the portable dot
/// product.
#[test]
fn largest_k_quant_sums_stay_exact() {
    let (m, k) = (16, 512);
    for t in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        let mut block = vec![0xFFu8; t.block_bytes()];
        if t == GgmlType::Q6_K {
            block[208..].copy_from_slice(&[0x00, 0x3C]); // d = 1; scales −1
        } else {
            block[..4].copy_from_slice(&[0x00, 0x3C, 0x00, 0x38]); // d = 1, dmin = 0.5
        }
        let w: Vec<u8> = block.repeat(m * k / 256);
        let p = pack_serial(t, &w, m, k).expect("packable");
        for sign in [1f32, -1.0] {
            let mut q = vec![BlockQ8K::default(); k / 256];
            quantize_q8k(&vec![sign; k], &mut q);
            let want = portable::dot_q8k(t, &w[..w.len() / m], &q);
            for table in every_level().iter().filter(|k| k.of(t).packs()) {
                let kernel = kernels_of(table, t).1.expect("packed kernel");
                let mut out = vec![0f32; m];
                run(kernel, &p, &q, k / 256, &[], 1, 0..1, &mut out);
                for got in out {
                    assert!(
                        (got - want).abs() <= 1e-5 * want.abs(),
                        "{t} {}: {got} vs {want}",
                        table.name()
                    );
                }
            }
        }
    }
}

/// Every packed kernel, on every instruction set this CPU has, agrees with the portable dot
/// products on the original blocks (integer parts exactly, so only float summation order
/// differs), and gives each token the same bits whether it ran alone, in calls of two, three or four
/// tokens (short tiles of their own: verify passes) or in a tile (rows long enough for a tile to
/// run in spans, the last one short).
#[test]
fn packed_kernels_match_the_portable_dot_products() {
    let (m, k, n) = (48, 2304, 11);
    for table in every_level() {
        for t in GgmlType::ALL {
            let (k8, k8k) = kernels_of(&table, t);
            if k8.is_none() && k8k.is_none() {
                continue;
            }
            let w: Vec<u8> = (0..m)
                .flat_map(|r| random_row(t, k, 77 + 13 * r as u64 + t.id() as u64))
                .collect();
            let rb = w.len() / m;
            let p = pack_serial(t, &w, m, k).expect("packable");
            let x: Vec<f32> = (0..n)
                .flat_map(|i| activations(k, 500 + i as u64))
                .collect();
            let mut reference = vec![0f32; n * m];
            let mut tiled = vec![0f32; n * m];
            let mut alone = vec![0f32; n * m];
            // Calls of `CALLS[c]` tokens each, into `calls[c]`.
            const CALLS: [usize; 3] = [2, 3, 4];
            let mut calls = vec![vec![0f32; n * m]; CALLS.len()];
            if let Some(kernel) = k8 {
                let nb = k / 32;
                let mut q = vec![BlockQ8::default(); n * nb];
                for i in 0..n {
                    quantize_q8(&x[i * k..(i + 1) * k], &mut q[i * nb..(i + 1) * nb]);
                }
                let xsum: Vec<i32> = q
                    .iter()
                    .map(|b| b.qs.iter().map(|&v| v as i32).sum())
                    .collect();
                for i in 0..n {
                    for r in 0..m {
                        let (row, xs) = (&w[r * rb..(r + 1) * rb], &q[i * nb..]);
                        reference[i * m + r] = if t == GgmlType::Q1_0 {
                            portable_iq::dot_q1_0(row, xs)
                        } else {
                            portable::dot_q8(t, row, xs)
                        };
                    }
                }
                run(kernel, &p, &q, nb, &xsum, n, 0..n, &mut tiled);
                for i in 0..n {
                    run(kernel, &p, &q, nb, &xsum, n, i..i + 1, &mut alone);
                    for (&size, out) in CALLS.iter().zip(&mut calls) {
                        if i % size == 0 {
                            run(kernel, &p, &q, nb, &xsum, n, i..(i + size).min(n), out);
                        }
                    }
                }
            } else if let Some(kernel) = k8k {
                let nb = k / 256;
                let mut q = vec![BlockQ8K::default(); n * nb];
                for i in 0..n {
                    quantize_q8k(&x[i * k..(i + 1) * k], &mut q[i * nb..(i + 1) * nb]);
                }
                for i in 0..n {
                    for r in 0..m {
                        reference[i * m + r] =
                            portable::dot_q8k(t, &w[r * rb..(r + 1) * rb], &q[i * nb..]);
                    }
                }
                run(kernel, &p, &q, nb, &[], n, 0..n, &mut tiled);
                for i in 0..n {
                    run(kernel, &p, &q, nb, &[], n, i..i + 1, &mut alone);
                    for (&size, out) in CALLS.iter().zip(&mut calls) {
                        if i % size == 0 {
                            run(kernel, &p, &q, nb, &[], n, i..(i + size).min(n), out);
                        }
                    }
                }
            }
            let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (i, (&got, &want)) in tiled.iter().zip(&reference).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-5 * scale,
                    "{t} {} token {} row {}: {got} vs {want}",
                    table.name(),
                    i / m,
                    i % m
                );
            }
            assert_eq!(
                tiled.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{t} {}: tiled and one-token results differ",
                table.name()
            );
            for (&size, out) in CALLS.iter().zip(&calls) {
                assert_eq!(
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{t} {}: {size}-token and one-token results differ",
                    table.name()
                );
            }
        }
    }
}

/// Every level with a GEMM (any x86 SIMD level; ARM with dotprod) packs the same fourteen types,
/// and the others none, so the tests above cannot pass by testing nothing.
#[test]
fn gemm_levels_pack_every_repackable_type() {
    for table in every_level() {
        let packed: Vec<GgmlType> = GgmlType::ALL
            .into_iter()
            .filter(|&t| table.of(t).packs())
            .collect();
        let has_gemm = !matches!(table.level, Level::Portable);
        #[cfg(target_arch = "aarch64")]
        let has_gemm = has_gemm && table.level == Level::NeonDot;
        let want = if has_gemm { 14 } else { 0 };
        assert_eq!(packed.len(), want, "{}: {packed:?}", table.name());
    }
}

/// The F16 panel GEMM (`f16.rs`) through the backend's passes, at every level that has it, sums
/// each output as one chain of fused multiply-adds in column order over the activations rounded
/// to f16 — the bits of a scalar loop written apart — for every tile shape (1 to 4 tokens, whole
/// and padded tiles, the last vectors of a task), one token's streamed decode, and two weights in
/// one pass (a fused projection, whose groups one thread's share may straddle).
#[test]
fn f16_panels_sum_each_output_in_column_order() {
    use crate::backend::CoreOps;
    use crate::backend::cpu::CpuBackend;
    use crate::tensor::Tensor;
    let t = GgmlType::F16;
    let mut tested = 0;
    for kernels in every_level() {
        if kernels.f16_panels.is_none() {
            continue;
        }
        let mut cpu = CpuBackend::new(2).unwrap();
        cpu.kernels = kernels;
        for (rows, tokens, k) in [
            (16, 1, 1),
            (48, 2, 17),
            (32, 3, 16),
            (80, 4, 33),
            (16, 5, 64),
            (112, 13, 75),
            (160, 1, 300),
            (96, 30, 40),
            (208, 61, 24),
        ] {
            let ws: Vec<_> = [rows, 2 * rows]
                .iter()
                .enumerate()
                .map(|(i, &m)| {
                    let bytes: Vec<u8> = (0..m)
                        .flat_map(|r| random_row(t, k, (r + 100 * i) as u64))
                        .collect();
                    cpu.weight(&Tensor::from_bytes("w", t, vec![k, m], bytes))
                        .unwrap()
                })
                .collect();
            assert!(ws.iter().all(|w| w.packed.is_some()), "in panels");
            let x = activations(tokens * k, 3);
            let mut outs = [vec![0.0; tokens * rows], vec![0.0; tokens * 2 * rows]];
            let [a, b] = &mut outs;
            cpu.matmul_many(&x, &[&ws[0], &ws[1]], tokens, &mut [a, b]);
            for (w, out) in ws.iter().zip(&outs) {
                let m = w.rows;
                for i in 0..tokens {
                    for r in 0..m {
                        let row = w.row(r);
                        let want = (0..k).fold(0f32, |acc, c| {
                            let wv = half::f16::from_le_bytes([row[2 * c], row[2 * c + 1]]);
                            let xv = half::f16::from_f32(x[i * k + c]);
                            wv.to_f32().mul_add(xv.to_f32(), acc)
                        });
                        assert_eq!(
                            out[i * m + r].to_bits(),
                            want.to_bits(),
                            "{}: {m}x{k}, {tokens} tokens, token {i} row {r}",
                            cpu.kernels.name()
                        );
                    }
                }
            }
            tested += 1;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        assert!(tested > 0, "no level ran the panel GEMM");
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = tested; // ARM has no panel GEMM yet
}
