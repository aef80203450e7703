// pack_q8k.wgsl — a row of values quantized to packed Q8_K blocks by one workgroup (round_acts.wgsl's
// PACKED layout: quants four to a word, then every block's d; bit for bit its rounding), for the
// integer-dot mat-vecs that read it next. The including kernel defines `packed` (the blocks'
// binding) and `pack_value(i)` (value i of its output, written before the call by any invocation
// of the workgroup); `{{WG}}` is a multiple of 64, so a block is 64 invocations of one pass.

var<workgroup> block_max: array<f32, {{WG}}>;

// Values first .. first + dim (whole blocks of 256) into quant words first / 4 .., their blocks'
// d into words `scales` + first / 256 ..: four values per invocation a pass, a block's maximum
// over its 64 invocations in workgroup memory.
fn write_packed_row(first: u32, dim: u32, scales: u32, lid: u32) {
    // Other invocations wrote the values read here.
    storageBarrier();
    for (var c = 0u; c < dim; c += 4u * {{WG}}u) {
        let e = c + 4u * lid;
        var v = vec4<f32>(0.0);
        if (e < dim) {
            for (var j = 0u; j < 4u; j++) {
                v[j] = pack_value(first + e + j);
            }
        }
        let a = abs(v);
        block_max[lid] = max(max(a.x, a.y), max(a.z, a.w));
        workgroupBarrier();
        var amax = 0.0;
        let block = lid & ~63u;
        for (var i = 0u; i < 64u; i++) {
            amax = max(amax, block_max[block + i]);
        }
        workgroupBarrier();
        let q = q8_k_quants(v, amax);
        let d = q8_k_d(amax);
        if (e < dim) {
            packed[(first + e) / 4u] = pack4xI8(q);
            if ((lid & 63u) == 0u) {
                packed[scales + (first + e) / 256u] = bitcast<u32>(d);
            }
        }
    }
}
