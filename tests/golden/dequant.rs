//! Every block decoder against llama.cpp's reference values (`gguf.quants.dequantize`), bit for bit.

use crate::common;

use kiln::gguf::GgmlType;
use kiln::gguf::dequant::dequantize;

fn check_golden_file(name: &str) -> usize {
    let golden = common::golden(name);
    let mut checked = 0;
    for (type_name, case) in golden.as_object().unwrap() {
        let t =
            GgmlType::from_name(type_name).unwrap_or_else(|| panic!("unknown type {type_name}"));
        assert_eq!(
            case["block_size"].as_u64().unwrap() as usize,
            t.block_len(),
            "{t}"
        );
        assert_eq!(
            case["type_size"].as_u64().unwrap() as usize,
            t.block_bytes(),
            "{t}"
        );
        let raw = common::hex_bytes(case["raw_hex"].as_str().unwrap());
        let want: Vec<f32> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(
            raw.len() / t.block_bytes() * t.block_len(),
            want.len(),
            "{t}"
        );
        let mut got = vec![0f32; want.len()];
        dequantize(t, &raw, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{t} value {i}: got {g}, want {w}");
        }
        checked += 1;
    }
    checked
}

#[test]
fn dequantization_matches_llama_cpp_goldens() {
    assert_eq!(check_golden_file("dequant.json"), 12);
}

/// Q2_K, Q8_K and Q8_1 are not in the shared goldens; these were made with the same Python `gguf`
/// package from random bytes by tests/fixtures/make_dequant_extra.py.
#[test]
fn dequantization_matches_gguf_py_for_the_remaining_types() {
    assert_eq!(check_golden_file("dequant-extra.json"), 1);
}

/// The i-quants (IQ1-IQ4), TQ1_0, TQ2_0, MXFP4 and Q1_0: 16 random blocks each (scales finite),
/// against llama.cpp's `dequantize_row_*` (which gguf-py matches bit for bit on all but Q1_0, which
/// it lacks), made by tests/fixtures/make_dequant_iq.py.
#[test]
fn dequantization_matches_llama_cpp_for_the_iq_ternary_and_fp4_types() {
    assert_eq!(check_golden_file("dequant-iq.json"), 13);
}
