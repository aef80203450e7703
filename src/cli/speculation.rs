//! Speculative decoding's flags, as llama.cpp spells them (`--spec-type`, `-md`,
//! `--spec-draft-n-max`, …), and the drafter they ask for: the text's own n-grams, a draft model
//! loaded beside the model (on the CPU or the GPU as `-ngld` places it), or the model's own
//! multi-token-prediction block.

use std::path::PathBuf;
use std::rc::Rc;

use anyhow::{Context, Result, bail};

use super::placement::GpuLayers;
use super::values::DEFAULT_PARALLEL;
use super::{AnyLoaded, BackendArgs, ModelArgs, load};
use crate::backend::Backend;
use crate::model::arch::KvCacheTypes;
use crate::model::generate::{DraftSource, Speculation};
use crate::model::session::DEFAULT_BATCH;
use crate::model::speculative::{
    Drafter, EditDrafter, ModelDrafter, NgramDrafter, NgramMapDrafter, check_draft_vocabulary,
};
use crate::model::{Session, Tokenizer};

#[derive(clap::Args, Debug, Clone)]
pub struct SpeculationArgs {
    /// Speculative decoding: a drafter proposes the next tokens and the model checks several per
    /// forward pass; greedy output is unchanged, sampled output distributed as without it.
    /// `ngram-simple` drafts from the text's own repeats (quotations, edits, code), `ngram-map-k`
    /// too, keyed on longer n-grams and remembering how much of each key's draft was kept,
    /// `ngram-edit` (kiln's own) keeps its place in the text being copied and learns its edits
    /// (a renamed variable is drafted renamed after its first use), `draft-simple` with the draft
    /// model of --spec-draft-model (the default when one is given), `draft-mtp` with the
    /// multi-token-prediction block of Qwen3.5 and GLM-4.5 files that carry one.
    /// Not with --logprobs
    #[arg(long, value_enum, value_name = "TYPE")]
    pub spec_type: Option<SpecType>,

    /// A smaller model of the same vocabulary that drafts for this one (llama.cpp's -md), e.g. a
    /// 0.5B for a 7B of its family; any path or hub name -m takes
    #[arg(long = "spec-draft-model", alias = "model-draft", value_name = "PATH")]
    pub draft_model: Option<PathBuf>,

    /// The draft model's layers on the GPU, as -ngl (llama.cpp's -ngld; default: as -ngl)
    #[arg(
        long = "spec-draft-ngl",
        alias = "n-gpu-layers-draft",
        value_name = "N",
        requires = "draft_model"
    )]
    pub draft_gpu_layers: Option<GpuLayers>,

    /// Most tokens drafted per pass (the length adapts below it: it doubles while drafts are
    /// accepted whole and falls back to what was accepted when not)
    #[arg(
        long = "spec-draft-n-max",
        alias = "draft-max",
        default_value_t = 16,
        value_name = "N"
    )]
    pub draft_max: usize,

    /// Fewest drafted tokens worth a verify pass; a shorter draft is dropped
    #[arg(
        long = "spec-draft-n-min",
        alias = "draft-min",
        default_value_t = 0,
        value_name = "N"
    )]
    pub draft_min: usize,

    /// The draft model (or MTP block) stops drafting where its own probability of its pick is
    /// below P
    #[arg(
        long = "spec-draft-p-min",
        alias = "draft-p-min",
        default_value_t = 0.0,
        value_name = "P"
    )]
    pub draft_p_min: f32,

    /// Benchmarking only, as llama.cpp's: drafts are kept at random, up to position i with
    /// probability P_i (comma-separated, one per drafted token, never increasing), whatever the
    /// model predicts: the speed at a chosen acceptance on any model. The text is not the model's
    #[arg(
        long = "spec-synth-rates",
        value_delimiter = ',',
        value_name = "P0,P1,..."
    )]
    pub synth_rates: Vec<f64>,

    /// Benchmarking only, as llama.cpp's: drafts kept at random at rates p, p², p³, … chosen so
    /// that a pass yields L tokens on average (the model's own one included; 1 to
    /// --spec-draft-n-max + 1). Instead of --spec-synth-rates
    #[arg(
        long = "spec-synth-len",
        value_name = "L",
        conflicts_with = "synth_rates"
    )]
    pub synth_len: Option<f64>,

    /// The synthetic rates the two flags above give, worked out once.
    #[arg(skip)]
    synthetic: std::sync::OnceLock<Vec<f64>>,

    /// ngram-map-k: tokens in the key n-gram (llama.cpp's default)
    #[arg(
        long = "spec-ngram-map-k-size-n",
        default_value_t = 12,
        value_name = "N"
    )]
    pub ngram_map_n: usize,

    /// ngram-map-k: most tokens drafted after a key (llama.cpp's default; --spec-draft-n-max
    /// caps it too)
    #[arg(
        long = "spec-ngram-map-k-size-m",
        default_value_t = 48,
        value_name = "N"
    )]
    pub ngram_map_m: usize,
}

/// Speculative decoding in `kiln bench`'s generation tests.
#[derive(Clone)]
pub struct BenchSpeculation {
    /// llama.cpp's name for the drafter.
    pub name: &'static str,
    /// The drafter; None: the model's multi-token-prediction block.
    pub drafter: Option<Rc<dyn Drafter>>,
    pub max_draft: usize,
    /// `--spec-synth-rates`: drafts kept at random with these rates; empty: as greedy keeps them.
    pub rates: Vec<f64>,
}

/// llama.cpp's names for the speculative decoding kinds kiln has, and kiln's own `ngram-edit`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecType {
    None,
    NgramSimple,
    NgramMapK,
    NgramEdit,
    DraftSimple,
    DraftMtp,
}

/// llama.cpp's rates for a mean synthetic acceptance length `len` over `n_max` drafted tokens
/// (`common_speculative_synth_rates_resolve`): p, p², …, p^n_max with 1 + Σ pⁱ = len, p found by
/// bisection.
fn rates_for_length(len: f64, n_max: usize) -> std::result::Result<Vec<f64>, String> {
    let most = n_max as f64 + 1.0;
    if n_max == 0 || !len.is_finite() || !(1.0..=most).contains(&len) {
        return Err(format!(
            "a mean length must be within 1 and {most} (--spec-draft-n-max + 1), not {len}"
        ));
    }
    let length_of = |p: f64| (1..=n_max as i32).map(|i| p.powi(i)).sum::<f64>();
    let p = if len == most {
        1.0
    } else if len == 1.0 {
        0.0
    } else {
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..32 {
            let mid = 0.5 * (lo + hi);
            if length_of(mid) < len - 1.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    };
    Ok((1..=n_max as i32).map(|i| p.powi(i)).collect())
}

impl SpeculationArgs {
    /// Check the flags' combination (before any model loads).
    pub fn validate(&self) -> Result<()> {
        self.kind()?;
        if !self.rates().is_empty() {
            eprintln!(
                "warning: synthetic acceptance keeps drafts at random, for benchmarking: the text \
                 is not the model's"
            );
        }
        Ok(())
    }

    /// The synthetic acceptance rates: `--spec-synth-rates`, or those of `--spec-synth-len`
    /// (empty where its length is invalid: `kind` says why).
    fn rates(&self) -> &[f64] {
        self.synthetic.get_or_init(|| match self.synth_len {
            Some(len) => rates_for_length(len, self.draft_max).unwrap_or_default(),
            None => self.synth_rates.clone(),
        })
    }

    /// The kind of speculation asked for: `--spec-type`, else `draft-simple` with a draft model.
    fn kind(&self) -> Result<SpecType> {
        let kind = match (self.spec_type, &self.draft_model) {
            (Some(kind), _) => kind,
            (None, Some(_)) => SpecType::DraftSimple,
            (None, None) => SpecType::None,
        };
        if kind == SpecType::DraftSimple && self.draft_model.is_none() {
            bail!(super::FlagError(
                "--spec-type draft-simple needs a draft model: --spec-draft-model (-md) PATH"
                    .into()
            ));
        }
        if self.draft_model.is_some() && kind != SpecType::DraftSimple {
            bail!(super::FlagError(format!(
                "--spec-draft-model drafts with --spec-type draft-simple, not {kind:?}"
            )));
        }
        if let Some(len) = self.synth_len {
            if kind == SpecType::None {
                bail!(super::FlagError(
                    "--spec-synth-len measures speculative decoding: give a --spec-type".into()
                ));
            }
            rates_for_length(len, self.draft_max)
                .map_err(|e| super::FlagError(format!("--spec-synth-len: {e}")))?;
        }
        if !self.synth_rates.is_empty() {
            if kind == SpecType::None {
                bail!(super::FlagError(
                    "--spec-synth-rates measures speculative decoding: give a --spec-type".into()
                ));
            }
            if self.synth_rates.len() != self.draft_max {
                bail!(super::FlagError(format!(
                    "--spec-synth-rates needs one rate per drafted token: {} for --spec-draft-n-max \
                     {}, got {}",
                    self.draft_max,
                    self.draft_max,
                    self.synth_rates.len()
                )));
            }
            crate::model::generate::check_synthetic_rates(&self.synth_rates)
                .map_err(|e| super::FlagError(format!("--spec-synth-rates: {e}")))?;
        }
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            bail!(super::FlagError(format!(
                "--spec-draft-p-min is a probability, not {}",
                self.draft_p_min
            )));
        }
        Ok(kind)
    }

    /// Load the draft model, when these flags name one, placed as the model's flags place the
    /// model but with --spec-draft-ngl's layers on the GPU. Its context is the model's.
    pub fn load_draft(
        &self,
        backend: &BackendArgs,
        ctx: Option<usize>,
        cache: KvCacheTypes,
    ) -> Result<Option<AnyLoaded>> {
        if self.kind()? != SpecType::DraftSimple {
            return Ok(None);
        }
        let Some(path) = &self.draft_model else {
            return Ok(None);
        };
        let mut backend = backend.clone();
        if let Some(layers) = self.draft_gpu_layers {
            backend.placement.n_gpu_layers = layers;
        }
        let model = ModelArgs {
            model: path.clone(),
        };
        load(&model, &backend, ctx, cache, false)
            .with_context(|| format!("loading the draft model {}", path.display()))
            .map(Some)
    }

    /// The drafter these flags ask for: `draft` is what `load_draft` loaded, `target` the model's
    /// tokenizer (the draft's must match it) and `ctx` the model's context size.
    pub fn drafter<'d>(
        &self,
        draft: Option<&'d AnyLoaded>,
        target: &Tokenizer,
        ctx: usize,
        cache: KvCacheTypes,
    ) -> Result<Option<Box<dyn Drafter + Send + 'd>>> {
        Ok(match (self.kind()?, draft) {
            (SpecType::None | SpecType::DraftMtp, _) => None,
            (kind @ (SpecType::NgramSimple | SpecType::NgramEdit | SpecType::NgramMapK), _) => {
                self.ngram_drafter(kind)
            }
            (SpecType::DraftSimple, None) => None,
            (SpecType::DraftSimple, Some(draft)) => {
                let p_min = self.draft_p_min;
                macro_rules! drafter {
                    ($loaded:expr) => {{
                        check_draft_vocabulary(target, &$loaded.tokenizer)?;
                        let session =
                            Session::with_options(&$loaded.model, ctx, DEFAULT_BATCH, cache)?;
                        Box::new(ModelDrafter::new(session, p_min)) as Box<dyn Drafter + Send + 'd>
                    }};
                }
                Some(match draft {
                    AnyLoaded::Cpu(l) => drafter!(l),
                    AnyLoaded::Gpu(l) => drafter!(l),
                    AnyLoaded::Split(l) => drafter!(l),
                })
            }
        })
    }

    /// The drafter of an n-gram kind (None for the others).
    fn ngram_drafter(&self, kind: SpecType) -> Option<Box<dyn Drafter + Send>> {
        Some(match kind {
            SpecType::NgramSimple => Box::new(NgramDrafter::default()),
            SpecType::NgramEdit => Box::new(EditDrafter::default()),
            SpecType::NgramMapK => {
                Box::new(NgramMapDrafter::new(self.ngram_map_n, self.ngram_map_m))
            }
            _ => return None,
        })
    }

    /// What `kiln bench` measures of these flags: none, the text's n-grams or the model's
    /// multi-token-prediction block (a draft model is not measured there).
    pub fn for_bench(&self) -> Result<Option<BenchSpeculation>> {
        let kind = self.kind()?;
        match kind {
            SpecType::None => return Ok(None),
            SpecType::NgramSimple
            | SpecType::NgramMapK
            | SpecType::NgramEdit
            | SpecType::DraftMtp => {}
            SpecType::DraftSimple => bail!(super::FlagError(
                "kiln bench measures --spec-type draft-mtp and the ngram types; time a draft \
                 model with kiln run -v"
                    .into()
            )),
        };
        Ok(Some(BenchSpeculation {
            name: match kind {
                SpecType::NgramMapK => "ngram-map-k",
                SpecType::NgramEdit => "ngram-edit",
                SpecType::DraftMtp => "draft-mtp",
                _ => "ngram-simple",
            },
            drafter: self
                .ngram_drafter(kind)
                .map(|d| Rc::from(d as Box<dyn Drafter>)),
            max_draft: self.draft_max,
            rates: self.rates().to_vec(),
        }))
    }

    /// `--parallel` as given, else the default: one sequence where the model's own
    /// multi-token-prediction block drafts (it follows one sequence), else `DEFAULT_PARALLEL`.
    pub fn parallel(&self, given: Option<usize>) -> usize {
        given.unwrap_or(if self.wants_mtp() {
            1
        } else {
            DEFAULT_PARALLEL
        })
    }

    /// Whether the model's multi-token-prediction block must be loaded (`--spec-type draft-mtp`).
    pub fn wants_mtp(&self) -> bool {
        self.spec_type == Some(SpecType::DraftMtp)
    }

    /// Make `session` ready for the drafter: with `draft-mtp`, the model's multi-token-prediction
    /// block follows it (an error for a model without one). Before the session's first token.
    pub fn prepare<B: Backend>(&self, session: &mut Session<B>) -> Result<()> {
        if self.kind()? == SpecType::DraftMtp {
            if session.model().config.nextn_layers == 0 {
                bail!(super::FlagError(format!(
                    "--spec-type draft-mtp: this {} file has no multi-token-prediction block \
                     (nextn_predict_layers); Qwen3.5 files converted with their MTP weights have one",
                    session.model().config.arch.name()
                )));
            }
            session.enable_mtp()?;
        }
        Ok(())
    }

    /// The generation setting for `drafter` (from `drafter()`), or for the model's own
    /// multi-token-prediction block (`prepare`).
    pub fn speculation<'a>(
        &'a self,
        drafter: &'a Option<Box<dyn Drafter + Send + '_>>,
    ) -> Option<Speculation<'a>> {
        let source = match drafter.as_deref() {
            Some(d) => DraftSource::Drafter(d as &dyn Drafter),
            None if self.spec_type == Some(SpecType::DraftMtp) => DraftSource::Mtp {
                p_min: self.draft_p_min,
            },
            None => return None,
        };
        Some(Speculation {
            drafter: source,
            max_draft: self.draft_max,
            min_draft: self.draft_min,
            synthetic: (!self.rates().is_empty()).then_some(self.rates()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::rates_for_length;

    /// llama.cpp's rule: p, p², … whose sum plus the model's own token is the mean length asked
    /// for; the ends of the range keep every draft or none; lengths outside it are refused.
    #[test]
    fn a_mean_length_gives_geometric_rates_that_add_up_to_it() {
        for (len, n_max) in [(2.8, 3), (1.5, 1), (4.0, 8), (2.0, 2)] {
            let rates = rates_for_length(len, n_max).unwrap();
            assert_eq!(rates.len(), n_max);
            let mean = 1.0 + rates.iter().sum::<f64>();
            assert!((mean - len).abs() < 1e-6, "{len}, {n_max}: {rates:?}");
            for pair in rates.windows(2) {
                assert!((pair[1] - pair[0] * rates[0]).abs() < 1e-12, "{rates:?}");
            }
        }
        assert_eq!(rates_for_length(3.0, 2).unwrap(), [1.0, 1.0]);
        assert_eq!(rates_for_length(1.0, 2).unwrap(), [0.0, 0.0]);
        for (len, n_max) in [(3.5, 2), (0.9, 2), (f64::NAN, 2), (2.0, 0)] {
            assert!(rates_for_length(len, n_max).is_err(), "{len}, {n_max}");
        }
    }
}
