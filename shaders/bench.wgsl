// bench.wgsl — the device's memory bandwidth, measured by `kiln bench` with a plain copy
// (16 bytes per invocation).

struct Params {
    len: u32,  // vec4 words to copy
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> src: array<vec4<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < p.len) {
        dst[i] = src[i];
    }
}
