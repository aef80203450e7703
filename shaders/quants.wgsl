// quants.wgsl — GGML weight blocks read in place. Weights are bound as `array<u32>` in their GGUF
// byte layout (WGSL has no 8- or 16-bit storage); the kernel defines `fn word(i: u32) -> u32` that
// returns word i of the weight in use. One type is compiled per pipeline (`#if` on the type name).
//
// `dq4(row, g, q)` decodes values 4q..4q+3 (q < 4) of the g-th run of 16 consecutive values of the
// row whose first byte is at byte offset `row`, value for value as src/gguf/dequant.rs (llama.cpp's
// dequantize_row_*) does. Every supported type keeps a run of 16 inside one block and under one
// scale. The decoders use vectors, not private arrays: arrays indexed at run time land in scratch
// memory on most compilers.

fn byte_at(b: u32) -> u32 {
    return (word(b >> 2u) >> ((b & 3u) * 8u)) & 0xffu;
}

// Four bytes from any byte offset (blocks of 18, 22, 34, 110 and 210 bytes leave rows 2-aligned).
fn u32_at(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let lo = word(b >> 2u);
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (word((b >> 2u) + 1u) << (32u - s));
}

fn f16_at(b: u32) -> f32 {
    return unpack2x16float((word(b >> 2u) >> ((b & 2u) * 8u)) & 0xffffu).x;
}

// The four bytes of a word, low first.
fn bytes4(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
}

// The four bytes of a word as signed values.
fn ibytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// Bits b..b+3 of h, one per lane, as 0 or 1.
fn bits4(h: u32, b: u32) -> vec4<u32> {
    return (vec4<u32>(h) >> (vec4<u32>(b) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
}

#if F32
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let w = (row >> 2u) + g * 16u + q * 4u;
    return vec4<f32>(bitcast<f32>(word(w)), bitcast<f32>(word(w + 1u)),
                     bitcast<f32>(word(w + 2u)), bitcast<f32>(word(w + 3u)));
}
#endif

#if F16
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let w = (row >> 2u) + g * 8u + q * 2u;
    return vec4<f32>(unpack2x16float(word(w)), unpack2x16float(word(w + 1u)));
}
#endif

#if BF16
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let w = (row >> 2u) + g * 8u + q * 2u;
    let a = word(w);
    let b = word(w + 1u);
    return vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u),
                     bitcast<f32>(b << 16u), bitcast<f32>(b & 0xffff0000u));
}
#endif

#if Q4_0
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 18u;
    let v = (bytes4(u32_at(blk + 2u + 4u * q)) >> vec4<u32>((g & 1u) * 4u)) & vec4<u32>(0xfu);
    return f16_at(blk) * (vec4<f32>(v) - 8.0);
}
#endif

#if Q4_1
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 20u;
    let v = (bytes4(u32_at(blk + 4u + 4u * q)) >> vec4<u32>((g & 1u) * 4u)) & vec4<u32>(0xfu);
    return f16_at(blk) * vec4<f32>(v) + f16_at(blk + 2u);
}
#endif

#if Q5_0
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 22u;
    let lo = (bytes4(u32_at(blk + 6u + 4u * q)) >> vec4<u32>((g & 1u) * 4u)) & vec4<u32>(0xfu);
    let hi = bits4(u32_at(blk + 2u), (g & 1u) * 16u + 4u * q);
    return f16_at(blk) * (vec4<f32>(lo | (hi << vec4<u32>(4u))) - 16.0);
}
#endif

#if Q5_1
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 24u;
    let lo = (bytes4(u32_at(blk + 8u + 4u * q)) >> vec4<u32>((g & 1u) * 4u)) & vec4<u32>(0xfu);
    let hi = bits4(u32_at(blk + 4u), (g & 1u) * 16u + 4u * q);
    return f16_at(blk) * vec4<f32>(lo | (hi << vec4<u32>(4u))) + f16_at(blk + 2u);
}
#endif

#if Q8_0
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 34u;
    return ibytes4(u32_at(blk + 2u + (g & 1u) * 16u + 4u * q)) * f16_at(blk);
}
#endif

#if Q2_K
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 84u;
    let gi = g & 15u;
    let sc = byte_at(blk + gi);
    let d = f16_at(blk + 80u) * f32(sc & 0xfu);
    let m = f16_at(blk + 82u) * f32(sc >> 4u);
    let shift = ((gi & 7u) >> 1u) * 2u;
    let v = bytes4(u32_at(blk + 16u + (gi >> 3u) * 32u + (gi & 1u) * 16u + 4u * q));
    return d * vec4<f32>((v >> vec4<u32>(shift)) & vec4<u32>(3u)) - m;
}
#endif

#if Q3_K
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 110u;
    let gi = g & 15u;
    // The 6-bit scale of group gi: 4 low bits from byte gi % 8 (low or high nibble), 2 high bits
    // from byte 8 + gi % 4.
    var lo: u32;
    if (gi < 8u) {
        lo = byte_at(blk + 96u + gi) & 0xfu;
    } else {
        lo = byte_at(blk + 96u + gi - 8u) >> 4u;
    }
    let hi = (byte_at(blk + 96u + 8u + (gi & 3u)) >> (2u * (gi >> 2u))) & 3u;
    let dl = f16_at(blk + 108u) * f32(i32(lo | (hi << 4u)) - 32);
    let half = gi >> 3u;
    let sh = (gi & 7u) >> 1u;
    let part = (gi & 1u) * 16u + 4u * q;
    let low = (bytes4(u32_at(blk + 32u + half * 32u + part)) >> vec4<u32>(2u * sh)) & vec4<u32>(3u);
    let mbit = (bytes4(u32_at(blk + part)) >> vec4<u32>(half * 4u + sh)) & vec4<u32>(1u);
    // A clear mask bit subtracts 4.
    return dl * (vec4<f32>(low) - 4.0 * (1.0 - vec4<f32>(mbit)));
}
#endif

#if Q4_K || Q5_K
// The 6-bit (scale, min) pair j of a Q4_K/Q5_K block, from its 12 packed bytes at `s`.
fn scale_min_k4(s: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(byte_at(s + j) & 63u), f32(byte_at(s + j + 4u) & 63u));
    }
    let sc = (byte_at(s + j + 4u) & 0xfu) | ((byte_at(s + j - 4u) >> 6u) << 4u);
    let m = (byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}
#endif

#if Q4_K
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 144u;
    let gi = g & 15u;
    let chunk = gi >> 2u;
    let sub = (gi >> 1u) & 1u;
    let sm = scale_min_k4(blk + 4u, 2u * chunk + sub);
    let d = f16_at(blk) * sm.x;
    let m = f16_at(blk + 2u) * sm.y;
    let v = bytes4(u32_at(blk + 16u + chunk * 32u + (gi & 1u) * 16u + 4u * q));
    return d * vec4<f32>((v >> vec4<u32>(sub * 4u)) & vec4<u32>(0xfu)) - m;
}
#endif

#if Q5_K
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 176u;
    let gi = g & 15u;
    let chunk = gi >> 2u;
    let sub = (gi >> 1u) & 1u;
    let sm = scale_min_k4(blk + 4u, 2u * chunk + sub);
    let d = f16_at(blk) * sm.x;
    let m = f16_at(blk + 2u) * sm.y;
    let l0 = (gi & 1u) * 16u + 4u * q;
    let lo = (bytes4(u32_at(blk + 48u + chunk * 32u + l0)) >> vec4<u32>(sub * 4u)) & vec4<u32>(0xfu);
    let hi = (bytes4(u32_at(blk + 16u + l0)) >> vec4<u32>(2u * chunk + sub)) & vec4<u32>(1u);
    return d * vec4<f32>(lo + hi * 16u) - m;
}
#endif

#if Q6_K
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 210u;
    let gi = g & 15u;
    let n = gi >> 3u;
    let k = (gi & 7u) >> 1u;
    let l0 = (gi & 1u) * 16u + 4u * q;
    let low = (bytes4(u32_at(blk + n * 64u + l0 + (k & 1u) * 32u)) >> vec4<u32>((k >> 1u) * 4u)) & vec4<u32>(0xfu);
    let high = (bytes4(u32_at(blk + 128u + n * 32u + l0)) >> vec4<u32>(2u * k)) & vec4<u32>(3u);
    let sc = f16_at(blk + 208u) * f32(sext8(byte_at(blk + 192u + n * 8u + (gi & 1u) + 2u * k)));
    return sc * (vec4<f32>(low | (high << vec4<u32>(4u))) - 32.0);
}

fn sext8(v: u32) -> i32 {
    return (i32(v << 24u)) >> 24u;
}
#endif

#if IQ4_NL || IQ4_XS
// IQ4_NL's 16 levels, four signed bytes per word.
fn kvalue_iq4nl(i: u32) -> f32 {
    let w = select(select(0xbfad9881u, 0xf6eaddcfu, i >= 4u), select(0x26190d01u, 0x71594535u, i >= 12u), i >= 8u);
    return f32(i32(w << (24u - 8u * (i & 3u))) >> 24u);
}

fn kvalues_iq4nl(v: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(kvalue_iq4nl(v.x), kvalue_iq4nl(v.y), kvalue_iq4nl(v.z), kvalue_iq4nl(v.w));
}
#endif

#if IQ4_NL
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 18u;
    let v = (bytes4(u32_at(blk + 2u + 4u * q)) >> vec4<u32>((g & 1u) * 4u)) & vec4<u32>(0xfu);
    return f16_at(blk) * kvalues_iq4nl(v);
}
#endif

#if IQ4_XS
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 136u;
    let gi = g & 15u;
    let ib = gi >> 1u;
    let lo = (byte_at(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 0xfu;
    let hi = (byte_at(blk + 2u + ib / 4u) >> (2u * (ib % 4u))) & 3u;
    let dl = f16_at(blk) * f32(i32(lo | (hi << 4u)) - 32);
    let v = (bytes4(u32_at(blk + 8u + 16u * ib + 4u * q)) >> vec4<u32>((gi & 1u) * 4u)) & vec4<u32>(0xfu);
    return dl * kvalues_iq4nl(v);
}
#endif

#if MXFP4
// MXFP4's E2M1 levels, doubled (the scale is halved to match).
fn kvalue_mxfp4(i: u32) -> f32 {
    let m = i & 7u;
    let mag = select(select(f32(m), f32(2u * m - 4u), m >= 4u), f32(4u * m - 16u), m >= 6u);
    return select(mag, -mag, i >= 8u);
}

fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 1u) * 17u;
    let e = byte_at(blk);
    // 2^(e − 127) halved, as ggml's GGML_E8M0_TO_FP32_HALF.
    let d = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
    let v = (bytes4(u32_at(blk + 1u + 4u * q)) >> vec4<u32>((g & 1u) * 4u)) & vec4<u32>(0xfu);
    return d * vec4<f32>(kvalue_mxfp4(v.x), kvalue_mxfp4(v.y), kvalue_mxfp4(v.z), kvalue_mxfp4(v.w));
}
#endif

#if TQ1_0
// A trit stored base 3 scaled to a byte, times 3^n (n < 5), as −1, 0 or 1.
fn trits4(b: vec4<u32>, n: u32) -> vec4<f32> {
    let pow3 = select(select(select(select(1u, 3u, n >= 1u), 9u, n >= 2u), 27u, n >= 3u), 81u, n >= 4u);
    let q = (b * pow3) & vec4<u32>(0xffu);
    return vec4<f32>(vec4<i32>((q * 3u) >> vec4<u32>(8u)) - vec4<i32>(1));
}

fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 54u;
    let v = (g & 15u) * 16u + 4u * q;
    // Values 0..160: 32 bytes × 5 trits; 160..240: 16 bytes × 5; 240..256: 4 bytes × 4.
    var byte: u32;
    var n: u32;
    if (v < 160u) {
        byte = v % 32u;
        n = v / 32u;
    } else if (v < 240u) {
        byte = 32u + (v - 160u) % 16u;
        n = (v - 160u) / 16u;
    } else {
        byte = 48u + (v - 240u) % 4u;
        n = (v - 240u) / 4u;
    }
    return trits4(bytes4(u32_at(blk + byte)), n) * f16_at(blk + 52u);
}
#endif

#if TQ2_0
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 4u) * 66u;
    let v = (g & 15u) * 16u + 4u * q;
    let r = v % 128u;
    let b = bytes4(u32_at(blk + 32u * (v / 128u) + r % 32u));
    let t = (b >> vec4<u32>(2u * (r / 32u))) & vec4<u32>(3u);
    return (vec4<f32>(t) - 1.0) * f16_at(blk + 64u);
}
#endif

#if Q1_0
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let blk = row + (g >> 3u) * 18u;
    let v = (g & 7u) * 16u + 4u * q;
    let bits = byte_at(blk + 2u + v / 8u) >> (v % 8u);
    let d = f16_at(blk);
    return select(vec4<f32>(-d), vec4<f32>(d), bits4(bits, 0u) == vec4<u32>(1u));
}
#endif

// The i-quants with grids.
#include "quants_iq"
