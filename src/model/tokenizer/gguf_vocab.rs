//! How each GGUF tokenizer model (`tokenizer.ggml.model`) becomes a `tokenizers::Tokenizer`: BPE
//! merges as llama.cpp reads them, the pre-tokenizers of byte-level BPE, Gemma 4's space-escaped BPE,
//! BERT's WordPiece, and the merges equivalent to SentencePiece's scores.

use ahash::AHashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::pre_tokenizer::{self, Splitter};
use crate::error::{Error, Result};
use crate::gguf::Metadata;

/// GGUF `tokenizer.ggml.token_type` values.
pub(super) const TOKEN_TYPE_CONTROL: i64 = 3;
pub(super) const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// `tokenizer.ggml.merges` as pairs, split as llama.cpp splits them: at the first space after the
/// first character.
pub(super) fn gguf_merges(md: &Metadata) -> Result<Vec<(String, String)>> {
    let merges = md
        .str_array("tokenizer.ggml.merges")?
        .ok_or_else(|| tok_err("BPE needs tokenizer.ggml.merges"))?;
    merges
        .iter()
        .map(|m| {
            let split = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i)
                .ok_or_else(|| tok_err(format!("malformed merge {m:?}")))?;
            Ok((m[..split].to_string(), m[split + 1..].to_string()))
        })
        .collect()
}

pub(super) fn tok_err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

/// The pre-tokenizer of a BPE vocabulary: the splitter's regexes one after another (each
/// splitting what the last left), then (but for raw splitters) the byte-level mapping.
pub(super) fn byte_level_pre_tokenizer(splitter: Splitter) -> Result<PreTokenizerWrapper> {
    let (regexes, byte_level) = match splitter {
        Splitter::Regexes(list) => (list, true),
        Splitter::Raw(list) => (list, false),
        Splitter::Gpt2 | Splitter::SpaceEscaped => {
            return Ok(ByteLevel::new(false, true, true).into());
        }
    };
    let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(regexes.len() + 1);
    for re in regexes {
        let split = Split::new(
            SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tok_err(format!("bad pre-tokenizer regex {re:?}: {e}")))?;
        steps.push(split.into());
    }
    if byte_level {
        steps.push(ByteLevel::new(false, false, false).into());
    }
    Ok(PreSequence::new(steps).into())
}

/// The pieces a byte-level BPE vocabulary with `tokenizer.ggml.pre = pre` hands to its merges
/// (byte-level encoded, as llama.cpp's `unicode_regex_split` gives them): for tests and debugging.
pub fn pre_tokenize(pre: &str, text: &str) -> Result<Vec<String>> {
    use tokenizers::tokenizer::PreTokenizer as _;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString};
    let spec = pre_tokenizer::lookup(pre)
        .ok_or_else(|| tok_err(format!("unknown pre-tokenizer '{pre}'")))?;
    let mut pieces = PreTokenizedString::from(text);
    byte_level_pre_tokenizer(spec.splitter)?
        .pre_tokenize(&mut pieces)
        .map_err(|e| tok_err(e.to_string()))?;
    Ok(pieces
        .get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(piece, _, _)| piece.to_string())
        .collect())
}

/// BPE over raw UTF-8 with byte fallback, spaces written `▁` and lines split apart, as llama.cpp
/// runs Gemma 4's vocabulary (and the BPE vocabularies whose pre-tokenizer is built like it).
pub(super) fn space_escaped_bpe(
    vocab: AHashMap<String, u32>,
    merges: Vec<(String, String)>,
    tokens: &[&str],
    types: &[i64],
) -> Result<tokenizers::Tokenizer> {
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .build()
        .map_err(|e| tok_err(format!("cannot build the BPE: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    // llama.cpp: spaces become ▁, then merges run over whole lines (newline runs apart), with no
    // byte-level mapping.
    inner
        .with_normalizer(Some(
            Replace::new(" ", "▁").map_err(|e| tok_err(e.to_string()))?,
        ))
        .map_err(|e| tok_err(e.to_string()))?;
    inner.with_pre_tokenizer(Some(
        Split::new(
            SplitPattern::Regex("[^\n]+|\n+".into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tok_err(e.to_string()))?,
    ));
    inner.with_decoder(Some(DecoderSequence::new(vec![
        Replace::new("▁", " ")
            .map_err(|e| tok_err(e.to_string()))?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])));
    // llama.cpp takes a run of newlines that the vocabulary has whole as that token, before any
    // merge: added tokens do the same here.
    let runs: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|&(t, &ty)| {
            ty != TOKEN_TYPE_CONTROL && !t.is_empty() && t.chars().all(|c| c == '\n')
        })
        .map(|(t, _)| AddedToken::from(t.to_string(), false).normalized(false))
        .collect();
    inner.add_tokens(runs).map_err(|e| tok_err(e.to_string()))?;
    Ok(inner)
}

/// BERT's WordPiece as llama.cpp runs it (`llm_tokenizer_wpm`): text lower-cased with accents and
/// control characters removed, split at whitespace, punctuation and CJK characters, then each word
/// matched greedily, longest piece first, a word with any unmatched rest becoming `[UNK]` whole.
/// llama.cpp's GGUF writes a word's first piece `▁piece` and the others bare, where Hugging Face's
/// WordPiece wants `piece` and `##piece`: the vocabulary is turned back.
pub(super) fn wordpiece(
    tokens: &[&str],
    types: &[i64],
    unk: Option<u32>,
) -> Result<tokenizers::Tokenizer> {
    let form = |t: &str, ty: i64| -> String {
        if let Some(word_start) = t.strip_prefix('▁') {
            word_start.to_string()
        } else if ty == TOKEN_TYPE_CONTROL || (t.starts_with('[') && t.ends_with(']')) {
            t.to_string()
        } else {
            format!("##{t}")
        }
    };
    let vocab: AHashMap<String, u32> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (t, &ty))| (form(t, ty), i as u32))
        .collect();
    let unk = match unk {
        Some(id) => tokens[id as usize].to_string(),
        None => "[UNK]".to_string(),
    };
    let model = WordPiece::builder()
        .vocab(vocab)
        .unk_token(unk)
        .continuing_subword_prefix("##".into())
        .build()
        .map_err(|e| tok_err(format!("cannot build WordPiece: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(model);
    inner
        .with_normalizer(Some(BertNormalizer::new(true, true, None, true)))
        .map_err(|e| tok_err(e.to_string()))?;
    inner.with_pre_tokenizer(Some(BertPreTokenizer));
    inner.with_decoder(Some(WordPieceDecoder::default()));
    Ok(inner)
}

/// BPE merges equivalent to SentencePiece's score-ordered merging: every split of every piece into
/// two pieces of the vocabulary, ranked by the merged piece's score (best first), ties broken by
/// the lengths of the halves as Hugging Face's converter does.
pub(super) fn sentencepiece_merges(
    tokens: &[&str],
    scores: &[f32],
    vocab: &AHashMap<String, u32>,
) -> Vec<(String, String)> {
    // (score, left id, right id, left length in bytes, right length): the pieces themselves are
    // looked up by id only once the order is known.
    let mut merges: Vec<(f32, u32, u32, u32, u32)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        for (split, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(split);
            if let Some(&lid) = vocab.get(l)
                && let Some(&rid) = vocab.get(r)
            {
                merges.push((scores[id], lid, rid, l.len() as u32, r.len() as u32));
            }
        }
    }
    // (left, right) pairs are unique, so the order is total and an unstable sort gives it.
    merges.sort_unstable_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.3.cmp(&b.3))
            .then_with(|| a.4.cmp(&b.4))
            .then_with(|| (a.1, a.2).cmp(&(b.1, b.2)))
    });
    merges
        .into_iter()
        .map(|(_, l, r, _, _)| {
            (
                tokens[l as usize].to_string(),
                tokens[r as usize].to_string(),
            )
        })
        .collect()
}
