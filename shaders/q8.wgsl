// q8.wgsl — the q8_0 KV cache (snippet): its layout, and the arithmetic of llama.cpp's quantized
// caches as kiln's CPU backend does it (src/backend/cpu/cache.rs), so that both hold the same
// blocks.
//
// Layout (kiln's own; the numbers are GGML Q8_0's): one u32 array, the quants first, value e's
// int8 in byte e % 4 of word e / 4 (a block's 32 bytes are 8 whole words); then, from word
// `scales` (the cache's length / 4), the f16 scales, block b's in half b % 2 of word
// scales + b / 2. (GGML puts each scale before its quants in 34-byte blocks; two arrays keep every
// load word-aligned.) Each run of `rotation` values (a power of two dividing the head; 1: none) is
// stored multiplied by the orthonormal Walsh–Hadamard matrix H, as llama.cpp does: a store rotates
// then quantizes; attention rotates the query the same way (H is orthonormal, so q·k is unchanged)
// and rotates its output from rotated values back (H·H = I).
//
// A block's scale is f16(amax / 127) and its quants round_half_even(x · 127/amax) (llama.cpp's x86
// quantize_row_q8_0, the CPU's `quantize_q8`). The rotation's butterflies run in the order of the
// CPU's `portable::hadamard`, its 1/√n comes from the host: the same values, rounded the same way.
//
// The including shader declares `var<workgroup> hx: array<f32, N>` (the values rotated and
// quantized in place) and `var<workgroup> q8_d: array<f32, N / 32>`, `q8_id` (per block: its
// scale as an f32, and 127/amax).

#include "common"

// Each run of n values of hx[0..len) multiplied by the Walsh–Hadamard matrix (nothing for n = 1;
// n ≤ 256): butterflies (u + v, u − v) for h = 1, 2, 4, …, then × scale (1/√n, from the host).
// All `nt` invocations of the workgroup call it, and it ends with a barrier. Its eight stages
// always run (naga takes a function's arguments as non-uniform, so no barrier may depend on n).
fn hadamard(n: u32, scale: f32, len: u32, lid: u32, nt: u32) {
    workgroupBarrier();
    for (var h = 1u; h < 256u; h <<= 1u) {
        if (h < n) {
            for (var t = lid; t < len / 2u; t += nt) {
                let i = (t / h) * 2u * h + t % h;
                let u = hx[i];
                let v = hx[i + h];
                hx[i] = u + v;
                hx[i + h] = u - v;
            }
        }
        workgroupBarrier();
    }
    if (n > 1u) {
        for (var t = lid; t < len; t += nt) {
            hx[t] = hx[t] * scale;
        }
    }
    workgroupBarrier();
}

// The scales of blocks 0..len/32 of hx into q8_d (f16-rounded, as an f32) and q8_id (127/amax,
// 0 for an all-zero block). All invocations call it; it ends with a barrier.
fn q8_scales(len: u32, lid: u32, nt: u32) {
    for (var b = lid; b < len / 32u; b += nt) {
        var amax = 0.0;
        for (var j = 0u; j < 32u; j++) {
            amax = max(amax, abs(hx[32u * b + j]));
        }
        q8_d[b] = unpack2x16float(f16_bits(amax / 127.0)).x;
        q8_id[b] = select(0.0, 127.0 / amax, amax != 0.0);
    }
    workgroupBarrier();
}

// hx[0..len) rotated in runs of `rot` (scale `rot_scale`) and its blocks' scales computed: what a
// store or a query needs before `q8_word`.
fn q8_prepare(rot: u32, rot_scale: f32, len: u32, lid: u32, nt: u32) {
    hadamard(rot, rot_scale, len, lid, nt);
    q8_scales(len, lid, nt);
}

// The quants of hx[4w..4w + 4), packed as a cache word (after `q8_scales`).
fn q8_word(w: u32) -> u32 {
    let x = vec4<f32>(hx[4u * w], hx[4u * w + 1u], hx[4u * w + 2u], hx[4u * w + 3u]);
    return pack4xI8(vec4<i32>(round(x * q8_id[w / 8u])));
}

// The scale word of blocks 2w and 2w + 1 of hx, whose first value is global value `g`, merged into
// the word `old`: only the halves of blocks in [lo, hi) change (a word may straddle the edge of a
// store; no other invocation writes its other half meanwhile). The scales are exact f16 values,
// so pack2x16float is exact.
fn q8_scale_word(w: u32, old: u32, g: u32, lo: u32, hi: u32) -> u32 {
    let packed = pack2x16float(vec2<f32>(q8_d[2u * w], q8_d[2u * w + 1u]));
    var keep = 0u;
    if (g < lo || g >= hi) {
        keep |= 0xffffu;
    }
    if (g + 32u < lo || g + 32u >= hi) {
        keep |= 0xffff0000u;
    }
    return (old & keep) | (packed & ~keep);
}
