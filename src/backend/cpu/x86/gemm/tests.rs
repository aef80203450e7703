//! Tests of the GEMM kernels over repacked weights: each instruction set against the portable dot
//! products, tile sizes against one token, and the conversions the kernels share.

use super::*;
use crate::backend::cpu::portable::tests::{activations, random_row};
use crate::backend::cpu::portable::{self, quantize_q8, quantize_q8k};
use crate::backend::cpu::portable_iq;
use crate::backend::cpu::repack::{Packed, tests::pack_serial};

/// The levels this CPU runs.
fn isas() -> Vec<Level> {
    super::super::levels()
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

/// Every instruction set's E8M0 conversion gives ggml's value for each of the 256 bytes.
#[test]
fn e8m0_exponents_convert_as_ggml() {
    fn check<V: Isa>(what: &str) {
        let bytes: Vec<u8> = (0..=255).collect();
        for chunk in bytes.chunks(V::LANES) {
            let mut got = [0f32; 16];
            // SAFETY: called only for instruction sets this CPU has.
            unsafe { V::store(got.as_mut_ptr(), V::e8m0_halves(chunk.as_ptr())) };
            for (&e, g) in chunk.iter().zip(got) {
                let want = crate::gguf::iq::e8m0_half(e);
                assert_eq!(g.to_bits(), want.to_bits(), "{what}: exponent byte {e}");
            }
        }
    }
    let levels = isas();
    if !levels.is_empty() {
        check::<Avx2<false>>("AVX2");
        check::<Avx2Pair<false>>("AVX2 pairs");
    }
    if levels.contains(&Level::Avx512Vnni) {
        check::<Avx512>("AVX-512");
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
            for isa in isas() {
                let kernel = q8k_kernel(isa, t).expect("packed kernel");
                let mut out = vec![0f32; m];
                run(kernel, &p, &q, k / 256, &[], 1, 0..1, &mut out);
                for got in out {
                    assert!(
                        (got - want).abs() <= 1e-5 * want.abs(),
                        "{t} {isa:?}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// Every packed kernel, on every instruction set this CPU has, agrees with the portable dot
/// products on the original blocks (integer parts exactly, so only float summation order
/// differs), and gives each token the same bits whether it ran alone or in a tile (rows long
/// enough for a tile to run in spans, the last one short).
#[test]
fn packed_kernels_match_the_portable_dot_products() {
    let (m, k, n) = (48, 2304, 11);
    for isa in isas() {
        for t in GgmlType::ALL {
            let (k8, k8k) = (q8_kernel(isa, t), q8k_kernel(isa, t));
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
                }
            }
            let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (i, (&got, &want)) in tiled.iter().zip(&reference).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-5 * scale,
                    "{t} {isa:?} token {} row {}: {got} vs {want}",
                    i / m,
                    i % m
                );
            }
            assert_eq!(
                tiled.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{t} {isa:?}: tiled and one-token results differ"
            );
        }
    }
}

/// The decoded GEMM (`Tiled`) gives every row and token the bits of the level's row kernel, for
/// every type it takes, tile sizes with and without a remainder, on random blocks.
#[test]
fn decoded_gemm_gives_the_row_kernels_bits() {
    use crate::backend::cpu::kernels::{BlockQ8K, DECODED_BLOCK, TiledCall, TypeKernels};
    let (k, tokens) = (512, 11);
    for level in isas() {
        // SAFETY: `levels` lists only what this CPU has.
        let table = unsafe { super::super::kernels(level) };
        let mut tested = 0;
        for t in GgmlType::ALL {
            let TypeKernels::Q8K(q8k) = table.of(t) else {
                continue;
            };
            let Some(tiled) = q8k.tiled else { continue };
            tested += 1;
            let rows: Vec<Vec<u8>> = (0..16).map(|r| random_row(t, k, 100 + r)).collect();
            let x: Vec<BlockQ8K> = (0..tokens)
                .flat_map(|i| {
                    let mut q = vec![BlockQ8K::default(); k / 256];
                    quantize_q8k(&activations(k, 7 + i as u64), &mut q);
                    q
                })
                .collect();
            let mut decoded = vec![0u8; k / 256 * DECODED_BLOCK];
            let row_refs: [&[u8]; 16] = std::array::from_fn(|r| &rows[r][..]);
            let mut out = vec![0f32; tokens * 16];
            // SAFETY: the rows are whole blocks of `t`; the buffers fit; the ISA was detected.
            unsafe {
                (tiled.decode)(&row_refs, &mut decoded);
                for range in [0..3, 3..tokens] {
                    let call = TiledCall {
                        decoded: &decoded,
                        blocks: k / 256,
                        factor: tiled.factor,
                        x: &x,
                        stride: k / 256,
                        tokens: range,
                        out: out.as_mut_ptr(),
                        m: 16,
                    };
                    (tiled.gemm)(&call);
                }
            }
            for i in 0..tokens {
                for (r, row) in rows.iter().enumerate() {
                    let want = (q8k.dot)(row, &x[i * (k / 256)..(i + 1) * (k / 256)]);
                    let got = out[i * 16 + r];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{t} {level:?}: row {r} token {i}: {got} vs {want}"
                    );
                }
            }
        }
        assert_eq!(tested, 9, "{level:?}: the grid i-quants and ternary types");
    }
}
