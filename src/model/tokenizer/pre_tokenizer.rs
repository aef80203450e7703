//! The pre-tokenizers of byte-level BPE vocabularies: every `tokenizer.ggml.pre` name that llama.cpp
//! knows (`src/llama-vocab.cpp` at 0c1e570), each with the regexes its model's tokenizer.json splits
//! the text by before BPE runs, and the two rules llama.cpp keys to the same name (whether a
//! pre-token that is whole in the vocabulary skips the merges, and whether BOS is added).
//!
//! The regexes are the models' own (tokenizer.json), not llama.cpp's rewrites of them: kiln runs
//! them through Oniguruma, which has the case-insensitive groups, class intersections and possessive
//! quantifiers that llama.cpp had to rewrite for `std::regex`. Several regexes in a list split one
//! after another, each the pieces the last one left (a tokenizer.json `Sequence` of `Split`s, as
//! llama.cpp's `unicode_regex_split` applies them).

/// How a pre-tokenizer splits text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Splitter {
    /// Hugging Face's `ByteLevel` pre-tokenizer with its built-in GPT-2 regex.
    Gpt2,
    /// These regexes one after another, then the byte-level mapping.
    Regexes(&'static [&'static str]),
    /// These regexes one after another over raw UTF-8, no byte-level mapping (jina's Chinese
    /// embeddings, `whitespace`).
    Raw(&'static [&'static str]),
    /// No byte-level mapping: spaces become `▁`, lines split apart, merges over raw UTF-8 with byte
    /// fallback (Gemma 4's vocabulary and those built like it).
    SpaceEscaped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreTokenizer {
    pub splitter: Splitter,
    /// A pre-token that is in the vocabulary whole is that token (tiktoken's rule), merges or not.
    pub ignore_merges: bool,
    /// BOS is added unless the file says otherwise.
    pub add_bos: bool,
}

/// GPT-2's regex, for the lists that run it after others.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
pub const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const JAIS2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}";
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's: letters keep their combining marks (Khmer, Devanagari, … stay whole words).
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// o200k's (gpt-oss, Llama 4): words split where lower case turns to upper, contractions in either
/// case, digits in threes, punctuation runs keeping trailing newlines and slashes.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's tekken: o200k's without contractions, digits one at a time.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GRANITE_EMB_MULTI: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const KIMI_K2: &str = r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Digit runs in threes from the right (1234567 → 1, 234, 567).
const DIGITS_IN_THOUSANDS: &str = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))";
/// DeepSeek V3's (also Hunyuan dense, JoyAI, HY v4): digits in threes, CJK runs, then words that
/// keep one leading ASCII punctuation mark.
const DEEPSEEK3: [&str; 3] = [
    r"\p{N}{1,3}",
    r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];
const BLOOM: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";

const fn regexes(list: &'static [&'static str]) -> PreTokenizer {
    PreTokenizer {
        splitter: Splitter::Regexes(list),
        ignore_merges: false,
        add_bos: false,
    }
}

const fn merges_ignored(mut p: PreTokenizer) -> PreTokenizer {
    p.ignore_merges = true;
    p
}

const fn with_bos(mut p: PreTokenizer) -> PreTokenizer {
    p.add_bos = true;
    p
}

const GPT2_STYLE: PreTokenizer = PreTokenizer {
    splitter: Splitter::Gpt2,
    ignore_merges: false,
    add_bos: false,
};

/// llama.cpp's pre-tokenizer for a file with no `tokenizer.ggml.pre`, or `default`.
const DEFAULT: PreTokenizer =
    regexes(&[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]);
/// StarCoder's and the others that split digits one by one before GPT-2's regex.
const STARCODER: PreTokenizer = regexes(&[r"\p{N}", GPT2]);

/// Every name llama.cpp knows, with what it stands for.
pub const TABLE: &[(&[&str], PreTokenizer)] = &[
    (&["default"], DEFAULT),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        with_bos(merges_ignored(regexes(&[LLAMA3]))),
    ),
    (&["dbrx", "smaug-bpe", "chatglm-bpe"], regexes(&[LLAMA3])),
    (&["glm4", "glm5"], merges_ignored(regexes(&[LLAMA3]))),
    (&["jais-2"], regexes(&[JAIS2])),
    (
        &["minicpm5"],
        merges_ignored(regexes(&[
            r"\p{N}{1,3}",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ])),
    ),
    (
        &["deepseek-llm"],
        regexes(&[
            "[\r\n]",
            r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
            r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
            r"\s+$",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}+",
        ]),
    ),
    (
        &["deepseek-coder"],
        regexes(&[
            "[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}",
        ]),
    ),
    (
        &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        regexes(&DEEPSEEK3),
    ),
    (
        &["spark2_5"],
        regexes(&[
            r"\p{N}{1,3}",
            r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
            r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
            r"\p{N}",
        ]),
    ),
    (
        &["youtu"],
        merges_ignored(regexes(&[
            r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ])),
    ),
    (
        &["falcon"],
        regexes(&[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"]),
    ),
    (
        &[
            "gpt2",
            "gpt-2",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
        ],
        GPT2_STYLE,
    ),
    (
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        STARCODER,
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "megrez",
            "grok-2",
        ],
        regexes(&[QWEN2]),
    ),
    (&["qwen35"], regexes(&[QWEN35])),
    (&["poro-chat", "bloom", "gpt3-finnish"], regexes(&[BLOOM])),
    (&["viking"], regexes(&[BLOOM, r"\p{N}"])),
    (&["tekken"], with_bos(merges_ignored(regexes(&[TEKKEN])))),
    (
        &["chameleon"],
        with_bos(regexes(&[
            r"<sentinel:[0-9]+>",
            r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            r"([\t\n]|    |  )",
            r"\p{N}",
            r"[\p{P}!-/:-@\[-`{-~]",
            GPT2,
        ])),
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        regexes(&[GPT4O]),
    ),
    (
        &["granite-embed-multi-97m"],
        merges_ignored(regexes(&[GRANITE_EMB_MULTI])),
    ),
    (
        &["tiny_aya", "cohere2moe"],
        regexes(&[
            r"\d{1,3}(?=(?:\d{3})*\b)",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ]),
    ),
    (&["kimi-k2"], regexes(&[KIMI_K2])),
    (
        &["superbpe"],
        regexes(&[r"\p{N}+", r"\d{1,3}(?=(?:\d{3})*(?!\d))"]),
    ),
    (
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        regexes(&[
            r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        ]),
    ),
    (
        &["seed-coder"],
        regexes(&[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
        ]),
    ),
    (
        &["ufakzeka"],
        regexes(&[
            r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ]),
    ),
    (
        &["afmoe"],
        regexes(&[
            DIGITS_IN_THOUSANDS,
            r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{8C48}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+",
            r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
        ]),
    ),
    (&["laguna"], regexes(&["[^\n]+|[\n]+", QWEN2])),
    (
        &["exaone-moe"],
        regexes(&[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
        ]),
    ),
    (
        &["whitespace"],
        PreTokenizer {
            splitter: Splitter::Raw(&[r"\S+"]),
            ignore_merges: false,
            add_bos: false,
        },
    ),
    (
        &["gemma4", "granite-embed-multi-311m", "sarvam-moe"],
        PreTokenizer {
            splitter: Splitter::SpaceEscaped,
            ignore_merges: false,
            add_bos: false,
        },
    ),
];

/// The pre-tokenizer `tokenizer.ggml.pre = name` stands for, or None for a name llama.cpp does
/// not know either.
pub fn lookup(name: &str) -> Option<PreTokenizer> {
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every regex in the table compiles in Oniguruma (a bad one would only show on a file that
    /// names it), and no name is listed twice.
    #[test]
    fn every_regex_compiles_and_every_name_is_listed_once() {
        let mut names = std::collections::HashSet::new();
        let mut checked = 0;
        for (list, pre) in TABLE {
            for name in *list {
                assert!(names.insert(*name), "{name} is listed twice");
            }
            if let Splitter::Regexes(regexes) | Splitter::Raw(regexes) = pre.splitter {
                for re in regexes {
                    tokenizers::utils::SysRegex::new(re)
                        .unwrap_or_else(|e| panic!("{list:?}: {re}: {e}"));
                    checked += 1;
                }
            }
        }
        assert!(
            names.len() > 90 && checked > 40,
            "{} {checked}",
            names.len()
        );
    }
}
