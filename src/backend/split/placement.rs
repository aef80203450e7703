//! Where each part of a model runs when it is split between the GPU and the CPU (`-ngl`,
//! `--n-cpu-moe`), as llama.cpp places it: `-ngl N` puts the last N layers on the GPU, counting
//! the output projection as one more layer past the last (so N = layers + 1 is everything);
//! `--n-cpu-moe N` keeps the routed experts of the first N layers in system memory while the rest
//! of those layers stays on the GPU. The token embeddings are only looked up, and stay on the CPU
//! unless they double as the output projection.
//! (model/placement.rs makes one for a model, and fits one to a GPU's memory.)

/// The two places a part of a split model can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Gpu,
    Cpu,
}

/// Which layers, experts and output run on the GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub n_layers: usize,
    /// `-ngl`: the last `gpu_layers` layers run on the GPU; above `n_layers`, the output too.
    pub gpu_layers: usize,
    /// `--n-cpu-moe`: layers below this keep their routed experts on the CPU.
    pub cpu_moe_layers: usize,
    /// The token embeddings are the output projection too.
    pub tied_embeddings: bool,
}

impl Placement {
    fn first_gpu_layer(&self) -> usize {
        self.n_layers.saturating_sub(self.gpu_layers)
    }

    pub fn layer(&self, il: usize) -> Side {
        if il >= self.first_gpu_layer() && self.gpu_layers > 0 {
            Side::Gpu
        } else {
            Side::Cpu
        }
    }

    /// The routed experts of layer `il`.
    pub fn experts(&self, il: usize) -> Side {
        if il < self.cpu_moe_layers {
            Side::Cpu
        } else {
            self.layer(il)
        }
    }

    /// The output norm and projection.
    pub fn output(&self) -> Side {
        if self.gpu_layers > self.n_layers {
            Side::Gpu
        } else {
            Side::Cpu
        }
    }

    /// Everything on the GPU: no split is needed.
    pub fn all_gpu(&self) -> bool {
        self.output() == Side::Gpu && self.cpu_moe_layers == 0
    }

    /// Nothing on the GPU.
    pub fn all_cpu(&self) -> bool {
        self.gpu_layers == 0
    }

    /// The side of a tensor, by its GGUF name: `blk.N.…` goes with layer N (routed experts,
    /// `…_exps…`, with the experts of layer N); the token embeddings with the output when tied,
    /// else the CPU (`lookup_only`: the embedding table is only looked up); the rest with the
    /// output.
    pub fn tensor(&self, name: &str, lookup_only: bool) -> Side {
        if let Some((il, part)) = crate::tensor::block_of(name) {
            return if part.contains("_exps") {
                self.experts(il)
            } else {
                self.layer(il)
            };
        }
        if name.starts_with("token_embd.") && (lookup_only || !self.tied_embeddings) {
            return Side::Cpu;
        }
        // Gemma 4's per-layer embeddings are only looked up, as llama.cpp does on the CPU.
        if name.starts_with("per_layer_token_embd.") {
            return Side::Cpu;
        }
        self.output()
    }

    /// One line for stderr and `kiln info`: what runs where.
    pub fn describe(&self) -> String {
        let n = self.n_layers;
        let first = self.first_gpu_layer();
        let mut gpu = Vec::new();
        let mut cpu = Vec::new();
        let range = |a: usize, b: usize| {
            if b == a + 1 {
                format!("layer {a}")
            } else {
                format!("layers {a}–{}", b - 1)
            }
        };
        if self.gpu_layers > 0 && first < n {
            gpu.push(range(first, n));
        }
        if first > 0 {
            cpu.push(range(0, first));
        }
        match self.output() {
            Side::Gpu => gpu.push("the output".into()),
            Side::Cpu => cpu.push("the output".into()),
        }
        if self.gpu_layers > 0 && self.cpu_moe_layers > first {
            let experts = range(first, self.cpu_moe_layers);
            cpu.push(format!("the routed experts of {experts}"));
        }
        let list = |v: Vec<String>| {
            if v.is_empty() {
                "nothing".to_string()
            } else {
                v.join(", ")
            }
        };
        format!("GPU: {}; CPU: {}", list(gpu), list(cpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(n_layers: usize, gpu_layers: usize, cpu_moe_layers: usize) -> Placement {
        Placement {
            n_layers,
            gpu_layers,
            cpu_moe_layers,
            tied_embeddings: false,
        }
    }

    #[test]
    fn ngl_counts_layers_from_the_output_end_as_llama_cpp() {
        let p = placement(4, 2, 0);
        let sides: Vec<Side> = (0..4).map(|il| p.layer(il)).collect();
        assert_eq!(sides, [Side::Cpu, Side::Cpu, Side::Gpu, Side::Gpu]);
        assert_eq!(p.output(), Side::Cpu);
        assert_eq!(placement(4, 4, 0).output(), Side::Cpu);
        assert_eq!(placement(4, 5, 0).output(), Side::Gpu);
        assert!(placement(4, 5, 0).all_gpu());
        assert!(!placement(4, 5, 1).all_gpu());
        assert!(placement(4, 0, 0).all_cpu());
        assert_eq!(placement(4, 0, 0).layer(3), Side::Cpu);
    }

    #[test]
    fn tensors_go_with_their_layer_and_experts_with_n_cpu_moe() {
        let p = placement(4, 5, 2);
        assert_eq!(p.tensor("blk.1.attn_q.weight", false), Side::Gpu);
        assert_eq!(p.tensor("blk.1.ffn_gate_exps.weight", false), Side::Cpu);
        assert_eq!(p.tensor("blk.1.ffn_gate_shexp.weight", false), Side::Gpu);
        assert_eq!(p.tensor("blk.2.ffn_up_exps.weight", false), Side::Gpu);
        assert_eq!(p.tensor("output.weight", false), Side::Gpu);
        assert_eq!(p.tensor("token_embd.weight", true), Side::Cpu);
        let tied = Placement {
            tied_embeddings: true,
            ..p.clone()
        };
        assert_eq!(tied.tensor("token_embd.weight", false), Side::Gpu);
        assert_eq!(tied.tensor("token_embd.weight", true), Side::Cpu);
    }

    #[test]
    fn describe_names_each_side() {
        assert_eq!(
            placement(4, 2, 0).describe(),
            "GPU: layers 2–3; CPU: layers 0–1, the output"
        );
        assert_eq!(
            placement(4, 5, 2).describe(),
            "GPU: layers 0–3, the output; CPU: the routed experts of layers 0–1"
        );
        assert_eq!(
            placement(4, 3, 2).describe(),
            "GPU: layers 1–3; CPU: layer 0, the output, the routed experts of layer 1"
        );
    }
}
