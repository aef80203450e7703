//! The SIMD instruction sets as one interface, so each quantized kernel is written once and
//! instantiated per instruction set in `#[target_feature]` wrappers: `F32Isa` (f32 vectors) and
//! `Isa` (the integer operations of the quantized kernels). x86 implements them for AVX-512 and
//! AVX2 (`x86/isa.rs`), aarch64 for NEON with SDOT (`arm/isa.rs`); the GEMM kernels over repacked
//! weights (`gemm/`) are written against them.
//!
//! Every method is unsafe: it is only correct inside a function compiled with (and called after
//! detecting) the instruction set it uses.
#![allow(clippy::missing_safety_doc)] // the module doc states the one rule

/// f32 vector operations on `LANES` values at once.
pub trait F32Isa: Copy {
    const LANES: usize;
    type F: Copy;

    unsafe fn fzero() -> Self::F;
    unsafe fn fsplat(x: f32) -> Self::F;
    /// `LANES` f32 values.
    unsafe fn loadf(p: *const f32) -> Self::F;
    /// `LANES` f16 values, converted exactly.
    unsafe fn f16s(p: *const u8) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// a·b + c
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// c − a·b
    unsafe fn fnmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    unsafe fn store(p: *mut f32, v: Self::F);
}

/// The integer operations the quantized kernels need, on `LANES` rows at once (one i32 per row;
/// four weight bytes per row in byte form): the GEMM kernels keep one output row per lane; the
/// row kernels (256-bit only) use a register as 32 bytes of one row.
pub trait Isa: F32Isa {
    /// `dot_i8` returns Σ (w + I8_OFFSET)·x.
    const I8_OFFSET: i32;
    /// Whether `dot` sums its byte products in 32 bits (VNNI, SDOT); without, pairs of products
    /// saturate at 16 bits.
    const WIDE_DOT: bool;
    /// Whether `dot`'s unsigned operands may use all eight bits (VNNI's `vpdpbusd`); SDOT takes
    /// both operands signed, so they stay below 128.
    const DOT_U8: bool = Self::WIDE_DOT;
    type I: Copy;

    unsafe fn zero() -> Self::I;
    /// `4 · LANES` bytes (one half-line with AVX2).
    unsafe fn load(p: *const u8) -> Self::I;
    /// Bytes of `v` and'ed with `c`.
    unsafe fn and8(v: Self::I, c: i8) -> Self::I;
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn srl16<const N: u32>(v: Self::I) -> Self::I;
    /// Bytes whose bit is set in `mask` (bit 4r + i for row r, byte i) or'ed with `c`.
    unsafe fn or_where(v: Self::I, mask: u64, c: i8) -> Self::I;
    /// acc + Σ u·s over each group of four bytes: u unsigned (< 128 without `WIDE_DOT`), s signed.
    #[cfg(target_arch = "x86_64")] // the x86 row kernels'
    unsafe fn dot_vec(acc: Self::I, u: Self::I, s: Self::I) -> Self::I;
    /// acc + Σ u·x per row over four bytes: u unsigned (< 128), x the four signed activation
    /// bytes, broadcast.
    unsafe fn dot(acc: Self::I, u: Self::I, x: i32) -> Self::I;
    /// acc + Σ (w + I8_OFFSET)·x per row, w signed.
    unsafe fn dot_i8(acc: Self::I, w: Self::I, x: i32) -> Self::I;
    /// acc + a.lo·x.lo + a.hi·x.hi per row, over i16 halves.
    unsafe fn madd16(acc: Self::I, a: Self::I, x: i32) -> Self::I;
    /// `madd16` with a vector: acc + a.lo·b.lo + a.hi·b.hi per row.
    unsafe fn madd16_by(acc: Self::I, a: Self::I, b: Self::I) -> Self::I;
    /// acc + (u0·x0 + u1·x1, u2·x2 + u3·x3) per row, in i16 halves (saturating: the caller keeps
    /// the sums in range).
    unsafe fn dot16(acc: Self::I, u: Self::I, x: i32) -> Self::I;
    /// acc + a·b in i32.
    unsafe fn mul_add(acc: Self::I, a: Self::I, b: Self::I) -> Self::I;
    unsafe fn add(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub_splat(a: Self::I, x: i32) -> Self::I;
    unsafe fn and32(a: Self::I, x: i32) -> Self::I;
    unsafe fn shl32<const N: u32>(v: Self::I) -> Self::I;
    unsafe fn srl32<const N: u32>(v: Self::I) -> Self::I;
    unsafe fn sra32<const N: u32>(v: Self::I) -> Self::I;
    /// `LANES` unsigned bytes, zero-extended.
    unsafe fn u8s(p: *const u8) -> Self::I;
    /// `2 · LANES` unsigned bytes, zero-extended to 16 bits: a pair per row.
    unsafe fn u8_pairs(p: *const u8) -> Self::I;
    /// `LANES` signed bytes, sign-extended.
    unsafe fn i8s(p: *const u8) -> Self::I;
    unsafe fn cvt(v: Self::I) -> Self::F;
    /// Bytes of `v` (each 0..15) replaced by their entry of `levels` (IQ4_NL's and MXFP4's
    /// 16-level tables), by `pshufb` in each 128-bit lane.
    unsafe fn levels(v: Self::I, levels: &[i8; 16]) -> Self::I;
    /// `LANES` E8M0 exponent bytes as f32, halved (ggml's `E8M0_TO_FP32_HALF`: 2^(e − 128), the
    /// two smallest as subnormals).
    unsafe fn e8m0_halves(p: *const u8) -> Self::F;
}
