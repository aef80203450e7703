// quants.wgsl — GGML weight blocks read in place. Weights are bound as `array<u32>` in their GGUF
// byte layout (WGSL has no 8- or 16-bit storage); the kernel defines `fn word(i: u32) -> u32` that
// returns word i of the weight in use. One type is compiled per pipeline (`#if` on the type name).
//
// `dq16(row, g)` decodes the g-th run of 16 consecutive values of the row whose first byte is at
// byte offset `row`, value for value as src/gguf/dequant.rs (llama.cpp's dequantize_row_*) does.
// Every supported type keeps a run of 16 inside one block and under one scale.

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

// 16 bytes from byte offset b, as four little-endian words.
fn bytes16(b: u32) -> array<u32, 4> {
    return array<u32, 4>(u32_at(b), u32_at(b + 4u), u32_at(b + 8u), u32_at(b + 12u));
}

fn byte_of(w: array<u32, 4>, i: u32) -> u32 {
    return (w[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

fn sext8(v: u32) -> i32 {
    return (i32(v << 24u)) >> 24u;
}

#if F32
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let w0 = (row >> 2u) + g * 16u;
    for (var j = 0u; j < 16u; j++) {
        y[j] = bitcast<f32>(word(w0 + j));
    }
    return y;
}
#endif

#if F16
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let w0 = (row >> 2u) + g * 8u;
    for (var j = 0u; j < 8u; j++) {
        let v = unpack2x16float(word(w0 + j));
        y[2u * j] = v.x;
        y[2u * j + 1u] = v.y;
    }
    return y;
}
#endif

#if BF16
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let w0 = (row >> 2u) + g * 8u;
    for (var j = 0u; j < 8u; j++) {
        let v = word(w0 + j);
        y[2u * j] = bitcast<f32>(v << 16u);
        y[2u * j + 1u] = bitcast<f32>(v & 0xffff0000u);
    }
    return y;
}
#endif

#if Q4_0
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 1u) * 18u;
    let d = f16_at(blk);
    let q = bytes16(blk + 2u);
    let shift = (g & 1u) * 4u;
    for (var j = 0u; j < 16u; j++) {
        y[j] = d * f32(i32((byte_of(q, j) >> shift) & 0xfu) - 8);
    }
    return y;
}
#endif

#if Q4_1
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 1u) * 20u;
    let d = f16_at(blk);
    let m = f16_at(blk + 2u);
    let q = bytes16(blk + 4u);
    let shift = (g & 1u) * 4u;
    for (var j = 0u; j < 16u; j++) {
        y[j] = d * f32((byte_of(q, j) >> shift) & 0xfu) + m;
    }
    return y;
}
#endif

#if Q5_0
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 1u) * 22u;
    let d = f16_at(blk);
    let qh = u32_at(blk + 2u) >> ((g & 1u) * 16u);
    let q = bytes16(blk + 6u);
    let shift = (g & 1u) * 4u;
    for (var j = 0u; j < 16u; j++) {
        let v = ((byte_of(q, j) >> shift) & 0xfu) | (((qh >> j) & 1u) << 4u);
        y[j] = d * f32(i32(v) - 16);
    }
    return y;
}
#endif

#if Q5_1
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 1u) * 24u;
    let d = f16_at(blk);
    let m = f16_at(blk + 2u);
    let qh = u32_at(blk + 4u) >> ((g & 1u) * 16u);
    let q = bytes16(blk + 8u);
    let shift = (g & 1u) * 4u;
    for (var j = 0u; j < 16u; j++) {
        let v = ((byte_of(q, j) >> shift) & 0xfu) | (((qh >> j) & 1u) << 4u);
        y[j] = d * f32(v) + m;
    }
    return y;
}
#endif

#if Q8_0
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 1u) * 34u;
    let d = f16_at(blk);
    let q = bytes16(blk + 2u + (g & 1u) * 16u);
    for (var j = 0u; j < 16u; j++) {
        y[j] = f32(sext8(byte_of(q, j))) * d;
    }
    return y;
}
#endif

#if Q2_K
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 4u) * 84u;
    let gi = g & 15u;
    let sc = byte_at(blk + gi);
    let d = f16_at(blk + 80u) * f32(sc & 0xfu);
    let m = f16_at(blk + 82u) * f32(sc >> 4u);
    let half = gi >> 3u;
    let shift = ((gi & 7u) >> 1u) * 2u;
    let q = bytes16(blk + 16u + half * 32u + (gi & 1u) * 16u);
    for (var j = 0u; j < 16u; j++) {
        y[j] = d * f32((byte_of(q, j) >> shift) & 3u) - m;
    }
    return y;
}
#endif

#if Q3_K
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
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
    let part = (gi & 1u) * 16u;
    let q = bytes16(blk + 32u + half * 32u + part);
    let hm = bytes16(blk + part);
    let mbit = 1u << (half * 4u + sh);
    for (var j = 0u; j < 16u; j++) {
        let low = i32((byte_of(q, j) >> (2u * sh)) & 3u);
        let high = select(4, 0, (byte_of(hm, j) & mbit) != 0u);
        y[j] = dl * f32(low - high);
    }
    return y;
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
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 4u) * 144u;
    let gi = g & 15u;
    let chunk = gi >> 2u;
    let sub = (gi >> 1u) & 1u;
    let sm = scale_min_k4(blk + 4u, 2u * chunk + sub);
    let d = f16_at(blk) * sm.x;
    let m = f16_at(blk + 2u) * sm.y;
    let q = bytes16(blk + 16u + chunk * 32u + (gi & 1u) * 16u);
    for (var j = 0u; j < 16u; j++) {
        y[j] = d * f32((byte_of(q, j) >> (sub * 4u)) & 0xfu) - m;
    }
    return y;
}
#endif

#if Q5_K
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 4u) * 176u;
    let gi = g & 15u;
    let chunk = gi >> 2u;
    let sub = (gi >> 1u) & 1u;
    let sm = scale_min_k4(blk + 4u, 2u * chunk + sub);
    let d = f16_at(blk) * sm.x;
    let m = f16_at(blk + 2u) * sm.y;
    let l0 = (gi & 1u) * 16u;
    let q = bytes16(blk + 48u + chunk * 32u + l0);
    let qh = bytes16(blk + 16u + l0);
    let u = 1u << (2u * chunk + sub);
    for (var j = 0u; j < 16u; j++) {
        let h = select(0u, 16u, (byte_of(qh, j) & u) != 0u);
        y[j] = d * f32(((byte_of(q, j) >> (sub * 4u)) & 0xfu) + h) - m;
    }
    return y;
}
#endif

#if Q6_K
fn dq16(row: u32, g: u32) -> array<f32, 16> {
    var y: array<f32, 16>;
    let blk = row + (g >> 4u) * 210u;
    let gi = g & 15u;
    let n = gi >> 3u;
    let k = (gi & 7u) >> 1u;
    let l0 = (gi & 1u) * 16u;
    let ql = bytes16(blk + n * 64u + l0 + (k & 1u) * 32u);
    let qh = bytes16(blk + 128u + n * 32u + l0);
    let sc = f16_at(blk + 208u) * f32(sext8(byte_at(blk + 192u + n * 8u + (gi & 1u) + 2u * k)));
    let shift = (k >> 1u) * 4u;
    for (var j = 0u; j < 16u; j++) {
        let low = (byte_of(ql, j) >> shift) & 0xfu;
        let high = (byte_of(qh, j) >> (2u * k)) & 3u;
        y[j] = sc * f32(i32(low | (high << 4u)) - 32);
    }
    return y;
}
#endif
