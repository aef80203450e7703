//! The compute backend: the operations a transformer forward pass needs, on buffers the backend
//! owns, in three parts: `CoreOps` (what every architecture needs), `RecurrentOps` (Qwen3.5's
//! DeltaNet blocks) and `MoeOps` (mixture-of-experts layers); `Backend` is all three. The forward
//! pass of every architecture is written once against `Backend`; a GPU backend
//! keeps weights, activations and the KV cache on the device and moves only what the host asks
//! for (`download` of logits) and the little it must send (`upload` of RoPE tables).
//!
//! Conventions: activations are row-major f32 matrices of `rows` tokens × a width; a matrix weight
//! has GGML layout (`out_features` rows of `in_features` values, any GGML type) and `matmul`
//! computes `out = x · Wᵀ`. Buffers are allocated for a maximum size and ops use the leading part.

pub mod cpu;
#[cfg(feature = "gpu")]
pub mod split;
#[cfg(feature = "gpu")]
pub mod wgpu;

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
    /// GGML's Q8_0 blocks (32 values in 8 bits with an f16 scale: 34 bytes), about half of f16.
    /// As llama.cpp: the query is quantized to 8 bits for integer dot products with the keys;
    /// value rows are expanded one at a time.
    #[serde(rename = "q8_0")]
    Q8_0,
}

impl CacheType {
    pub const ALL: [CacheType; 3] = [CacheType::F32, CacheType::F16, CacheType::Q8_0];

    pub fn name(self) -> &'static str {
        match self {
            CacheType::F32 => "f32",
            CacheType::F16 => "f16",
            CacheType::Q8_0 => "q8_0",
        }
    }

    /// Values per block: a row of the cache (and each head in it) must hold whole blocks.
    pub fn block_len(self) -> usize {
        match self {
            CacheType::F32 | CacheType::F16 => 1,
            CacheType::Q8_0 => 32,
        }
    }

    /// The Walsh–Hadamard rotation (its size n, or 1 for none) to store keys of heads of
    /// `head_dim` with, as llama.cpp does for quantized caches: rotating each run of n values
    /// spreads a few large dimensions (Qwen2's keys have some) over the whole block, so its scale
    /// no longer crushes the small ones. Keys use the largest power of two from 64 up to 256
    /// that divides the head (llama.cpp rotates a 512-value head, Gemma 4's global ones, whole;
    /// kiln in two halves, which its GPU kernels take, as orthonormal).
    pub fn key_rotation(self, head_dim: usize) -> usize {
        if self.block_len() == 1 || !head_dim.is_multiple_of(64) {
            return 1;
        }
        1 << head_dim.trailing_zeros().min(8)
    }

    /// The Walsh–Hadamard rotation for values: 64, as llama.cpp (smaller serves values better).
    pub fn value_rotation(self, head_dim: usize) -> usize {
        if self.block_len() == 1 || !head_dim.is_multiple_of(64) {
            return 1;
        }
        64
    }

    /// Bytes that `width` cached values take (`width` a multiple of `block_len`).
    pub fn row_bytes(self, width: usize) -> usize {
        match self {
            CacheType::F32 => width * 4,
            CacheType::F16 => width * 2,
            CacheType::Q8_0 => width.div_ceil(32) * 34,
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
    /// Soft cap of the scaled scores: `cap · tanh(s / cap)` before the softmax (Gemma 2).
    pub softcap: Option<f32>,
    /// False: every row also sees the keys of the rows after it in this call, up to the last
    /// (an image span that Gemma 3 attends to both ways, as llama.cpp's non-causal decode).
    pub causal: bool,
}

impl AttentionParams {
    /// The last key query row `i` sees (the sliding window bounds the first, not this).
    #[inline]
    pub fn last_key(&self, i: usize) -> usize {
        self.start_pos + if self.causal { i } else { self.rows - 1 }
    }

    /// A score as the softmax takes it: q·k times the scale, soft-capped where the model caps.
    #[inline]
    pub fn score(&self, dot: f32) -> f32 {
        let s = dot * self.scale;
        match self.softcap {
            Some(cap) => cap * (s / cap).tanh(),
            None => s,
        }
    }
}

/// The shapes of one `CoreOps::rope_store_kv` call: this step's queries and keys rotated (RoPE over
/// the first `rot_dims` values of each head), its keys and values appended to the caches.
#[derive(Debug, Clone, Copy)]
pub struct KvAppend {
    /// Tokens in this step.
    pub rows: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rot_dims: usize,
    pub layout: RopeLayout,
    /// The cache row the first token's keys and values go to.
    pub dst_row: usize,
}

/// Elementwise gate activations of the feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateActivation {
    /// silu(gate) · up
    Silu,
    /// gelu_tanh(gate) · up
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: with g = min(gate, 7) and u = clamp(up, −7, 7),
    /// g · sigmoid(1.702·g) · (u + 1) (llama.cpp's `swiglu_oai`).
    SwigluOai,
}

impl GateActivation {
    /// gpt-oss's α and clamp limit (fixed in llama.cpp too).
    pub const OAI_ALPHA: f32 = 1.702;
    pub const OAI_LIMIT: f32 = 7.0;
}

/// Shapes of one Gated DeltaNet call (`Backend::gated_delta_net`).
#[derive(Debug, Clone, Copy)]
pub struct DeltaNetParams {
    /// Tokens of one sequence, in order.
    pub rows: usize,
    /// Key (and query) heads.
    pub n_k_heads: usize,
    /// Value heads, a multiple of `n_k_heads`.
    pub n_v_heads: usize,
    /// Width of every key, query and value head.
    pub head_dim: usize,
    /// Epsilon of the L2 normalization of q and k: x / sqrt(Σx² + eps).
    pub eps: f32,
}

/// Which rows of a stacked expert weight one `Backend::expert_matmul` call multiplies by.
#[derive(Debug, Clone, Copy)]
pub struct ExpertMatmulParams {
    /// Tokens.
    pub rows: usize,
    /// Experts used per token (slots per token).
    pub n_used: usize,
    /// True when every slot has its own input row (`x` has `rows · n_used` rows); false when
    /// the slots of a token share its row (`x` has `rows` rows).
    pub per_slot_input: bool,
    /// Output rows taken from each expert: the width of each output row.
    pub expert_rows: usize,
    /// Rows from one expert's block to the next in the weight (`expert_rows`, or more for a
    /// fused gate-and-up weight).
    pub expert_stride: usize,
    /// First row used within each expert's block.
    pub row_offset: usize,
}

/// Everything a forward pass asks of a backend: the ops every architecture needs (`CoreOps`) and
/// those of recurrent and mixture-of-experts layers (`RecurrentOps`, `MoeOps`). Model code asks
/// for `B: Backend`; a backend implements the parts, each in its own file.
pub trait Backend: CoreOps + RecurrentOps + MoeOps {}

impl<B: CoreOps + RecurrentOps + MoeOps> Backend for B {}

/// The ops every architecture needs.
pub trait CoreOps: Send + Sync {
    /// An f32 activation buffer on the device.
    type Buffer: Send;
    /// Key or value cache storage, of one of the `CacheType`s.
    type Cache: Send;
    /// A weight (matrix in its stored type, or a vector) on the device.
    type Weight: Send + Sync;

    /// A short description for logs and `kiln bench` (e.g. "CPU (AVX2, 2 threads)").
    fn describe(&self) -> String;

    /// The index of the largest of the first `len` values of `x` (the first on ties), computed
    /// where `x` lives, so that greedy decoding reads back one index instead of the logits. None
    /// where the backend has no such kernel: the caller reads the values back instead.
    fn argmax(&self, x: &Self::Buffer, len: usize) -> Option<u32> {
        self.argmax_rows(x, len, 1)?.first().copied()
    }

    /// `argmax` of each of the first `rows` rows of `len` values of `x` (a verify pass's rows of
    /// logits). None where the backend has no such kernel, or where a row has no largest value
    /// (all NaN or -inf): the caller reads the values back instead.
    fn argmax_rows(&self, _x: &Self::Buffer, _len: usize, _rows: usize) -> Option<Vec<u32>> {
        None
    }

    /// Start gathering a `Profile` (clearing what was gathered), or stop. Backends that cannot
    /// profile ignore it.
    fn set_profiling(&self, _on: bool) {}

    /// What was gathered since profiling started; None when the backend does not profile.
    fn profile(&self) -> Option<Profile> {
        None
    }

    /// A failure met while running ops, which return no errors themselves (a lost GPU device, a
    /// validation error): the session turns it into the error of its call. Taken once.
    fn take_error(&self) -> Option<crate::error::Error> {
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
    /// The values of `b` where they are the host's own memory (the CPU's buffers), for host code
    /// to read in place; None where they live elsewhere (a GPU's): read them with `download`.
    fn host_values<'a>(&self, _b: &'a Self::Buffer) -> Option<&'a [f32]> {
        None
    }
    /// `host_values`, to change in place instead of through `download` and `upload`.
    fn host_values_mut<'a>(&self, _b: &'a mut Self::Buffer) -> Option<&'a mut [f32]> {
        None
    }
    fn upload(&self, dst: &mut Self::Buffer, src: &[f32]);
    /// Copy `out.len()` values starting at `offset` back to the host.
    fn download(&self, src: &Self::Buffer, offset: usize, out: &mut [f32]);

    /// Rows of an embedding table, times `scale`: `out[i] = table[ids[i]] · scale`.
    fn embed(&self, table: &Self::Weight, ids: &[u32], scale: f32, out: &mut Self::Buffer);

    /// RMSNorm of `rows` rows of width `w.len()`, in place: `x = x / rms(x) · w`.
    fn rms_norm(&self, x: &mut Self::Buffer, w: &Self::Weight, rows: usize, eps: f32);

    /// `out = rms_norm(x) · w` for `rows` rows of `width`, leaving `x` as it is (the input of a
    /// block, normed from the residual stream). A backend may fuse the copy and the norm.
    fn rms_norm_into(
        &self,
        x: &Self::Buffer,
        w: &Self::Weight,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut Self::Buffer,
    ) {
        self.copy_rows(x, 0, out, 0, rows, width);
        self.rms_norm(out, w, rows, eps);
    }

    /// `x += y` over `rows` rows of `width`, then `out = rms_norm(x) · w`: a residual add and the
    /// next block's input norm, which a backend may fuse, with each other and with the op that
    /// wrote `y` (the GPU's mat-vec).
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm_into(
        &self,
        x: &mut Self::Buffer,
        y: &Self::Buffer,
        w: &Self::Weight,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut Self::Buffer,
    ) {
        self.add(x, y, rows * width);
        self.rms_norm_into(x, w, rows, width, eps, out);
    }

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

    /// The gated feed-forward's first half: `gate_out = act(x · Gᵀ) · (x · Uᵀ)` for `rows` rows
    /// of `width` (the rows of `gate` and `up`): `matmul_many` then `gated_activation`, which a
    /// backend may fuse. `up_out` is scratch of the same size, left as the backend finds cheaper.
    #[allow(clippy::too_many_arguments)]
    fn matmul_gated(
        &self,
        x: &Self::Buffer,
        gate: &Self::Weight,
        up: &Self::Weight,
        rows: usize,
        width: usize,
        act: GateActivation,
        gate_out: &mut Self::Buffer,
        up_out: &mut Self::Buffer,
    ) {
        self.matmul_many(x, &[gate, up], rows, &mut [&mut *gate_out, &mut *up_out]);
        self.gated_activation(gate_out, up_out, rows * width, act);
    }

    /// `x[r] += b` for each of `rows` rows.
    fn add_bias(&self, x: &mut Self::Buffer, b: &Self::Weight, rows: usize);

    /// `x[r] *= scales[r]` for each of `rows` rows of `width` values.
    fn scale_rows(&self, x: &mut Self::Buffer, scales: &Self::Buffer, rows: usize, width: usize);

    /// Rotate `rows × n_heads` heads of width `head_dim` in place (RoPE) over their first `rot_dims`
    /// values: all of them (`rot_dims == head_dim`), or a partial rotary embedding whose other
    /// `head_dim − rot_dims` values pass through unchanged. `table` holds, per row, the
    /// `rot_dims / 2` pairs (cos, sin) of that row's position. Neox pairs (i, i + rot_dims/2),
    /// Interleaved pairs (2i, 2i+1), both within the first `rot_dims`.
    #[allow(clippy::too_many_arguments)]
    fn rope_partial(
        &self,
        x: &mut Self::Buffer,
        table: &Self::Buffer,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    );

    /// A zeroed cache of `len` values of type `ty`. With `rotation` n > 1 (a power of two, for a
    /// quantized type; see `CacheType::key_rotation`) each run of n values is stored multiplied
    /// by the orthonormal n×n Walsh–Hadamard matrix H (H·H = I), and every op undoes it: q·k is
    /// taken as (Hq)·(Hk), attention's output from rotated values is rotated back, `rope_cache`
    /// rotates back before RoPE. Only the rounding differs from an unrotated cache.
    fn cache(&self, len: usize, ty: CacheType, rotation: usize) -> Result<Self::Cache>;

    /// The cache of layer `layer`: `cache`, on the device that layer runs on where a backend
    /// spans two (`split`).
    fn layer_cache(
        &self,
        _layer: usize,
        len: usize,
        ty: CacheType,
        rotation: usize,
    ) -> Result<Self::Cache> {
        self.cache(len, ty, rotation)
    }

    /// Ready `k` and `v` (a layer's caches) for attention with `n_heads` query heads over
    /// `n_kv_heads`, of `head_dim` values: a backend whose kernels are built for the shape builds
    /// them now, at load, rather than at the first token. Nothing by default.
    fn prepare_attention(
        &self,
        _k: &Self::Cache,
        _v: &Self::Cache,
        _head_dim: usize,
        _n_heads: usize,
        _n_kv_heads: usize,
    ) {
    }

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

    /// RoPE of a step's queries and keys and the append of its keys and values to the caches, one
    /// op so that a backend may fuse them: `q` rotated in place (`rope_partial` over `p.n_heads`
    /// heads), the keys rotated the same way (over `p.n_kv_heads`) and stored with the values `v`
    /// from row `p.dst_row` of `k_cache` and `v_cache` (`store_rows`). `k` itself is left rotated
    /// or not, as the backend finds cheaper: read the keys from the cache afterwards.
    #[allow(clippy::too_many_arguments)]
    fn rope_store_kv(
        &self,
        q: &mut Self::Buffer,
        k: &mut Self::Buffer,
        v: &Self::Buffer,
        table: &Self::Buffer,
        k_cache: &mut Self::Cache,
        v_cache: &mut Self::Cache,
        p: &KvAppend,
    ) {
        let (rows, hd, rd) = (p.rows, p.head_dim, p.rot_dims);
        self.rope_partial(q, table, rows, p.n_heads, hd, rd, p.layout);
        self.rope_partial(k, table, rows, p.n_kv_heads, hd, rd, p.layout);
        let width = p.n_kv_heads * hd;
        self.store_rows(k, k_cache, p.dst_row, rows, width);
        self.store_rows(v, v_cache, p.dst_row, rows, width);
    }

    /// `matmul_many` of one row `x` by the query, key and value projections `ws` into `q`, `k`
    /// and `v`, then `rope_store_kv`, as one op where the backend can fuse the second into the
    /// first's epilogue (the GPU's decode mat-vecs): true when it did (`k` and `v` are left
    /// unwritten; read the cache), false when it recorded nothing and the caller runs the two.
    #[allow(clippy::too_many_arguments)]
    fn qkv_rope_store(
        &self,
        _x: &Self::Buffer,
        _ws: [&Self::Weight; 3],
        _qkv: [&mut Self::Buffer; 3],
        _table: &Self::Buffer,
        _k_cache: &mut Self::Cache,
        _v_cache: &mut Self::Cache,
        _p: &KvAppend,
    ) -> bool {
        false
    }

    /// Move `rows` rows of `width` values from row `src_row` of `cache` to row `dst_row` (the ranges
    /// may overlap): a context shift closes the gap its dropped tokens leave.
    fn move_cache_rows(
        &self,
        cache: &mut Self::Cache,
        src_row: usize,
        dst_row: usize,
        rows: usize,
        width: usize,
    );

    /// Rotate the keys in `rows` rows of `cache` from `first_row` (each `n_heads` heads of
    /// `head_dim`, RoPE'd over their first `rot_dims`) further by the rotation in `table`: one row
    /// of `rot_dims / 2` pairs (cos, sin),
    /// RoPE at a position delta, so keys cached at position p become keys at p + delta. RoPE is a
    /// rotation, so a context shift re-rotates keys instead of recomputing them. The result is
    /// rounded to the cache's type (a quantized cache's rows are expanded, rotated and quantized
    /// again, as llama.cpp does).
    #[allow(clippy::too_many_arguments)]
    fn rope_cache(
        &self,
        cache: &mut Self::Cache,
        table: &Self::Buffer,
        first_row: usize,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    );

    /// Multi-head attention of `q` against the cached keys and values: each row sees those up to
    /// its own position (`p.causal`), or up to the call's last row; `out` gets
    /// `rows × n_heads × head_dim`. As llama.cpp computes it: softmax in f32;
    /// with an f16 key cache q is rounded to f16 for q·k, with an f16 value cache the
    /// probabilities are rounded to f16 for the sum over values; with a q8_0 key cache q is
    /// quantized to 8 bits for integer dot products, and q8_0 value rows are expanded one by one.
    /// `sinks` (gpt-oss), one logit per query head, join each head's softmax denominator as a key
    /// whose value is zero.
    fn attention(
        &self,
        q: &Self::Buffer,
        k_cache: &Self::Cache,
        v_cache: &Self::Cache,
        out: &mut Self::Buffer,
        p: &AttentionParams,
        sinks: Option<&Self::Weight>,
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
        self.copy_rows(src, row, dst, 0, 1, width);
    }

    /// Copy `rows` rows starting at `src_row` of `src` into `dst` from its row `dst_row` on (the
    /// rows of `dst` before and after keep their values).
    fn copy_rows(
        &self,
        src: &Self::Buffer,
        src_row: usize,
        dst: &mut Self::Buffer,
        dst_row: usize,
        rows: usize,
        width: usize,
    );

    /// `x[r][i] *= sigmoid(gate[r][i / (width / gate_width)])` for `rows` rows of `width`:
    /// an elementwise sigmoid gate (`gate_width == width`, Qwen3.5's attention output gate) or
    /// one gate value per row (`gate_width == 1`, the shared expert's gate). `gate` has rows of
    /// `gate_width` values, which divides `width`. sigmoid(v) = 1 / (1 + e^−v).
    fn mul_sigmoid(
        &self,
        x: &mut Self::Buffer,
        gate: &Self::Buffer,
        rows: usize,
        width: usize,
        gate_width: usize,
    );
}

/// The ops of recurrent layers (Qwen3.5's Gated DeltaNet blocks): a short causal convolution and
/// the delta-rule recurrence, each carrying its state between calls.
pub trait RecurrentOps: CoreOps {
    /// The convolution step of a recurrent block: a causal depthwise convolution over time
    /// followed by SiLU, carrying its state between calls.
    ///
    /// `x` holds `rows` consecutive tokens of one sequence × `channels`. `kernel` is a GGUF
    /// `ssm_conv1d` weight, F32, `channels` rows of K taps (tap K−1 multiplies the current
    /// token). `state` holds the K−1 input rows that precede `x`, oldest first ((K−1) ×
    /// `channels`; zeros at the start of a sequence). With `inp` = state rows followed by `x`:
    /// `out[t][c] = silu(Σ_{j<K} kernel[c][j] · inp[t + j][c])` for t < `rows`, summed in j order
    /// in f32, silu(v) = v / (1 + e^−v); then `state` = the last K−1 rows of `inp`.
    fn conv_step(
        &self,
        x: &Self::Buffer,
        kernel: &Self::Weight,
        state: &mut Self::Buffer,
        out: &mut Self::Buffer,
        rows: usize,
        channels: usize,
    );

    /// The Gated DeltaNet recurrence (Qwen3.5's linear attention) over `p.rows` consecutive
    /// tokens of one sequence, in one call (prefill and decode alike).
    ///
    /// Inputs, per token t (row-major, one row per token):
    /// - `qkv`: `2·n_k·d + n_v·d` values, the convolved channels: q heads, then k heads (n_k
    ///   each), then v heads (n_v), each head `d = p.head_dim` wide;
    /// - `alpha`, `beta`: `n_v` values, the raw decay and write-strength projections;
    /// - `a` (`ssm_a`, n_v values, already −exp(A_log)) and `dt_bias` (n_v): 1-D weights.
    ///
    /// `state` holds one d × d matrix S per value head (n_v·d·d values, zeros at the start of a
    /// sequence), stored transposed as llama.cpp does: `state[h·d·d + j·d + i] = S_h[i][j]`, i
    /// over key dims, j over value dims. Value head h reads key/query head `h mod n_k` (GGUF's
    /// tiled order). For each token, in order, and each value head h:
    /// - q, k ← q / sqrt(Σq² + eps), k / sqrt(Σk² + eps);
    /// - g = a[h] · softplus(alpha[t][h] + dt_bias[h]) (softplus(v) = v for v > 20, else
    ///   ln(1 + e^v)); β = sigmoid(beta[t][h]);
    /// - S ← e^g · S; δ = β · (v − Sᵀk); S ← S + k δᵀ;
    /// - `out[t][h·d + j] = (Sᵀq)[j] / sqrt(d)`.
    ///
    /// `out` gets `rows × n_v·d` values and `state` the state after the last token.
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_net(
        &self,
        qkv: &Self::Buffer,
        alpha: &Self::Buffer,
        beta: &Self::Buffer,
        a: &Self::Weight,
        dt_bias: &Self::Weight,
        state: &mut Self::Buffer,
        out: &mut Self::Buffer,
        p: &DeltaNetParams,
    );
}

/// How a mixture-of-experts router turns logits into expert scores (llama.cpp's
/// `expert_gating_func`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpertGating {
    /// The softmax over all experts (Qwen3 MoE, Qwen3.5 MoE, Mixtral, gpt-oss).
    Softmax,
    /// Each logit's sigmoid on its own (GLM-4.5).
    Sigmoid,
}

/// The routing of `rows` tokens among `n_expert` experts (`MoeOps::moe_route`).
#[derive(Debug, Clone, Copy)]
pub struct MoeRouteParams {
    pub rows: usize,
    pub n_expert: usize,
    pub n_used: usize,
    pub gating: ExpertGating,
    /// The chosen experts' scores divided by their sum.
    pub normalize: bool,
    /// The weights' factor after that (1: none).
    pub scale: f32,
}

/// The ops of mixture-of-experts feed-forward layers: routing, the selected experts' matmuls and
/// the weighted sum of their outputs.
pub trait MoeOps: CoreOps {
    /// Mixture-of-experts routing, per row of `p.n_expert` router logits (llama.cpp's
    /// `build_moe_ffn` up to the expert matmuls): each expert's score by `p.gating`; the
    /// `p.n_used` experts of highest score plus `selection_bias` (one value per expert, DeepSeek
    /// V3's and GLM-4.5's `exp_probs_b`: it moves the choice, not the weights), highest first,
    /// ties to the lower index; their scores, divided by their sum where `p.normalize` (the sum
    /// clamped below at 6.103515625e-5, as llama.cpp does), times `p.scale`. `selected` gets the
    /// expert indices as f32 integers and `weights` their weights, `rows × n_used` each.
    fn moe_route(
        &self,
        logits: &Self::Buffer,
        selection_bias: Option<&Self::Weight>,
        p: &MoeRouteParams,
        selected: &mut Self::Buffer,
        weights: &mut Self::Buffer,
    );

    /// The matmuls of the selected experts (llama.cpp's `mul_mat_id`). `w` stacks the experts'
    /// matrices (GGUF `[in, rows, n_expert]`: expert e's row r is row `e · p.expert_stride + r`
    /// of the weight). For slot s = t·n_used + j (token t, its j-th expert e = `selected[s]`):
    /// `out[s] = x_s · W_e[p.row_offset .. p.row_offset + p.expert_rows]ᵀ`, where x_s is row s
    /// of `x` with `p.per_slot_input`, else row t. `out` gets `rows · n_used × expert_rows`.
    fn expert_matmul(
        &self,
        x: &Self::Buffer,
        w: &Self::Weight,
        selected: &Self::Buffer,
        out: &mut Self::Buffer,
        p: &ExpertMatmulParams,
    );

    /// Each slot's expert's bias (llama.cpp's `add_id`): `x[s] += bias[selected[s]]` for `slots`
    /// rows of `width` values, `bias` holding one row per expert.
    fn add_expert_bias(
        &self,
        x: &mut Self::Buffer,
        bias: &Self::Weight,
        selected: &Self::Buffer,
        slots: usize,
        width: usize,
    );

    /// The weighted sum of each token's expert outputs: `out[t] = Σ_j weights[t·n_used + j] ·
    /// y[t·n_used + j]` (j in order) for `rows` tokens of `width` values; `out` is overwritten.
    fn moe_combine(
        &self,
        y: &Self::Buffer,
        weights: &Self::Buffer,
        rows: usize,
        n_used: usize,
        width: usize,
        out: &mut Self::Buffer,
    );
}
