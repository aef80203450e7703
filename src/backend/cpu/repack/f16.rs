//! F16 weights in panels, for the F16 GEMM (`gemm/f16.rs`): a group of 16 rows holds, for each
//! column k in turn, the 16 rows' values side by side (32 bytes). A kernel reads one vector of
//! the rows' weights per column and multiplies it by a token's activation k broadcast, so every
//! output sums its products in column order, whatever the vector width or the tile of tokens,
//! and no tile ends in a horizontal sum. The values are GGML's bytes, moved.

use super::ROWS;

/// Bytes per group of 16 rows of `cols` values.
pub(super) fn group_bytes(cols: usize) -> usize {
    cols * 2 * ROWS
}

/// The 16 rows (F16 bytes, `cols` values each) into one group's panel.
pub(super) fn pack_group(rows: &[&[u8]; ROWS], out: &mut [u8]) {
    // Row by row, so the source is read as one stream; the group (tens of KB) stays in cache.
    for (r, row) in rows.iter().enumerate() {
        for (k, v) in row.chunks_exact(2).enumerate() {
            out[(k * ROWS + r) * 2..][..2].copy_from_slice(v);
        }
    }
}

/// Row `r` of a group back in GGML's bytes (`out` holds one row's).
pub(super) fn unpack_row(group: &[u8], r: usize, out: &mut [u8]) {
    for (k, v) in out.chunks_exact_mut(2).enumerate() {
        v.copy_from_slice(&group[(k * ROWS + r) * 2..][..2]);
    }
}
