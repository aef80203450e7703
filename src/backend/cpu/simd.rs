//! Kernel dispatch by CPU features detected at run time. On x86-64 with AVX2 the hot dot products
//! (32-block types against 8-bit activations, K-quants against Q8_K, f32 for attention) use the
//! `x86` kernels, on aarch64 the NEON ones in `neon.rs` (with SDOT where the CPU has dotprod);
//! everything else, and other CPUs, the portable ones in `quant.rs`. Each matmul resolves its
//! kernel once into a function pointer.

#[cfg(target_arch = "x86_64")]
use super::gemm::GemmIsa;
#[cfg(target_arch = "aarch64")]
use super::neon;
use super::quant::{self, BlockQ8, BlockQ8K};
use crate::gguf::GgmlType;

pub type DotF32 = fn(&[u8], &[f32]) -> f32;
pub type DotQ8 = fn(&[u8], &[BlockQ8]) -> f32;
pub type DotQ8K = fn(&[u8], &[BlockQ8K]) -> f32;
/// One weight row against four activation rows.
pub type Dot4<A> = fn(&[u8], [&[A]; 4]) -> [f32; 4];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2 plus AVX-VNNI byte dot products.
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// NEON (every aarch64 CPU).
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// NEON plus the dotprod extension's SDOT byte dot products.
    #[cfg(target_arch = "aarch64")]
    NeonDot,
}

pub struct Kernels {
    level: Level,
    /// The instruction set of the matmul kernels over repacked weights (`gemm.rs`), if any.
    #[cfg(target_arch = "x86_64")]
    gemm: Option<GemmIsa>,
}

impl Kernels {
    /// The best kernels this CPU runs. `KILN_NO_SIMD` forces the portable ones; `KILN_NO_AVX512`
    /// the AVX2 ones on a CPU with AVX-512 (to measure or test them).
    pub fn detect() -> Kernels {
        #[cfg(target_arch = "x86_64")]
        if std::env::var_os("KILN_NO_SIMD").is_none()
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            let (level, gemm) = if is_x86_feature_detected!("avxvnni") {
                (Level::AvxVnni, GemmIsa::AvxVnni)
            } else {
                (Level::Avx2, GemmIsa::Avx2)
            };
            let avx512 = is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vnni")
                && std::env::var_os("KILN_NO_AVX512").is_none();
            let gemm = if avx512 { GemmIsa::Avx512Vnni } else { gemm };
            return Kernels {
                level,
                gemm: Some(gemm),
            };
        }
        #[cfg(target_arch = "aarch64")]
        if std::env::var_os("KILN_NO_SIMD").is_none() {
            let level = if std::arch::is_aarch64_feature_detected!("dotprod") {
                Level::NeonDot
            } else {
                Level::Neon
            };
            return Kernels { level };
        }
        Kernels {
            level: Level::Portable,
            #[cfg(target_arch = "x86_64")]
            gemm: None,
        }
    }

    /// The aarch64 kernels' instruction set, when those are in use.
    #[cfg(target_arch = "aarch64")]
    fn arm(&self) -> Option<neon::Isa> {
        match self.level {
            Level::Neon => Some(neon::Isa::Neon),
            Level::NeonDot => Some(neon::Isa::DotProd),
            Level::Portable => None,
        }
    }

    pub fn name(&self) -> &'static str {
        #[cfg(target_arch = "x86_64")]
        if self.gemm == Some(GemmIsa::Avx512Vnni) {
            return "AVX-512 VNNI";
        }
        match self.level {
            Level::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "AVX2",
            #[cfg(target_arch = "x86_64")]
            Level::AvxVnni => "AVX2+VNNI",
            #[cfg(target_arch = "aarch64")]
            Level::Neon => "NEON",
            #[cfg(target_arch = "aarch64")]
            Level::NeonDot => "NEON+dotprod",
        }
    }

    /// The instruction set of the matmul kernels over repacked weights, where this CPU has one.
    #[cfg(target_arch = "x86_64")]
    pub fn gemm_isa(&self) -> Option<GemmIsa> {
        self.gemm
    }

    /// These kernels with AVX-512 left out, where they use it (tests of the AVX2 paths).
    #[cfg(all(test, target_arch = "x86_64"))]
    pub fn without_avx512(&self) -> Option<Kernels> {
        (self.gemm == Some(GemmIsa::Avx512Vnni)).then_some(Kernels {
            level: self.level,
            gemm: Some(match self.level {
                Level::AvxVnni => GemmIsa::AvxVnni,
                _ => GemmIsa::Avx2,
            }),
        })
    }

    pub fn quantize_q8(&self, x: &[f32], out: &mut [BlockQ8]) {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::quantize_q8(x, out);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::quantize_q8(x, out);
        }
        quant::quantize_q8(x, out)
    }

    pub fn quantize_q8k(&self, x: &[f32], out: &mut [BlockQ8K]) {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::quantize_q8k(x, out);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::quantize_q8k(x, out);
        }
        quant::quantize_q8k(x, out)
    }

    /// The dot product of a weight row of type `t` (unquantized) with f32 activations.
    pub fn dot_f32(&self, t: GgmlType) -> DotF32 {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            match t {
                GgmlType::F32 => return x86::dot_f32_bytes,
                GgmlType::F16 => return x86::dot_f16_bytes,
                _ => {}
            }
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some()
            && let Some(f) = neon::dot_f32(t)
        {
            return f;
        }
        match t {
            GgmlType::F32 => |w, x| quant::dot_f32(GgmlType::F32, w, x),
            GgmlType::F16 => |w, x| quant::dot_f32(GgmlType::F16, w, x),
            _ => |w, x| quant::dot_f32(GgmlType::BF16, w, x),
        }
    }

    /// The dot product of a weight row of a 32-block type `t` with Q8 activations.
    pub fn dot_q8(&self, t: GgmlType) -> DotQ8 {
        #[cfg(target_arch = "x86_64")]
        if self.level == Level::AvxVnni {
            match t {
                GgmlType::Q4_0 => return x86::vnni_q4_0,
                GgmlType::Q4_1 => return x86::vnni_q4_1,
                GgmlType::Q5_0 => return x86::vnni_q5_0,
                GgmlType::Q5_1 => return x86::vnni_q5_1,
                GgmlType::Q8_0 => return x86::vnni_q8_0,
                _ => {}
            }
        }
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            match t {
                GgmlType::Q4_0 => return x86::dot_q4_0,
                GgmlType::Q4_1 => return x86::dot_q4_1,
                GgmlType::Q5_0 => return x86::dot_q5_0,
                GgmlType::Q5_1 => return x86::dot_q5_1,
                GgmlType::Q8_0 => return x86::dot_q8_0,
                _ => {}
            }
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(isa) = self.arm()
            && let Some(f) = neon::dot_q8(isa, t)
        {
            return f;
        }
        match t {
            GgmlType::Q4_0 => |w, x| quant::dot_q8(GgmlType::Q4_0, w, x),
            GgmlType::Q4_1 => |w, x| quant::dot_q8(GgmlType::Q4_1, w, x),
            GgmlType::Q5_0 => |w, x| quant::dot_q8(GgmlType::Q5_0, w, x),
            GgmlType::Q5_1 => |w, x| quant::dot_q8(GgmlType::Q5_1, w, x),
            GgmlType::Q8_0 => |w, x| quant::dot_q8(GgmlType::Q8_0, w, x),
            _ => |w, x| quant::dot_q8(GgmlType::Q8_1, w, x),
        }
    }

    /// The dot product of a weight row of K-quant type `t` with Q8_K activations.
    pub fn dot_q8k(&self, t: GgmlType) -> DotQ8K {
        #[cfg(target_arch = "x86_64")]
        if self.level == Level::AvxVnni {
            match t {
                GgmlType::Q2_K => return x86::vnni_q2_k,
                GgmlType::Q3_K => return x86::vnni_q3_k,
                GgmlType::Q4_K => return x86::vnni_q4_k,
                GgmlType::Q5_K => return x86::vnni_q5_k,
                GgmlType::Q6_K => return x86::vnni_q6_k,
                _ => {}
            }
        }
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            match t {
                GgmlType::Q2_K => return x86::dot_q2_k,
                GgmlType::Q3_K => return x86::dot_q3_k,
                GgmlType::Q4_K => return x86::dot_q4_k,
                GgmlType::Q5_K => return x86::dot_q5_k,
                GgmlType::Q6_K => return x86::dot_q6_k,
                _ => {}
            }
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(isa) = self.arm()
            && let Some(f) = neon::dot_q8k(isa, t)
        {
            return f;
        }
        match t {
            GgmlType::Q2_K => |w, x| quant::dot_q8k(GgmlType::Q2_K, w, x),
            GgmlType::Q3_K => |w, x| quant::dot_q8k(GgmlType::Q3_K, w, x),
            GgmlType::Q4_K => |w, x| quant::dot_q8k(GgmlType::Q4_K, w, x),
            GgmlType::Q5_K => |w, x| quant::dot_q8k(GgmlType::Q5_K, w, x),
            GgmlType::Q6_K => |w, x| quant::dot_q8k(GgmlType::Q6_K, w, x),
            _ => |w, x| quant::dot_q8k(GgmlType::Q8_K, w, x),
        }
    }

    /// A four-row kernel for a 32-block type, where one exists.
    pub fn dot_q8_x4(&self, t: GgmlType) -> Option<Dot4<BlockQ8>> {
        #[cfg(target_arch = "x86_64")]
        match (self.level, t) {
            (Level::AvxVnni, GgmlType::Q4_0) => return Some(x86::vnni_q4_0_x4),
            (Level::AvxVnni, GgmlType::Q4_1) => return Some(x86::vnni_q4_1_x4),
            (Level::AvxVnni, GgmlType::Q5_0) => return Some(x86::vnni_q5_0_x4),
            (Level::AvxVnni, GgmlType::Q8_0) => return Some(x86::vnni_q8_0_x4),
            (Level::Avx2, GgmlType::Q4_0) => return Some(x86::avx2_q4_0_x4),
            (Level::Avx2, GgmlType::Q4_1) => return Some(x86::avx2_q4_1_x4),
            (Level::Avx2, GgmlType::Q5_0) => return Some(x86::avx2_q5_0_x4),
            (Level::Avx2, GgmlType::Q8_0) => return Some(x86::avx2_q8_0_x4),
            _ => {}
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(isa) = self.arm() {
            return neon::dot_q8_x4(isa, t);
        }
        let _ = t;
        None
    }

    /// A four-row kernel for a K-quant, where one exists.
    pub fn dot_q8k_x4(&self, t: GgmlType) -> Option<Dot4<BlockQ8K>> {
        #[cfg(target_arch = "x86_64")]
        match (self.level, t) {
            (Level::AvxVnni, GgmlType::Q4_K) => return Some(x86::vnni_q4_k_x4),
            (Level::AvxVnni, GgmlType::Q6_K) => return Some(x86::vnni_q6_k_x4),
            (Level::Avx2, GgmlType::Q4_K) => return Some(x86::avx2_q4_k_x4),
            (Level::Avx2, GgmlType::Q6_K) => return Some(x86::avx2_q6_k_x4),
            _ => {}
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(isa) = self.arm() {
            return neon::dot_q8k_x4(isa, t);
        }
        let _ = t;
        None
    }

    /// gate[i] = silu(gate[i]) · up[i], with llama.cpp's `expf`.
    pub fn silu_mul(&self, gate: &mut [f32], up: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::silu_mul(gate, up);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::silu_mul(gate, up);
        }
        for (g, &u) in gate.iter_mut().zip(up) {
            *g = super::ggml_math::silu(*g) * u;
        }
    }

    /// One token of the gated delta rule on one head's state `s` (row j = column j of the state
    /// matrix, `k.len()` values each): every row decayed, corrected along k by
    /// δ_j = β (v_j − row·k), and read out as out_j = (row·q)·scale. The dot products are those of
    /// `dot_f32(F32)`, so every ISA's result is that of the steps taken one at a time.
    #[allow(clippy::too_many_arguments)]
    pub fn delta_rule(
        &self,
        s: &mut [f32],
        k: &[f32],
        q: &[f32],
        v: &[f32],
        decay: f32,
        beta: f32,
        scale: f32,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::delta_rule(s, k, q, v, [decay, beta, scale], out);
        }
        let dot = self.dot_f32(GgmlType::F32);
        let dot = |a: &[f32], b: &[f32]| dot(super::f32_bytes(a), b);
        for (j, row) in s.chunks_exact_mut(k.len()).enumerate() {
            row.iter_mut().for_each(|x| *x *= decay);
            let delta = (v[j] - dot(row, k)) * beta;
            row.iter_mut().zip(k).for_each(|(x, &kv)| *x += kv * delta);
            out[j] = dot(row, q) * scale;
        }
    }

    /// x[i] = expf(x[i] − max) with llama.cpp's `expf`; returns Σ in f64.
    pub fn exp_sub(&self, x: &mut [f32], max: f32) -> f64 {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::exp_sub(x, max);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::exp_sub(x, max);
        }
        x.iter_mut()
            .map(|v| {
                *v = super::ggml_math::expf(*v - max);
                *v as f64
            })
            .sum()
    }

    /// Round each value to the nearest f16 (kept as f32).
    pub fn round_f16(&self, x: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::round_f16(x);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::round_f16(x);
        }
        x.iter_mut()
            .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
    }

    /// Σ a·b with b in f16 (attention scores against the key cache).
    pub fn dot_f32_f16(&self, a: &[f32], b: &[half::f16]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::dot_f32_f16(a, b);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::dot_f32_f16(a, b);
        }
        a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
    }

    /// y += a·x with x in f16 (attention output from the value cache).
    pub fn axpy_f16(&self, a: f32, x: &[half::f16], y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Portable {
            return x86::axpy_f16(a, x, y);
        }
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::axpy_f16(a, x, y);
        }
        y.iter_mut()
            .zip(x)
            .for_each(|(yv, xv)| *yv += a * xv.to_f32());
    }

    /// y += a·x with x a row of Q8_0 blocks (attention output from a q8_0 value cache).
    pub fn axpy_q8_0(&self, a: f32, x: &[u8], y: &mut [f32]) {
        #[cfg(target_arch = "aarch64")]
        if self.arm().is_some() {
            return neon::axpy_q8_0(a, x, y);
        }
        quant::axpy_q8_0(a, x, y)
    }
}

/// x86-64 kernels, each generated twice from one body: with AVX2 (`maddubs` + `madd` for byte dot
/// products) and with AVX-VNNI (`vpdpbusd`). The public wrappers are safe: `Kernels` hands them
/// out only after detecting the features. Integer dot products follow llama.cpp: weight bytes made
/// unsigned (or signed ones split into magnitude and sign), one float multiply-add per block.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::quant::{BlockQ8, BlockQ8K};
    use crate::gguf::dequant::{q3_k_scales, scale_min_k4};

    /// An f16 at byte `i`, converted with F16C (only reached from F16C kernels).
    #[inline(always)]
    fn f16(b: &[u8], i: usize) -> f32 {
        let bits = u16::from_le_bytes([b[i], b[i + 1]]);
        // SAFETY: callers are kernels compiled with, and dispatched after detecting, F16C.
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) }
    }

    #[inline(always)]
    unsafe fn hsum_f32(v: __m256) -> f32 {
        unsafe {
            let lo = _mm256_castps256_ps128(v);
            let hi = _mm256_extractf128_ps(v, 1);
            let s = _mm_add_ps(lo, hi);
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }
    }

    #[inline(always)]
    unsafe fn hsum_i32(v: __m256i) -> i32 {
        unsafe {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
            _mm_cvtsi128_si32(s)
        }
    }

    /// 16 packed nibble bytes → 32 bytes: low nibbles then high nibbles.
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        unsafe {
            let q = _mm_loadu_si128(p as *const __m128i);
            let lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
            let hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
            _mm256_set_m128i(hi, lo)
        }
    }

    /// 32 bits → 32 bytes, 0xFF where the bit is set (llama.cpp's `bytes_from_bits_32`).
    #[inline(always)]
    unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
        unsafe {
            let bits = (p as *const u32).read_unaligned();
            let shuf = _mm256_set_epi64x(
                0x0303030303030303,
                0x0202020202020202,
                0x0101010101010101,
                0x0000000000000000,
            );
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
            let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
            _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
        }
    }

    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        unsafe { _mm256_loadu_si256(p as *const __m256i) }
    }

    /// The (scale, min) pairs of a Q4_K/Q5_K block and Σ min_j · (activation sum of sub-block j).
    #[inline(always)]
    fn k_scales(scales: &[u8], x: &BlockQ8K) -> ([u8; 8], i32) {
        let mut sc = [0u8; 8];
        let mut mins = 0i32;
        for (j, s) in sc.iter_mut().enumerate() {
            let (a, m) = scale_min_k4(j, scales);
            *s = a;
            mins += m as i32 * (x.bsums[2 * j] as i32 + x.bsums[2 * j + 1] as i32);
        }
        (sc, mins)
    }

    /// The kernel set, instantiated per instruction set: `$features` to compile with, and
    /// `$dot_us` computing acc + Σ u·s over groups of four bytes (u unsigned, s signed).
    macro_rules! kernel_set {
        ($module:ident, $features:literal, $dot_us:expr) => {
            pub mod $module {
                use super::*;

                /// acc + Σ a·b over groups of four signed bytes (|a| ≤ 127 or a = −128 with b ≠ −128).
                #[inline(always)]
                unsafe fn dot_ss(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
                    unsafe { $dot_us(acc, _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)) }
                }

                /// Σ over blocks of d_w·d_x·(signed weight bytes · activations), even and odd blocks
                /// in two accumulators (for instruction-level parallelism), summed exactly as the
                /// four-row version sums, so a row's result does not depend on how rows were batched.
                #[inline(always)]
                unsafe fn signed_blocks<const BB: usize>(
                    w: &[u8],
                    x: &[BlockQ8],
                    weights: impl Fn(*const u8) -> __m256i,
                ) -> f32 {
                    unsafe {
                        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                        // A macro, not a closure: closures are not compiled with the target features.
                        macro_rules! block {
                            ($wb:expr, $xb:expr, $acc:expr) => {{
                                let (wb, xb): (&[u8], &BlockQ8) = ($wb, $xb);
                                let xs = load(xb.qs.as_ptr() as *const u8);
                                let i = dot_ss(_mm256_setzero_si256(), weights(wb.as_ptr()), xs);
                                _mm256_fmadd_ps(
                                    _mm256_set1_ps(f16(wb, 0) * xb.d),
                                    _mm256_cvtepi32_ps(i),
                                    $acc,
                                )
                            }};
                        }
                        for (wb, xb) in w.chunks_exact(2 * BB).zip(x.chunks_exact(2)) {
                            acc0 = block!(wb, &xb[0], acc0);
                            acc1 = block!(&wb[BB..], &xb[1], acc1);
                        }
                        let n = w.len() / BB;
                        if n % 2 == 1 {
                            acc0 = block!(&w[(n - 1) * BB..], &x[n - 1], acc0);
                        }
                        hsum_f32(_mm256_add_ps(acc0, acc1))
                    }
                }

                /// Σ over blocks of d·(unsigned weight bytes · activations)·d_x + m·s_x.
                #[inline(always)]
                unsafe fn offset_blocks<const BB: usize>(
                    w: &[u8],
                    x: &[BlockQ8],
                    weights: impl Fn(*const u8) -> __m256i,
                ) -> f32 {
                    unsafe {
                        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                        let (mut m0, mut m1) = (0.0f32, 0.0f32);
                        macro_rules! block {
                            ($wb:expr, $xb:expr, $acc:expr, $m:expr) => {{
                                let (wb, xb): (&[u8], &BlockQ8) = ($wb, $xb);
                                let xs = load(xb.qs.as_ptr() as *const u8);
                                let i = $dot_us(_mm256_setzero_si256(), weights(wb.as_ptr()), xs);
                                $m += f16(wb, 2) * xb.s;
                                _mm256_fmadd_ps(
                                    _mm256_set1_ps(f16(wb, 0) * xb.d),
                                    _mm256_cvtepi32_ps(i),
                                    $acc,
                                )
                            }};
                        }
                        for (wb, xb) in w.chunks_exact(2 * BB).zip(x.chunks_exact(2)) {
                            acc0 = block!(wb, &xb[0], acc0, m0);
                            acc1 = block!(&wb[BB..], &xb[1], acc1, m1);
                        }
                        let n = w.len() / BB;
                        if n % 2 == 1 {
                            acc0 = block!(&w[(n - 1) * BB..], &x[n - 1], acc0, m0);
                        }
                        hsum_f32(_mm256_add_ps(acc0, acc1)) + (m0 + m1)
                    }
                }

                /// `signed_blocks` against four activation rows at once: each weight block is
                /// unpacked once; even and odd blocks accumulate apart, as in `signed_blocks`.
                #[inline(always)]
                unsafe fn signed_blocks4<const BB: usize>(
                    w: &[u8],
                    x: [&[BlockQ8]; 4],
                    weights: impl Fn(*const u8) -> __m256i,
                ) -> [f32; 4] {
                    unsafe {
                        let mut even = [_mm256_setzero_ps(); 4];
                        let mut odd = [_mm256_setzero_ps(); 4];
                        macro_rules! block {
                            ($b:expr, $acc:ident) => {{
                                let b: usize = $b;
                                let wb = &w[b * BB..];
                                let wv = weights(wb.as_ptr());
                                let aw = _mm256_sign_epi8(wv, wv);
                                let dw = f16(wb, 0);
                                for k in 0..4 {
                                    let xb = &x[k][b];
                                    let xs = load(xb.qs.as_ptr() as *const u8);
                                    let i = $dot_us(
                                        _mm256_setzero_si256(),
                                        aw,
                                        _mm256_sign_epi8(xs, wv),
                                    );
                                    $acc[k] = _mm256_fmadd_ps(
                                        _mm256_set1_ps(dw * xb.d),
                                        _mm256_cvtepi32_ps(i),
                                        $acc[k],
                                    );
                                }
                            }};
                        }
                        let n = w.len() / BB;
                        for b in (0..n - n % 2).step_by(2) {
                            block!(b, even);
                            block!(b + 1, odd);
                        }
                        if n % 2 == 1 {
                            block!(n - 1, even);
                        }
                        let mut out = [0.0f32; 4];
                        for k in 0..4 {
                            out[k] = hsum_f32(_mm256_add_ps(even[k], odd[k]));
                        }
                        out
                    }
                }

                /// `offset_blocks` against four activation rows at once.
                #[inline(always)]
                unsafe fn offset_blocks4<const BB: usize>(
                    w: &[u8],
                    x: [&[BlockQ8]; 4],
                    weights: impl Fn(*const u8) -> __m256i,
                ) -> [f32; 4] {
                    unsafe {
                        let mut even = [_mm256_setzero_ps(); 4];
                        let mut odd = [_mm256_setzero_ps(); 4];
                        let mut m_even = [0.0f32; 4];
                        let mut m_odd = [0.0f32; 4];
                        macro_rules! block {
                            ($b:expr, $acc:ident, $m:ident) => {{
                                let b: usize = $b;
                                let wb = &w[b * BB..];
                                let u = weights(wb.as_ptr());
                                let (dw, mw) = (f16(wb, 0), f16(wb, 2));
                                for k in 0..4 {
                                    let xb = &x[k][b];
                                    let i = $dot_us(
                                        _mm256_setzero_si256(),
                                        u,
                                        load(xb.qs.as_ptr() as *const u8),
                                    );
                                    $m[k] += mw * xb.s;
                                    $acc[k] = _mm256_fmadd_ps(
                                        _mm256_set1_ps(dw * xb.d),
                                        _mm256_cvtepi32_ps(i),
                                        $acc[k],
                                    );
                                }
                            }};
                        }
                        let n = w.len() / BB;
                        for b in (0..n - n % 2).step_by(2) {
                            block!(b, even, m_even);
                            block!(b + 1, odd, m_odd);
                        }
                        if n % 2 == 1 {
                            block!(n - 1, even, m_even);
                        }
                        let mut out = [0.0f32; 4];
                        for k in 0..4 {
                            out[k] =
                                hsum_f32(_mm256_add_ps(even[k], odd[k])) + (m_even[k] + m_odd[k]);
                        }
                        out
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q4_0_x4(w: &[u8], x: [&[BlockQ8]; 4]) -> [f32; 4] {
                    unsafe {
                        signed_blocks4::<18>(w, x, |p| {
                            _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8))
                        })
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q5_0_x4(w: &[u8], x: [&[BlockQ8]; 4]) -> [f32; 4] {
                    unsafe {
                        signed_blocks4::<22>(w, x, |p| {
                            let hi = _mm256_andnot_si256(
                                bytes_from_bits(p.add(2)),
                                _mm256_set1_epi8(0xF0u8 as i8),
                            );
                            _mm256_or_si256(nibbles(p.add(6)), hi)
                        })
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q8_0_x4(w: &[u8], x: [&[BlockQ8]; 4]) -> [f32; 4] {
                    unsafe { signed_blocks4::<34>(w, x, |p| load(p.add(2))) }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q4_1_x4(w: &[u8], x: [&[BlockQ8]; 4]) -> [f32; 4] {
                    unsafe { offset_blocks4::<20>(w, x, |p| nibbles(p.add(4))) }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q4_0(w: &[u8], x: &[BlockQ8]) -> f32 {
                    unsafe {
                        signed_blocks::<18>(w, x, |p| {
                            _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8))
                        })
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q5_0(w: &[u8], x: &[BlockQ8]) -> f32 {
                    unsafe {
                        signed_blocks::<22>(w, x, |p| {
                            // 0xF0 where the fifth bit is clear: the byte becomes nibble − 16.
                            let hi = _mm256_andnot_si256(
                                bytes_from_bits(p.add(2)),
                                _mm256_set1_epi8(0xF0u8 as i8),
                            );
                            _mm256_or_si256(nibbles(p.add(6)), hi)
                        })
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q8_0(w: &[u8], x: &[BlockQ8]) -> f32 {
                    unsafe { signed_blocks::<34>(w, x, |p| load(p.add(2))) }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q4_1(w: &[u8], x: &[BlockQ8]) -> f32 {
                    unsafe { offset_blocks::<20>(w, x, |p| nibbles(p.add(4))) }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q5_1(w: &[u8], x: &[BlockQ8]) -> f32 {
                    unsafe {
                        offset_blocks::<24>(w, x, |p| {
                            let hi =
                                _mm256_and_si256(bytes_from_bits(p.add(4)), _mm256_set1_epi8(0x10));
                            _mm256_or_si256(nibbles(p.add(8)), hi)
                        })
                    }
                }

                /// Σ over the eight 32-value sub-blocks of scale_j · (weights · activations).
                #[inline(always)]
                unsafe fn k_sub_blocks(
                    xq: &[i8; 256],
                    scales: &[u8; 8],
                    sub: impl Fn(usize) -> __m256i,
                ) -> i32 {
                    unsafe {
                        let mut acc = _mm256_setzero_si256();
                        for (j, &sc) in scales.iter().enumerate() {
                            let p16 = _mm256_maddubs_epi16(
                                sub(j),
                                load(xq.as_ptr().add(32 * j) as *const u8),
                            );
                            acc = _mm256_add_epi32(
                                acc,
                                _mm256_madd_epi16(p16, _mm256_set1_epi16(sc as i16)),
                            );
                        }
                        hsum_i32(acc)
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q4_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
                    unsafe {
                        let mut total = 0.0f32;
                        for (wb, xb) in w.chunks_exact(144).zip(x) {
                            let (sc, mins) = k_scales(&wb[4..16], xb);
                            let qs = wb.as_ptr().add(16);
                            let sum = k_sub_blocks(&xb.qs, &sc, |j| {
                                let q = load(qs.add(32 * (j / 2)));
                                let q = if j % 2 == 0 {
                                    q
                                } else {
                                    _mm256_srli_epi16(q, 4)
                                };
                                _mm256_and_si256(q, _mm256_set1_epi8(0x0F))
                            });
                            total += xb.d * (f16(wb, 0) * sum as f32 - f16(wb, 2) * mins as f32);
                        }
                        total
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q4_k_x4(w: &[u8], x: [&[BlockQ8K]; 4]) -> [f32; 4] {
                    unsafe {
                        let mut total = [0.0f32; 4];
                        for (b, wb) in w.chunks_exact(144).enumerate() {
                            let mut sc = [0u8; 8];
                            let mut mn = [0u8; 8];
                            for j in 0..8 {
                                (sc[j], mn[j]) = scale_min_k4(j, &wb[4..16]);
                            }
                            let qs = wb.as_ptr().add(16);
                            let mut acc = [_mm256_setzero_si256(); 4];
                            for j in 0..8 {
                                let q = load(qs.add(32 * (j / 2)));
                                let q = if j % 2 == 0 {
                                    q
                                } else {
                                    _mm256_srli_epi16(q, 4)
                                };
                                let u = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
                                let scale = _mm256_set1_epi16(sc[j] as i16);
                                for k in 0..4 {
                                    let xs = load(x[k][b].qs.as_ptr().add(32 * j) as *const u8);
                                    let p16 = _mm256_maddubs_epi16(u, xs);
                                    acc[k] =
                                        _mm256_add_epi32(acc[k], _mm256_madd_epi16(p16, scale));
                                }
                            }
                            let (d, dmin) = (f16(wb, 0), f16(wb, 2));
                            for k in 0..4 {
                                let xb = &x[k][b];
                                let mut mins = 0i32;
                                for j in 0..8 {
                                    mins += mn[j] as i32
                                        * (xb.bsums[2 * j] as i32 + xb.bsums[2 * j + 1] as i32);
                                }
                                total[k] +=
                                    xb.d * (d * hsum_i32(acc[k]) as f32 - dmin * mins as f32);
                            }
                        }
                        total
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q6_k_x4(w: &[u8], x: [&[BlockQ8K]; 4]) -> [f32; 4] {
                    unsafe {
                        let mut total = [0.0f32; 4];
                        let m4 = _mm256_set1_epi8(0x0F);
                        let m2 = _mm256_set1_epi8(0x03);
                        for (b, wb) in w.chunks_exact(210).enumerate() {
                            let scales = &wb[192..208];
                            let mut acc = [_mm256_setzero_si256(); 4];
                            for n in 0..2 {
                                let ql = wb.as_ptr().add(64 * n);
                                let qh = load(wb.as_ptr().add(128 + 32 * n));
                                let (ql0, ql1) = (load(ql), load(ql.add(32)));
                                let six = |low: __m256i, h: __m256i| {
                                    _mm256_or_si256(
                                        _mm256_and_si256(low, m4),
                                        _mm256_slli_epi16(_mm256_and_si256(h, m2), 4),
                                    )
                                };
                                let groups = [
                                    six(ql0, qh),
                                    six(ql1, _mm256_srli_epi16(qh, 2)),
                                    six(_mm256_srli_epi16(ql0, 4), _mm256_srli_epi16(qh, 4)),
                                    six(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 6)),
                                ];
                                for (g, &u) in groups.iter().enumerate() {
                                    let s0 = scales[8 * n + 2 * g] as i8 as i16;
                                    let s1 = scales[8 * n + 2 * g + 1] as i8 as i16;
                                    let sc =
                                        _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                                    for k in 0..4 {
                                        let xs =
                                            load(x[k][b].qs.as_ptr().add(128 * n + 32 * g)
                                                as *const u8);
                                        let p16 = _mm256_maddubs_epi16(u, xs);
                                        acc[k] =
                                            _mm256_add_epi32(acc[k], _mm256_madd_epi16(p16, sc));
                                    }
                                }
                            }
                            let d = f16(wb, 208);
                            for k in 0..4 {
                                let xb = &x[k][b];
                                let mut offset = 0i32;
                                for (g, &bs) in xb.bsums.iter().enumerate() {
                                    offset += scales[g] as i8 as i32 * bs as i32;
                                }
                                total[k] += d * xb.d * (hsum_i32(acc[k]) - 32 * offset) as f32;
                            }
                        }
                        total
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q5_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
                    unsafe {
                        let mut total = 0.0f32;
                        for (wb, xb) in w.chunks_exact(176).zip(x) {
                            let (sc, mins) = k_scales(&wb[4..16], xb);
                            let qh = load(wb.as_ptr().add(16));
                            let qs = wb.as_ptr().add(48);
                            let sum = k_sub_blocks(&xb.qs, &sc, |j| {
                                let q = load(qs.add(32 * (j / 2)));
                                let q = if j % 2 == 0 {
                                    q
                                } else {
                                    _mm256_srli_epi16(q, 4)
                                };
                                let low = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
                                // Bit j of each qh byte is the fifth bit of this sub-block's value.
                                let bit = _mm256_and_si256(qh, _mm256_set1_epi8(1i8 << j));
                                let high = _mm256_and_si256(
                                    _mm256_cmpeq_epi8(bit, _mm256_set1_epi8(1i8 << j)),
                                    _mm256_set1_epi8(0x10),
                                );
                                _mm256_or_si256(low, high)
                            });
                            total += xb.d * (f16(wb, 0) * sum as f32 - f16(wb, 2) * mins as f32);
                        }
                        total
                    }
                }

                /// Σ over the 16 sub-blocks of a Q2_K/Q3_K block of scale_s · (codes ·
                /// activations), where `codes(n, g)` are the unsigned codes of values
                /// 128n + 32g..+32 (sub-blocks 8n + 2g and 8n + 2g + 1).
                #[inline(always)]
                unsafe fn sixteen_sub_blocks(
                    xq: &[i8; 256],
                    scales: &[i16; 16],
                    codes: impl Fn(usize, usize) -> __m256i,
                ) -> i32 {
                    unsafe {
                        let mut acc = _mm256_setzero_si256();
                        for n in 0..2 {
                            for g in 0..4 {
                                let xs = load(xq.as_ptr().add(128 * n + 32 * g) as *const u8);
                                let p16 = _mm256_maddubs_epi16(codes(n, g), xs);
                                let (s0, s1) = (scales[8 * n + 2 * g], scales[8 * n + 2 * g + 1]);
                                let sc = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, sc));
                            }
                        }
                        hsum_i32(acc)
                    }
                }

                /// Bits 2g..2g + 2 of each of the 32 bytes at `p` (the codes of group `g` of a
                /// Q2_K/Q3_K line).
                #[inline(always)]
                unsafe fn two_bits(p: *const u8, g: usize) -> __m256i {
                    unsafe {
                        let q = load(p);
                        let q = match g {
                            0 => q,
                            1 => _mm256_srli_epi16(q, 2),
                            2 => _mm256_srli_epi16(q, 4),
                            _ => _mm256_srli_epi16(q, 6),
                        };
                        _mm256_and_si256(q, _mm256_set1_epi8(3))
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q2_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
                    unsafe {
                        let mut total = 0.0f32;
                        for (wb, xb) in w.chunks_exact(84).zip(x) {
                            let mut scales = [0i16; 16];
                            let mut sum_min = 0i32;
                            for (j, &sc) in wb[..16].iter().enumerate() {
                                scales[j] = (sc & 0xF) as i16;
                                sum_min += (sc >> 4) as i32 * xb.bsums[j] as i32;
                            }
                            let qs = wb.as_ptr().add(16);
                            let sum = sixteen_sub_blocks(&xb.qs, &scales, |n, g| {
                                two_bits(qs.add(32 * n), g)
                            });
                            let (d, dmin) = (f16(wb, 80) * xb.d, f16(wb, 82) * xb.d);
                            total += d * sum as f32 - dmin * sum_min as f32;
                        }
                        total
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q3_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
                    unsafe {
                        let mut total = 0.0f32;
                        for (wb, xb) in w.chunks_exact(110).zip(x) {
                            let mut scales = [0i16; 16];
                            let mut offset = 0i32;
                            for (j, sc) in q3_k_scales(&wb[96..108]).into_iter().enumerate() {
                                scales[j] = sc as i16;
                                offset += sc as i32 * xb.bsums[j] as i32;
                            }
                            let hmask = load(wb.as_ptr());
                            let qs = wb.as_ptr().add(32);
                            // Codes u = low two bits | the hmask bit << 2; weights are u − 4.
                            let sum = sixteen_sub_blocks(&xb.qs, &scales, |n, g| {
                                let q = load(qs.add(32 * n));
                                let q = match g {
                                    0 => q,
                                    1 => _mm256_srli_epi16(q, 2),
                                    2 => _mm256_srli_epi16(q, 4),
                                    _ => _mm256_srli_epi16(q, 6),
                                };
                                let low = _mm256_and_si256(q, _mm256_set1_epi8(3));
                                let m = _mm256_set1_epi8((1u8 << (4 * n + g)) as i8);
                                let set = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, m), m);
                                _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(4)))
                            });
                            total += f16(wb, 108) * xb.d * (sum - 4 * offset) as f32;
                        }
                        total
                    }
                }

                #[target_feature(enable = $features)]
                pub unsafe fn q6_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
                    unsafe {
                        let mut total = 0.0f32;
                        let m4 = _mm256_set1_epi8(0x0F);
                        let m2 = _mm256_set1_epi8(0x03);
                        for (wb, xb) in w.chunks_exact(210).zip(x) {
                            let scales = &wb[192..208];
                            let mut acc = _mm256_setzero_si256();
                            for n in 0..2 {
                                let ql = wb.as_ptr().add(64 * n);
                                let qh = load(wb.as_ptr().add(128 + 32 * n));
                                let (ql0, ql1) = (load(ql), load(ql.add(32)));
                                let six = |low: __m256i, shift: i32| {
                                    let h = match shift {
                                        0 => qh,
                                        2 => _mm256_srli_epi16(qh, 2),
                                        4 => _mm256_srli_epi16(qh, 4),
                                        _ => _mm256_srli_epi16(qh, 6),
                                    };
                                    _mm256_or_si256(
                                        _mm256_and_si256(low, m4),
                                        _mm256_slli_epi16(_mm256_and_si256(h, m2), 4),
                                    )
                                };
                                // The four 32-value groups of this half, as unsigned 6-bit values.
                                let groups = [
                                    six(ql0, 0),
                                    six(ql1, 2),
                                    six(_mm256_srli_epi16(ql0, 4), 4),
                                    six(_mm256_srli_epi16(ql1, 4), 6),
                                ];
                                for (g, &u) in groups.iter().enumerate() {
                                    let xs =
                                        load(xb.qs.as_ptr().add(128 * n + 32 * g) as *const u8);
                                    let p16 = _mm256_maddubs_epi16(u, xs);
                                    // Each 32-value group spans two 16-value scale groups.
                                    let s0 = scales[8 * n + 2 * g] as i8 as i16;
                                    let s1 = scales[8 * n + 2 * g + 1] as i8 as i16;
                                    let sc =
                                        _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, sc));
                                }
                            }
                            // The stored values are u − 32.
                            let mut offset = 0i32;
                            for (g, &bs) in xb.bsums.iter().enumerate() {
                                offset += scales[g] as i8 as i32 * bs as i32;
                            }
                            total += f16(wb, 208) * xb.d * (hsum_i32(acc) - 32 * offset) as f32;
                        }
                        total
                    }
                }
            }
        };
    }

    #[inline(always)]
    unsafe fn dot_us_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        unsafe {
            _mm256_add_epi32(
                acc,
                _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)),
            )
        }
    }

    #[inline(always)]
    unsafe fn dot_us_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, s) }
    }

    kernel_set!(avx2, "avx2,fma,f16c", dot_us_avx2);
    kernel_set!(vnni, "avx2,fma,f16c,avxvnni", dot_us_vnni);

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_f32_f16_impl(a: &[f32], b: &[half::f16]) -> f32 {
        unsafe {
            let n = a.len().min(b.len());
            let bp = b.as_ptr() as *const u16;
            let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 16 <= n {
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(bp.add(i) as *const __m128i));
                let b1 = _mm256_cvtph_ps(_mm_loadu_si128(bp.add(i + 8) as *const __m128i));
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), b0, s0);
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i + 8)), b1, s1);
                i += 16;
            }
            let mut sum = hsum_f32(_mm256_add_ps(s0, s1));
            while i < n {
                sum += a[i] * b[i].to_f32();
                i += 1;
            }
            sum
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn axpy_f16_impl(alpha: f32, x: &[half::f16], y: &mut [f32]) {
        unsafe {
            let n = x.len().min(y.len());
            let xp = x.as_ptr() as *const u16;
            let a = _mm256_set1_ps(alpha);
            let mut i = 0;
            while i + 8 <= n {
                let xv = _mm256_cvtph_ps(_mm_loadu_si128(xp.add(i) as *const __m128i));
                let r = _mm256_fmadd_ps(a, xv, _mm256_loadu_ps(y.as_ptr().add(i)));
                _mm256_storeu_ps(y.as_mut_ptr().add(i), r);
                i += 8;
            }
            while i < n {
                y[i] += alpha * x[i].to_f32();
                i += 1;
            }
        }
    }

    /// `quant::quantize_q8`, vectorized; the same values (llama.cpp's `quantize_row_q8_0/1`).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quantize_q8_impl(x: &[f32], out: &mut [BlockQ8]) {
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
                let v: [__m256; 4] =
                    std::array::from_fn(|i| _mm256_loadu_ps(xb.as_ptr().add(8 * i)));
                let m = v.iter().fold(_mm256_setzero_ps(), |m, &vi| {
                    _mm256_max_ps(m, _mm256_andnot_ps(sign, vi))
                });
                let amax = hsum_max(m);
                let d = amax / 127.0;
                let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
                let mut sum = _mm256_setzero_si256();
                let mut q = [0i32; 32];
                for (i, &vi) in v.iter().enumerate() {
                    let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        _mm256_mul_ps(vi, id),
                    );
                    let qi = _mm256_cvtps_epi32(r);
                    sum = _mm256_add_epi32(sum, qi);
                    _mm256_storeu_si256(q.as_mut_ptr().add(8 * i) as *mut __m256i, qi);
                }
                for (dst, &v) in b.qs.iter_mut().zip(&q) {
                    *dst = v as i8;
                }
                b.d = half::f16::from_f32(d).to_f32();
                b.s = half::f16::from_f32(d * hsum_i32(sum) as f32).to_f32();
            }
        }
    }

    /// `quant::quantize_q8k`, vectorized; the same values (llama.cpp's `quantize_row_q8_K`).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quantize_q8k_impl(x: &[f32], out: &mut [BlockQ8K]) {
        unsafe {
            for (xb, b) in x.chunks_exact(256).zip(out.iter_mut()) {
                let (max, amax) = super::super::quant::signed_absmax(xb);
                if amax == 0.0 {
                    *b = BlockQ8K::default();
                    continue;
                }
                let iscale = -127.0 / max;
                let is = _mm256_set1_ps(iscale);
                let mut q = [0i32; 256];
                for i in 0..32 {
                    let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        _mm256_mul_ps(_mm256_loadu_ps(xb.as_ptr().add(8 * i)), is),
                    );
                    let qi = _mm256_min_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127));
                    _mm256_storeu_si256(q.as_mut_ptr().add(8 * i) as *mut __m256i, qi);
                }
                for (dst, &v) in b.qs.iter_mut().zip(&q) {
                    *dst = v as i8;
                }
                for (j, s) in b.bsums.iter_mut().enumerate() {
                    *s = q[j * 16..j * 16 + 16].iter().sum::<i32>() as i16;
                }
                b.d = 1.0 / iscale;
            }
        }
    }

    #[inline(always)]
    unsafe fn hsum_max(v: __m256) -> f32 {
        unsafe {
            let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_max_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }
    }

    pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
        // SAFETY: handed out by `Kernels` only after AVX2, FMA and F16C were detected.
        unsafe { quantize_q8_impl(x, out) }
    }

    pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
        // SAFETY: as above.
        unsafe { quantize_q8k_impl(x, out) }
    }

    /// llama.cpp's `expf`, eight lanes at a time: the same operations as the scalar
    /// `ggml_math::expf`, lane for lane.
    #[inline(always)]
    unsafe fn expf8(x: __m256) -> __m256 {
        unsafe {
            use super::super::ggml_math::EXPF_CONSTANTS as C;
            let c = |i: usize| _mm256_set1_ps(f32::from_bits(C[i]));
            let r = c(0);
            let z = _mm256_fmadd_ps(x, c(1), r);
            let n = _mm256_sub_ps(z, r);
            let b = _mm256_fnmadd_ps(n, c(2), _mm256_fnmadd_ps(n, c(3), x));
            let u = _mm256_mul_ps(b, b);
            let j = _mm256_fmadd_ps(
                _mm256_fmadd_ps(
                    _mm256_fmadd_ps(c(4), b, c(5)),
                    u,
                    _mm256_fmadd_ps(c(6), b, c(7)),
                ),
                u,
                _mm256_fmadd_ps(c(8), b, _mm256_set1_ps(1.0)),
            );
            // scalef(j, n) as j · 2^(n>>1) · 2^(n − (n>>1)), with |n| ≤ 192 clamped.
            let big = _mm256_cmp_ps(
                _mm256_andnot_ps(_mm256_set1_ps(-0.0), n),
                _mm256_set1_ps(192.0),
                _CMP_GT_OQ,
            );
            let ni = _mm256_cvtps_epi32(_mm256_max_ps(
                _mm256_min_ps(n, _mm256_set1_ps(192.0)),
                _mm256_set1_ps(-192.0),
            ));
            let h = _mm256_srai_epi32(ni, 1);
            let pow2 = |e: __m256i| {
                _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_add_epi32(e, _mm256_set1_epi32(127)),
                    23,
                ))
            };
            let res = _mm256_mul_ps(_mm256_mul_ps(j, pow2(h)), pow2(_mm256_sub_epi32(ni, h)));
            // |n| > 192: 0 below, infinity above.
            let alt = _mm256_and_ps(
                _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ),
                _mm256_set1_ps(f32::INFINITY),
            );
            _mm256_blendv_ps(res, alt, big)
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn silu_mul_impl(gate: &mut [f32], up: &[f32]) {
        unsafe {
            let n = gate.len().min(up.len());
            let one = _mm256_set1_ps(1.0);
            let mut i = 0;
            while i + 8 <= n {
                let x = _mm256_loadu_ps(gate.as_ptr().add(i));
                let e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
                let s = _mm256_div_ps(x, _mm256_add_ps(one, e));
                _mm256_storeu_ps(
                    gate.as_mut_ptr().add(i),
                    _mm256_mul_ps(s, _mm256_loadu_ps(up.as_ptr().add(i))),
                );
                i += 8;
            }
            for k in i..n {
                gate[k] = super::super::ggml_math::silu(gate[k]) * up[k];
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn exp_sub_impl(x: &mut [f32], max: f32) -> f64 {
        unsafe {
            let n = x.len();
            let m = _mm256_set1_ps(max);
            let mut sum = 0.0f64;
            let mut i = 0;
            while i + 8 <= n {
                let e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), m));
                _mm256_storeu_ps(x.as_mut_ptr().add(i), e);
                sum += hsum_f32(e) as f64;
                i += 8;
            }
            for v in &mut x[i..] {
                *v = super::super::ggml_math::expf(*v - max);
                sum += *v as f64;
            }
            sum
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn round_f16_impl(x: &mut [f32]) {
        unsafe {
            let n = x.len();
            let mut i = 0;
            while i + 8 <= n {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(
                    x.as_ptr().add(i),
                ));
                _mm256_storeu_ps(x.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                i += 8;
            }
            for v in &mut x[i..] {
                *v = half::f16::from_f32(*v).to_f32();
            }
        }
    }

    pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
        // SAFETY: handed out by `Kernels` only after AVX2, FMA and F16C were detected.
        unsafe { silu_mul_impl(gate, up) }
    }

    pub fn delta_rule(
        s: &mut [f32],
        k: &[f32],
        q: &[f32],
        v: &[f32],
        decay_beta_scale: [f32; 3],
        out: &mut [f32],
    ) {
        let d = k.len();
        assert!(q.len() == d && s.len() == v.len() * d && out.len() >= v.len());
        let mut j = 0;
        // SAFETY: AVX2, FMA and F16C were detected (as above); rows j..j + R lie in `s`.
        unsafe {
            while j + 4 <= v.len() {
                delta_rule_rows::<4>(s, k, q, v, decay_beta_scale, out, j);
                j += 4;
            }
            while j < v.len() {
                delta_rule_rows::<1>(s, k, q, v, decay_beta_scale, out, j);
                j += 1;
            }
        }
    }

    /// Rows j..j + R of `Kernels::delta_rule`, side by side so their dot products' dependency
    /// chains overlap. Per row, the arithmetic of the scalar steps: `x *= decay`, the 8-lane FMA
    /// dot of `dot_f32_bytes_impl` (tail added after the horizontal sum), `x += k·δ` unfused.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::needless_range_loop)] // the rows' accumulators and the tails index alike
    unsafe fn delta_rule_rows<const R: usize>(
        s: &mut [f32],
        k: &[f32],
        q: &[f32],
        v: &[f32],
        [decay, beta, scale]: [f32; 3],
        out: &mut [f32],
        j: usize,
    ) {
        unsafe {
            let d = k.len();
            let n8 = d / 8 * 8;
            let base = s.as_mut_ptr().add(j * d);
            let row = |r: usize| base.add(r * d);
            let dv = _mm256_set1_ps(decay);
            let mut acc = [_mm256_setzero_ps(); R];
            let mut i = 0;
            while i < n8 {
                let kv = _mm256_loadu_ps(k.as_ptr().add(i));
                for r in 0..R {
                    let x = _mm256_mul_ps(_mm256_loadu_ps(row(r).add(i)), dv);
                    _mm256_storeu_ps(row(r).add(i), x);
                    acc[r] = _mm256_fmadd_ps(x, kv, acc[r]);
                }
                i += 8;
            }
            let mut delta = [0.0f32; R];
            for r in 0..R {
                let mut dot = hsum_f32(acc[r]);
                for i in n8..d {
                    let x = row(r).add(i);
                    *x *= decay;
                    dot += *x * k[i];
                }
                delta[r] = (v[j + r] - dot) * beta;
                acc[r] = _mm256_setzero_ps();
            }
            let mut i = 0;
            while i < n8 {
                let kv = _mm256_loadu_ps(k.as_ptr().add(i));
                let qv = _mm256_loadu_ps(q.as_ptr().add(i));
                for r in 0..R {
                    let x = _mm256_loadu_ps(row(r).add(i));
                    let x = _mm256_add_ps(x, _mm256_mul_ps(kv, _mm256_set1_ps(delta[r])));
                    _mm256_storeu_ps(row(r).add(i), x);
                    acc[r] = _mm256_fmadd_ps(x, qv, acc[r]);
                }
                i += 8;
            }
            for r in 0..R {
                let mut dot = hsum_f32(acc[r]);
                for i in n8..d {
                    let x = row(r).add(i);
                    *x += k[i] * delta[r];
                    dot += *x * q[i];
                }
                out[j + r] = dot * scale;
            }
        }
    }

    pub fn exp_sub(x: &mut [f32], max: f32) -> f64 {
        // SAFETY: as above.
        unsafe { exp_sub_impl(x, max) }
    }

    pub fn round_f16(x: &mut [f32]) {
        // SAFETY: as above.
        unsafe { round_f16_impl(x) }
    }

    /// f32 weights stored as little-endian bytes (possibly unaligned) · f32 activations.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_f32_bytes_impl(w: &[u8], x: &[f32]) -> f32 {
        unsafe {
            let n = (w.len() / 4).min(x.len());
            let mut s = _mm256_setzero_ps();
            let mut i = 0;
            while i + 8 <= n {
                let wv = _mm256_loadu_ps(w.as_ptr().add(4 * i) as *const f32);
                s = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr().add(i)), s);
                i += 8;
            }
            let mut sum = hsum_f32(s);
            while i < n {
                let b = &w[4 * i..4 * i + 4];
                sum += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x[i];
                i += 1;
            }
            sum
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_f16_bytes_impl(w: &[u8], x: &[f32]) -> f32 {
        unsafe {
            let n = (w.len() / 2).min(x.len());
            let mut s = _mm256_setzero_ps();
            let mut i = 0;
            while i + 8 <= n {
                let h = _mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i);
                s = _mm256_fmadd_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(x.as_ptr().add(i)), s);
                i += 8;
            }
            let mut sum = hsum_f32(s);
            while i < n {
                sum += f16(w, 2 * i) * x[i];
                i += 1;
            }
            sum
        }
    }

    macro_rules! safe {
        ($name:ident, $impl:path, $w:ty, $x:ty) => {
            pub fn $name(w: $w, x: $x) -> f32 {
                // SAFETY: handed out by `Kernels` only after its features were detected.
                unsafe { $impl(w, x) }
            }
        };
    }
    safe!(dot_q4_0, avx2::q4_0, &[u8], &[BlockQ8]);
    safe!(dot_q4_1, avx2::q4_1, &[u8], &[BlockQ8]);
    safe!(dot_q5_0, avx2::q5_0, &[u8], &[BlockQ8]);
    safe!(dot_q5_1, avx2::q5_1, &[u8], &[BlockQ8]);
    safe!(dot_q8_0, avx2::q8_0, &[u8], &[BlockQ8]);
    safe!(dot_q2_k, avx2::q2_k, &[u8], &[BlockQ8K]);
    safe!(dot_q3_k, avx2::q3_k, &[u8], &[BlockQ8K]);
    safe!(dot_q4_k, avx2::q4_k, &[u8], &[BlockQ8K]);
    safe!(dot_q5_k, avx2::q5_k, &[u8], &[BlockQ8K]);
    safe!(dot_q6_k, avx2::q6_k, &[u8], &[BlockQ8K]);
    safe!(vnni_q4_0, vnni::q4_0, &[u8], &[BlockQ8]);
    safe!(vnni_q4_1, vnni::q4_1, &[u8], &[BlockQ8]);
    safe!(vnni_q5_0, vnni::q5_0, &[u8], &[BlockQ8]);
    safe!(vnni_q5_1, vnni::q5_1, &[u8], &[BlockQ8]);
    safe!(vnni_q8_0, vnni::q8_0, &[u8], &[BlockQ8]);
    safe!(vnni_q2_k, vnni::q2_k, &[u8], &[BlockQ8K]);
    safe!(vnni_q3_k, vnni::q3_k, &[u8], &[BlockQ8K]);
    safe!(vnni_q4_k, vnni::q4_k, &[u8], &[BlockQ8K]);
    safe!(vnni_q5_k, vnni::q5_k, &[u8], &[BlockQ8K]);
    safe!(vnni_q6_k, vnni::q6_k, &[u8], &[BlockQ8K]);
    safe!(dot_f32_f16, dot_f32_f16_impl, &[f32], &[half::f16]);
    safe!(dot_f32_bytes, dot_f32_bytes_impl, &[u8], &[f32]);
    safe!(dot_f16_bytes, dot_f16_bytes_impl, &[u8], &[f32]);

    macro_rules! safe4 {
        ($name:ident, $impl:path, $x:ty) => {
            pub fn $name(w: &[u8], x: [&[$x]; 4]) -> [f32; 4] {
                // SAFETY: handed out by `Kernels` only after its features were detected.
                unsafe { $impl(w, x) }
            }
        };
    }
    safe4!(avx2_q4_0_x4, avx2::q4_0_x4, BlockQ8);
    safe4!(avx2_q4_1_x4, avx2::q4_1_x4, BlockQ8);
    safe4!(avx2_q5_0_x4, avx2::q5_0_x4, BlockQ8);
    safe4!(avx2_q8_0_x4, avx2::q8_0_x4, BlockQ8);
    safe4!(avx2_q4_k_x4, avx2::q4_k_x4, BlockQ8K);
    safe4!(avx2_q6_k_x4, avx2::q6_k_x4, BlockQ8K);
    safe4!(vnni_q4_0_x4, vnni::q4_0_x4, BlockQ8);
    safe4!(vnni_q4_1_x4, vnni::q4_1_x4, BlockQ8);
    safe4!(vnni_q5_0_x4, vnni::q5_0_x4, BlockQ8);
    safe4!(vnni_q8_0_x4, vnni::q8_0_x4, BlockQ8);
    safe4!(vnni_q4_k_x4, vnni::q4_k_x4, BlockQ8K);
    safe4!(vnni_q6_k_x4, vnni::q6_k_x4, BlockQ8K);

    pub fn axpy_f16(a: f32, x: &[half::f16], y: &mut [f32]) {
        // SAFETY: as above.
        unsafe { axpy_f16_impl(a, x, y) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::quant::tests::{activations, random_row};
    use super::super::quant::{ActFormat, act_format, quantize_q8k};
    use super::*;

    /// The delta-rule kernel gives the bits of its steps taken one at a time with this CPU's f32
    /// dot product, on head sizes with and without an 8-value tail and row counts with and
    /// without a remainder of four.
    #[test]
    fn delta_rule_equals_its_steps() {
        let kernels = Kernels::detect();
        let dot = kernels.dot_f32(GgmlType::F32);
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
            kernels.delta_rule(&mut s, &k, &q, &v, decay, beta, scale, &mut out);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&out),
                bits(&want),
                "outputs, head size {d}, {rows} rows"
            );
            assert_eq!(bits(&s), bits(&want_s), "state, head size {d}, {rows} rows");
        }
    }

    /// Every dispatched kernel agrees with the portable reference (integer parts exactly, so only
    /// float summation order differs).
    #[test]
    fn dispatched_kernels_match_the_portable_ones() {
        let mut levels = vec![Level::Portable];
        #[cfg(target_arch = "x86_64")]
        if Kernels::detect().level != Level::Portable {
            levels.push(Level::Avx2);
            if is_x86_feature_detected!("avxvnni") {
                levels.push(Level::AvxVnni);
            }
        }
        #[cfg(target_arch = "aarch64")]
        if Kernels::detect().level != Level::Portable {
            levels.push(Level::Neon);
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                levels.push(Level::NeonDot);
            }
        }
        // CI names the kernels its (emulated) CPU must get, so a run cannot pass by testing less.
        if let Ok(expected) = std::env::var("KILN_EXPECT_KERNELS") {
            assert_eq!(Kernels::detect().name(), expected);
        }
        for level in levels {
            check_level(Kernels {
                level,
                #[cfg(target_arch = "x86_64")]
                gemm: None,
            });
        }
    }

    /// The four-row kernels give each row exactly what the one-row kernel gives it.
    fn check_x4(k: &Kernels, t: GgmlType, w: &[u8], n: usize, seed: u64) {
        let rows: Vec<Vec<f32>> = (0..4).map(|r| activations(n, seed * 7 + r + 11)).collect();
        if let Some(x4) = k.dot_q8_x4(t) {
            let q: Vec<Vec<BlockQ8>> = rows
                .iter()
                .map(|x| {
                    let mut q = vec![BlockQ8::default(); n / 32];
                    k.quantize_q8(x, &mut q);
                    q
                })
                .collect();
            let got = x4(w, [&q[0], &q[1], &q[2], &q[3]]);
            for r in 0..4 {
                let want = k.dot_q8(t)(w, &q[r]);
                assert_eq!(
                    got[r].to_bits(),
                    want.to_bits(),
                    "{t} x4 row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
        if let Some(x4) = k.dot_q8k_x4(t) {
            let q: Vec<Vec<BlockQ8K>> = rows
                .iter()
                .map(|x| {
                    let mut q = vec![BlockQ8K::default(); n / 256];
                    quantize_q8k(x, &mut q);
                    q
                })
                .collect();
            let got = x4(w, [&q[0], &q[1], &q[2], &q[3]]);
            for r in 0..4 {
                let want = k.dot_q8k(t)(w, &q[r]);
                assert_eq!(
                    got[r].to_bits(),
                    want.to_bits(),
                    "{t} x4 row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
    }

    fn check_level(k: Kernels) {
        let n = 1024;
        for t in GgmlType::ALL {
            for seed in 0..4u64 {
                let w = random_row(t, n, seed * 31 + t.id() as u64);
                let x = activations(n, seed + 5);
                let (fast, reference) = match act_format(t) {
                    ActFormat::F32 => (k.dot_f32(t)(&w, &x), quant::dot_f32(t, &w, &x)),
                    ActFormat::Q8 => {
                        let mut q = vec![BlockQ8::default(); n / 32];
                        k.quantize_q8(&x, &mut q);
                        (k.dot_q8(t)(&w, &q), quant::dot_q8(t, &w, &q))
                    }
                    ActFormat::Q8K => {
                        let mut q = vec![BlockQ8K::default(); n / 256];
                        quantize_q8k(&x, &mut q);
                        (k.dot_q8k(t)(&w, &q), quant::dot_q8k(t, &w, &q))
                    }
                };
                let tol = 1e-4 * reference.abs().max(1.0);
                assert!(
                    (fast - reference).abs() <= tol,
                    "{t} ({}): {fast} vs {reference}",
                    k.name()
                );
                check_x4(&k, t, &w, n, seed);
            }
        }
        // Quantization equals the reference, value for value.
        let xq = activations(512, 77);
        let (mut a8, mut b8) = (vec![BlockQ8::default(); 16], vec![BlockQ8::default(); 16]);
        k.quantize_q8(&xq, &mut a8);
        quant::quantize_q8(&xq, &mut b8);
        for (a, b) in a8.iter().zip(&b8) {
            assert_eq!((a.d, a.s, a.qs), (b.d, b.s, b.qs));
        }
        let (mut ak, mut bk) = (vec![BlockQ8K::default(); 2], vec![BlockQ8K::default(); 2]);
        k.quantize_q8k(&xq, &mut ak);
        quantize_q8k(&xq, &mut bk);
        for (a, b) in ak.iter().zip(&bk) {
            assert_eq!((a.d, a.qs, a.bsums), (b.d, b.qs, b.bsums));
        }

        // Elementwise functions equal the scalar definitions bit for bit.
        let xs: Vec<f32> = (0..203).map(|i| (i as f32 - 101.0) * 0.37).collect();
        let ups = activations(203, 9);
        let mut g = xs.clone();
        k.silu_mul(&mut g, &ups);
        for i in 0..203 {
            let want = super::super::ggml_math::silu(xs[i]) * ups[i];
            assert_eq!(g[i].to_bits(), want.to_bits(), "silu({})", xs[i]);
        }
        let mut e = xs.clone();
        let sum = k.exp_sub(&mut e, 3.0);
        for i in 0..203 {
            assert_eq!(
                e[i].to_bits(),
                super::super::ggml_math::expf(xs[i] - 3.0).to_bits()
            );
        }
        assert!((sum - e.iter().map(|&v| v as f64).sum::<f64>()).abs() < 1e-6 * sum);
        let mut r = ups.clone();
        k.round_f16(&mut r);
        for i in 0..203 {
            assert_eq!(r[i], half::f16::from_f32(ups[i]).to_f32());
        }

        let a = activations(77, 1);
        let b: Vec<half::f16> = activations(77, 2)
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y.to_f32()).sum();
        assert!((k.dot_f32_f16(&a, &b) - want).abs() < 1e-4);
        let mut y = a.clone();
        k.axpy_f16(0.5, &b, &mut y);
        for i in 0..77 {
            assert!((y[i] - (a[i] + 0.5 * b[i].to_f32())).abs() < 1e-6);
        }
        let q8 = random_row(GgmlType::Q8_0, 96, 3);
        let (mut y, mut want) = (activations(96, 4), activations(96, 4));
        k.axpy_q8_0(0.7, &q8, &mut y);
        quant::axpy_q8_0(0.7, &q8, &mut want);
        for i in 0..96 {
            assert!(
                (y[i] - want[i]).abs() <= 1e-6 * want[i].abs().max(1.0),
                "axpy_q8_0 [{i}]"
            );
        }
    }
}
