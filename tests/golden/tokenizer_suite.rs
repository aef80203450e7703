//! llama.cpp's own tokenizer suite (`tests/test-tokenizer-0.cpp`): every vocabulary-only
//! `ggml-vocab-*.gguf` of llama.cpp's tree that comes with texts (`.inp`, separated by
//! `\n__ggml_vocab_test__\n`) and the ids the model's own tokenizer gives them (`.out`, one line per
//! text), tokenized as that test does it: no BOS or EOS, control tokens in the text not parsed.
//! The files are fetched by scripts/fetch-models.sh into `models/ggml-vocab/`.

use crate::common;

use std::path::{Path, PathBuf};

use kiln::gguf::GgufFile;
use kiln::model::Tokenizer;

/// The suite's cases: (vocabulary file, text, expected ids).
fn cases(vocab: &Path) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let p = PathBuf::from(format!("{}.{ext}", vocab.display()));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    // As test-tokenizer-0 reads them: the separator ends the last text too, and adds no empty one.
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{}", vocab.display());
    texts.into_iter().map(String::from).zip(ids).collect()
}

fn suite_files() -> Vec<PathBuf> {
    let dir = common::models_dir().join("ggml-vocab");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run scripts/fetch-models.sh (or set KILN_MODELS)",
                dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "gguf")
                && PathBuf::from(format!("{}.inp", p.display())).is_file()
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_text_of_llama_cpp_tokenizer_suite_matches() {
    let files = suite_files();
    // The suite at llama.cpp 0c1e570: 15 vocabularies with texts, 694 texts.
    assert_eq!(files.len(), 15, "{files:?}");
    let mut total = 0;
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let gguf = GgufFile::open(file).unwrap();
        let mut tok = match Tokenizer::from_gguf(&gguf.metadata) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        tok.set_parse_special(false);
        let cases = cases(file);
        let mut wrong = 0;
        for (text, want) in &cases {
            total += 1;
            let got = tok.encode(text, false).unwrap();
            if &got != want {
                wrong += 1;
                if wrong <= 3 {
                    failures.push(format!("{name}: {text:?}\n  want {want:?}\n  got  {got:?}"));
                }
            }
        }
        if wrong > 0 {
            failures.push(format!("{name}: {wrong} of {} texts differ", cases.len()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(total, 694);
}

/// Where kiln's split departs from llama.cpp's on purpose. kiln runs each model's own regex
/// (tokenizer.json) in Oniguruma, the engine of Hugging Face's tokenizers; llama.cpp runs rewrites of
/// them, some in `std::regex`, and on these inputs the rewrites cut differently from the model's own
/// tokenizer. Each entry: the names, the texts it covers (a regex over the text), and why.
const DEPARTURES: [(&[&str], &str, &str); 5] = [
    (
        &[
            "gpt-4o",
            "llama4",
            "kanana2",
            "talkie",
            "minimax-m2",
            "tekken",
            "kimi-k2",
        ],
        r"\p{M}",
        "llama.cpp's lookahead rewrite of o200k-style regexes leaves \\p{M} out of the letter classes, \
         so a combining mark (Devanagari vowel signs, Khmer, é written e + U+0301) is cut from its \
         letter; tokenizer.json keeps it (llama.cpp itself adds \\p{M} back for granite-embed-multi-97m)",
    ),
    (
        &["tiny_aya", "cohere2moe", "youtu", "kimi-k2"],
        r"\p{Ll}\p{Lu}",
        "\\p{Lu} and \\p{Ll} collapse to one letter class in llama.cpp's std::regex path (and its \
         Kimi K2 splitter), so camelCase stays one piece; the models' regexes cut it where case turns",
    ),
    (
        &["tiny_aya", "cohere2moe"],
        r"[0-9]{4,}[^\W0-9]",
        "tokenizer.json groups digits by threes only before a word boundary (\\d{1,3}(?=(?:\\d{3})*\\b)); \
         llama.cpp swaps in AFMoE's splitter, which groups every run from the right",
    ),
    (
        &["deepseek-llm", "deepseek-coder"],
        "\u{3000}",
        "llama.cpp's \\s takes the ideographic space U+3000; Oniguruma's (and the model's tokenizer) \
         does not",
    ),
    (
        &["superbpe"],
        r"[\d--[0-9]]",
        "llama.cpp's \\d is ASCII; the model's regex engine takes every decimal digit (Arabic-Indic)",
    ),
];

/// Every pre-tokenizer llama.cpp knows cuts text where llama.cpp's `unicode_regex_split` does, on
/// the suite's texts and on scripts, digits and whitespace the suite leaves out
/// (`llama-cpp-pretokenize.json`, scripts/reference/make_pretokenizer_goldens.py), but for the
/// listed departures.
#[test]
fn every_pre_tokenizer_splits_like_llama_cpp() {
    let departures: Vec<(&[&str], regex::Regex)> = DEPARTURES
        .iter()
        .map(|&(names, texts, _)| (names, regex::Regex::new(texts).unwrap()))
        .collect();
    let mut used = vec![0; departures.len()];
    let golden = common::golden("llama-cpp-pretokenize.json");
    let texts = golden["texts"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut names = 0;
    let mut compared = 0;
    for case in golden["pre_tokenizers"].as_object().unwrap().values() {
        for name in case["names"].as_array().unwrap() {
            let name = name.as_str().unwrap();
            names += 1;
            for (text, want) in texts.iter().zip(case["pieces"].as_array().unwrap()) {
                let text = text.as_str().unwrap();
                let got = kiln::model::tokenizer::pre_tokenize(name, text).unwrap();
                let want: Vec<&str> = want
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap())
                    // llama.cpp leaves an empty piece where a zero-width match splits (superbpe's
                    // thousands): it adds no token.
                    .filter(|p| !p.is_empty())
                    .collect();
                if got == want {
                    compared += 1;
                    continue;
                }
                match departures
                    .iter()
                    .position(|(names, re)| names.contains(&name) && re.is_match(text))
                {
                    Some(d) => used[d] += 1,
                    None => {
                        failures.push(format!("{name}: {text:?}\n  want {want:?}\n  got  {got:?}"))
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} texts split otherwise:\n{}",
        failures.len(),
        failures[..failures.len().min(30)].join("\n")
    );
    assert!(
        names >= 85 && compared > 4500,
        "{names} names, {compared} texts"
    );
    // A departure no text needs any more is stale.
    for (d, n) in used.iter().enumerate() {
        assert!(*n > 0, "departure {:?} is never needed", DEPARTURES[d].0);
    }
}

/// Where kiln's BERT WordPiece departs from llama.cpp's on purpose: kiln normalizes as BERT's own
/// tokenizer does (Hugging Face's `BertNormalizer`, Python's `BasicTokenizer`).
const WORDPIECE_DEPARTURES: [(&str, &str, &str); 2] = [
    (
        "bert-bge",
        r"\p{Devanagari}",
        "accents are stripped as non-spacing marks (Mn) only; llama.cpp drops spacing marks too \
         (Devanagari's vowel signs ि and ा)",
    ),
    (
        "bert-bge",
        r"\p{Hangul}",
        "NFD splits Hangul syllables into jamo, as Unicode's decomposition does; llama.cpp's NFD \
         keeps them whole",
    ),
];

/// llama.cpp's ids beyond its suite (`llama-cpp-vocab-extra.json`,
/// scripts/reference/make_vocab_goldens.py): on every suite vocabulary, scripts with combining
/// marks, digit runs, case changes and whitespace runs; on the SentencePiece ones (Llama 2 and
/// Mistral, Phi-3), chats in their templates with special tokens parsed, where SentencePiece's
/// dummy prefix follows every special token.
#[test]
fn suite_vocabularies_match_llama_cpp_beyond_the_suite() {
    let golden = common::golden("llama-cpp-vocab-extra.json");
    let dir = common::models_dir().join("ggml-vocab");
    let departures: Vec<(&str, regex::Regex)> = WORDPIECE_DEPARTURES
        .iter()
        .map(|&(vocab, texts, _)| (vocab, regex::Regex::new(texts).unwrap()))
        .collect();
    let mut failures = Vec::new();
    let mut compared = 0;
    let mut departed = 0;
    for (group, parse_special) in [("plain", false), ("chat", true)] {
        for (vocab, cases) in golden[group].as_object().unwrap() {
            let file = dir.join(format!("ggml-vocab-{vocab}.gguf"));
            let mut tok = Tokenizer::from_gguf_file(&GgufFile::open(&file).unwrap()).unwrap();
            tok.set_parse_special(parse_special);
            for case in cases.as_array().unwrap() {
                let text = case["text"].as_str().unwrap();
                let want = common::golden_run::ids(&case["ids"]);
                let got = tok.encode(text, false).unwrap();
                compared += 1;
                let departs = departures
                    .iter()
                    .any(|(v, re)| v == vocab && re.is_match(text));
                if departs {
                    assert_ne!(got, want, "{vocab}: {text:?} no longer departs");
                    departed += 1;
                } else if got != want {
                    failures.push(format!(
                        "{vocab} ({group}): {text:?}\n  want {want:?}\n  got  {got:?}"
                    ));
                }
            }
        }
    }
    assert_eq!((compared, departed), (157, 2));
    assert!(
        failures.is_empty(),
        "{} texts differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
