//! Rotary position embedding tables: for each position, the (cos, sin) of every frequency of a
//! head, computed in f64 on the host (exact to f32 rounding at any position) and uploaded once per
//! forward call for all layers that share them.

use super::config::RopeScaling;

#[derive(Debug, Clone, PartialEq)]
pub struct RopeFreqs {
    /// Angle per position of each of the head_dim/2 rotation pairs.
    inv_freq: Vec<f64>,
}

impl RopeFreqs {
    pub fn new(head_dim: usize, theta: f32, scaling: Option<&RopeScaling>) -> RopeFreqs {
        let half = head_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = (theta as f64).powf(-2.0 * i as f64 / head_dim as f64);
                match scaling {
                    None => f,
                    Some(RopeScaling::Linear { factor }) => f / *factor as f64,
                    Some(RopeScaling::PerFrequency { divisors }) => f / divisors[i] as f64,
                }
            })
            .collect();
        RopeFreqs { inv_freq }
    }

    /// Fill `out` with `rows` rows of head_dim values: (cos, sin) pairs for positions
    /// `start_pos..start_pos + rows`.
    pub fn table(&self, start_pos: usize, rows: usize, out: &mut Vec<f32>) {
        let half = self.inv_freq.len();
        out.clear();
        out.reserve(rows * half * 2);
        for r in 0..rows {
            let pos = (start_pos + r) as f64;
            for &f in &self.inv_freq {
                let (s, c) = (pos * f).sin_cos();
                out.push(c as f32);
                out.push(s as f32);
            }
        }
    }
}
