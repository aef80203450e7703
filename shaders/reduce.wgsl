// reduce.wgsl — workgroup-wide sums and maxima of one value per invocation. Two variants chosen when
// the pipeline is built: subgroup operations where the adapter has SUBGROUP, else a tree in
// workgroup memory. Every invocation of the workgroup must call these (they contain barriers); all
// get the result. `{{WG}}` is the workgroup size (a power of two).

var<workgroup> red_scratch: array<f32, {{WG}}>;

#if SUBGROUP
fn wg_sum(v: f32, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) -> f32 {
    let s = subgroupAdd(v);
    if (sg_lane == 0u) {
        red_scratch[sg_id] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var i = 0u; i < n_sg; i++) {
        t += red_scratch[i];
    }
    workgroupBarrier();
    return t;
}

fn wg_max(v: f32, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) -> f32 {
    let s = subgroupMax(v);
    if (sg_lane == 0u) {
        red_scratch[sg_id] = s;
    }
    workgroupBarrier();
    var t = red_scratch[0];
    for (var i = 1u; i < n_sg; i++) {
        t = max(t, red_scratch[i]);
    }
    workgroupBarrier();
    return t;
}
#else
fn wg_sum(v: f32, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) -> f32 {
    red_scratch[lid] = v;
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red_scratch[lid] += red_scratch[lid + s];
        }
        workgroupBarrier();
    }
    let t = red_scratch[0];
    workgroupBarrier();
    return t;
}

fn wg_max(v: f32, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) -> f32 {
    red_scratch[lid] = v;
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red_scratch[lid] = max(red_scratch[lid], red_scratch[lid + s]);
        }
        workgroupBarrier();
    }
    let t = red_scratch[0];
    workgroupBarrier();
    return t;
}
#endif
