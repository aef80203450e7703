//! Device memory: activation buffers, KV caches and weights, each a `DeviceBuf` that counts its
//! bytes against the device (and `KILN_WGPU_MAX_MEMORY`) and, when dropped, tells the bind-group
//! cache to forget it. Weights are uploaded once from the file mapping in their GGUF block layout;
//! a matrix larger than one binding may cover is split by whole rows into parts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::device::Gpu;
use super::pipelines::{CacheKernels, MatrixKernels};
use crate::backend::CacheType;
use crate::error::{Error, Result};
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

/// Bookkeeping shared by every buffer of one backend.
#[derive(Default)]
pub struct Memory {
    next_id: AtomicU64,
    pub allocated: AtomicU64,
    /// Ids of dropped buffers, for the bind-group cache to purge.
    pub dead: Mutex<Vec<u64>>,
    /// Whether `dead` holds any, set and cleared under its lock: the stream, taken several times
    /// a dispatch, looks here instead of taking the lock (that lock pair was 8 % of a decode
    /// step's host time on the no-op adapter).
    pub any_dead: AtomicBool,
}

/// A device buffer with an identity (for the bind-group cache) and an accounted size.
pub struct DeviceBuf {
    pub buf: wgpu::Buffer,
    pub id: u64,
    bytes: u64,
    memory: Arc<Memory>,
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        self.memory
            .allocated
            .fetch_sub(self.bytes, Ordering::Relaxed);
        let mut dead = self.memory.dead.lock().unwrap_or_else(|p| p.into_inner());
        dead.push(self.id);
        self.memory.any_dead.store(true, Ordering::Relaxed);
        // No `destroy()`: commands recorded but not yet submitted may still use the buffer; wgpu
        // frees it when the last of them is done.
    }
}

/// The buffer and id a dispatch binds.
pub fn bind(d: &DeviceBuf) -> (&wgpu::Buffer, u64) {
    (&d.buf, d.id)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// A storage buffer of `bytes` (rounded up to 4), zeroed, or with `contents`.
pub fn create(
    gpu: &Gpu,
    memory: &Arc<Memory>,
    what: &str,
    bytes: u64,
    contents: Option<&[u8]>,
) -> Result<DeviceBuf> {
    let size = bytes.max(4).next_multiple_of(4);
    if size > gpu.max_binding {
        return Err(Error::Unsupported(format!(
            "{what} needs a {:.1} MiB buffer, more than the GPU ({}) can bind ({:.1} MiB); try --backend cpu",
            mib(size),
            gpu.info.name,
            mib(gpu.max_binding)
        )));
    }
    let before = memory.allocated.load(Ordering::Relaxed);
    if let Some(cap) = gpu.max_memory
        && before + size > cap
    {
        return Err(Error::Unsupported(format!(
            "{what} does not fit in GPU memory: {:.1} MiB are in use and it needs {:.1} MiB more, \
             beyond the {:.1} MiB allowed (KILN_WGPU_MAX_MEMORY); keep layers on the CPU \
             (-ngl with fewer layers, or -ngl auto) or use --backend cpu",
            mib(before),
            mib(size),
            mib(cap)
        )));
    }
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let buf = gpu.checked(what, || {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage,
            mapped_at_creation: contents.is_some(),
        })
    })?;
    if let Some(data) = contents {
        let mut view = buf
            .slice(..)
            .get_mapped_range_mut()
            .map_err(|e| Error::Unsupported(format!("cannot write {what} to the GPU: {e}")))?;
        view.slice(..data.len()).copy_from_slice(data);
        drop(view);
        buf.unmap();
    }
    memory.allocated.fetch_add(size, Ordering::Relaxed);
    Ok(DeviceBuf {
        buf,
        id: memory.next_id.fetch_add(1, Ordering::Relaxed),
        bytes: size,
        memory: memory.clone(),
    })
}

/// An f32 activation buffer.
pub struct GpuBuffer {
    pub dev: DeviceBuf,
    pub len: usize,
}

/// A key or value cache of `len` values: f32 values, f16 pairs packed into u32 words, or q8_0
/// quants and scales (shaders/q8.wgsl), each run of `rotation` values stored Hadamard-rotated
/// (1: none; see `CoreOps::cache`).
pub struct GpuCache {
    pub dev: DeviceBuf,
    pub len: usize,
    pub ty: CacheType,
    pub rotation: usize,
    pub kernels: CacheKernels,
}

/// Rows `first_row..first_row + rows` of a matrix, in one buffer.
pub struct Part {
    pub dev: DeviceBuf,
    pub first_row: usize,
    pub rows: usize,
}

/// A weight matrix in its stored type.
pub struct Matrix {
    pub dtype: GgmlType,
    pub cols: usize,
    pub rows: usize,
    pub row_bytes: usize,
    pub parts: Vec<Part>,
    /// Shared: a vector weight is the size of its buffer, not of a matrix's kernel slots, and a
    /// recorded mat-vec may hold them (`Projection`).
    pub kernels: Arc<MatrixKernels>,
}

pub enum GpuWeight {
    /// A vector (norm weight, bias), decoded to f32 at load.
    Vector {
        dev: DeviceBuf,
        len: usize,
    },
    Matrix(Matrix),
}

impl GpuWeight {
    pub fn matrix(&self) -> Option<&Matrix> {
        match self {
            GpuWeight::Matrix(m) => Some(m),
            GpuWeight::Vector { .. } => None,
        }
    }
}

/// The matrix types the kernels read (the CPU's, less the activation-only Q8_1 and Q8_K).
pub const MATRIX_TYPES: [GgmlType; 26] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::Q1_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// Upload a tensor: vectors as f32, matrices as stored, split by rows to fit one binding.
pub fn upload_weight(gpu: &Gpu, memory: &Arc<Memory>, t: &Tensor) -> Result<GpuWeight> {
    if t.dims.len() == 1 {
        let values = t.to_f32();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let dev = create(gpu, memory, &t.name, bytes.len() as u64, Some(&bytes))?;
        return Ok(GpuWeight::Vector {
            dev,
            len: values.len(),
        });
    }
    if !MATRIX_TYPES.contains(&t.dtype) {
        return Err(Error::Unsupported(format!(
            "tensor '{}' is {}, which the GPU backend does not read; try --backend cpu",
            t.name, t.dtype
        )));
    }
    let (cols, rows, stored_row_bytes) = (t.row_len(), t.n_rows(), t.row_bytes());
    // The kernels read rows in runs of 16 values. Block types always hold whole runs; a float
    // row of another width (Qwen3.5 MoE's hidden size of 40) is padded with zeros to the next
    // run, and the kernels stop reading activations at `cols`.
    let row_bytes = if cols.is_multiple_of(16) {
        stored_row_bytes
    } else if t.dtype.block_len() == 1 {
        cols.next_multiple_of(16) * stored_row_bytes / cols
    } else {
        return Err(Error::Unsupported(format!(
            "tensor '{}' has rows of {cols} values; the GPU kernels need a multiple of 16; try --backend cpu",
            t.name
        )));
    };
    // Four spare bytes (and up to four more, to whole 8-byte units) let the kernels read a word
    // past a 2-byte-aligned end.
    let rows_per_part =
        ((gpu.weight_binding as usize).saturating_sub(8) / row_bytes.max(1)).min(rows);
    if rows_per_part == 0 {
        return Err(Error::Unsupported(format!(
            "a row of tensor '{}' takes {row_bytes} bytes, more than the GPU can bind ({} bytes); try --backend cpu",
            t.name, gpu.weight_binding
        )));
    }
    let data: std::borrow::Cow<[u8]> = if row_bytes == stored_row_bytes {
        t.bytes().into()
    } else {
        let mut padded = vec![0u8; rows * row_bytes];
        for (dst, src) in padded
            .chunks_mut(row_bytes)
            .zip(t.bytes().chunks(stored_row_bytes))
        {
            dst[..stored_row_bytes].copy_from_slice(src);
        }
        padded.into()
    };
    let mut parts = Vec::new();
    let mut first = 0;
    while first < rows {
        let n = rows_per_part.min(rows - first);
        let bytes = &data[first * row_bytes..(first + n) * row_bytes];
        let what = if rows_per_part < rows {
            format!("rows {first}..{} of {}", first + n, t.name)
        } else {
            t.name.clone()
        };
        // Whole 8-byte units, so the kernels that read weights 8 bytes at a time (W2) reach the
        // spare word too.
        let size = (bytes.len() as u64 + 4).next_multiple_of(8);
        let dev = create(gpu, memory, &what, size, Some(bytes))?;
        parts.push(Part {
            dev,
            first_row: first,
            rows: n,
        });
        first += n;
    }
    Ok(GpuWeight::Matrix(Matrix {
        dtype: t.dtype,
        cols,
        rows,
        row_bytes,
        parts,
        kernels: Arc::default(),
    }))
}
