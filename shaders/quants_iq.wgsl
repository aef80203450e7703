// quants_iq.wgsl — `dq4` (see quants.wgsl, whose helpers these use) for the i-quants that look
// their values up in a grid: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, value for
// value as src/gguf/iq.rs (llama.cpp's dequantize_row_*), the same f32 operations in the same
// order. All are 256-value blocks in which a run of 16 values is half of one 32-value sub-block
// `ib` under one scale: the four values 4q.. of run g are half `h` of the 8-value grid entry `l`
// of that sub-block.
//
// The type's grid is a storage buffer (the CPU's table, `iq_grid` in pipelines.rs: a byte per value, a u64
// entry i as words 2i and 2i + 1) that the pipeline binds after the kernel's own buffers. As a
// WGSL `const` array (which naga copies to a function variable wherever it is indexed at run
// time) or a `var<private>` one, lavapipe took over seven minutes to build one pipeline.

#if IQ2_XXS || IQ2_XS || IQ2_S || IQ3_XXS || IQ3_S || IQ1_S || IQ1_M
@group(0) @binding({{GRID_BINDING}}) var<storage, read> iq_grid: array<u32>;

// Where the values 4q..4q+3 of run g fall in their block.
struct IqPos {
    blk: u32,  // the block's first byte
    ib: u32,   // 32-value sub-block
    l: u32,    // 8-value grid entry within it
    h: u32,    // which four values of that entry
}

fn iq_pos(row: u32, g: u32, q: u32, block_bytes: u32) -> IqPos {
    let v = (g & 15u) * 16u + 4u * q;
    return IqPos(row + (g >> 4u) * block_bytes, v / 32u, (v / 8u) % 4u, (v / 4u) % 2u);
}

// The u16 at an even byte offset.
fn u16_at(b: u32) -> u32 {
    return (word(b >> 2u) >> ((b & 2u) * 8u)) & 0xffffu;
}

// v with lane i negated where bit b + i of `signs` is set (exact, as llama.cpp's ±1 factor).
fn signed4(v: vec4<f32>, signs: u32, b: u32) -> vec4<f32> {
    return select(v, -v, bits4(signs, b) == vec4<u32>(1u));
}
#endif

#if IQ2_XXS || IQ2_XS || IQ3_XXS
// llama.cpp's ksigns_iq2xs[i]: the seven stored sign bits and an eighth that makes the count of
// negatives even, computed rather than tabled.
fn ksigns(i: u32) -> u32 {
    return i | ((countOneBits(i) & 1u) << 7u);
}
#endif

#if IQ2_XS || IQ2_S
// The 4-bit scale of half `half` of sub-block scale byte `sc`, applied to d as llama.cpp does.
fn iq2_db(d: f32, sc: u32, half: u32) -> f32 {
    return d * (0.5 + f32((sc >> (4u * half)) & 0xfu)) * 0.25;
}
#endif

#if IQ2_XXS
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 66u);
    let qs = pos.blk + 2u + 8u * pos.ib;
    // Four grid indices, then four 7-bit sign indices under a 4-bit scale.
    let aux = u32_at(qs + 4u);
    let db = f16_at(pos.blk) * (0.5 + f32(aux >> 28u)) * 0.25;
    let grid = vec4<f32>(bytes4(iq_grid[2u * byte_at(qs + pos.l) + pos.h]));
    return signed4(db * grid, ksigns((aux >> (7u * pos.l)) & 127u), 4u * pos.h);
}
#endif

#if IQ2_XS
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 74u);
    // A 9-bit grid index under a 7-bit sign index.
    let qv = u16_at(pos.blk + 2u + 2u * (4u * pos.ib + pos.l));
    let db = iq2_db(f16_at(pos.blk), byte_at(pos.blk + 66u + pos.ib), pos.l / 2u);
    let grid = vec4<f32>(bytes4(iq_grid[2u * (qv & 511u) + pos.h]));
    return signed4(db * grid, ksigns(qv >> 9u), 4u * pos.h);
}
#endif

#if IQ2_S
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 82u);
    // Index low bytes at 2, sign bytes at 34, index high bits at 66 (2 per entry), scales at 74.
    let index = byte_at(pos.blk + 2u + 4u * pos.ib + pos.l)
        | ((byte_at(pos.blk + 66u + pos.ib) << (8u - 2u * pos.l)) & 0x300u);
    let db = iq2_db(f16_at(pos.blk), byte_at(pos.blk + 74u + pos.ib), pos.l / 2u);
    let grid = vec4<f32>(bytes4(iq_grid[2u * index + pos.h]));
    return signed4(db * grid, byte_at(pos.blk + 34u + 4u * pos.ib + pos.l), 4u * pos.h);
}
#endif

#if IQ3_XXS
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 98u);
    // 64 grid indices (4 values each) at 2, then per sub-block signs and scale as IQ2_XXS's.
    let aux = u32_at(pos.blk + 66u + 4u * pos.ib);
    let db = f16_at(pos.blk) * (0.5 + f32(aux >> 28u)) * 0.5;
    let index = byte_at(pos.blk + 2u + 8u * pos.ib + 2u * pos.l + pos.h);
    let grid = vec4<f32>(bytes4(iq_grid[index]));
    return signed4(db * grid, ksigns((aux >> (7u * pos.l)) & 127u), 4u * pos.h);
}
#endif

#if IQ3_S
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 110u);
    // Index low bytes at 2, index high bits at 66 (one per 4-value entry), signs at 74, scales
    // at 106 (a nibble per sub-block).
    let sc = (byte_at(pos.blk + 106u + pos.ib / 2u) >> (4u * (pos.ib % 2u))) & 0xfu;
    let db = f16_at(pos.blk) * f32(1u + 2u * sc);
    let k = 2u * pos.l + pos.h;
    let index = byte_at(pos.blk + 2u + 8u * pos.ib + k)
        | (((byte_at(pos.blk + 66u + pos.ib) >> k) & 1u) << 8u);
    let grid = vec4<f32>(bytes4(iq_grid[index]));
    return signed4(db * grid, byte_at(pos.blk + 74u + 4u * pos.ib + pos.l), 4u * pos.h);
}
#endif

#if IQ1_S || IQ1_M
// Four of an IQ1 grid entry's values (−1, 0 or 1), shifted by ±1/8 and scaled.
fn iq1_values(dl: f32, index: u32, h: u32, negative_delta: bool) -> vec4<f32> {
    let delta = select(0.125, -0.125, negative_delta);
    return dl * (ibytes4(iq_grid[2u * index + h]) + delta);
}
#endif

#if IQ1_S
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 50u);
    // Per sub-block a u16: four 3-bit index high parts, a 3-bit scale, the delta's sign.
    let qh = u16_at(pos.blk + 34u + 2u * pos.ib);
    let dl = f16_at(pos.blk) * f32(2u * ((qh >> 12u) & 7u) + 1u);
    let index = byte_at(pos.blk + 2u + 4u * pos.ib + pos.l) | (((qh >> (3u * pos.l)) & 7u) << 8u);
    return iq1_values(dl, index, pos.h, (qh & 0x8000u) != 0u);
}
#endif

#if IQ1_M
fn dq4(row: u32, g: u32, q: u32) -> vec4<f32> {
    let pos = iq_pos(row, g, q, 56u);
    // d is the top nibbles of the four scale u16s at 48, low first.
    let w0 = u32_at(pos.blk + 48u);
    let w1 = u32_at(pos.blk + 52u);
    let bits = ((w0 >> 12u) & 0xfu) | ((w0 >> 24u) & 0xf0u) | ((w1 >> 4u) & 0xf00u)
        | ((w1 >> 16u) & 0xf000u);
    let d = unpack2x16float(bits).x;
    // Two 3-bit scales per sub-block (entries 0-1, 2-3), six bits per sub-block in each u16.
    let s = u16_at(pos.blk + 48u + 2u * (pos.ib / 2u));
    let dl = d * f32(2u * ((s >> (6u * (pos.ib % 2u) + 3u * (pos.l / 2u))) & 7u) + 1u);
    // Per entry a nibble at 32: 3 index high bits and the delta's sign.
    let hx = byte_at(pos.blk + 32u + 2u * pos.ib + pos.l / 2u) >> (4u * (pos.l % 2u));
    let index = byte_at(pos.blk + 4u * pos.ib + pos.l) | ((hx & 7u) << 8u);
    return iq1_values(dl, index, pos.h, (hx & 8u) != 0u);
}
#endif
