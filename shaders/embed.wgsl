// embed.wgsl — embedding lookup: out[i] = table[ids[i]] · scale, decoding the rows of any weight
// type in place. A table split into parts is looked up once per part; each part writes the rows
// it holds.

#include "common"

struct Params {
    n: u32,          // ids
    groups: u32,     // row length / 16, rounded up
    row_bytes: u32,
    first_row: u32,  // first table row held by this part
    rows: u32,       // rows held by this part
    scale: f32,
    width: u32,      // values per row (rows of float tables are padded to whole runs of 16)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> w0: array<u32>;
@group(0) @binding(3) var<storage, read_write> out0: array<f32>;

fn word(i: u32) -> u32 {
    return w0[i];
}

#include "quants"

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.x;
    let i = gid.y;
    if (g >= p.groups || i >= p.n) {
        return;
    }
    let id = ids[i];
    if (id < p.first_row || id >= p.first_row + p.rows) {
        return;
    }
    let c = g * 16u;
    let o = i * p.width + c;
    for (var q = 0u; q < 4u; q++) {
        let y = dq4((id - p.first_row) * p.row_bytes, g, q) * p.scale;
        for (var l = 0u; l < 4u; l++) {
            if (c + 4u * q + l < p.width) {
                out0[o + 4u * q + l] = y[l];
            }
        }
    }
}
