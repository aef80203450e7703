//! The x86 instruction sets behind `F32Isa` and `Isa` (`cpu/isa.rs`), used by attention, the row
//! kernels and the GEMM kernels. Three shapes implement them: `Avx512` (16 lanes of 512 bits),
//! `Avx2` (8 lanes of 256 bits, byte dot products by `maddubs`/`madd` or, with `VNNI`, AVX-VNNI's
//! `vpdpbusd`) and `Avx2Pair` (16 lanes as two AVX2 registers, for one-token GEMM).
//!
//! Every method is `#[inline(always)]` and unsafe: it is only correct inside a function compiled
//! with (and called after detecting) the instruction set it uses.
#![allow(clippy::missing_safety_doc)] // the module doc states the one rule

use std::arch::x86_64::*;

pub use crate::backend::cpu::isa::{F32Isa, Isa};

#[derive(Clone, Copy)]
pub struct Avx512;

impl F32Isa for Avx512 {
    const LANES: usize = 16;
    type F = __m512;

    #[inline(always)]
    unsafe fn fzero() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn f16s(p: *const u8) -> __m512 {
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn fsplat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fnmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn loadf(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Isa for Avx512 {
    const I8_OFFSET: i32 = 128;
    const WIDE_DOT: bool = true;
    type I = __m512i;

    #[inline(always)]
    unsafe fn zero() -> __m512i {
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        unsafe { _mm512_loadu_si512(p as *const _) }
    }
    #[inline(always)]
    unsafe fn and8(v: __m512i, c: i8) -> __m512i {
        unsafe { _mm512_and_si512(v, _mm512_set1_epi8(c)) }
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn srl16<const N: u32>(v: __m512i) -> __m512i {
        unsafe { _mm512_srli_epi16::<N>(v) }
    }
    #[inline(always)]
    unsafe fn or_where(v: __m512i, mask: u64, c: i8) -> __m512i {
        unsafe { _mm512_mask_add_epi8(v, mask, v, _mm512_set1_epi8(c)) }
    }
    #[inline(always)]
    unsafe fn dot_vec(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
        unsafe { _mm512_dpbusd_epi32(acc, u, s) }
    }
    #[inline(always)]
    unsafe fn dot(acc: __m512i, u: __m512i, x: i32) -> __m512i {
        unsafe { Self::dot_vec(acc, u, _mm512_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn dot_i8(acc: __m512i, w: __m512i, x: i32) -> __m512i {
        unsafe {
            let u = _mm512_xor_si512(w, _mm512_set1_epi8(-128));
            _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(x))
        }
    }
    #[inline(always)]
    unsafe fn madd16(acc: __m512i, a: __m512i, x: i32) -> __m512i {
        unsafe { _mm512_dpwssd_epi32(acc, a, _mm512_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn madd16_by(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_dpwssd_epi32(acc, a, b) }
    }
    #[inline(always)]
    unsafe fn dot16(acc: __m512i, u: __m512i, x: i32) -> __m512i {
        unsafe { _mm512_adds_epi16(acc, _mm512_maddubs_epi16(u, _mm512_set1_epi32(x))) }
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(acc, _mm512_mullo_epi32(a, b)) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub_splat(a: __m512i, x: i32) -> __m512i {
        unsafe { _mm512_sub_epi32(a, _mm512_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn and32(a: __m512i, x: i32) -> __m512i {
        unsafe { _mm512_and_si512(a, _mm512_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn shl32<const N: u32>(v: __m512i) -> __m512i {
        unsafe { _mm512_slli_epi32::<N>(v) }
    }
    #[inline(always)]
    unsafe fn srl32<const N: u32>(v: __m512i) -> __m512i {
        unsafe { _mm512_srli_epi32::<N>(v) }
    }
    #[inline(always)]
    unsafe fn sra32<const N: u32>(v: __m512i) -> __m512i {
        unsafe { _mm512_srai_epi32::<N>(v) }
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m512i {
        unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn u8_pairs(p: *const u8) -> __m512i {
        unsafe { _mm512_cvtepu8_epi16(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> __m512i {
        unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn cvt(v: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(v) }
    }
    #[inline(always)]
    unsafe fn levels(v: __m512i, levels: &[i8; 16]) -> __m512i {
        unsafe {
            let table = _mm512_broadcast_i32x4(_mm_loadu_si128(levels.as_ptr() as *const __m128i));
            _mm512_shuffle_epi8(table, v)
        }
    }
    #[inline(always)]
    unsafe fn e8m0_halves(p: *const u8) -> __m512 {
        unsafe {
            let e = _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i));
            let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
            let small = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
            let is_normal = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
            _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_normal, small, normal))
        }
    }
}

/// AVX2, eight rows per register; `VNNI` uses AVX-VNNI's `vpdpbusd` for byte dot products.
#[derive(Clone, Copy)]
pub struct Avx2<const VNNI: bool>;

impl<const VNNI: bool> F32Isa for Avx2<VNNI> {
    const LANES: usize = 8;
    type F = __m256;

    #[inline(always)]
    unsafe fn fzero() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn f16s(p: *const u8) -> __m256 {
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn fsplat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fnmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn loadf(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
}

impl<const VNNI: bool> Isa for Avx2<VNNI> {
    const I8_OFFSET: i32 = 0;
    const WIDE_DOT: bool = VNNI;
    type I = __m256i;

    #[inline(always)]
    unsafe fn zero() -> __m256i {
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        unsafe { _mm256_loadu_si256(p as *const __m256i) }
    }
    #[inline(always)]
    unsafe fn and8(v: __m256i, c: i8) -> __m256i {
        unsafe { _mm256_and_si256(v, _mm256_set1_epi8(c)) }
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn srl16<const N: u32>(v: __m256i) -> __m256i {
        unsafe { _mm256_srl_epi16(v, _mm_cvtsi32_si128(N as i32)) }
    }
    #[inline(always)]
    unsafe fn or_where(v: __m256i, mask: u64, c: i8) -> __m256i {
        unsafe {
            // llama.cpp's bytes_from_bits_32: byte i becomes 0xFF where bit i is set.
            let shuf = _mm256_set_epi64x(
                0x0303030303030303,
                0x0202020202020202,
                0x0101010101010101,
                0x0000000000000000,
            );
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(mask as u32 as i32), shuf);
            let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
            let set = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
            _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(c)))
        }
    }
    #[inline(always)]
    unsafe fn dot_vec(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        unsafe {
            if VNNI {
                _mm256_dpbusd_avx_epi32(acc, u, s)
            } else {
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
                _mm256_add_epi32(acc, p)
            }
        }
    }
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, x: i32) -> __m256i {
        unsafe { Self::dot_vec(acc, u, _mm256_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn dot_i8(acc: __m256i, w: __m256i, x: i32) -> __m256i {
        unsafe {
            // |w| · (x with w's sign): exact, and within maddubs' range.
            let x = _mm256_sign_epi8(_mm256_set1_epi32(x), w);
            Self::dot_vec(acc, _mm256_sign_epi8(w, w), x)
        }
    }
    #[inline(always)]
    unsafe fn madd16(acc: __m256i, a: __m256i, x: i32) -> __m256i {
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(a, _mm256_set1_epi32(x))) }
    }
    #[inline(always)]
    unsafe fn madd16_by(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)) }
    }
    #[inline(always)]
    unsafe fn dot16(acc: __m256i, u: __m256i, x: i32) -> __m256i {
        unsafe { _mm256_adds_epi16(acc, _mm256_maddubs_epi16(u, _mm256_set1_epi32(x))) }
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(acc, _mm256_mullo_epi32(a, b)) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub_splat(a: __m256i, x: i32) -> __m256i {
        unsafe { _mm256_sub_epi32(a, _mm256_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn and32(a: __m256i, x: i32) -> __m256i {
        unsafe { _mm256_and_si256(a, _mm256_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn shl32<const N: u32>(v: __m256i) -> __m256i {
        unsafe { _mm256_sll_epi32(v, _mm_cvtsi32_si128(N as i32)) }
    }
    #[inline(always)]
    unsafe fn srl32<const N: u32>(v: __m256i) -> __m256i {
        unsafe { _mm256_srl_epi32(v, _mm_cvtsi32_si128(N as i32)) }
    }
    #[inline(always)]
    unsafe fn sra32<const N: u32>(v: __m256i) -> __m256i {
        unsafe { _mm256_sra_epi32(v, _mm_cvtsi32_si128(N as i32)) }
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m256i {
        unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn u8_pairs(p: *const u8) -> __m256i {
        unsafe { _mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> __m256i {
        unsafe { _mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn cvt(v: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(v) }
    }
    #[inline(always)]
    unsafe fn levels(v: __m256i, levels: &[i8; 16]) -> __m256i {
        unsafe {
            let table =
                _mm256_broadcastsi128_si256(_mm_loadu_si128(levels.as_ptr() as *const __m128i));
            _mm256_shuffle_epi8(table, v)
        }
    }
    #[inline(always)]
    unsafe fn e8m0_halves(p: *const u8) -> __m256 {
        unsafe {
            let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
            let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
            let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
            let is_normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
            _mm256_castsi256_ps(_mm256_blendv_epi8(small, normal, is_normal))
        }
    }
}

/// AVX2 on all 16 rows of a group at once, as pairs of registers: for one token, so that each
/// weight line is used whole as it arrives (taking the two halves in turn left memory idle while
/// the second half was computed from cache).
#[derive(Clone, Copy)]
pub struct Avx2Pair<const VNNI: bool>;

/// An `Avx2` operation on each half of a pair: the arguments before `;` are pairs, those after
/// it are passed to both halves as they are.
macro_rules! halves {
    ($op:ident $(::<$n:ident>)? ($($a:expr),* $(; $s:expr)*)) => {
        [
            Avx2::<VNNI>::$op$(::<$n>)?($($a[0],)* $($s),*),
            Avx2::<VNNI>::$op$(::<$n>)?($($a[1],)* $($s),*),
        ]
    };
}

impl<const VNNI: bool> F32Isa for Avx2Pair<VNNI> {
    const LANES: usize = 16;
    type F = [__m256; 2];

    #[inline(always)]
    unsafe fn fzero() -> Self::F {
        unsafe { [_mm256_setzero_ps(); 2] }
    }
    #[inline(always)]
    unsafe fn f16s(p: *const u8) -> Self::F {
        unsafe { [Avx2::<VNNI>::f16s(p), Avx2::<VNNI>::f16s(p.add(16))] }
    }
    #[inline(always)]
    unsafe fn fsplat(x: f32) -> Self::F {
        unsafe { [_mm256_set1_ps(x); 2] }
    }
    #[inline(always)]
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F {
        unsafe { halves!(mul(a, b)) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F {
        unsafe { halves!(fmadd(a, b, c)) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F {
        unsafe { halves!(fnmadd(a, b, c)) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::F) {
        unsafe {
            Avx2::<VNNI>::store(p, v[0]);
            Avx2::<VNNI>::store(p.add(8), v[1]);
        }
    }
    #[inline(always)]
    unsafe fn loadf(p: *const f32) -> Self::F {
        unsafe { [Avx2::<VNNI>::loadf(p), Avx2::<VNNI>::loadf(p.add(8))] }
    }
}

impl<const VNNI: bool> Isa for Avx2Pair<VNNI> {
    const I8_OFFSET: i32 = 0;
    const WIDE_DOT: bool = VNNI;
    type I = [__m256i; 2];

    #[inline(always)]
    unsafe fn zero() -> Self::I {
        unsafe { [_mm256_setzero_si256(); 2] }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self::I {
        unsafe { [Avx2::<VNNI>::load(p), Avx2::<VNNI>::load(p.add(32))] }
    }
    #[inline(always)]
    unsafe fn and8(v: Self::I, c: i8) -> Self::I {
        unsafe { halves!(and8(v; c)) }
    }
    #[inline(always)]
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I {
        unsafe { halves!(or(a, b)) }
    }
    #[inline(always)]
    unsafe fn srl16<const N: u32>(v: Self::I) -> Self::I {
        unsafe { halves!(srl16::<N>(v)) }
    }
    #[inline(always)]
    unsafe fn or_where(v: Self::I, mask: u64, c: i8) -> Self::I {
        unsafe {
            [
                Avx2::<VNNI>::or_where(v[0], mask, c),
                Avx2::<VNNI>::or_where(v[1], mask >> 32, c),
            ]
        }
    }
    #[inline(always)]
    unsafe fn dot_vec(acc: Self::I, u: Self::I, s: Self::I) -> Self::I {
        unsafe { halves!(dot_vec(acc, u, s)) }
    }
    #[inline(always)]
    unsafe fn dot(acc: Self::I, u: Self::I, x: i32) -> Self::I {
        unsafe { halves!(dot(acc, u; x)) }
    }
    #[inline(always)]
    unsafe fn dot_i8(acc: Self::I, w: Self::I, x: i32) -> Self::I {
        unsafe { halves!(dot_i8(acc, w; x)) }
    }
    #[inline(always)]
    unsafe fn madd16(acc: Self::I, a: Self::I, x: i32) -> Self::I {
        unsafe { halves!(madd16(acc, a; x)) }
    }
    #[inline(always)]
    unsafe fn madd16_by(acc: Self::I, a: Self::I, b: Self::I) -> Self::I {
        unsafe { halves!(madd16_by(acc, a, b)) }
    }
    #[inline(always)]
    unsafe fn dot16(acc: Self::I, u: Self::I, x: i32) -> Self::I {
        unsafe { halves!(dot16(acc, u; x)) }
    }
    #[inline(always)]
    unsafe fn mul_add(acc: Self::I, a: Self::I, b: Self::I) -> Self::I {
        unsafe { halves!(mul_add(acc, a, b)) }
    }
    #[inline(always)]
    unsafe fn add(a: Self::I, b: Self::I) -> Self::I {
        unsafe { halves!(add(a, b)) }
    }
    #[inline(always)]
    unsafe fn sub(a: Self::I, b: Self::I) -> Self::I {
        unsafe { halves!(sub(a, b)) }
    }
    #[inline(always)]
    unsafe fn sub_splat(a: Self::I, x: i32) -> Self::I {
        unsafe { halves!(sub_splat(a; x)) }
    }
    #[inline(always)]
    unsafe fn and32(a: Self::I, x: i32) -> Self::I {
        unsafe { halves!(and32(a; x)) }
    }
    #[inline(always)]
    unsafe fn shl32<const N: u32>(v: Self::I) -> Self::I {
        unsafe { halves!(shl32::<N>(v)) }
    }
    #[inline(always)]
    unsafe fn srl32<const N: u32>(v: Self::I) -> Self::I {
        unsafe { halves!(srl32::<N>(v)) }
    }
    #[inline(always)]
    unsafe fn sra32<const N: u32>(v: Self::I) -> Self::I {
        unsafe { halves!(sra32::<N>(v)) }
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> Self::I {
        unsafe { [Avx2::<VNNI>::u8s(p), Avx2::<VNNI>::u8s(p.add(8))] }
    }
    #[inline(always)]
    unsafe fn u8_pairs(p: *const u8) -> Self::I {
        unsafe { [Avx2::<VNNI>::u8_pairs(p), Avx2::<VNNI>::u8_pairs(p.add(16))] }
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> Self::I {
        unsafe { [Avx2::<VNNI>::i8s(p), Avx2::<VNNI>::i8s(p.add(8))] }
    }
    #[inline(always)]
    unsafe fn cvt(v: Self::I) -> Self::F {
        unsafe { halves!(cvt(v)) }
    }
    #[inline(always)]
    unsafe fn levels(v: Self::I, levels: &[i8; 16]) -> Self::I {
        unsafe { halves!(levels(v; levels)) }
    }
    #[inline(always)]
    unsafe fn e8m0_halves(p: *const u8) -> Self::F {
        unsafe {
            [
                Avx2::<VNNI>::e8m0_halves(p),
                Avx2::<VNNI>::e8m0_halves(p.add(8)),
            ]
        }
    }
}
