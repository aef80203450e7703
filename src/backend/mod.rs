//! The compute backend: the operations a transformer forward pass needs, on buffers the backend
//! owns. The forward pass of every architecture is written once against this trait; a GPU backend
//! keeps weights, activations and the KV cache on the device and moves only what the host asks
//! for (`download` of logits) and the little it must send (`upload` of RoPE tables).
//!
//! Conventions: activations are row-major f32 matrices of `rows` tokens × a width; a matrix weight
//! has GGML layout (`out_features` rows of `in_features` values, any GGML type) and `matmul`
//! computes `out = x · Wᵀ`. Buffers are allocated for a maximum size and ops use the leading part.

pub mod cpu;

use crate::error::Result;
use crate::tensor::Tensor;

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeLayout {
    /// Adjacent pairs (2i, 2i+1): GGUF llama files, whose Q/K rows llama.cpp's converter permuted.
    Interleaved,
    /// Halves (i, i + d/2), "rotate-half": Hugging Face checkpoints, and qwen/gemma everywhere.
    Neox,
}

/// Element type of the key or value cache, by llama.cpp's `--cache-type-k/-v` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheType {
    /// Exact: attention multiplies in f32.
    F32,
    /// Half the memory of f32; attention rounds its other operand to f16 too, as llama.cpp does.
    #[default]
    F16,
}

impl CacheType {
    pub const ALL: [CacheType; 2] = [CacheType::F32, CacheType::F16];

    pub fn name(self) -> &'static str {
        match self {
            CacheType::F32 => "f32",
            CacheType::F16 => "f16",
        }
    }

    /// Bytes that `width` cached values take.
    pub fn row_bytes(self, width: usize) -> usize {
        match self {
            CacheType::F32 => width * 4,
            CacheType::F16 => width * 2,
        }
    }
}

impl std::fmt::Display for CacheType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CacheType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<CacheType, String> {
        CacheType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = CacheType::ALL.iter().map(|t| t.name()).collect();
                format!("unknown cache type '{s}' (kiln has {})", names.join(", "))
            })
    }
}

/// What a backend measured while profiling was on (`kiln bench --profile`).
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// Time per kind of operation, in the order first seen.
    pub ops: Vec<OpTime>,
    /// Backend-specific counts over the same span (a GPU's dispatches and submits, say).
    pub counters: Vec<(&'static str, u64)>,
}

/// Calls of one kind of operation and the time they took.
#[derive(Debug, Clone)]
pub struct OpTime {
    pub name: &'static str,
    pub calls: u64,
    pub time: std::time::Duration,
}

/// What attention needs to know about one call.
#[derive(Debug, Clone, Copy)]
pub struct AttentionParams {
    /// Absolute position of the first query row.
    pub start_pos: usize,
    /// Number of query rows (tokens in this batch).
    pub rows: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplier of q·k before the softmax.
    pub scale: f32,
    /// Sliding window: a query at position p sees keys in (p − window, p]. None: all of [0, p].
    pub window: Option<usize>,
}

/// Elementwise gate activations of the feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateActivation {
    /// silu(gate) · up
    Silu,
    /// gelu_tanh(gate) · up
    GeluTanh,
}

pub trait Backend: Send + Sync {
    /// An f32 activation buffer on the device.
    type Buffer: Send;
    /// Key or value cache storage, of one of the `CacheType`s.
    type Cache: Send;
    /// A weight (matrix in its stored type, or a vector) on the device.
    type Weight: Send + Sync;

    /// A short description for logs and `kiln bench` (e.g. "CPU (AVX2, 2 threads)").
    fn describe(&self) -> String;

    /// Start gathering a `Profile` (clearing what was gathered), or stop. Backends that cannot
    /// profile ignore it.
    fn set_profiling(&self, _on: bool) {}

    /// What was gathered since profiling started; None when the backend does not profile.
    fn profile(&self) -> Option<Profile> {
        None
    }

    /// Make a tensor usable by the backend. The CPU keeps the mapped bytes as they are, or
    /// repacks matrices for its kernels.
    fn weight(&self, t: &Tensor) -> Result<Self::Weight>;

    /// An embedding table that is only looked up (`embed`), never multiplied (the output
    /// projection is a separate tensor): a backend may keep it as it is, reading only the rows
    /// it is asked for.
    fn embedding_table(&self, t: &Tensor) -> Result<Self::Weight> {
        self.weight(t)
    }

    /// A zeroed buffer of `len` values; an error (not an abort) when memory runs out.
    fn buffer(&self, len: usize) -> Result<Self::Buffer>;
    fn upload(&self, dst: &mut Self::Buffer, src: &[f32]);
    /// Copy `out.len()` values starting at `offset` back to the host.
    fn download(&self, src: &Self::Buffer, offset: usize, out: &mut [f32]);

    /// Rows of an embedding table, times `scale`: `out[i] = table[ids[i]] · scale`.
    fn embed(&self, table: &Self::Weight, ids: &[u32], scale: f32, out: &mut Self::Buffer);

    /// RMSNorm of `rows` rows of width `w.len()`, in place: `x = x / rms(x) · w`.
    fn rms_norm(&self, x: &mut Self::Buffer, w: &Self::Weight, rows: usize, eps: f32);

    /// `out[rows × w.rows] = x[rows × w.cols] · Wᵀ`.
    fn matmul(&self, x: &Self::Buffer, w: &Self::Weight, rows: usize, out: &mut Self::Buffer);

    /// Several matmuls of the same input (Q/K/V, gate/up), which a backend may run as one pass.
    fn matmul_many(
        &self,
        x: &Self::Buffer,
        ws: &[&Self::Weight],
        rows: usize,
        outs: &mut [&mut Self::Buffer],
    ) {
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.matmul(x, w, rows, out);
        }
    }

    /// `x[r] += b` for each of `rows` rows.
    fn add_bias(&self, x: &mut Self::Buffer, b: &Self::Weight, rows: usize);

    /// Rotate `rows × n_heads` heads of width `head_dim` in place. `table` holds, per row, the
    /// `head_dim / 2` pairs (cos, sin) of that row's position.
    fn rope(
        &self,
        x: &mut Self::Buffer,
        table: &Self::Buffer,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        layout: RopeLayout,
    );

    /// A zeroed cache of `len` values of type `ty`.
    fn cache(&self, len: usize, ty: CacheType) -> Result<Self::Cache>;

    /// Store `rows × width` values of `src` into `dst` from row `dst_row` (KV cache append),
    /// rounded to the cache's type.
    fn store_rows(
        &self,
        src: &Self::Buffer,
        dst: &mut Self::Cache,
        dst_row: usize,
        rows: usize,
        width: usize,
    );

    /// Causal multi-head attention of `q` against the first `start_pos + rows` cached keys and
    /// values; `out` gets `rows × n_heads × head_dim`. As llama.cpp computes it: softmax in f32;
    /// with an f16 key cache q is rounded to f16 for q·k, with an f16 value cache the
    /// probabilities are rounded to f16 for the sum over values.
    fn attention(
        &self,
        q: &Self::Buffer,
        k_cache: &Self::Cache,
        v_cache: &Self::Cache,
        out: &mut Self::Buffer,
        p: &AttentionParams,
    );

    /// `gate = act(gate) · up` over `len` values.
    fn gated_activation(
        &self,
        gate: &mut Self::Buffer,
        up: &Self::Buffer,
        len: usize,
        act: GateActivation,
    );

    /// `x += y` over `len` values.
    fn add(&self, x: &mut Self::Buffer, y: &Self::Buffer, len: usize);

    /// Copy row `row` (of width `width`) of `src` into row 0 of `dst`.
    fn copy_row(&self, src: &Self::Buffer, row: usize, dst: &mut Self::Buffer, width: usize) {
        self.copy_rows_from(src, row, dst, 1, width);
    }

    /// Copy `rows` rows starting at `src_row` of `src` into the start of `dst`.
    fn copy_rows_from(
        &self,
        src: &Self::Buffer,
        src_row: usize,
        dst: &mut Self::Buffer,
        rows: usize,
        width: usize,
    );
}
