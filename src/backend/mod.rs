//! The compute backend: the operations a transformer forward pass needs, on buffers the backend
//! owns. The forward pass of every architecture is written once against this trait; a GPU backend
//! keeps weights, activations and the KV cache on the device and moves only what the host asks
//! for (`download` of logits) and the little it must send (`upload` of RoPE tables).
//!
//! Conventions: activations are row-major f32 matrices of `rows` tokens × a width; a matrix weight
//! has GGML layout (`out_features` rows of `in_features` values, any GGML type) and `matmul`
//! computes `out = x · Wᵀ`. Buffers are allocated for a maximum size and ops use the leading part.

pub mod cpu;
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

    /// A failure met while running ops, which return no errors themselves (a lost GPU device, a
    /// validation error): the session turns it into the error of its call. Taken once.
    fn take_error(&self) -> Option<crate::error::Error> {
        None
    }

    /// Make a tensor usable by the backend. The CPU keeps the mapped bytes as they are.
    fn weight(&self, t: &Tensor) -> Result<Self::Weight>;

    /// A zeroed buffer of `len` values; an error (not an abort) when memory runs out.
    fn buffer(&self, len: usize) -> Result<Self::Buffer>;
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
        self.copy_rows_from(x, 0, out, rows, width);
        self.rms_norm(out, w, rows, eps);
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

    // ---- Hybrid recurrent and mixture-of-experts models (Qwen3.5) ----

    /// RoPE over the first `rot_dims` values of each head only (partial rotary embedding); the
    /// other `head_dim − rot_dims` values pass through unchanged. `table` holds, per row, the
    /// `rot_dims / 2` pairs (cos, sin) of that row's position. Neox pairs (i, i + rot_dims/2),
    /// Interleaved pairs (2i, 2i+1), both within the first `rot_dims`. With `rot_dims ==
    /// head_dim` this is exactly `rope`.
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

    /// Mixture-of-experts routing: for each of `rows` rows of `n_expert` router logits, the
    /// softmax over all experts, the `n_used` most probable (highest first, ties to the lower
    /// index), and their probabilities renormalized to sum to 1 (the sum clamped below at
    /// 6.103515625e-5, as llama.cpp does). `selected` gets the expert indices as f32 integers and
    /// `weights` their weights, `rows × n_used` each.
    fn moe_route(
        &self,
        logits: &Self::Buffer,
        rows: usize,
        n_expert: usize,
        n_used: usize,
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
