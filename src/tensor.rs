//! Tensor views: a name, a GGML type, GGML-order dimensions and the bytes, which live in a file
//! mapping (zero-copy) or, for the few small tensors kiln derives itself, in an owned buffer.

use std::sync::Arc;

use memmap2::Mmap;

use crate::gguf::dequant::dequantize;
use crate::gguf::{GgmlType, GgufFile};

#[derive(Clone)]
enum Storage {
    /// A mapping, and whether it maps a file (else anonymous memory that holds the only copy).
    Mapped(Arc<Mmap>, bool),
    Owned(Arc<Vec<u8>>),
}

/// The block index and the rest of a GGUF tensor name `blk.N.rest`; None for other names.
pub fn block_of(name: &str) -> Option<(usize, &str)> {
    let (il, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    Some((il.parse().ok()?, rest))
}

#[derive(Clone)]
pub struct Tensor {
    /// Canonical (GGUF-style) name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    pub dtype: GgmlType,
    /// GGML order: `dims[0]` is the row length; a matrix of `dims[1]` rows.
    pub dims: Vec<usize>,
    storage: Storage,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {:?}", self.name, self.dtype, self.dims)
    }
}

impl Tensor {
    /// Every tensor of an opened GGUF file (whose sizes the reader checked against the file), as
    /// views of its mapping, in the file's order: a model's and a projector's alike.
    pub fn all_in(gguf: &GgufFile) -> impl Iterator<Item = Tensor> + '_ {
        gguf.tensors.iter().map(|t| {
            let dims = t.dims.iter().map(|&d| d as usize).collect();
            Tensor::mapped(
                t.name.clone(),
                t.ggml_type,
                dims,
                gguf.map.clone(),
                gguf.file_backed,
                t.offset,
                t.nbytes,
            )
        })
    }

    /// A view of `len` bytes at `start` in a mapping (of a file, or of anonymous memory). The
    /// caller has checked the range.
    pub fn mapped(
        name: String,
        dtype: GgmlType,
        dims: Vec<usize>,
        map: Arc<Mmap>,
        file_backed: bool,
        start: usize,
        len: usize,
    ) -> Tensor {
        debug_assert!(start + len <= map.len());
        Tensor {
            name,
            dtype,
            dims,
            storage: Storage::Mapped(map, file_backed),
            start,
            len,
        }
    }

    pub fn from_f32(name: impl Into<String>, dims: Vec<usize>, values: &[f32]) -> Tensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::from_bytes(name, GgmlType::F32, dims, bytes)
    }

    /// A tensor of type `dtype` over owned bytes (tests, derived tensors). The caller sizes `bytes`
    /// for `dims`.
    pub fn from_bytes(
        name: impl Into<String>,
        dtype: GgmlType,
        dims: Vec<usize>,
        bytes: Vec<u8>,
    ) -> Tensor {
        let len = bytes.len();
        Tensor {
            name: name.into(),
            dtype,
            dims,
            storage: Storage::Owned(Arc::new(bytes)),
            start: 0,
            len,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.storage {
            Storage::Mapped(m, _) => m,
            Storage::Owned(v) => v,
        };
        &all[self.start..self.start + self.len]
    }

    /// Maps a file-backed tensor's pages into the process ahead of use (Linux's
    /// MADV_POPULATE_READ, in one call), so that the first pass over it does not stop at a page
    /// fault every 4 KB: for weights read in place every pass (a vision tower's F16 weights on the
    /// CPU: 1 GB, 200 000 faults, 2 s of a first image). Best effort: elsewhere, or on kernels
    /// older than 5.14, the pages fault in as they are read.
    pub fn prefault(&self) {
        #[cfg(target_os = "linux")]
        if let Storage::Mapped(map, true) = &self.storage {
            let _ = map.advise_range(memmap2::Advice::PopulateRead, self.start, self.len);
        }
    }

    pub fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// Values per row (the first GGML dimension).
    pub fn row_len(&self) -> usize {
        self.dims.first().copied().unwrap_or(1)
    }

    pub fn n_rows(&self) -> usize {
        self.dims.iter().skip(1).product()
    }

    pub fn row_bytes(&self) -> usize {
        self.row_len() / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// The whole tensor decoded to f32 (for small tensors: norms, biases).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.n_elements()];
        dequantize(self.dtype, self.bytes(), &mut out);
        out
    }

    /// Let the OS drop the pages of `range` (of this tensor's bytes) of the file mapping from the
    /// process's resident memory
    /// (after a backend has copied the tensor into its own layout). The bytes stay readable: a
    /// later read faults them in again from the file.
    pub fn release_pages(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Storage::Mapped(m, true) = &self.storage
            && range.end <= self.len
            && !range.is_empty()
        {
            // SAFETY: the mapping is a read-only file mapping, so dropping its pages does not
            // change what any reference reads. Page-rounding may drop a neighbour's pages too,
            // with the same effect. Failure only means the pages stay resident.
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.start + range.start,
                    range.len(),
                )
            };
        }
    }

    /// One row decoded to f32.
    pub fn row_to_f32(&self, row: usize, out: &mut [f32]) {
        let rb = self.row_bytes();
        dequantize(self.dtype, &self.bytes()[row * rb..(row + 1) * rb], out);
    }

    /// Rows `start..start + count` of this matrix as a tensor of their own, sharing its bytes
    /// (rows are whole blocks of any type). Used to split a fused projection (Phi-3's
    /// `attn_qkv`, `ffn_up`); the caller has checked that the rows exist.
    pub fn row_range(&self, name: impl Into<String>, start: usize, count: usize) -> Tensor {
        let rb = self.row_bytes();
        debug_assert!((start + count) * rb <= self.len);
        Tensor {
            name: name.into(),
            dtype: self.dtype,
            dims: vec![self.row_len(), count],
            storage: self.storage.clone(),
            start: self.start + start * rb,
            len: count * rb,
        }
    }

    /// Columns `start..start + count` of every row of this matrix as a tensor of its own, its
    /// bytes copied; None unless both ends fall on the type's block boundaries. Used to split a
    /// projection of concatenated inputs into one weight per input (the MTP block's `eh_proj`).
    pub fn column_range(
        &self,
        name: impl Into<String>,
        start: usize,
        count: usize,
    ) -> Option<Tensor> {
        let (block, block_bytes) = (self.dtype.block_len(), self.dtype.block_bytes());
        if !start.is_multiple_of(block)
            || !count.is_multiple_of(block)
            || start + count > self.row_len()
        {
            return None;
        }
        let (rb, from, len) = (
            self.row_bytes(),
            start / block * block_bytes,
            count / block * block_bytes,
        );
        let all = self.bytes();
        let mut bytes = Vec::with_capacity(self.n_rows() * len);
        for row in all.chunks_exact(rb) {
            bytes.extend_from_slice(&row[from..from + len]);
        }
        Some(Tensor::from_bytes(
            name,
            self.dtype,
            vec![count, self.n_rows()],
            bytes,
        ))
    }

    /// A tensor of the given rows of this one, in that order, its bytes copied (rows are whole
    /// blocks of any type). Used to separate the row groups of a fused projection.
    pub fn gather_rows(&self, name: impl Into<String>, rows: &[usize]) -> Tensor {
        let rb = self.row_bytes();
        let all = self.bytes();
        let mut bytes = Vec::with_capacity(rows.len() * rb);
        for &r in rows {
            bytes.extend_from_slice(&all[r * rb..(r + 1) * rb]);
        }
        Tensor::from_bytes(name, self.dtype, vec![self.row_len(), rows.len()], bytes)
    }
}
