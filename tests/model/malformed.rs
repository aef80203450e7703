//! Untrusted model files: truncations and corrupted header fields must each be an error that names
//! the file — never a panic, an abort, or an allocation sized by the corrupt number.

use crate::common;

use std::path::Path;

use common::gguf_writer::{GgufWriter, array, string};
use gguf_rs_lib::format::metadata::MetadataValue as V;
use gguf_rs_lib::format::types::GGUFValueType;
use kiln::gguf::GgufFile;
use kiln::model::ModelFile;

const LABEL: &str = "corrupt-test.gguf";

/// A small but complete llama GGUF: metadata of every value type (nested arrays included) and
/// three tensors.
fn base_writer() -> GgufWriter {
    let mut w = GgufWriter::default();
    w.kv("general.architecture", string("llama"))
        .kv("general.name", string("MARKER-NAME"))
        .kv("llama.block_count", V::U32(1))
        .kv("llama.context_length", V::U64(64))
        .kv("llama.embedding_length", V::U32(32))
        .kv("llama.feed_forward_length", V::I32(64))
        .kv("llama.attention.head_count", V::U16(2))
        .kv("llama.attention.head_count_kv", V::U8(1))
        .kv("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5))
        .kv("llama.rope.freq_base", V::F64(10000.0))
        .kv("test.flags", V::Bool(true))
        .kv("test.small", V::I8(-3))
        .kv("test.short", V::I16(-300))
        .kv("test.big", V::I64(-5))
        .kv(
            "test.nested",
            array(
                GGUFValueType::Array,
                vec![
                    array(GGUFValueType::U32, vec![V::U32(1), V::U32(2)]),
                    array(GGUFValueType::String, vec![string("a"), string("bc")]),
                ],
            ),
        )
        .kv(
            "tokenizer.ggml.tokens",
            array(
                GGUFValueType::String,
                (0..64).map(|i| string(&format!("t{i}"))).collect(),
            ),
        );
    w.f32_tensor("token_embd.weight", &[32, 64], &vec![0.5; 32 * 64]);
    w.f32_tensor("output_norm.weight", &[32], &[1.0; 32]);
    // One Q8_0 tensor: 2 rows of one 34-byte block.
    w.tensor("blk.0.attn_q.weight", 8, &[32, 2], vec![0u8; 68]);
    w
}

fn parse(bytes: &[u8]) -> Result<GgufFile, kiln::Error> {
    GgufFile::from_bytes(Path::new(LABEL), bytes)
}

fn expect_error(bytes: &[u8], what: &str) -> String {
    match parse(bytes) {
        Ok(_) => panic!("{what}: a corrupt file was accepted"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(LABEL),
                "{what}: error does not name the file: {msg}"
            );
            msg
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(needle)))
}

/// The offset of the u64 length that precedes `s` in the file.
fn length_field_of(bytes: &[u8], s: &str) -> usize {
    let pos = find(bytes, s.as_bytes());
    let len = u64::from_le_bytes(bytes[pos - 8..pos].try_into().unwrap());
    assert_eq!(len as usize, s.len());
    pos - 8
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn the_base_file_is_valid_and_reads_every_value_type() {
    let g = parse(&base_writer().to_bytes()).expect("base file parses");
    assert_eq!(g.tensors.len(), 3);
    assert_eq!(g.metadata.str("general.name").unwrap(), Some("MARKER-NAME"));
    assert_eq!(
        g.metadata.u64("llama.attention.head_count_kv").unwrap(),
        Some(1)
    );
    assert_eq!(
        g.metadata.f64("llama.rope.freq_base").unwrap(),
        Some(10000.0)
    );
    assert_eq!(g.metadata.bool("test.flags").unwrap(), Some(true));
    assert!(g.metadata.display("test.nested").contains("bc"));
    // A value of the wrong kind is an error naming the key, not a panic.
    let e = g.metadata.str("llama.block_count").unwrap_err().to_string();
    assert!(e.contains("llama.block_count"), "{e}");
}

#[test]
fn version_2_files_are_read() {
    let mut w = base_writer();
    w.version = 2;
    let g = parse(&w.to_bytes()).expect("GGUF v2 parses");
    assert_eq!(g.version, 2);
    assert_eq!(g.tensors.len(), 3);
}

#[test]
fn every_truncation_of_a_small_file_is_an_error() {
    let bytes = base_writer().to_bytes();
    for cut in 0..bytes.len() {
        expect_error(&bytes[..cut], &format!("truncated at {cut}"));
    }
}

#[test]
fn truncations_of_real_model_files_are_errors() {
    for name in ["models/tiny-llama.gguf", "models/llama3-vocab.gguf"] {
        let bytes = std::fs::read(common::fixture(name)).unwrap();
        let n = bytes.len();
        // Every byte of the header and first keys, 400 cuts spread through the metadata, tokenizer,
        // descriptors and data, and the last 64 bytes where they are tensor data (a file without
        // tensors ends in optional alignment padding, which may be cut).
        let has_tensors = !name.contains("vocab");
        let tail = if has_tensors { n - 64..n } else { 0..0 };
        let cuts = (0..512).chain((1..400).map(|i| i * n / 400)).chain(tail);
        for cut in cuts {
            expect_error(&bytes[..cut], &format!("{name} truncated at {cut}"));
        }
    }
}

#[test]
fn corrupt_header_fields_are_errors() {
    let good = base_writer().to_bytes();
    let corrupt = |what: &str, f: &dyn Fn(&mut Vec<u8>)| -> String {
        let mut b = good.clone();
        f(&mut b);
        expect_error(&b, what)
    };

    let msg = corrupt("flipped magic", &|b| b[0] ^= 0x20);
    assert!(msg.contains("not a GGUF file"), "{msg}");
    let msg = corrupt("version 1", &|b| b[4] = 1);
    assert!(msg.contains("version 1"), "{msg}");
    let msg = corrupt("version 7", &|b| b[4] = 7);
    assert!(msg.contains("version 7"), "{msg}");
    corrupt("big-endian version", &|b| {
        b[4..8].copy_from_slice(&3u32.to_be_bytes())
    });
    corrupt("2^60 tensors", &|b| put_u64(b, 8, 1 << 60));
    corrupt("2^60 metadata entries", &|b| put_u64(b, 16, 1 << 60));
    corrupt("a 2^40-byte key", &|b| put_u64(b, 24, 1 << 40));
    corrupt("a 2^40-byte string", &|b| {
        let at = length_field_of(b, "MARKER-NAME");
        put_u64(b, at, 1 << 40);
    });
    corrupt("a 2^60-element array", &|b| {
        // tokenizer.ggml.tokens: key, then type u32 (9), element type u32 (8), then the count.
        let at = find(b, b"tokenizer.ggml.tokens") + "tokenizer.ggml.tokens".len() + 8;
        assert_eq!(u64::from_le_bytes(b[at..at + 8].try_into().unwrap()), 64);
        put_u64(b, at, 1 << 60);
    });
    corrupt("an unknown metadata value type", &|b| {
        let at = find(b, b"test.flags") + "test.flags".len();
        b[at..at + 4].copy_from_slice(&77u32.to_le_bytes());
    });
    corrupt("a tensor pointing past the end", &|b| {
        // The last descriptor's offset field sits 8 bytes before the (aligned) data section.
        let name = b"blk.0.attn_q.weight";
        let at = find(b, name) + name.len() + 4 + 16 + 4;
        put_u64(b, at, 1 << 20);
    });
    corrupt("tensor dimensions whose product overflows", &|b| {
        let name = b"token_embd.weight";
        let at = find(b, name) + name.len() + 4;
        put_u64(b, at, 1 << 40);
        put_u64(b, at + 8, 1 << 40);
    });
    corrupt("1000 tensor dimensions", &|b| {
        let name = b"output_norm.weight";
        let at = find(b, name) + name.len();
        b[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
    });
}

#[test]
fn unsupported_tensor_types_name_the_type_and_the_tensor() {
    let mut w = base_writer();
    w.tensor("blk.0.attn_k.weight", 24, &[256, 1], vec![0u8; 256]);
    let msg = expect_error(&w.to_bytes(), "I8 tensor");
    assert!(
        msg.contains("I8") && msg.contains("blk.0.attn_k.weight") && msg.contains("IQ2_XXS, "),
        "the message names the type, the tensor and what kiln reads: {msg}"
    );

    let mut w = base_writer();
    w.tensor("blk.0.attn_v.weight", 99, &[32, 1], vec![0u8; 32]);
    expect_error(&w.to_bytes(), "type 99");
}

#[test]
fn rows_must_be_whole_blocks() {
    let mut w = base_writer();
    w.tensor("blk.0.attn_v.weight", 8, &[33, 1], vec![0u8; 68]);
    expect_error(&w.to_bytes(), "Q8_0 row of 33 values");
}

#[test]
fn bad_configuration_values_are_errors_not_panics() {
    let cases: [(&str, V); 4] = [
        ("llama.attention.head_count", V::U32(0)),
        ("llama.attention.head_count_kv", V::U32(3)),
        ("llama.embedding_length", V::U64(1 << 40)),
        ("llama.block_count", string("thirty")),
    ];
    for (key, value) in cases {
        let mut w = base_writer();
        w.kv(key, value);
        let g = parse(&w.to_bytes()).expect("the GGUF layer itself is fine");
        let err = match ModelFile::from_gguf(g) {
            Ok(_) => panic!("{key}: bad value accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(LABEL), "{key}: {err}");
    }
    let mut w = base_writer();
    w.kv("general.architecture", string("rwkv7"));
    let err = ModelFile::from_gguf(parse(&w.to_bytes()).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("rwkv7") && err.contains("not supported"),
        "{err}"
    );
}
