//! A sequence's recurrent state in a model with recurrent blocks (Qwen3.5): per Gated DeltaNet
//! block, the convolution's last K−1 input rows and the DeltaNet matrices. It lives beside the KV
//! cache of the attention blocks, allocated once per session.
//!
//! A KV cache can be cut back to any length by forgetting rows; a recurrent state cannot, since
//! it folds every token in. So the state is copied at checkpoints (token counts) the session
//! chooses — the end of each prefill and reply, and every `CHECKPOINT_INTERVAL` tokens — and
//! rolling back to n tokens restores the nearest checkpoint at or before n, from which the
//! session recomputes the rest. Checkpoint slots are allocated on first use and at most
//! `MAX_CHECKPOINTS` are kept (the oldest give way), which bounds their memory.
//!
//! Speculative decoding's verify pass runs drafted tokens the model may reject. During it the
//! state after each of its rows is copied into slots of their own (`begin_verify`: the DeltaNet
//! blocks then run the pass row by row), apart from the prompt's and replies' checkpoints so that
//! a pass never pushes one of those out; rolling back into the pass restores the state after the
//! last accepted row, with nothing to recompute. (Speculation always keeps a pass's first row, the
//! token it sampled; a rollback to before the pass goes to an older checkpoint.)

use super::config::ModelConfig;
use crate::backend::Backend;
use crate::error::Result;

/// Tokens between the checkpoints taken while a long prompt is prefilled or a reply decoded.
pub const CHECKPOINT_INTERVAL: usize = 512;
/// Checkpoints kept per session.
pub const MAX_CHECKPOINTS: usize = 8;

/// One recurrent block's state.
pub struct LayerState<B: Backend> {
    /// The last K−1 input rows of the convolution, oldest first.
    pub conv: B::Buffer,
    /// One head_dim × head_dim matrix per value head (the `gated_delta_net` layout).
    pub ssm: B::Buffer,
}

/// A copy of every recurrent block's state after `pos` tokens.
struct Checkpoint<B: Backend> {
    pos: Option<usize>,
    layers: Vec<Option<LayerState<B>>>,
}

pub struct RecurrentState<B: Backend> {
    /// Per block: the live state of a recurrent block, None for attention blocks.
    pub layers: Vec<Option<LayerState<B>>>,
    /// Slots; `pos` None marks a free one.
    checkpoints: Vec<Checkpoint<B>>,
    /// The state after each row of the last verify pass (slots allocated as passes need them).
    verify_rows: Vec<Checkpoint<B>>,
    /// Rows of the pass now running whose states the blocks keep (`row_state`); 0 outside one.
    keep_rows: usize,
    /// Values in each block's conv and ssm buffers.
    conv_len: usize,
    ssm_len: usize,
    /// Zeros to upload when a sequence starts over.
    zeros: Vec<f32>,
}

impl<B: Backend> RecurrentState<B> {
    /// The zero state of `config`'s recurrent blocks; None for models without any.
    pub fn new(config: &ModelConfig, b: &B) -> Result<Option<RecurrentState<B>>> {
        let Some(d) = &config.delta_net else {
            return Ok(None);
        };
        let layers = alloc_layers(config, b)?;
        Ok(Some(RecurrentState {
            layers,
            checkpoints: Vec::new(),
            verify_rows: Vec::new(),
            keep_rows: 0,
            conv_len: d.conv_state_len(),
            ssm_len: d.ssm_state_len(),
            zeros: vec![0.0; d.conv_state_len().max(d.ssm_state_len())],
        }))
    }

    /// Start a new sequence: the live state becomes zero (checkpoints are kept; they are
    /// forgotten by `restore`).
    pub fn zero(&mut self, b: &B) {
        for l in self.layers.iter_mut().flatten() {
            b.upload(&mut l.conv, &self.zeros[..self.conv_len]);
            b.upload(&mut l.ssm, &self.zeros[..self.ssm_len]);
        }
    }

    /// Positions that have a checkpoint, in increasing order.
    pub fn checkpoint_positions(&self) -> Vec<usize> {
        let mut p: Vec<usize> = self.checkpoints.iter().filter_map(|c| c.pos).collect();
        p.sort_unstable();
        p
    }

    /// Copy the live state as the checkpoint of `pos` tokens (nothing if one exists). A new
    /// slot is allocated while fewer than `MAX_CHECKPOINTS` exist; otherwise the oldest is
    /// reused.
    pub fn save(&mut self, b: &B, config: &ModelConfig, pos: usize) -> Result<()> {
        if self.checkpoints.iter().any(|c| c.pos == Some(pos)) {
            return Ok(());
        }
        let slot = match self.checkpoints.iter().position(|c| c.pos.is_none()) {
            Some(i) => i,
            None if self.checkpoints.len() < MAX_CHECKPOINTS => {
                self.checkpoints.push(Checkpoint {
                    pos: None,
                    layers: alloc_layers(config, b)?,
                });
                self.checkpoints.len() - 1
            }
            None => self
                .checkpoints
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.pos)
                .map_or(0, |(i, _)| i),
        };
        let lens = self.lens();
        copy(
            &mut self.layers,
            &mut self.checkpoints[slot],
            Direction::Save,
            lens,
            b,
        );
        self.checkpoints[slot].pos = Some(pos);
        Ok(())
    }

    /// Before a verify pass of `rows` tokens: slots for the state after each row but the last
    /// (the live state is that one), which the DeltaNet blocks fill (`keeps_rows`, `row_state`)
    /// and `end_verify` dates.
    pub fn begin_verify(&mut self, b: &B, config: &ModelConfig, rows: usize) -> Result<()> {
        while self.verify_rows.len() < rows.saturating_sub(1) {
            self.verify_rows.push(Checkpoint {
                pos: None,
                layers: alloc_layers(config, b)?,
            });
        }
        for slot in &mut self.verify_rows {
            slot.pos = None;
        }
        self.keep_rows = rows;
        Ok(())
    }

    /// After the verify pass begun at `pos`: when it `ran`, the states kept are the checkpoints
    /// of `pos + 1 ..= pos + rows − 1` (the live state is the one after the last row).
    pub fn end_verify(&mut self, pos: usize, ran: bool) {
        let kept = self.keep_rows.saturating_sub(1);
        for (r, slot) in self.verify_rows[..kept].iter_mut().enumerate() {
            slot.pos = ran.then_some(pos + r + 1);
        }
        self.keep_rows = 0;
    }

    /// Whether the forward call now running keeps the state after each of its rows.
    pub fn keeps_rows(&self) -> bool {
        self.keep_rows > 0
    }

    /// Block `il`'s live state, and where the state after row `row` of the verify pass goes
    /// (None for the last row, whose state stays live only).
    pub fn row_state(
        &mut self,
        il: usize,
        row: usize,
    ) -> Option<(&mut LayerState<B>, Option<&mut LayerState<B>>)> {
        let live = self.layers.get_mut(il)?.as_mut()?;
        let kept = match row + 1 < self.keep_rows {
            true => Some(
                self.verify_rows
                    .get_mut(row)?
                    .layers
                    .get_mut(il)?
                    .as_mut()?,
            ),
            false => None,
        };
        Some((live, kept))
    }

    /// Values in a block's conv and ssm state.
    pub fn state_lens(&self) -> (usize, usize) {
        (self.conv_len, self.ssm_len)
    }

    /// Roll the live state back to the latest checkpoint at or before `n` tokens (the zero
    /// state at 0 when there is none), forget the checkpoints after `n`, and return the
    /// checkpoint's position: the caller recomputes the tokens from there to `n`.
    pub fn restore(&mut self, b: &B, n: usize) -> usize {
        for c in self.slots() {
            if c.pos.is_some_and(|p| p > n) {
                c.pos = None;
            }
        }
        let lens = self.lens();
        let best = self
            .checkpoints
            .iter_mut()
            .chain(&mut self.verify_rows)
            .filter(|c| c.pos.is_some())
            .max_by_key(|c| c.pos);
        match best {
            Some(c) if c.pos > Some(0) => {
                copy(&mut self.layers, c, Direction::Restore, lens, b);
                c.pos.unwrap_or(0)
            }
            _ => {
                self.zero(b);
                0
            }
        }
    }

    fn lens(&self) -> (usize, usize) {
        (self.conv_len, self.ssm_len)
    }

    /// Forget every checkpoint.
    pub fn clear_checkpoints(&mut self) {
        for c in self.slots() {
            c.pos = None;
        }
    }

    /// Every slot a state can be restored from.
    fn slots(&mut self) -> impl Iterator<Item = &mut Checkpoint<B>> {
        self.checkpoints.iter_mut().chain(&mut self.verify_rows)
    }
}

/// Copy every block's state between the live state and a checkpoint.
fn copy<B: Backend>(
    live: &mut [Option<LayerState<B>>],
    checkpoint: &mut Checkpoint<B>,
    dir: Direction,
    (conv_len, ssm_len): (usize, usize),
    b: &B,
) {
    for (live, saved) in live.iter_mut().zip(checkpoint.layers.iter_mut()) {
        if let (Some(live), Some(saved)) = (live, saved) {
            let (src, dst) = match dir {
                Direction::Save => (&*live, saved),
                Direction::Restore => (&*saved, live),
            };
            b.copy_rows(&src.conv, 0, &mut dst.conv, 0, 1, conv_len);
            b.copy_rows(&src.ssm, 0, &mut dst.ssm, 0, 1, ssm_len);
        }
    }
}

fn alloc_layers<B: Backend>(config: &ModelConfig, b: &B) -> Result<Vec<Option<LayerState<B>>>> {
    let Some(d) = &config.delta_net else {
        return Ok(Vec::new());
    };
    (0..config.n_layers)
        .map(|il| {
            if config.layer_is_recurrent(il) {
                Ok(Some(LayerState {
                    conv: b.buffer(d.conv_state_len())?,
                    ssm: b.buffer(d.ssm_state_len())?,
                }))
            } else {
                Ok(None)
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Direction {
    Save,
    Restore,
}
