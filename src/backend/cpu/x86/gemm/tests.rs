//! Tests of the x86-only parts of the GEMM: each instruction set's E8M0 conversion, and the GEMM
//! over rows decoded on the fly against the row kernels.

use super::*;
use crate::backend::cpu::isa::Isa;
use crate::backend::cpu::kernels::Level;
use crate::backend::cpu::portable::quantize_q8k;
use crate::backend::cpu::portable::tests::{activations, random_row};
use crate::backend::cpu::x86::isa::{Avx2, Avx2Pair, Avx512};

/// The levels this CPU runs.
fn isas() -> Vec<Level> {
    super::super::levels()
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
