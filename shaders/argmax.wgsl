// argmax.wgsl — per row of n values, the index of the largest (the first on ties), so greedy
// decoding reads back a few bytes a row instead of the logits (one row when decoding, each row of
// a speculative verify pass). A row is scanned by `chunks` workgroups (a 128k vocabulary by one
// workgroup was a chain of 500 loads an invocation): each writes its chunk's best value (f32 bits)
// and index, and the host picks the best of the row's chunks, the earliest on ties.

struct Params {
    n: u32,
    chunk: u32,   // values per workgroup
    chunks: u32,  // workgroups per row
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> result: array<u32>;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let c = wg.x;
    let row = wg.y;
    let base = row * p.n;
    let end = min((c + 1u) * p.chunk, p.n);
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var i = c * p.chunk + lid; i < end; i += 256u) {
        let v = x[base + i];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let ov = best_v[lid + s];
            let oi = best_i[lid + s];
            if (ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid])) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let at = 2u * (row * p.chunks + c);
        result[at] = bitcast<u32>(best_v[0]);
        result[at + 1u] = best_i[0];
    }
}
