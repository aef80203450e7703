//! Flag values with a special meaning, spelled as llama.cpp spells them so that scripts written for
//! llama.cpp run unchanged: `--seed -1` (a random seed), `--repeat-last-n -1` (the whole context),
//! `-t -1` (one thread per core). The same parsing serves batch requests' `seed` and
//! `repeat_last_n`, as llama.cpp's server takes them. (`--temp -1` and `-c 0` are plain numbers
//! with a meaning, handled where they are used.) Other negative values are refused with a message
//! that names the special one, instead of llama.cpp's silent wrap-around or fallback.

use std::fmt;
use std::str::FromStr;

use serde::de::{Deserialize, Deserializer, Visitor};

/// A whole number as typed, wide enough for every u64 and for negative values.
fn whole(s: &str) -> Result<i128, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))
}

/// A whole number in a JSON request (any u64, or a negative i64); `what` names it in errors.
fn json_whole<'de, D: Deserializer<'de>>(d: D, what: &'static str) -> Result<i128, D::Error> {
    struct Whole(&'static str);
    impl Visitor<'_> for Whole {
        type Value = i128;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_u64<E>(self, v: u64) -> Result<i128, E> {
            Ok(v.into())
        }
        fn visit_i64<E>(self, v: i64) -> Result<i128, E> {
            Ok(v.into())
        }
    }
    d.deserialize_any(Whole(what))
}

/// The random seed's source: a number, or -1 for a random one. llama.cpp's `-s -1` is its
/// `LLAMA_DEFAULT_SEED` (0xFFFFFFFF), which means "pick a random seed"; the server reads a
/// request's `"seed": -1` the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    Random,
    Fixed(u64),
}

impl Seed {
    fn from_whole(n: i128) -> Result<Seed, String> {
        match n {
            -1 => Ok(Seed::Random),
            n => u64::try_from(n).map(Seed::Fixed).map_err(|_| {
                format!(
                    "{n} is not a seed: give a whole number from 0 to {}, or -1 for a random seed",
                    u64::MAX
                )
            }),
        }
    }

    /// The seed to use: the one given, or a fresh random one.
    pub fn pick(self) -> u64 {
        match self {
            Seed::Fixed(n) => n,
            Seed::Random => random_seed(),
        }
    }
}

impl FromStr for Seed {
    type Err = String;
    fn from_str(s: &str) -> Result<Seed, String> {
        Seed::from_whole(whole(s)?)
    }
}

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seed, D::Error> {
        let n = json_whole(d, "a seed: a whole number, or -1 for a random one")?;
        Seed::from_whole(n).map_err(serde::de::Error::custom)
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

/// How many recent tokens the repetition penalties look at: N (0: none), or -1 for the whole
/// context, as llama.cpp's `--repeat-last-n -1` and its server's `"repeat_last_n": -1` (both
/// refuse anything below -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastN {
    Tokens(usize),
    Context,
}

impl LastN {
    fn from_whole(n: i128) -> Result<LastN, String> {
        match n {
            -1 => Ok(LastN::Context),
            n => usize::try_from(n).map(LastN::Tokens).map_err(|_| {
                format!("{n} is not a token count: give N ≥ 0, or -1 for the whole context")
            }),
        }
    }

    /// The count for a context of `ctx` tokens.
    pub fn tokens(self, ctx: usize) -> usize {
        match self {
            LastN::Tokens(n) => n,
            LastN::Context => ctx,
        }
    }
}

impl FromStr for LastN {
    type Err = String;
    fn from_str(s: &str) -> Result<LastN, String> {
        LastN::from_whole(whole(s)?)
    }
}

impl fmt::Display for LastN {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LastN::Tokens(n) => write!(f, "{n}"),
            LastN::Context => f.write_str("-1"),
        }
    }
}

impl<'de> Deserialize<'de> for LastN {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LastN, D::Error> {
        let n = json_whole(d, "a token count, or -1 for the whole context")?;
        LastN::from_whole(n).map_err(serde::de::Error::custom)
    }
}

/// `-t N`: N threads, or 0 or -1 for one per core (0 is what the CPU backend takes for that).
/// llama.cpp takes any N ≤ 0 to mean its default; kiln refuses the others, which are more
/// likely slips than intent.
pub fn threads(s: &str) -> Result<usize, String> {
    match whole(s)? {
        -1 => Ok(0),
        n => usize::try_from(n)
            .map_err(|_| format!("{n} is not a thread count: give N ≥ 1, or -1 for one per core")),
    }
}

/// Sequences that generate at once when `--parallel` is not given (llama-server's and ollama's).
pub const DEFAULT_PARALLEL: usize = 4;
/// The most sequences `--parallel` takes (each has a KV cache of its own).
pub const MAX_PARALLEL: usize = 256;

/// `--parallel N`: 1 to `MAX_PARALLEL`.
pub fn parse_parallel(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_PARALLEL).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of sequences from 1 to {MAX_PARALLEL}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_numbers_or_minus_one() {
        assert_eq!("-1".parse(), Ok(Seed::Random));
        assert_eq!("0".parse(), Ok(Seed::Fixed(0)));
        let max = u64::MAX.to_string();
        assert_eq!(max.parse(), Ok(Seed::Fixed(u64::MAX)));
        for bad in ["-2", "-5", "18446744073709551616", "1.5", "x"] {
            assert!(bad.parse::<Seed>().is_err(), "{bad}");
        }
        // JSON requests: every u64, and -1.
        let json = |s: &str| serde_json::from_str::<Seed>(s);
        assert_eq!(json("-1").ok(), Some(Seed::Random));
        assert_eq!(json(&max).ok(), Some(Seed::Fixed(u64::MAX)));
        assert!(json("-7").is_err() && json("\"3\"").is_err() && json("2.5").is_err());
    }

    #[test]
    fn last_n_is_a_count_or_the_context() {
        assert_eq!("-1".parse::<LastN>().map(|l| l.tokens(512)), Ok(512));
        assert_eq!("64".parse::<LastN>().map(|l| l.tokens(512)), Ok(64));
        assert_eq!("0".parse::<LastN>().map(|l| l.tokens(512)), Ok(0));
        assert!("-2".parse::<LastN>().is_err());
        assert_eq!(
            serde_json::from_str::<LastN>("-1").ok(),
            Some(LastN::Context)
        );
        assert!(serde_json::from_str::<LastN>("-3").is_err());
        assert_eq!(LastN::Context.to_string().parse(), Ok(LastN::Context));
    }

    #[test]
    fn threads_take_minus_one_as_the_default() {
        assert_eq!(threads("-1"), Ok(0));
        assert_eq!(threads("0"), Ok(0));
        assert_eq!(threads("3"), Ok(3));
        assert!(threads("-2").is_err() && threads("two").is_err());
    }
}
