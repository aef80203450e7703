//! Rotary position embedding tables: for each position, the (cos, sin) of every frequency of a
//! head, computed on the host once per forward call for all layers that share them. The arithmetic
//! is llama.cpp's rope cache (f32 angles by repeated multiplication, libm `cosf`/`sinf`), so
//! kiln's rotations round as llama.cpp's do.

use super::config::RopeScaling;

#[derive(Debug, Clone, PartialEq)]
pub struct RopeFreqs {
    half: usize,
    /// base^(−2/head_dim): the ratio between successive frequencies.
    theta_scale: f32,
    /// Linear position scaling (1/factor).
    freq_scale: f32,
    /// Per-frequency divisors (Llama 3), if any.
    divisors: Option<Vec<f32>>,
}

impl RopeFreqs {
    pub fn new(head_dim: usize, theta: f32, scaling: Option<&RopeScaling>) -> RopeFreqs {
        let (freq_scale, divisors) = match scaling {
            None => (1.0, None),
            Some(RopeScaling::Linear { factor }) => (1.0 / factor, None),
            Some(RopeScaling::PerFrequency { divisors }) => (1.0, Some(divisors.clone())),
        };
        RopeFreqs {
            half: head_dim / 2,
            theta_scale: theta.powf(-2.0 / head_dim as f32),
            freq_scale,
            divisors,
        }
    }

    /// Fill `out` with `rows` rows of head_dim values: (cos, sin) pairs for positions
    /// `start_pos..start_pos + rows`.
    pub fn table(&self, start_pos: usize, rows: usize, out: &mut Vec<f32>) {
        out.clear();
        out.reserve(rows * self.half * 2);
        for r in 0..rows {
            self.push_row((start_pos + r) as f32, out);
        }
    }

    /// One row of (cos, sin) pairs for a position delta (negative to move keys back): the
    /// rotation that takes a key RoPE'd at p to p + delta.
    pub fn shift_table(&self, delta: i64, out: &mut Vec<f32>) {
        out.clear();
        self.push_row(delta as f32, out);
    }

    fn push_row(&self, pos: f32, out: &mut Vec<f32>) {
        let mut theta = pos;
        for i in 0..self.half {
            let divisor = self.divisors.as_ref().map_or(1.0, |d| d[i]);
            let angle = self.freq_scale * (theta / divisor);
            out.push(angle.cos());
            out.push(angle.sin());
            theta *= self.theta_scale;
        }
    }
}
