//! A model's placement between the GPU and the CPU (`-ngl`, `--n-cpu-moe`): the `Placement` for
//! its layer count and experts, the bytes it puts on each side, and `-ngl auto`'s fit — the most
//! a GPU memory budget holds, counted from the file's tensors, the KV cache and the activations.

use super::config::ModelConfig;
use super::loader::ModelFile;
use crate::backend::split::{Placement, Side};

/// The placement of a model of `config` with its last `gpu_layers` layers on the GPU (its layer
/// count + 1 takes the output too) and the routed experts of its first `cpu_moe_layers` on the
/// CPU (none for a dense model).
pub fn placement(config: &ModelConfig, gpu_layers: usize, cpu_moe_layers: usize) -> Placement {
    let n = config.n_layers;
    Placement {
        n_layers: n,
        gpu_layers: gpu_layers.min(n + 1),
        cpu_moe_layers: if config.moe.is_some() {
            cpu_moe_layers.min(n)
        } else {
            0
        },
        tied_embeddings: config.tie_embeddings,
    }
}

/// Bytes of the file's tensors that `p` puts on the GPU and on the CPU.
pub fn bytes_by_side(file: &ModelFile, p: &Placement) -> (u64, u64) {
    let (mut gpu, mut cpu) = (0u64, 0u64);
    for t in file.tensors().filter(|t| loaded(file, &t.name)) {
        let n = t.bytes().len() as u64;
        match p.tensor(&t.name, false) {
            Side::Gpu => gpu += n,
            Side::Cpu => cpu += n,
        }
    }
    (gpu, cpu)
}

/// Whether tensor `name` is loaded: not the blocks after the used ones (Qwen3.5's
/// multi-token-prediction blocks, which kiln skips).
fn loaded(file: &ModelFile, name: &str) -> bool {
    crate::tensor::block_of(name).is_none_or(|(il, _)| il < file.config.n_layers)
}

/// What a placement must fit: the bytes each part of the model takes on the GPU.
#[derive(Debug, Clone, Default)]
pub struct Footprint {
    /// Per layer: its weights other than routed experts, plus its KV cache or recurrent state.
    pub layers: Vec<u64>,
    /// Per layer: its routed experts (0 for a dense layer).
    pub experts: Vec<u64>,
    /// The output norm and projection (with the embeddings when tied).
    pub output: u64,
    /// The embedding table when it is not the output projection: on the GPU only when the whole
    /// model is (a split model looks it up on the CPU).
    pub embeddings: u64,
    /// Activation buffers, which the GPU needs whatever it holds.
    pub scratch: u64,
    /// The token embeddings are the output projection too.
    pub tied_embeddings: bool,
}

impl Footprint {
    /// The footprint of `file` with a KV cache of `ctx` positions (`kv_row_bytes`: the bytes of
    /// one position's keys and values together, for a layer's key width) and activations for
    /// chunks of `rows` tokens.
    pub fn of(
        file: &ModelFile,
        ctx: usize,
        kv_row_bytes: impl Fn(usize) -> u64,
        rows: usize,
    ) -> Footprint {
        let c = &file.config;
        let n = c.n_layers;
        let mut f = Footprint {
            layers: vec![0; n],
            experts: vec![0; n],
            tied_embeddings: c.tie_embeddings,
            ..Footprint::default()
        };
        let probe = placement(c, n + 1, 0);
        for t in file.tensors().filter(|t| loaded(file, &t.name)) {
            let bytes = t.bytes().len() as u64;
            match crate::tensor::block_of(&t.name) {
                Some((il, part)) if il < n => {
                    if part.contains("_exps") {
                        f.experts[il] += bytes;
                    } else {
                        f.layers[il] += bytes;
                    }
                }
                _ if probe.tensor(&t.name, false) == Side::Gpu => f.output += bytes,
                _ => f.embeddings += bytes,
            }
        }
        for (il, l) in f.layers.iter_mut().enumerate() {
            *l += match &c.delta_net {
                Some(d) if c.layer_is_recurrent(il) => {
                    4 * (d.conv_state_len() + d.ssm_state_len()) as u64
                }
                _ if c.layer_has_kv(il) => ctx as u64 * kv_row_bytes(c.layer_kv_dim(il)),
                _ => 0,
            };
        }
        let h = c.hidden_size as u64;
        let widths = 4 * h + 2 * c.max_q_dim() as u64 + 2 * c.max_kv_dim() as u64;
        let experts = c.moe.as_ref().map_or(0, |m| m.expert_ff * m.n_used);
        let ffn = 2 * c.intermediate_size.max(experts) as u64;
        f.scratch = 4 * (rows as u64 * (widths + ffn) + c.vocab_size as u64);
        f
    }

    /// The placement that puts the most on a GPU of `budget` bytes, as llama.cpp's `--fit`:
    /// everything if it fits; else, for a mixture-of-experts model, the routed experts move to
    /// the CPU first, layer by layer from the input end (attention and the shared parts are
    /// small and used by every token); then whole layers, from the input end (the output
    /// projection first, as `-ngl` counts).
    /// At least `cpu_moe_layers` keep their experts on the CPU (`--n-cpu-moe` with `-ngl auto`).
    /// A sixteenth of the budget is left for what the count misses (row padding, the kernels'
    /// own scratch).
    pub fn fit(&self, budget: u64, cpu_moe_layers: usize) -> Placement {
        let budget = budget - budget / 16;
        let n = self.layers.len();
        let gpu_bytes = |p: &Placement| -> u64 {
            let mut total = self.scratch;
            if p.output() == Side::Gpu {
                total += self.output;
            }
            if p.all_gpu() {
                total += self.embeddings;
            }
            for il in 0..n {
                if p.layer(il) == Side::Gpu {
                    total += self.layers[il];
                }
                if p.experts(il) == Side::Gpu {
                    total += self.experts[il];
                }
            }
            total
        };
        let has_experts = self.experts.iter().any(|&e| e > 0);
        let mut p = Placement {
            n_layers: n,
            gpu_layers: n + 1,
            cpu_moe_layers: if has_experts {
                cpu_moe_layers.min(n)
            } else {
                0
            },
            tied_embeddings: self.tied_embeddings,
        };
        if has_experts {
            while gpu_bytes(&p) > budget && p.cpu_moe_layers < n {
                p.cpu_moe_layers += 1;
            }
        }
        while gpu_bytes(&p) > budget && p.gpu_layers > 0 {
            p.gpu_layers -= 1;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::Footprint;

    /// The smallest budget whose part `fit` counts on is `usable`.
    fn budget(usable: u64) -> u64 {
        (usable..).find(|b| b - b / 16 >= usable).unwrap_or(usable)
    }

    fn footprint(experts: u64) -> Footprint {
        Footprint {
            layers: vec![10; 4],
            experts: vec![experts; 4],
            output: 5,
            embeddings: 2,
            scratch: 3,
            tied_embeddings: false,
        }
    }

    #[test]
    fn a_dense_model_gives_up_the_output_then_layers_from_the_input_end() {
        let f = footprint(0);
        let fit = |usable| {
            let p = f.fit(budget(usable), 0);
            (p.gpu_layers, p.cpu_moe_layers)
        };
        assert_eq!(fit(50), (5, 0));
        assert_eq!(fit(49), (4, 0));
        assert_eq!(fit(43), (4, 0));
        assert_eq!(fit(42), (3, 0));
        assert_eq!(fit(13), (1, 0));
        assert_eq!(fit(12), (0, 0));
        assert_eq!(fit(0), (0, 0));
    }

    #[test]
    fn a_moe_model_moves_experts_to_the_cpu_before_layers() {
        let f = footprint(100);
        let fit = |usable, at_least| {
            let p = f.fit(budget(usable), at_least);
            (p.gpu_layers, p.cpu_moe_layers)
        };
        assert_eq!(fit(450, 0), (5, 0));
        assert_eq!(fit(449, 0), (5, 1));
        assert_eq!(fit(450, 2), (5, 2));
        assert_eq!(fit(148, 0), (5, 3));
        assert_eq!(fit(48, 0), (5, 4));
        assert_eq!(fit(47, 0), (4, 4));
    }
}
