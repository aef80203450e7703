//! Opening a model: a GGUF file or a Hugging Face directory (config.json + safetensors, one file or
//! shards listed in model.safetensors.index.json). Both end as a `ModelFile`: a `ModelConfig` and
//! tensors under one canonical (GGUF-style) naming, their bytes mapped, never copied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use serde_json::Value;

use super::config::{Arch, ModelConfig, RopeFactorTensors};
use crate::error::{Error, Result};
use crate::gguf::{GgmlType, GgufFile};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Gguf,
    HuggingFace,
}

/// Where the tokenizer and chat template come from.
pub enum Source {
    Gguf(GgufFile),
    HuggingFace { dir: PathBuf, config_json: Value },
}

pub struct ModelFile {
    pub path: PathBuf,
    pub config: ModelConfig,
    /// Canonical name → tensor. Tensors kiln does not use keep their original names.
    pub tensors: BTreeMap<String, Tensor>,
    pub source: Source,
    /// Bytes on disk (all shards).
    pub file_size: u64,
    /// Load the file's multi-token-prediction block too (for `--spec-type draft-mtp`); like
    /// llama.cpp, kiln leaves it unread otherwise.
    pub load_mtp: bool,
}

impl ModelFile {
    pub fn open(path: &Path) -> Result<ModelFile> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            open_hf(path)
        } else {
            Self::from_gguf(GgufFile::open(path)?)
        }
    }

    /// A model from an already opened GGUF file.
    pub fn from_gguf(gguf: GgufFile) -> Result<ModelFile> {
        let path = gguf.path.clone();
        let tensors: BTreeMap<String, Tensor> =
            Tensor::all_in(&gguf).map(|t| (t.name.clone(), t)).collect();
        let factors = |name: &str| tensors.get(name).map(Tensor::to_f32);
        let rope = RopeFactorTensors {
            freqs: factors("rope_freqs.weight"),
            short: factors("rope_factors_short.weight"),
            long: factors("rope_factors_long.weight"),
        };
        let vocab_from_tensors = tensors.get("token_embd.weight").map(Tensor::n_rows);
        let config = ModelConfig::from_gguf(
            &gguf.metadata,
            vocab_from_tensors,
            rope,
            tensors.contains_key("output.weight"),
        )
        .map_err(|e| e.in_file(&path))?;
        let file_size = gguf.file_size();
        Ok(ModelFile {
            path,
            config,
            tensors,
            source: Source::Gguf(gguf),
            file_size,
            load_mtp: false,
        })
    }

    pub fn format(&self) -> Format {
        match self.source {
            Source::Gguf(_) => Format::Gguf,
            Source::HuggingFace { .. } => Format::HuggingFace,
        }
    }

    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.source {
            Source::Gguf(g) => Some(g),
            Source::HuggingFace { .. } => None,
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// Every tensor of the file, in no particular order.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values()
    }

    pub fn parameter_count(&self) -> u64 {
        self.tensors.values().map(|t| t.n_elements() as u64).sum()
    }

    /// Tensor type → (tensor count, bytes), for `kiln info`.
    pub fn type_mix(&self) -> BTreeMap<GgmlType, (usize, u64)> {
        let mut mix = BTreeMap::new();
        for t in self.tensors.values() {
            let e = mix.entry(t.dtype).or_insert((0, 0));
            e.0 += 1;
            e.1 += t.bytes().len() as u64;
        }
        mix
    }

    /// A short model name: GGUF `general.name`, or the directory/file name.
    pub fn display_name(&self) -> String {
        if let Some(g) = self.gguf()
            && let Ok(Some(name)) = g.metadata.str("general.name")
        {
            return name.to_string();
        }
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::invalid(path, format!("invalid JSON: {e}")))
}

fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: read-only mapping of a model file; see GgufFile::open.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    Ok(Arc::new(map))
}

/// The safetensors files of a Hugging Face directory, in a stable order.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let json = read_json(&index)?;
        let map = json
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| Error::invalid(&index, "no \"weight_map\" object"))?;
        let mut files: Vec<String> = Vec::new();
        for v in map.values() {
            let name = v
                .as_str()
                .ok_or_else(|| Error::invalid(&index, "weight_map values must be file names"))?;
            // Shards live in the directory itself; refuse paths that would leave it.
            if name.contains('/') || name.contains('\\') || name.starts_with('.') {
                return Err(Error::invalid(
                    &index,
                    format!("bad shard file name '{name}'"),
                ));
            }
            if !files.iter().any(|f| f == name) {
                files.push(name.to_string());
            }
        }
        files.sort();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::invalid(
        dir,
        "no model.safetensors or model.safetensors.index.json in this directory",
    ))
}

fn open_hf(dir: &Path) -> Result<ModelFile> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return Err(Error::invalid(
            dir,
            "not a model: a directory needs config.json and safetensors weights",
        ));
    }
    let config_json = read_json(&config_path)?;
    let config = ModelConfig::from_hf(&config_json).map_err(|e| e.in_file(&config_path))?;

    let mut tensors = BTreeMap::new();
    let mut file_size = 0u64;
    for shard in safetensors_files(dir)? {
        let map = map_file(&shard)?;
        file_size += map.len() as u64;
        let (header_len, header) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| Error::invalid(&shard, format!("invalid safetensors file: {e}")))?;
        let data_start = 8 + header_len;
        for (hf_name, info) in header.tensors() {
            let dtype = match info.dtype {
                safetensors::Dtype::F32 => GgmlType::F32,
                safetensors::Dtype::F16 => GgmlType::F16,
                safetensors::Dtype::BF16 => GgmlType::BF16,
                other => {
                    return Err(Error::invalid(
                        &shard,
                        format!(
                            "tensor '{hf_name}' has dtype {other:?}; kiln reads F32, F16 and BF16"
                        ),
                    ));
                }
            };
            let (begin, end) = info.data_offsets;
            let start = data_start + begin;
            if end < begin || data_start + end > map.len() {
                return Err(Error::invalid(
                    &shard,
                    format!("tensor '{hf_name}' lies outside the file"),
                ));
            }
            // safetensors shapes are row-major [rows, cols]; GGML order is the reverse.
            let dims: Vec<usize> = if info.shape.is_empty() {
                vec![1]
            } else {
                info.shape.iter().rev().copied().collect()
            };
            let name = canonical_name(&hf_name, config.arch).unwrap_or(hf_name.clone());
            if tensors.contains_key(&name) {
                return Err(Error::invalid(
                    &shard,
                    format!("tensor '{hf_name}' appears twice"),
                ));
            }
            let t = Tensor::mapped(
                name.clone(),
                dtype,
                dims,
                map.clone(),
                true,
                start,
                end - begin,
            );
            tensors.insert(name, t);
        }
    }

    Ok(ModelFile {
        path: dir.to_path_buf(),
        config,
        tensors,
        source: Source::HuggingFace {
            dir: dir.to_path_buf(),
            config_json,
        },
        file_size,
        load_mtp: false,
    })
}

/// Hugging Face tensor name → canonical GGUF name, or None for tensors kiln does not use.
pub fn canonical_name(hf: &str, arch: Arch) -> Option<String> {
    let name = hf.strip_prefix("language_model.").unwrap_or(hf);
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    // The family's own names first (Gemma's post_attention_layernorm), then the shared table.
    let family_part = arch
        .family()
        .hf_tensor_names
        .iter()
        .find(|(hf_module, _)| *hf_module == module)
        .map(|&(_, part)| part);
    let part = match family_part {
        Some(part) => part,
        None => match module {
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" => "ffn_norm",
            "pre_feedforward_layernorm" => "ffn_norm",
            "post_feedforward_layernorm" => "post_ffw_norm",
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.o_proj" => "attn_output",
            "self_attn.q_norm" => "attn_q_norm",
            "self_attn.k_norm" => "attn_k_norm",
            "mlp.gate_proj" => "ffn_gate",
            "mlp.up_proj" => "ffn_up",
            "mlp.down_proj" => "ffn_down",
            _ => return None,
        },
    };
    Some(format!("blk.{layer}.{part}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_names_map_to_gguf_names() {
        let cases = [
            ("model.embed_tokens.weight", "token_embd.weight"),
            (
                "model.layers.3.self_attn.q_proj.weight",
                "blk.3.attn_q.weight",
            ),
            ("model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"),
            (
                "model.layers.0.post_attention_layernorm.weight",
                "blk.0.ffn_norm.weight",
            ),
            (
                "model.layers.11.mlp.down_proj.weight",
                "blk.11.ffn_down.weight",
            ),
        ];
        for (hf, gguf) in cases {
            assert_eq!(canonical_name(hf, Arch::Llama).as_deref(), Some(gguf));
        }
        assert_eq!(
            canonical_name(
                "model.layers.0.post_attention_layernorm.weight",
                Arch::Gemma3
            )
            .as_deref(),
            Some("blk.0.post_attention_norm.weight")
        );
        assert_eq!(canonical_name("vision_tower.x.weight", Arch::Gemma3), None);
    }
}
