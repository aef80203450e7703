//! Every kernel the ops dispatch, by op: its shader file, entry point, defines and bindings, as a
//! `Kernel` the pipeline cache (`pipelines.rs`) builds. Kernels that read weights take the type's
//! name (`GgmlType::name`) as the define that selects its block decoder in quants.wgsl. The
//! attention's are in `attention.rs`.

use super::device::Coop;
use super::pipelines::Access::{self, Read, ReadWrite};
use super::pipelines::Kernel;
use crate::backend::cpu::{ActFormat, activation_format};
use crate::backend::{CacheType, GateActivation};
use crate::gguf::GgmlType;

mod attention;
pub use attention::*;

/// How the decode mat-vec reads its weights (matvec.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatvecLayout {
    /// Each span of a row (of the gate and up rows, gated) staged in workgroup memory as whole
    /// lines, a run of 16 values an invocation a step (GPUs).
    Staged,
    /// In place, one row per subgroup, `rows` rows per workgroup (software adapters).
    Direct { rows: usize },
}

impl MatvecLayout {
    /// Weight rows per workgroup.
    pub fn rows(self) -> usize {
        match self {
            MatvecLayout::Staged => 1,
            MatvecLayout::Direct { rows } => rows,
        }
    }
}

/// How a weight type's dot products round the activations they take (the CPU's
/// `activation_format`): by shaders/round_acts.wgsl before a kernel, or by the mat-vec itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActRounding {
    Q8_0 = 0,
    Q8K = 1,
    F16 = 2,
    BF16 = 3,
}

impl ActRounding {
    /// None: the activations are taken as they are (f32 weights).
    pub fn of(t: GgmlType) -> Option<ActRounding> {
        match (t, activation_format(t)) {
            (GgmlType::F16, _) => Some(ActRounding::F16),
            (GgmlType::BF16, _) => Some(ActRounding::BF16),
            (_, ActFormat::F32) => None,
            (_, ActFormat::Q8) => Some(ActRounding::Q8_0),
            (_, ActFormat::Q8K) => Some(ActRounding::Q8K),
        }
    }

    /// round_acts.wgsl's `mode`.
    pub fn mode(self) -> u32 {
        self as u32
    }

    fn define(self) -> &'static str {
        match self {
            ActRounding::Q8_0 => "ROUND_Q8_0",
            ActRounding::Q8K => "ROUND_Q8K",
            ActRounding::F16 => "ROUND_F16",
            ActRounding::BF16 => "ROUND_BF16",
        }
    }
}

/// The decode mat-vec over `n_weights` weights of type `t` (matvec.wgsl); `x4`: the activation
/// row is read as vec4s (its length a multiple of 4); `rounding`: x rounded by the kernel as it
/// reads it (staged layout, subgroups of 8 to 64 lanes).
pub fn matvec_kernel(
    t: GgmlType,
    n_weights: usize,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
) -> Kernel {
    matvec_of_rows(t, n_weights, x4, layout, rounding, layout.rows())
}

/// `matvec_kernel` with `rows` weight rows a workgroup.
fn matvec_of_rows(
    t: GgmlType,
    n_weights: usize,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
    rows: usize,
) -> Kernel {
    // Audited: the tile, the runs' and blocks' maxima and the sums are written whole each step
    // before a barrier, and read after it.
    let mut k = over_weights("matvec", "matvec", t, n_weights).fills_workgroup_memory();
    // Values staged per row and step: a kilobyte of weights or a little more, in whole
    // superblocks (Q8_K blocks of x).
    let span = (1024 * t.block_len())
        .div_ceil(t.block_bytes())
        .next_multiple_of(256);
    let span_bytes = span / t.block_len() * t.block_bytes();
    // A span starting anywhere in a line touches at most this many 128-byte lines.
    let tile_row = (span_bytes + 127).div_ceil(128) * 32;
    for (name, value) in [
        ("ROWS", rows),
        ("SPAN", span),
        ("TILE_ROW", tile_row),
        ("TILE_WORDS", rows * tile_row),
        ("BLOCK_LEN", t.block_len()),
        ("BLOCK_BYTES", t.block_bytes()),
        ("RUN_WORDS", span / 16),
        ("BLOCK_WORDS", span / 256),
    ] {
        k.defines.insert(name, value.to_string());
    }
    if let Some(r) = rounding {
        k = k.flag(r.define());
    }
    if x4 {
        k = k.flag("X4");
    }
    if layout != MatvecLayout::Staged {
        k = k.flag("DIRECT");
    }
    k
}

/// A kernel of `file` over `n_weights` (1-3) weights of type `t` that share its input and run as
/// one dispatch: bindings x, then a weight and its output per weight; `NW2`/`NW3` say how many.
fn over_weights(label: &'static str, file: &'static str, t: GgmlType, n_weights: usize) -> Kernel {
    let mut bindings = vec![Read];
    for _ in 0..n_weights {
        bindings.extend([Read, ReadWrite]);
    }
    let k = Kernel::new(label, file, &bindings).weights(t).trusted();
    match n_weights {
        2 => k.flag("NW2"),
        3 => k.flag("NW3"),
        _ => k,
    }
}

/// The gate and up mat-vecs of a feed-forward with its gated activation as their epilogue.
pub fn matvec_gated_kernel(
    t: GgmlType,
    act: GateActivation,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
) -> Kernel {
    // Staged, a workgroup computes one output from its gate row and its up row.
    let rows = match layout {
        MatvecLayout::Staged => 2,
        MatvecLayout::Direct { rows } => rows,
    };
    with_activation(matvec_of_rows(t, 2, x4, layout, rounding, rows), act)
}

/// `k` as a gated kernel: its gate/up epilogue applies `act` (common.wgsl).
fn with_activation(k: Kernel, act: GateActivation) -> Kernel {
    match act {
        GateActivation::Silu => k.flag("GLU_SILU"),
        GateActivation::GeluTanh => k.flag("GLU_GELU"),
        GateActivation::SwigluOai => unreachable!("gated_matmuls runs SwigluOai unfused"),
    }
}

/// Whether the per-type mat-vec (matvec_blocks.wgsl) reads weights of type `t`, `k` values wide.
pub fn blocks_matvec_reads(t: GgmlType, k: usize) -> bool {
    use GgmlType::*;
    matches!(t, Q4_0 | Q8_0 | Q4_K | Q5_K | Q6_K) && k.is_multiple_of(256)
}

/// The per-type mat-vec's decoder family for type `t` (matvec_blocks.wgsl's function suffixes).
fn blocks_decoder(t: GgmlType) -> &'static str {
    match t {
        GgmlType::Q4_K | GgmlType::Q5_K => "k45",
        GgmlType::Q6_K => "q6k",
        _ => "legacy",
    }
}

/// Bytes of a run of 256 values of a row of type `t` (a whole number of blocks).
fn run_bytes(t: GgmlType) -> usize {
    256 / t.block_len() * t.block_bytes()
}

/// Whether the per-type mat-vec with integer dot products can take weights of types `a` and `b`
/// in one dispatch (`matvec_rope_kv_kernel`'s `second`): K-quants of two decoder families, so
/// each keeps its own functions.
pub fn blocks_mix(a: GgmlType, b: GgmlType) -> bool {
    use GgmlType::{Q4_K, Q5_K, Q6_K};
    matches!(a, Q4_K | Q5_K | Q6_K)
        && matches!(b, Q4_K | Q5_K | Q6_K)
        && blocks_decoder(a) != blocks_decoder(b)
}

/// How the per-type decode mat-vec (matvec_blocks.wgsl) spreads a matrix: `rows` rows (at most
/// 4) a workgroup of `wg` invocations (a multiple of 16, up to 256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlocksShape {
    pub wg: u32,
    pub rows: usize,
}

/// The per-type decode mat-vec (matvec_blocks.wgsl) over `n_weights` weights of type `t`, shaped
/// by `shape`; with `gate`, gate and up writing the gated activation, `rows / 2` outputs a
/// workgroup. `int_dot`: x comes as packed Q8_K blocks (`quantize_q8k_kernel`) and the K-quants
/// take integer dot products.
pub fn matvec_blocks_kernel(
    t: GgmlType,
    n_weights: usize,
    gate: Option<GateActivation>,
    rounding: Option<ActRounding>,
    int_dot: bool,
    shape: BlocksShape,
) -> Kernel {
    let BlocksShape { wg, rows } = shape;
    // Audited: every invocation writes its maximum each step before the barrier; the sums as
    // matvec.wgsl's.
    let k = over_weights("matvec", "matvec_blocks", t, n_weights)
        .workgroup(wg)
        .fills_workgroup_memory();
    let mut k = if int_dot {
        k.flag("IDOT")
    } else {
        k.flag("X4")
    };
    k.defines.insert("ROWS", rows.to_string());
    k.defines.insert("RUN_BYTES", run_bytes(t).to_string());
    k.defines.insert("DEC0", blocks_decoder(t).into());
    k.defines.insert("PART_WORDS", (2 * wg).to_string());
    if let Some(r) = rounding {
        k = k.flag(r.define());
    }
    if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
        k = k.flag("W2");
    }
    match gate {
        Some(act) => with_activation(k, act),
        None => k,
    }
}

/// `k` (a gated `matvec_blocks_kernel`) also writing the gated activation as packed Q8_K blocks,
/// two bindings more: the blocks and a count per block (matvec_rows.wgsl `GLU_PACK`).
// Audited: `completes` is written by invocation 0 before the uniform load that reads it, and every
// invocation writes its `pack_max` before the barrier that precedes the reads.
pub fn with_gated_packing(mut k: Kernel) -> Kernel {
    k.bindings.extend([ReadWrite, ReadWrite]);
    k.label = "matvec_gated_packed";
    k.flag("GLU_PACK")
}

/// `k` (a `matvec_blocks_kernel` over one weight, in workgroups of 64, 128 or 256: multiples
/// of 64 that divide `NORM_WG`) followed by the residual add of its output and the next block's
/// input norm, as `add_rms_norm_kernel(true)` would run after it: five bindings more, the
/// residual stream, the norm's weight, its output, a completion count and the output's packed
/// Q8_K blocks
/// (matvec_rows.wgsl `NORM_ADD`).
// Audited: `norm_completes` is written by invocation 0 before the uniform load that reads it, and
// the partial sums and blocks' maxima are written (every one read) before the barriers that
// precede their reads.
pub fn with_norm_add(mut k: Kernel) -> Kernel {
    k.bindings
        .extend([ReadWrite, Read, ReadWrite, ReadWrite, ReadWrite]);
    k.label = "matvec_norm";
    k.defines.insert("NORM_LANES", NORM_WG.to_string());
    k.flag("NORM_ADD")
}

/// A decode step's Q/K/V projections through `matvec_blocks_kernel` (over `roles.len()` weights,
/// each the query (0), key (1) or value (2) projection) with RoPE and the KV append to caches of
/// types `k` and `v` (f32 or f16) as the epilogue: three more bindings, the RoPE table and the
/// two caches (matvec_rows.wgsl `ROPE_KV`). `second`: the weights from index `.1` on are of type
/// `.0` (integer dot products only, `blocks_mix`; matvec_blocks.wgsl `MIXED`).
pub fn matvec_rope_kv_kernel(
    t: GgmlType,
    roles: &[usize],
    rounding: Option<ActRounding>,
    int_dot: bool,
    shape: BlocksShape,
    (k, v): (CacheType, CacheType),
    second: Option<(GgmlType, usize)>,
) -> Kernel {
    let mut kernel = matvec_blocks_kernel(t, roles.len(), None, rounding, int_dot, shape);
    kernel.label = "matvec_rope_kv";
    if let Some((t1, first)) = second {
        assert!(int_dot && blocks_mix(t, t1), "{t} and {t1} do not mix");
        kernel = kernel.flag("MIXED").flag(t1.name());
        if blocks_decoder(t1) == "k45" {
            kernel = kernel.flag("W2");
        }
        kernel.defines.insert("DEC1", blocks_decoder(t1).into());
        kernel.defines.insert("SECOND", first.to_string());
        kernel
            .defines
            .insert("RUN_BYTES1", run_bytes(t1).to_string());
    }
    for (i, name) in ["ROLE0", "ROLE1", "ROLE2"].into_iter().enumerate() {
        kernel
            .defines
            .insert(name, roles.get(i).copied().unwrap_or(0).to_string());
    }
    for (name, access) in [
        ("TABLE_BINDING", Read),
        ("K_CACHE_BINDING", ReadWrite),
        ("V_CACHE_BINDING", ReadWrite),
    ] {
        kernel.bindings.push(access);
        let binding = kernel.bindings.len().to_string();
        kernel.defines.insert(name, binding);
    }
    with_caches(kernel.flag("ROPE_KV"), k, v)
}

/// The tiled prefill kernel over `n_weights` weights of type `t` (`gated`: gate and up, writing
/// the gated activation); `x4`: activations read as vec4s (rows a multiple of 4); `sg8`: the
/// variant for lavapipe, one weight.
// Audited (#46): each step writes every value of its tiles before the barrier that precedes the
// reads: `main`'s 128 invocations four rows (r = lid / 8 + 16j) × four k (4 · lid % 8 + i) each,
// all 512 vec4 slots of `wt` and `xt` and their four lanes; `main_sg8`'s 64 eight k of a weight
// row each, all of `wsg`, and `xsg` by a loop over all 4096.
pub fn matmul_kernel(
    t: GgmlType,
    n_weights: usize,
    gated: Option<GateActivation>,
    x4: bool,
    sg8: bool,
) -> Kernel {
    let k = over_weights("matmul", "matmul", t, n_weights).fills_workgroup_memory();
    if sg8 {
        return k.flag("SG8").entry("main_sg8");
    }
    with_tile_input(k, x4, gated)
}

/// A tiled prefill kernel reading activations as vec4s (`x4`), and writing the gated activation
/// of a gate/up pair (`gated`).
fn with_tile_input(k: Kernel, x4: bool, gated: Option<GateActivation>) -> Kernel {
    let k = if x4 { k.flag("X4") } else { k };
    match gated {
        Some(act) => with_activation(k, act),
        None => k,
    }
}

/// Whether the cooperative-matrix GEMM takes weights of type `t`: those whose values f16 holds
/// (f16 itself and the block types), not f32 or bf16 ones.
pub fn coop_reads(t: GgmlType) -> bool {
    !matches!(t, GgmlType::F32 | GgmlType::BF16)
}

/// `kernel` (one on cooperative matrices) on the hardware's fragments (`COOP`) or emulated
/// (`COOP_EMU`), in workgroups of `Coop::invocations`.
pub(super) fn with_coop(kernel: Kernel, coop: Coop) -> Kernel {
    let flag = match coop {
        Coop::Hardware { .. } => "COOP",
        Coop::Emulated => "COOP_EMU",
    };
    kernel.flag(flag).workgroup(coop.invocations())
}

/// The tiled prefill kernel on cooperative matrices (matmul.wgsl's `main_coop`), otherwise as
/// `matmul_kernel`: four subgroups a workgroup, or 128 invocations emulating them; tiles of
/// `rows` activation rows, 64 or 128 (`COOP_WIDE`). `half_input`: the activations come as f16
/// (`round_acts_half_kernel`; rows a multiple of 4 long), else as f32.
pub fn matmul_coop_kernel(
    t: GgmlType,
    n_weights: usize,
    gated: Option<GateActivation>,
    x4: bool,
    coop: Coop,
    (rows, half_input): (u32, bool),
) -> Kernel {
    // Every workgroup-memory value main_coop reads it wrote first: the tiles' rows (64 weight
    // rows, `rows` activation rows), values 0..31 each step and the staged outputs' 64 × 64
    // (each half, with a barrier between a half's reads and the next's stores).
    let k = over_weights("matmul_coop", "matmul", t, n_weights)
        .entry("main_coop")
        .fills_workgroup_memory();
    let k = if rows == 128 { k.flag("COOP_WIDE") } else { k };
    let k = if half_input { k.flag("XH") } else { k };
    with_tile_input(with_coop(k, coop), x4 && !half_input, gated)
}

pub fn embed_kernel(t: GgmlType) -> Kernel {
    Kernel::new("embed", "embed", &[Read, Read, ReadWrite])
        .weights(t)
        .trusted()
}

pub fn elementwise_kernel(entry: &'static str) -> Kernel {
    Kernel::new(entry, "elementwise", &[ReadWrite, Read])
        .entry(entry)
        .trusted()
}

/// `kernel` with the defines that select how it reads or writes a key cache of type `k` and a
/// value cache of type `v` (`K_F16`, `K_Q8`, `V_F16`, `V_Q8`; f32 has none).
pub(super) fn with_caches(mut kernel: Kernel, k: CacheType, v: CacheType) -> Kernel {
    for (ty, f16, q8) in [(k, "K_F16", "K_Q8"), (v, "V_F16", "V_Q8")] {
        match ty {
            CacheType::F32 => {}
            CacheType::F16 => kernel = kernel.flag(f16),
            CacheType::Q8_0 => kernel = kernel.flag(q8),
        }
    }
    kernel
}

// Trusted: it writes cache values dst_off..dst_off + len (q8_0: the 256-value spans and scales
// of those, whole rotation runs) and reads len source values, which `store_cache_rows` checks;
// `hx`, `q8_d` and `q8_id` are indexed by invocation (< 256) and its blocks (< 8).
pub fn store_kernel(ty: CacheType) -> Kernel {
    let k = Kernel::new("kv_store", "kv", &[Read, ReadWrite]).trusted();
    match ty {
        CacheType::F32 => k,
        CacheType::F16 => k.flag("F16CACHE"),
        CacheType::Q8_0 => k.flag("Q8CACHE").entry("store_q8"),
    }
}
/// A kernel whose define and entry point share the op's name, in shader file `file`.
fn op_kernel(
    file: &'static str,
    op: &'static str,
    define: &'static str,
    bindings: &[Access],
) -> Kernel {
    Kernel::new(op, file, bindings).entry(op).flag(define)
}

// Trusted: x at i < len = rows · width, the gate at row · gate_width + (i % width) / group <
// rows · gate_width (gate_width divides width); `mul_sigmoid` checks both lengths.
pub fn mul_sigmoid_kernel() -> Kernel {
    op_kernel(
        "elementwise",
        "mul_sigmoid",
        "MUL_SIGMOID",
        &[ReadWrite, Read],
    )
    .trusted()
}

/// The convolution step (`conv_step`) or the state update after it (`conv_state`).
// Trusted: (token, channel) below (rows, channels) reads x and writes out at token · channels +
// channel, the state at rows below taps − 1, the taps at channel · taps + j (taps · channels of
// them); `conv_step` checks every length.
pub fn conv_kernel(entry: &'static str) -> Kernel {
    Kernel::new(entry, "conv", &[Read, Read, ReadWrite, ReadWrite])
        .entry(entry)
        .trusted()
}

// Trusted: out at i < rows · width, y at rows (token · n_used + j < rows · n_used) of width
// values, weights at slots below rows · n_used (n_used ≥ 1); `moe_combine` checks them.
pub fn moe_combine_kernel() -> Kernel {
    op_kernel(
        "moe",
        "moe_combine",
        "MOE_COMBINE",
        &[Read, Read, ReadWrite],
    )
    .trusted()
}

// Audited (both): every invocation writes its block maximum before the barrier. Trusted as the
// matmuls are: it reads and writes the `len` values of the matmul's input (rows × width, sized
// by the model from validated shapes) and, packed, the scratch buffer `weight_input` sizes for
// them (len / 4 words and a d per 256); `block_max` by invocation.
pub fn round_acts_kernel() -> Kernel {
    Kernel::new("round_acts", "round_acts", &[Read, ReadWrite])
        .fills_workgroup_memory()
        .trusted()
}

/// The rounded activations as f16 (`HALF`), the cooperative GEMM's input (`matmul_coop_kernel`
/// with `half_input`); the same bounds, a vec4 of f16 per four values.
pub fn round_acts_half_kernel() -> Kernel {
    let mut k = round_acts_kernel().flag("HALF");
    k.label = "round_acts_half";
    k
}

/// Activations quantized to packed Q8_K blocks, the integer-dot mat-vecs' input.
pub fn quantize_q8k_kernel() -> Kernel {
    let mut k = round_acts_kernel().flag("PACKED");
    k.label = "quantize_q8k";
    k
}

// Trusted: x at i < slots · width and `selected` at its slot, as `add_expert_bias` checks; a bias
// row only for experts below the rows the bias holds (the kernel tests the index it reads).
pub fn add_expert_bias_kernel() -> Kernel {
    op_kernel(
        "moe",
        "add_expert_bias",
        "ADD_EXPERT_BIAS",
        &[ReadWrite, Read, Read],
    )
    .trusted()
}

// Trusted: a workgroup per token below rows reads its n_expert logits (and the bias's, checked
// to hold n_expert) and writes n_used choices and weights, as `moe_route` checks; in workgroup
// memory, experts below n_expert ≤ 1024 and one best per invocation. Audited: the scores and taken
// flags of every expert below n_expert (all it reads) and every invocation's best are written
// before the barriers that precede their reads; the reductions' scratch as in the norms.
pub fn moe_route_kernel() -> Kernel {
    Kernel::new("moe_route", "moe", &[Read, Read, ReadWrite, ReadWrite])
        .entry("route")
        .flag("MOE_ROUTE")
        .trusted()
        .fills_workgroup_memory()
}

/// The expert mat-vec (llama.cpp's mul_mat_id, one activation row per slot) over a stacked
/// expert weight of type `t`: matvec.wgsl's `EXPERT` variant.
pub fn expert_kernel(
    t: GgmlType,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
) -> Kernel {
    let mut k = matvec_kernel(t, 1, x4, layout, rounding);
    k.label = "expert_matvec";
    k.bindings.push(Read);
    k.flag("EXPERT")
}

/// A norm's workgroup: a decode row (2-8 K values) in a few passes, not 32-128 dependent ones.
pub const NORM_WG: u32 = 256;

pub fn rms_norm_kernel(into: bool, packed: bool) -> Kernel {
    let k = if into {
        Kernel::new("rms_norm", "norm", &[ReadWrite, Read, Read]).flag("INTO")
    } else {
        Kernel::new("rms_norm", "norm", &[ReadWrite, Read])
    };
    let k = k.workgroup(NORM_WG).trusted().fills_workgroup_memory();
    with_packed_output(k, packed)
}

// The norms are audited (`Kernel::fills_workgroup_memory`): the sum's partials and the blocks'
// maxima are written by every invocation (subgroup) before the barrier that precedes their reads.

/// A residual add fused with the next block's input norm.
pub fn add_rms_norm_kernel(packed: bool) -> Kernel {
    let k = Kernel::new("add_rms_norm", "norm", &[ReadWrite, Read, ReadWrite, Read])
        .flag("ADD")
        .workgroup(NORM_WG)
        .trusted()
        .fills_workgroup_memory();
    with_packed_output(k, packed)
}

/// `packed`: the norm also writes packed Q8_K blocks, to one more binding.
fn with_packed_output(mut k: Kernel, packed: bool) -> Kernel {
    if packed {
        k.bindings.push(ReadWrite);
        let binding = k.bindings.len().to_string();
        k.defines.insert("PACKED_BINDING", binding);
        k = k.flag("PACKED");
    }
    k
}

pub fn rope_kernel() -> Kernel {
    Kernel::new("rope", "rope", &[ReadWrite, Read]).trusted()
}

/// RoPE of a step's queries and keys with the keys' and values' append to caches of types `k`
/// and `v`, in one dispatch.
// Trusted: as `rope_kernel` for the queries; the keys and values read below kv_len (a partner
// stays in its head: rot_dims even and at most head_dim), the caches written at dst_off ..
// dst_off + kv_len (q8_0: whole rotation runs, the scales of those blocks), all of which
// `rope_append` checks. Audited (q8_0): `hx` (256 values) is written by every invocation, and
// `q8_d` / `q8_id` for all 8 blocks, before the barriers that precede their reads.
pub fn rope_kv_kernel(k: CacheType, v: CacheType) -> Kernel {
    let kernel = Kernel::new(
        "rope_kv",
        "rope",
        &[ReadWrite, Read, Read, Read, ReadWrite, ReadWrite],
    )
    .flag("ROPE_KV")
    .trusted()
    .fills_workgroup_memory();
    with_caches(kernel, k, v)
}

/// Audited: every invocation writes its best value and index before the first barrier.
pub fn argmax_kernel() -> Kernel {
    Kernel::new("argmax", "argmax", &[Read, ReadWrite])
        .trusted()
        .fills_workgroup_memory()
}

/// The copy `kiln bench` measures the device's bandwidth with.
// Trusted: `measure_bandwidth` sizes both buffers for the len vec4s it copies.
pub fn bandwidth_kernel() -> Kernel {
    Kernel::new("copy_bandwidth", "bench", &[ReadWrite, Read]).trusted()
}

/// Cache rows moved within the cache (a context shift): whole words.
// Trusted (both moves): every word (half) read or written lies below the furthest row moved,
// which `move_units` checks against the cache buffer's size.
pub fn kv_move_kernel() -> Kernel {
    Kernel::new("kv_move", "kv_shift", &[ReadWrite])
        .entry("move_rows")
        .trusted()
}

/// 16-bit halves moved within the cache (a q8_0 cache's scales, in a context shift).
pub fn kv_move_halves_kernel() -> Kernel {
    Kernel::new("kv_move", "kv_shift", &[ReadWrite])
        .entry("move_halves")
        .flag("HALVES")
        .trusted()
}

/// Cached keys re-rotated by a position delta (a context shift).
// Trusted: heads below the count, from value src_off, a pair inside its head (rot_dims even and
// at most head_dim), the table's first rot_dims values: `rope_cached_keys` checks the cache and
// the table hold them. q8_0: values read and written only inside [src_off, src_off + len), the
// scales of those blocks; `hx` by span ≤ 512 (checked), `q8_d` / `q8_id` by its blocks ≤ 16.
// Audited (q8_0): the span's values of `hx` (all it reads) and its blocks' scales are written
// before the barriers that precede their reads.
pub fn kv_rope_kernel(ty: CacheType) -> Kernel {
    let k = Kernel::new("kv_rope", "kv_shift", &[ReadWrite, Read])
        .trusted()
        .fills_workgroup_memory();
    match ty {
        CacheType::F32 => k.entry("rope_rows"),
        CacheType::F16 => k.entry("rope_rows").flag("F16CACHE"),
        CacheType::Q8_0 => k.entry("rope_q8").flag("Q8CACHE"),
    }
}

/// The Gated DeltaNet recurrence for heads of `d` values (a pipeline per width: it sizes the
/// state each invocation keeps).
// Trusted: head h below n_v and column j below D read the state at (h · D + j) · D + i, qkv in
// the token's row (key head h mod n_k), alpha and beta at token · n_v + h, A and dt_bias at h, and
// write out at (token · n_v + h) · D + j: `gated_delta_net` checks every length. Audited: `qs`
// and `ks` (D values, all it reads) are written each token before the sums' barriers.
pub fn delta_net_kernel(d: usize) -> Kernel {
    let mut k = Kernel::new(
        "gated_delta_net",
        "delta_net",
        &[Read, Read, Read, Read, Read, ReadWrite, ReadWrite],
    )
    .trusted()
    .fills_workgroup_memory();
    k.defines.insert("D", d.to_string());
    k
}
