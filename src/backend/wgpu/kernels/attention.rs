//! The attention kernels (shaders/attention.wgsl, attention_coop.wgsl): decode, split over the
//! keys, with its reduce and the variants that pack their output for the integer-dot mat-vecs;
//! the decode attention v2; the tiled prefill and the flash-attention prefill on cooperative
//! matrices.

use super::super::device::Coop;
use super::super::pipelines::Access::{Read, ReadWrite};
use super::super::pipelines::Kernel;
use super::{with_caches, with_coop};
use crate::backend::CacheType;

/// The GQA-folded attention (attention.wgsl `main`); `lanes`: its 8-lane sums by subgroup
/// shuffles (`SG_LANES`, for subgroups of at least 8), else in workgroup memory.
// Audited (#46): every workgroup value it reads was written first, before a barrier: the queries
// (`hx`, the first nh·hd values, all it reads; rotated and their q8 scales and quants derived
// from them in place), each tile's scores for every filled key slot of its heads (`ss`, NEG past
// the last key), the lanes' partial sums (all 512, or 128 of the maxima and sums), and the
// per-head `talpha`, `tm`, `tl` of heads below nh, the only ones read.
// Trusted (#46), given what `WgpuBackend::attend` checks (head_dim even and ≤ 512, a multiple of
// the q8_0 rotation, queries and output of rows · heads · head_dim values, caches of (start_pos
// + rows) · KV heads · head_dim, sinks for every head, partials sized by the splits): queries and
// outputs are read at row i < rows, head < n_heads, dimension < head_dim; keys and values at
// positions below key_end ≤ start_pos + rows (q8_0 scales at their positions' blocks); partials
// at ((i · heads + h) · splits + s) · (head_dim + 2) + 2 + d. In workgroup memory nh · head_dim
// ≤ 2048 (8 heads to 256 values, 4 to 512) bounds `hx` and, by 4 and 32, `qw`, `q8_d`, `q8_id`;
// heads < 8 and key slots < 64 bound `ss`, `lanes`, `talpha`, `tm`, `tl`; the sums `acc` take
// nh · ⌈head_dim / 64⌉ ≤ 32. Hadamard indices stay inside each head (rotations are powers of
// two dividing head_dim). FUSED_REDUCE: its blocks and counts are those of one row
// (`packed_output`), a workgroup completes at most 9 blocks (`completed` holds 16).
pub fn attention_kernel(k: CacheType, v: CacheType, lanes: bool) -> Kernel {
    let kernel = Kernel::new(
        "attention",
        "attention",
        &[Read, Read, Read, ReadWrite, ReadWrite, Read],
    )
    .fills_workgroup_memory()
    .trusted();
    let kernel = if lanes {
        kernel.flag("SG_LANES")
    } else {
        kernel
    };
    with_caches(kernel, k, v)
}

/// `kernel` (an attention.wgsl one) built for heads of `head_dim` values in groups of `group`
/// query heads per KV head, as constants instead of parameters, so that the compiler sizes and
/// unrolls its loops over heads and dimensions and keeps the per-head sums in registers.
pub fn with_attention_shape(mut kernel: Kernel, (head_dim, group): (usize, usize)) -> Kernel {
    kernel.defines.insert("HEAD_DIM", format!("{head_dim}u"));
    kernel.defines.insert("GROUP", format!("{group}u"));
    kernel
}

/// `kernel` (a decode attention built `with_attention_shape`) as v2 (attention.wgsl `main_v2`)
/// in workgroups of `invocations` (64 or 128) for subgroups of `subgroup` lanes: `pairs` of each
/// head's query values a lane, `heads` heads a workgroup at most.
// Trusted as `attention_kernel`: a lane's pairs below head_dim / 2, heads below nh, keys below
// key_end, and its parts at split s · NSG + subgroup < `p.splits`, the partials `attend` sizes for
// them. It declares no workgroup memory beyond FUSED_REDUCE's and PACKED's (audited there; their
// block is reduced by the first 64 invocations).
pub fn with_attention_v2(
    kernel: Kernel,
    invocations: u32,
    subgroup: usize,
    (pairs, heads): (usize, usize),
) -> Kernel {
    let mut k = kernel.flag("V2").entry("main_v2").workgroup(invocations);
    for (name, value) in [
        ("SG", subgroup),
        ("RP", pairs),
        ("NQ", heads),
        ("NQRP", heads * pairs),
    ] {
        k.defines.insert(name, value.to_string());
    }
    k.label = if k.label == "attention_packed" {
        "attention_v2_packed"
    } else {
        "attention_v2"
    };
    k
}

/// `attention_kernel` for a split decode row whose workgroups also reduce the splits and write
/// the output as packed Q8_K blocks, the workgroup that completes a block doing it, with no reduce
/// dispatch after (attention.wgsl `FUSED_REDUCE`): two bindings more, the blocks and a count per
/// block.
// Audited: `completed` and `n_completed` are written by invocation 0 before the uniform load that
// reads the count (a barrier); `block_max` as in `attention_reduce_packed_kernel`, with a barrier
// before each next block.
pub fn attention_packing_kernel(k: CacheType, v: CacheType, lanes: bool) -> Kernel {
    let mut kernel = attention_kernel(k, v, lanes)
        .flag("PACKED")
        .flag("FUSED_REDUCE");
    kernel.bindings.extend([ReadWrite, ReadWrite]);
    kernel.label = "attention_packed";
    kernel
}

/// The reduce of split decode attention (attention.wgsl `reduce`; it reads no cache, so one
/// variant serves every cache type). It uses no workgroup memory: nothing to fill.
// Trusted: it reads the partials and writes the output of (row < rows, head < n_heads), as
// `attention_kernel`; PACKED, the one row's blocks, `block_max` by invocation (< 64).
pub fn attention_reduce_kernel() -> Kernel {
    Kernel::new(
        "attention_reduce",
        "attention",
        &[Read, Read, Read, ReadWrite, ReadWrite, Read],
    )
    .entry("reduce")
    .fills_workgroup_memory()
    .trusted()
}

/// The reduce fused with the quantization of its output to packed Q8_K blocks, one binding more
/// (attention.wgsl `reduce_packed`; `WgpuBackend::packed_output`).
// Audited: every invocation writes its block maximum before the barrier that precedes the reads.
pub fn attention_reduce_packed_kernel() -> Kernel {
    let mut k = attention_reduce_kernel()
        .entry("reduce_packed")
        .flag("PACKED")
        .fills_workgroup_memory();
    k.bindings.push(ReadWrite);
    k.label = "attention_reduce_packed";
    k
}

/// The tiled prefill attention (attention.wgsl `prefill`): 16 query rows per workgroup.
// Trusted: as `attention_kernel`, with head_dim a multiple of 32 and ≤ 256 (`attend` runs it only
// then): rows below `nrows` are read and written, keys clamped below key_end; `hx` holds 16
// rows of ≤ 256, `ts` 16 × 64 scores, `tmax` and `tsum` one per invocation, `acc_a`/`acc_b`
// head_dim / 32 ≤ 8 vec4s. Its workgroup memory is written before it is read (audited, #46):
// `hx`'s 16 rows (zeros past the last), each tile's 16 × 64 scores, `tmax` and `tsum` by every
// invocation, `talpha` and `tl` for all 16 rows, the q8 scales of every block of `hx`, and (q8_0
// values) all of `hx` again before it is rotated back.
pub fn attention_prefill_kernel(k: CacheType, v: CacheType) -> Kernel {
    let kernel = Kernel::new(
        "attention_prefill",
        "attention",
        &[Read, Read, Read, ReadWrite, ReadWrite, Read],
    )
    .entry("prefill")
    .flag("PREFILL")
    .trusted()
    .fills_workgroup_memory();
    with_caches(kernel, k, v)
}

/// The prefill attention on cooperative matrices over f16 caches (attention_coop.wgsl
/// `prefill_coop`), built for heads of `shape` (head size, group): four subgroups a workgroup, or
/// 128 invocations emulating them, per query head and 16 query rows, as `attention_prefill_kernel`.
// Trusted as `attention_prefill_kernel`, with head_dim a multiple of 64 and ≤ 256 (`attend` runs
// it only then): queries and outputs of rows below `nrows`, keys and values of positions clamped
// below key_end, values ko + 64c + (0..64) of a row of kv_stride ≥ ko + head_dim. In workgroup
// memory `qs` holds 16 rows of head_dim + 8, `kvs` 64 × 72, `ps` 16 × 72, `stage` 16 × 68, `cmax`
// one per invocation, `calpha` and `cl` 16; fragments are loaded and stored inside them (rows
// 16g.., values 64c + kk.. of 16). Every value it reads it wrote first (audited): each chunk's
// whole 64 × 64 of `kvs`, all 16 rows of `qs` (zeros past the last) and of `ps`, each fragment's
// 16 × 16 of `stage` (four of them cover 16 × 64), `cmax` by every invocation, `calpha` and `cl`
// for every row.
pub fn attention_prefill_coop_kernel(coop: Coop, shape: (usize, usize)) -> Kernel {
    let kernel = attention_prefill_kernel(CacheType::F16, CacheType::F16)
        .entry("prefill_coop")
        .flag("PREFILL_COOP");
    let mut kernel = with_attention_shape(with_coop(kernel, coop), shape);
    kernel.label = "attention_prefill_coop";
    kernel
}
