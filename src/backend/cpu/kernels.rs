//! The CPU kernel table, as ggml's `type_traits_cpu`: for each block type the kernels that
//! multiply it (the activation format it pairs with, the dot product of one weight row with one
//! activation row and, where one exists, with four, and the GEMM kernel over repacked weights),
//! and the elementwise and attention kernels. One table is filled once, for the instruction-set
//! level detected at start (`x86::kernels`, `arm::kernels`, or `portable::kernels`); the backend
//! reads every kernel from it, so adding a block type or a level means filling its entries, not
//! adding resolvers.
//!
//! The activation formats are llama.cpp's: 32-value blocks quantized to 8 bits (`BlockQ8`, its
//! `block_q8_0`/`q8_1`) for the 32-block types, 256-value blocks with per-16 sums (`BlockQ8K`) for
//! the K-quants, and the f32 values themselves for unquantized weights.

use std::ops::Range;

use half::f16;

use super::gemm::f16::PanelGemm;
use super::repack::Packed;
use crate::gguf::GgmlType;

/// An instruction-set level the CPU kernels are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Plain Rust, for every CPU (and `KILN_NO_SIMD=1`).
    Portable,
    /// AVX2 with FMA and F16C: `maddubs`/`madd` byte dot products.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2 plus AVX-VNNI's `vpdpbusd`.
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// AVX-512 (F, BW, VL, DQ) with VNNI: 16-row GEMM tiles and attention in 512-bit registers;
    /// the row kernels stay AVX2's (with AVX-VNNI where the CPU has it).
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// NEON, which every aarch64 CPU has: widening multiplies for byte dot products.
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// NEON with the dotprod extension's SDOT.
    #[cfg(target_arch = "aarch64")]
    NeonDot,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "AVX2",
            #[cfg(target_arch = "x86_64")]
            Level::AvxVnni => "AVX2+VNNI",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Vnni => "AVX-512 VNNI",
            #[cfg(target_arch = "aarch64")]
            Level::Neon => "NEON",
            #[cfg(target_arch = "aarch64")]
            Level::NeonDot => "NEON+dotprod",
        }
    }
}

/// 32 activations quantized to i8 with one f32 scale; `s` = d · Σ qs (for weight types with a
/// per-block minimum).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct BlockQ8 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
}

/// 256 activations quantized to i8, with the sums of each group of 16 (for K-quant minimums)
/// and of each group of 32 (`bsums` added in pairs: the GEMM kernels of the 32-value sub-block
/// types broadcast two of them at a time from memory, where a sum made in registers would cost
/// shuffles on the ports the dot products need).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; 256],
    pub bsums: [i16; 16],
    pub sums32: [i16; 8],
}

impl BlockQ8K {
    /// `sums32` from `bsums`.
    #[inline]
    pub fn sum_pairs(&mut self) {
        for (j, s) in self.sums32.iter_mut().enumerate() {
            *s = self.bsums[2 * j] + self.bsums[2 * j + 1];
        }
    }
}

impl Default for BlockQ8 {
    fn default() -> Self {
        BlockQ8 {
            d: 0.0,
            s: 0.0,
            qs: [0; 32],
        }
    }
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; 256],
            bsums: [0; 16],
            sums32: [0; 8],
        }
    }
}

/// One weight row (a GGML type's blocks, as bytes) · one activation row.
pub type Dot<A> = fn(&[u8], &[A]) -> f32;
/// One weight row · four activation rows: each weight block decoded once. Each row's result has
/// the bits the one-row kernel gives it.
pub type Dot4<A> = fn(&[u8], [&[A]; 4]) -> [f32; 4];
/// The same with eight activation rows, for kernels whose block decoding costs more than its
/// products (the grid i-quants): decoded once per eight tokens of a prefill.
pub type Dot8<A> = fn(&[u8], [&[A]; 8]) -> [f32; 8];
/// f32 values → activation blocks (the same values as the portable quantizer).
pub type Quantize<A> = fn(&[f32], &mut [A]);
/// A GEMM kernel over repacked weights (`gemm/`). Unsafe: the call's ranges must lie within
/// its buffers (the CPU has its instruction set: the table holds it only where it was detected).
pub type PackedKernel<A> = unsafe fn(&GroupCall<A>);

/// What one GEMM kernel call computes: rows `16·group..16·group + 16` of `p` against `tokens`,
/// each token's activations `stride` blocks apart in `x` (and their sums, for Q8, in `xsum`), the
/// group's row `r` for token `t` written to `out[t·m + r]` (so `out` points at the group's first
/// row).
pub struct GroupCall<'a, A> {
    pub p: &'a Packed,
    pub group: usize,
    pub x: &'a [A],
    pub stride: usize,
    pub xsum: &'a [i32],
    pub tokens: Range<usize>,
    pub out: *mut f32,
    pub m: usize,
}

/// Bytes of one 256-value block of 16 rows decoded for the GEMM (`Tiled`): 64 lines of signed
/// bytes (line q holds values 4q..4q + 4 of each row, row after row), then the i32 scale of each
/// 16 values of each row (16 planes of 16), then each row's f32 block scale.
pub const DECODED_BLOCK: usize = 4096 + 1024 + 64;

/// Decode 16 weight rows (a grid i-quant or ternary type, whole blocks) into `DECODED_BLOCK`s,
/// one per block of the rows.
pub type TileDecode = unsafe fn(rows: &[&[u8]; 16], out: &mut [u8]);

/// What one decoded GEMM call computes: the 16 rows decoded in `decoded` (`blocks` blocks) against
/// `tokens`, as `GroupCall`, each result times `factor` (the type's fixed fraction of its scales).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct TiledCall<'a, A> {
    pub decoded: &'a [u8],
    pub blocks: usize,
    pub factor: f32,
    pub x: &'a [A],
    pub stride: usize,
    pub tokens: Range<usize>,
    pub out: *mut f32,
    pub m: usize,
}

/// A type the GEMM takes decoded, 16 rows at a time, for a prefill: the rows turned into signed
/// bytes once for all its tokens (`decode`), then multiplied as the repacked types are (`gemm`),
/// with the bits of the row kernels (x86 `gemm/decoded.rs`), as llama.cpp's tiled path does for
/// the types it cannot repack.
pub struct Tiled<A> {
    pub decode: TileDecode,
    pub factor: f32,
    pub gemm: unsafe fn(&TiledCall<A>),
}

impl<A> Clone for Tiled<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Tiled<A> {}

/// The kernels of a quantized type against activations in blocks `A`.
pub struct QuantKernels<A> {
    pub dot: Dot<A>,
    pub dot4: Option<Dot4<A>>,
    pub dot8: Option<Dot8<A>>,
    /// Where the type is repacked at load: the GEMM kernel over its packed layout.
    pub packed: Option<PackedKernel<A>>,
    /// Where the GEMM takes the type decoded on the fly.
    pub tiled: Option<Tiled<A>>,
}

impl<A> Clone for QuantKernels<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for QuantKernels<A> {}

/// The table entry of a row kernel written for any number of activation rows, `$kernel::<$t, R>`
/// (an `unsafe` instantiation for one instruction set): its one- and four-row forms as the
/// table's safe function pointers, with no GEMM kernel. The caller vouches that the CPU has the
/// instruction set (the arch module hands tables out only for detected levels).
macro_rules! row_kernels {
    ($kernel:ident, $t:ty) => {
        QuantKernels {
            // SAFETY: as the macro's caller vouches.
            dot: |w, x| unsafe { $kernel::<$t, 1>(w, [x])[0] },
            dot4: Some(|w, x| unsafe { $kernel::<$t, 4>(w, x) }),
            dot8: None,
            packed: None,
            tiled: None,
        }
    };
    // A kernel written for one type only, `$kernel::<R>`.
    ($kernel:ident) => {
        QuantKernels {
            // SAFETY: as the macro's caller vouches.
            dot: |w, x| unsafe { $kernel::<1>(w, [x])[0] },
            dot4: Some(|w, x| unsafe { $kernel::<4>(w, x) }),
            dot8: None,
            packed: None,
            tiled: None,
        }
    };
    // With the eight-row form too.
    ($kernel:ident, $t:ty, 8) => {
        QuantKernels {
            // SAFETY: as the macro's caller vouches.
            dot: |w, x| unsafe { $kernel::<$t, 1>(w, [x])[0] },
            dot4: Some(|w, x| unsafe { $kernel::<$t, 4>(w, x) }),
            dot8: Some(|w, x| unsafe { $kernel::<$t, 8>(w, x) }),
            packed: None,
            tiled: None,
        }
    };
}
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_imports)
)]
pub(crate) use row_kernels;

/// What the CPU does with one block type.
#[derive(Clone, Copy)]
pub enum TypeKernels {
    /// Unquantized weights against the f32 activations.
    F32(Dot<f32>),
    /// 32-value blocks against `BlockQ8` activations.
    Q8(QuantKernels<BlockQ8>),
    /// K-quants against `BlockQ8K` activations.
    Q8K(QuantKernels<BlockQ8K>),
}

/// How a weight type wants its activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActFormat {
    F32,
    Q8,
    Q8K,
}

impl TypeKernels {
    pub fn format(&self) -> ActFormat {
        match self {
            TypeKernels::F32(_) => ActFormat::F32,
            TypeKernels::Q8(_) => ActFormat::Q8,
            TypeKernels::Q8K(_) => ActFormat::Q8K,
        }
    }

    /// Whether weights of this type are repacked for a GEMM kernel.
    pub fn packs(&self) -> bool {
        match self {
            TypeKernels::F32(_) => false,
            TypeKernels::Q8(k) => k.packed.is_some(),
            TypeKernels::Q8K(k) => k.packed.is_some(),
        }
    }
}

/// An activation block format of the quantized types: what the matmul passes (`matmul.rs`,
/// `moe.rs`) need to know to run either one with the same code.
pub trait ActBlock: Copy + Default + Send + Sync + 'static {
    /// Values per block.
    const LEN: usize;
    /// Whether the GEMM kernels take each block's integer sum (`GroupCall::xsum`).
    const SUMS: bool;
    /// The quantizer of this format in a table.
    fn quantizer(k: &Kernels) -> Quantize<Self>;
    /// The kernels of a type that takes this format.
    fn kernels(t: TypeKernels) -> Option<QuantKernels<Self>>;
    /// Σ of the block's 8-bit values.
    fn sum(&self) -> i32;
}

impl ActBlock for BlockQ8 {
    const LEN: usize = 32;
    const SUMS: bool = true;
    fn quantizer(k: &Kernels) -> Quantize<Self> {
        k.quantize_q8
    }
    fn kernels(t: TypeKernels) -> Option<QuantKernels<Self>> {
        match t {
            TypeKernels::Q8(k) => Some(k),
            _ => None,
        }
    }
    fn sum(&self) -> i32 {
        self.qs.iter().map(|&v| v as i32).sum()
    }
}

impl ActBlock for BlockQ8K {
    const LEN: usize = 256;
    const SUMS: bool = false;
    fn quantizer(k: &Kernels) -> Quantize<Self> {
        k.quantize_q8k
    }
    fn kernels(t: TypeKernels) -> Option<QuantKernels<Self>> {
        match t {
            TypeKernels::Q8K(k) => Some(k),
            _ => None,
        }
    }
    fn sum(&self) -> i32 {
        self.qs.iter().map(|&v| v as i32).sum()
    }
}

/// Keys or values attention reads in place in an f32 or f16 cache: row j at `ptr + j · stride`.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only x86 reads caches in place so far
pub enum CacheRows {
    F32(*const f32, usize),
    /// f16 values as their bits, converted as they are loaded (exactly).
    F16(*const u16, usize),
}

/// Attention's inner loops over rows read in place, for heads of a multiple of `lanes` values up
/// to 256. Unsafe: the rows must hold `n` rows of `hd` values.
#[derive(Clone, Copy)]
pub struct AttentionKernels {
    /// `s[qi·stride + j] = q_qi · k_j` for `nq` queries (rows of `q`) and `n` keys (a multiple
    /// of 16).
    #[allow(clippy::type_complexity)]
    pub scores: unsafe fn(
        hd: usize,
        q: &[f32],
        nq: usize,
        k: CacheRows,
        n: usize,
        s: &mut [f32],
        stride: usize,
    ),
    /// `acc[qi] = Σ_j p[qi·stride + j] · v_j` over `n` value rows.
    #[allow(clippy::type_complexity)]
    pub accumulate: unsafe fn(
        hd: usize,
        p: &[f32],
        stride: usize,
        nq: usize,
        v: CacheRows,
        n: usize,
        acc: &mut [f32],
    ),
    /// The vector width in f32 values: heads are read in whole vectors.
    pub lanes: usize,
}

impl AttentionKernels {
    /// Whether the kernels take heads of `hd` values.
    pub fn takes(&self, hd: usize) -> bool {
        hd > 0 && hd <= 256 && hd.is_multiple_of(self.lanes)
    }
}

/// The kernels of one instruction-set level.
pub struct Kernels {
    pub level: Level,
    /// Per block type, by `GgmlType as usize` (the order of `GgmlType::ALL`).
    pub types: [TypeKernels; GgmlType::ALL.len()],
    pub quantize_q8: Quantize<BlockQ8>,
    pub quantize_q8k: Quantize<BlockQ8K>,
    /// gate[i] = silu(gate[i]) · up[i], with llama.cpp's `expf`.
    pub silu_mul: fn(gate: &mut [f32], up: &[f32]),
    /// x[i] = expf(x[i] − max) with llama.cpp's `expf`; returns Σ in f64.
    pub exp_sub: fn(x: &mut [f32], max: f32) -> f64,
    /// Round each value to the nearest f16 (kept as f32).
    pub round_f16: fn(x: &mut [f32]),
    /// An F16 weight row · four activation rows already rounded to f16 (`round_f16`): the
    /// weights converted once for all four, each row's sum in the order of the one-row F16
    /// kernel, so its bits are that kernel's. None where the level has none.
    pub dot4_f16: Option<Dot4<f32>>,
    /// The F16 GEMM over weights repacked in panels (`gemm/f16.rs`), which F16 matrices take
    /// where it exists: every token count, decode too, in its one order.
    pub f16_panels: Option<PanelGemm>,
    /// Σ a·b with b in f16 (attention scores against an f16 key cache).
    pub dot_f32_f16: fn(a: &[f32], b: &[f16]) -> f32,
    /// y += a·x with x in f16 (attention output from an f16 value cache).
    pub axpy_f16: fn(a: f32, x: &[f16], y: &mut [f32]),
    /// y += a·x with x a row of Q8_0 blocks (attention output from a q8_0 value cache).
    pub axpy_q8_0: fn(a: f32, x: &[u8], y: &mut [f32]),
    /// One token of the gated delta rule on one head's state `s` (row j = column j of the state
    /// matrix, `k.len()` values each): every row decayed, corrected along k by
    /// δ_j = β (v_j − row·k), and read out as out_j = (row·q)·scale, with `[decay, β, scale]`.
    /// The dot products are those of the F32 row kernel, so every level's result is that of the
    /// steps taken one at a time.
    #[allow(clippy::type_complexity)]
    pub delta_rule: fn(
        s: &mut [f32],
        k: &[f32],
        q: &[f32],
        v: &[f32],
        decay_beta_scale: [f32; 3],
        out: &mut [f32],
    ),
    /// Attention over caches read in place; None where each chunk is copied to f32 first.
    pub attention: Option<AttentionKernels>,
}

impl Kernels {
    pub fn name(&self) -> &'static str {
        self.level.name()
    }

    /// The kernels of block type `t`.
    pub fn of(&self, t: GgmlType) -> TypeKernels {
        self.types[t as usize]
    }

    /// The dot product of an unquantized weight row (`t` F32, F16 or BF16) with f32 values.
    pub fn dot_f32(&self, t: GgmlType) -> Dot<f32> {
        match self.of(t) {
            TypeKernels::F32(dot) => dot,
            _ => unreachable!("{t} takes quantized activations"),
        }
    }

    /// The dot product of a 32-block weight row with `BlockQ8` activations.
    pub fn dot_q8(&self, t: GgmlType) -> Dot<BlockQ8> {
        match self.of(t) {
            TypeKernels::Q8(k) => k.dot,
            _ => unreachable!("{t} is not a 32-block type"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::portable::tests::{activations, random_row};
    use super::super::{ggml_math, portable};
    use super::*;

    /// The tables of every level this CPU runs.
    pub(crate) fn every_level() -> Vec<Kernels> {
        let mut tables = vec![portable::kernels()];
        #[cfg(target_arch = "x86_64")]
        for level in super::super::x86::levels() {
            // SAFETY: `levels` lists only what this CPU has.
            tables.push(unsafe { super::super::x86::kernels(level) });
        }
        #[cfg(target_arch = "aarch64")]
        for level in super::super::arm::levels() {
            // SAFETY: `levels` lists only what this CPU has.
            tables.push(unsafe { super::super::arm::kernels(level) });
        }
        tables
    }

    #[test]
    fn the_table_is_indexed_in_the_order_of_all_types() {
        for (i, t) in GgmlType::ALL.into_iter().enumerate() {
            assert_eq!(t as usize, i, "{t}");
        }
    }

    /// The delta-rule kernel gives the bits of its steps taken one at a time with the level's
    /// f32 dot product, on head sizes with and without an 8-value tail and row counts with and
    /// without a remainder of four.
    #[test]
    fn delta_rule_equals_its_steps() {
        for k8 in every_level() {
            let dot = k8.dot_f32(GgmlType::F32);
            let dot = |a: &[f32], b: &[f32]| dot(super::super::f32_bytes(a), b);
            let (decay, beta, scale) = (0.93, 0.61, 0.125);
            for (d, rows) in [(16, 16), (128, 128), (20, 7), (8, 3)] {
                let (k, q, v) = (activations(d, 1), activations(d, 2), activations(rows, 3));
                let mut s = activations(rows * d, 4);
                let mut want_s = s.clone();
                let mut want = vec![0.0; rows];
                for (j, row) in want_s.chunks_exact_mut(d).enumerate() {
                    row.iter_mut().for_each(|x| *x *= decay);
                    let delta = (v[j] - dot(row, &k)) * beta;
                    row.iter_mut().zip(&k).for_each(|(x, &kv)| *x += kv * delta);
                    want[j] = dot(row, &q) * scale;
                }
                let mut out = vec![0.0; rows];
                (k8.delta_rule)(&mut s, &k, &q, &v, [decay, beta, scale], &mut out);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let what = format!("{}, head size {d}, {rows} rows", k8.name());
                assert_eq!(bits(&out), bits(&want), "outputs, {what}");
                assert_eq!(bits(&s), bits(&want_s), "state, {what}");
            }
        }
    }

    /// Every level's kernels agree with the portable reference (integer parts exactly, so only
    /// float summation order differs), and their four-row kernels give each row the one-row
    /// kernel's bits.
    #[test]
    fn every_level_matches_the_portable_kernels() {
        // CI names the kernels its (emulated) CPU must get, so a run cannot pass by testing less.
        if let Ok(expected) = std::env::var("KILN_EXPECT_KERNELS") {
            assert_eq!(super::super::detect_kernels().name(), expected);
        }
        let reference = portable::kernels();
        for k in every_level() {
            check_level(&k, &reference);
        }
    }

    fn quantized<A: Default + Clone>(q: Quantize<A>, x: &[f32], block: usize) -> Vec<A> {
        let mut out = vec![A::default(); x.len() / block];
        q(x, &mut out);
        out
    }

    /// The four- and eight-row kernels (where they exist) give each row exactly what the one-row
    /// kernel gives it.
    fn check_x4<A: Default + Clone>(
        k: &QuantKernels<A>,
        quantize: Quantize<A>,
        block: usize,
        w: &[u8],
        n: usize,
        seed: u64,
        what: &str,
    ) {
        let q: Vec<Vec<A>> = (0..8)
            .map(|r| quantized(quantize, &activations(n, seed * 7 + r + 11), block))
            .collect();
        let mut got: Vec<(usize, Vec<f32>)> = Vec::new();
        if let Some(x4) = k.dot4 {
            got.push((4, x4(w, std::array::from_fn(|r| &q[r][..])).to_vec()));
        }
        if let Some(x8) = k.dot8 {
            got.push((8, x8(w, std::array::from_fn(|r| &q[r][..])).to_vec()));
        }
        for (rows, values) in got {
            for (r, v) in values.iter().enumerate() {
                let want = (k.dot)(w, &q[r]);
                assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "{what} x{rows} row {r}: {v} vs {want}"
                );
            }
        }
    }

    fn check_level(k: &Kernels, reference: &Kernels) {
        let n = 1024;
        for t in GgmlType::ALL {
            assert_eq!(k.of(t).format(), reference.of(t).format(), "{t}");
            for seed in 0..4u64 {
                let w = random_row(t, n, seed * 31 + t.id() as u64);
                let x = activations(n, seed + 5);
                let what = format!("{t} ({})", k.name());
                let (fast, slow) = match (k.of(t), reference.of(t)) {
                    (TypeKernels::F32(fast), TypeKernels::F32(slow)) => {
                        (fast(&w, &x), slow(&w, &x))
                    }
                    (TypeKernels::Q8(fast), TypeKernels::Q8(slow)) => {
                        let q = quantized(k.quantize_q8, &x, 32);
                        check_x4(&fast, k.quantize_q8, 32, &w, n, seed, &what);
                        ((fast.dot)(&w, &q), (slow.dot)(&w, &q))
                    }
                    (TypeKernels::Q8K(fast), TypeKernels::Q8K(slow)) => {
                        let q = quantized(k.quantize_q8k, &x, 256);
                        check_x4(&fast, k.quantize_q8k, 256, &w, n, seed, &what);
                        ((fast.dot)(&w, &q), (slow.dot)(&w, &q))
                    }
                    _ => unreachable!("formats checked above"),
                };
                let tol = 1e-4 * slow.abs().max(1.0);
                assert!((fast - slow).abs() <= tol, "{what}: {fast} vs {slow}");
            }
        }
        // Quantization equals the reference, value for value, also where the largest magnitude
        // comes with both signs (the first decides the scale's sign) and in a block of zeros.
        let mut xq = activations(1024, 77);
        (xq[600], xq[700]) = (-2.5, 2.5);
        xq[768..].fill(0.0);
        let (a8, b8) = (
            quantized(k.quantize_q8, &xq, 32),
            quantized(reference.quantize_q8, &xq, 32),
        );
        for (a, b) in a8.iter().zip(&b8) {
            assert_eq!((a.d, a.s, a.qs), (b.d, b.s, b.qs));
        }
        let (ak, bk) = (
            quantized(k.quantize_q8k, &xq, 256),
            quantized(reference.quantize_q8k, &xq, 256),
        );
        for (a, b) in ak.iter().zip(&bk) {
            assert_eq!(
                (a.d, a.qs, a.bsums, a.sums32),
                (b.d, b.qs, b.bsums, b.sums32)
            );
        }

        // Elementwise functions equal the scalar definitions bit for bit.
        let xs: Vec<f32> = (0..203).map(|i| (i as f32 - 101.0) * 0.37).collect();
        let ups = activations(203, 9);
        // SiLU also where exp(−x) overflows, is subnormal or underflows.
        let mut gates = xs.clone();
        gates[40..50].copy_from_slice(&[
            -200.0, -140.0, -100.0, -95.0, -89.0, -88.5, 88.5, 95.0, 104.0, 200.0,
        ]);
        let mut g = gates.clone();
        (k.silu_mul)(&mut g, &ups);
        for i in 0..203 {
            let want = ggml_math::silu(gates[i]) * ups[i];
            assert_eq!(g[i].to_bits(), want.to_bits(), "silu({})", gates[i]);
        }
        let mut e = xs.clone();
        let sum = (k.exp_sub)(&mut e, 3.0);
        for i in 0..203 {
            assert_eq!(e[i].to_bits(), ggml_math::expf(xs[i] - 3.0).to_bits());
        }
        assert!((sum - e.iter().map(|&v| v as f64).sum::<f64>()).abs() < 1e-6 * sum);
        let mut r = ups.clone();
        (k.round_f16)(&mut r);
        for i in 0..203 {
            assert_eq!(r[i], f16::from_f32(ups[i]).to_f32());
        }

        let a = activations(77, 1);
        let b: Vec<f16> = activations(77, 2)
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y.to_f32()).sum();
        assert!(((k.dot_f32_f16)(&a, &b) - want).abs() < 1e-4);
        let mut y = a.clone();
        (k.axpy_f16)(0.5, &b, &mut y);
        for i in 0..77 {
            assert!((y[i] - (a[i] + 0.5 * b[i].to_f32())).abs() < 1e-6);
        }
        let q8 = random_row(GgmlType::Q8_0, 96, 3);
        let (mut y, mut want) = (activations(96, 4), activations(96, 4));
        (k.axpy_q8_0)(0.7, &q8, &mut y);
        (reference.axpy_q8_0)(0.7, &q8, &mut want);
        for i in 0..96 {
            assert!(
                (y[i] - want[i]).abs() <= 1e-6 * want[i].abs().max(1.0),
                "axpy_q8_0 [{i}]"
            );
        }
    }
}
