//! Rotary position embedding tables: for each position, the (cos, sin) of every frequency of a
//! head, computed on the host once per forward call for all layers that share them. The arithmetic
//! is llama.cpp's rope cache (f32 angles by repeated multiplication, libm `cosf`/`sinf`), so
//! kiln's rotations round as llama.cpp's do. A table covers the rotated dimensions of a head
//! (all of them, or the leading `rope.dimension_count`: Qwen3.5, GLM-4, Phi-4-mini); with IMRoPE
//! sections, pairs outside the text sections get angle 0 (unrotated), as llama.cpp's mrope cache
//! gives text tokens. LongRoPE's divisors depend on the session's context, so a table is made
//! for one.

use super::config::RopeScaling;

#[derive(Debug, Clone, PartialEq)]
pub struct RopeFreqs {
    half: usize,
    /// base^(−2/head_dim): the ratio between successive frequencies.
    theta_scale: f32,
    /// Linear position scaling (1/factor).
    freq_scale: f32,
    /// Per-frequency divisors (Llama 3; LongRoPE's short ones), if any.
    divisors: Option<Vec<f32>>,
    /// LongRoPE's long divisors, and the context past which a session takes them.
    long: Option<(usize, Vec<f32>)>,
    /// The factor on cos and sin (YaRN's magnitude, LongRoPE's attention factor; 1 without).
    mscale: f32,
    /// Per pair under IMRoPE sections: which position component turns it (0 time, 1 row,
    /// 2 column), or None where the extra section leaves it unrotated.
    components: Option<Vec<Option<usize>>>,
    /// YaRN's correction range, when the model scales RoPE that way.
    yarn: Option<YarnRamp>,
}

/// YaRN as llama.cpp computes it (`ggml_rope_yarn_corr_dims`, `rope_yarn`): pairs below `low`
/// keep their frequency, pairs above `high` take the interpolated one (× `freq_scale`), a linear
/// ramp between.
#[derive(Debug, Clone, PartialEq)]
struct YarnRamp {
    low: f32,
    high: f32,
}

impl YarnRamp {
    fn new(dims: usize, theta: f32, original: usize, beta: (f32, f32)) -> Self {
        let corr_dim = |rotations: f32| {
            dims as f32 * (original as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * theta.ln())
        };
        YarnRamp {
            low: corr_dim(beta.0).floor().max(0.0),
            high: corr_dim(beta.1).ceil().min(dims as f32 - 1.0),
        }
    }

    /// The share of the unscaled frequency in pair `i`'s angle.
    fn extrapolation(&self, i: usize) -> f32 {
        let y = (i as f32 - self.low) / (self.high - self.low).max(0.001);
        1.0 - y.clamp(0.0, 1.0)
    }
}

impl RopeFreqs {
    /// Frequencies for `dims` rotated dimensions per head (head_dim, or fewer for partial RoPE),
    /// with IMRoPE `sections` when the model has them.
    pub fn new(
        dims: usize,
        theta: f32,
        scaling: Option<&RopeScaling>,
        sections: Option<[usize; 4]>,
    ) -> RopeFreqs {
        let (freq_scale, divisors) = match scaling {
            None => (1.0, None),
            Some(RopeScaling::Linear { factor } | RopeScaling::Yarn { factor, .. }) => {
                (1.0 / factor, None)
            }
            Some(RopeScaling::PerFrequency { divisors }) => (1.0, Some(divisors.clone())),
            Some(RopeScaling::LongRope { short, .. }) => (1.0, Some(short.clone())),
        };
        let (long, mscale) = match scaling {
            Some(RopeScaling::LongRope {
                long,
                original_context,
                magnitude,
                ..
            }) => (Some((*original_context, long.clone())), *magnitude),
            Some(RopeScaling::Yarn { magnitude, .. }) => (None, *magnitude),
            _ => (None, 1.0),
        };
        let yarn = match scaling {
            Some(&RopeScaling::Yarn {
                original_context,
                beta_fast,
                beta_slow,
                ..
            }) => Some(YarnRamp::new(
                dims,
                theta,
                original_context,
                (beta_fast, beta_slow),
            )),
            _ => None,
        };
        RopeFreqs {
            half: dims / 2,
            theta_scale: theta.powf(-2.0 / dims as f32),
            freq_scale,
            divisors,
            long,
            mscale,
            components: sections.map(|s| imrope_components(s, dims / 2)),
            yarn,
        }
    }

    /// Fill `out` with `rows` rows of `dims` values: (cos, sin) pairs for positions
    /// `start_pos..start_pos + rows`, in a session of `ctx` positions (LongRoPE's choice).
    pub fn table(&self, start_pos: usize, rows: usize, ctx: usize, out: &mut Vec<f32>) {
        out.clear();
        out.reserve(rows * self.half * 2);
        let divisors = self.divisors_for(ctx);
        for r in 0..rows {
            let p = (start_pos + r) as f32;
            self.push_row([p; 3], divisors, self.mscale, out);
        }
    }

    /// As `table`, for rows at explicit (time, row, column) positions: an image's tokens under
    /// multi-axis RoPE (text rows have all three equal). Models without IMRoPE sections take the
    /// time component.
    pub fn table_at(&self, positions: &[[u32; 3]], ctx: usize, out: &mut Vec<f32>) {
        out.clear();
        out.reserve(positions.len() * self.half * 2);
        let divisors = self.divisors_for(ctx);
        for p in positions {
            let p = p.map(|v| v as f32);
            self.push_row(p, divisors, self.mscale, out);
        }
    }

    /// One row of (cos, sin) pairs for a position delta (negative to move keys back): the
    /// rotation that takes a key RoPE'd at p to p + delta. (A pure rotation: YaRN's magnitude
    /// is in the key already.)
    pub fn shift_table(&self, delta: i64, ctx: usize, out: &mut Vec<f32>) {
        out.clear();
        self.push_row([delta as f32; 3], self.divisors_for(ctx), 1.0, out);
    }

    /// The per-frequency divisors a session of `ctx` positions uses.
    fn divisors_for(&self, ctx: usize) -> Option<&[f32]> {
        match &self.long {
            Some((original, long)) if ctx > *original => Some(long),
            _ => self.divisors.as_deref(),
        }
    }

    /// One row of (cos, sin) pairs. Each component's angle is built by repeated f32
    /// multiplication, as llama.cpp's (m)rope cache builds it.
    fn push_row(&self, pos: [f32; 3], divisors: Option<&[f32]>, mscale: f32, out: &mut Vec<f32>) {
        let mut thetas = pos;
        for i in 0..self.half {
            let divisor = divisors.map_or(1.0, |d| d[i]);
            let component = match &self.components {
                None => Some(0),
                Some(c) => c[i],
            };
            let on = component.is_some();
            let extrap = thetas[component.unwrap_or(0)] / divisor;
            let mut angle = self.freq_scale * extrap;
            if let Some(y) = &self.yarn {
                let mix = y.extrapolation(i);
                angle = angle * (1.0 - mix) + extrap * mix;
            }
            if !on {
                angle = 0.0;
            }
            out.push(angle.cos() * mscale);
            out.push(angle.sin() * mscale);
            for theta in &mut thetas {
                *theta *= self.theta_scale;
            }
        }
    }
}

/// Which position component turns each rotary pair under interleaved multimodal RoPE (llama.cpp's
/// `ggml_mrope_cache_init` with IMROPE): pair i falls in sector i mod Σsections, and sectors
/// cycle through the time, row and column components, each up to 3× its section size; the rest
/// take the extra component, which is 0 for text and images alike (unrotated).
fn imrope_components(sections: [usize; 4], pairs: usize) -> Vec<Option<usize>> {
    let total: usize = sections.iter().sum();
    (0..pairs)
        .map(|i| {
            let sector = i % total.max(1);
            (0..3).find(|&c| sector % 3 == c && sector < 3 * sections[c])
        })
        .collect()
}

/// Whether each pair rotates for text, whose components are all equal (tests).
#[cfg(test)]
fn imrope_text_pairs(sections: [usize; 4], pairs: usize) -> Vec<bool> {
    imrope_components(sections, pairs)
        .iter()
        .map(Option::is_some)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imrope_sections_that_cover_every_pair_rotate_all_of_them() {
        assert!(imrope_text_pairs([2, 1, 1, 0], 4).iter().all(|&r| r));
        assert!(imrope_text_pairs([11, 11, 10, 0], 32).iter().all(|&r| r));
        // A fourth (extra) section, or sections short of the pairs, leave pairs unrotated.
        assert_eq!(
            imrope_text_pairs([1, 1, 1, 1], 4),
            vec![true, true, true, false]
        );
        assert_eq!(imrope_text_pairs([1, 0, 0, 0], 2), vec![true, true]);
        assert_eq!(
            imrope_text_pairs([1, 0, 1, 0], 4),
            vec![true, false, true, false]
        );
    }
}
