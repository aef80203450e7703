//! GGUF files: the header, metadata and tensor descriptors are parsed by gguf-rs-lib from the memory
//! mapping; tensor data stays in the mapping and is handed out as byte ranges, never copied.
//!
//! Everything in the file is untrusted. gguf-rs-lib bounds its own allocations (metadata budgets,
//! descriptor ranges); on top of that this module checks what kiln relies on: versions 2 and 3 (they
//! share a layout; gguf-rs-lib reads only 3, so a version-2 header is presented to it as 3), tensor
//! types kiln can compute with, element counts that do not overflow, whole blocks per row, and every
//! tensor's bytes inside the file. Each error names the file. Keys named after a hyphenated
//! architecture (`gpt-oss.…`), which gguf-rs-lib refuses, are read under another name and renamed
//! back (key_names.rs).

pub mod dequant;
pub mod iq;
mod iq_tables;
mod key_names;
pub mod metadata;
pub mod types;

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gguf_rs_lib::reader::file_reader::{GGUFFileReader, GGUFReaderConfig};
use memmap2::Mmap;

pub use metadata::Metadata;
pub use types::{GgmlType, ggml_type_name};

use crate::error::{Error, Result};

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// One tensor descriptor, validated: its bytes lie inside the file.
#[derive(Debug, Clone)]
pub struct GgufTensor {
    pub name: String,
    pub ggml_type: GgmlType,
    /// GGML order: `dims[0]` is the row length (the fastest-varying dimension).
    pub dims: Vec<u64>,
    /// Absolute byte offset of the data in the file.
    pub offset: usize,
    pub nbytes: usize,
}

impl GgufTensor {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// An opened GGUF file: metadata, tensor descriptors and the mapping that holds the data.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<GgufTensor>,
    pub alignment: u64,
    pub map: Arc<Mmap>,
    /// Whether `map` maps a file (rather than anonymous memory holding a copy): only then may a
    /// backend drop its pages once it has copied the weights (`Tensor::release_pages`).
    pub file_backed: bool,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the mapping is read-only; kiln never writes model files. Another process truncating
        // the file while it is mapped is outside what any mmap-based loader can defend against.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let mut g = Self::from_map(path, Arc::new(map))?;
        g.file_backed = true;
        Ok(g)
    }

    /// Parse GGUF bytes held in memory (synthetic models, tests). They are copied into an anonymous
    /// mapping so that every tensor view works the same way; `label` names them in errors.
    pub fn from_bytes(label: &Path, bytes: &[u8]) -> Result<GgufFile> {
        if bytes.is_empty() {
            return Err(Error::invalid(label, "the file is empty"));
        }
        let mut anon = memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| Error::io(label, e))?;
        anon.copy_from_slice(bytes);
        let map = anon.make_read_only().map_err(|e| Error::io(label, e))?;
        Self::from_map(label, Arc::new(map))
    }

    pub fn from_map(path: &Path, map: Arc<Mmap>) -> Result<GgufFile> {
        let bad = |reason: String| Error::invalid(path, reason);
        let bytes: &[u8] = &map;
        if bytes.len() < 24 {
            return Err(bad(format!(
                "only {} bytes: too short for a GGUF header (24 bytes)",
                bytes.len()
            )));
        }
        if &bytes[0..4] != GGUF_MAGIC {
            return Err(bad(format!(
                "not a GGUF file (magic bytes {:02x?}, expected \"GGUF\")",
                &bytes[0..4]
            )));
        }
        let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        match version {
            2 | 3 => {}
            1 => {
                return Err(bad(
                    "GGUF version 1 is obsolete; re-convert the model".into()
                ));
            }
            v if v.swap_bytes() <= 3 => {
                return Err(bad("big-endian GGUF files are not supported".into()));
            }
            v => {
                return Err(bad(format!(
                    "unsupported GGUF version {v} (kiln reads 2 and 3)"
                )));
            }
        }

        let file_size = bytes.len();
        let config = GGUFReaderConfig {
            // Metadata cannot be larger than the file that holds it.
            max_metadata_size: file_size,
            ..GGUFReaderConfig::default()
        };
        let hyphenated = key_names::find(bytes);
        let reader =
            GGUFFileReader::with_config(AsVersion3::new(bytes, &hyphenated.offsets), config)
                .map_err(|e| bad(describe_gguf_error(e)))?;
        let mut raw = reader.metadata().clone();
        for (read_as, real) in hyphenated.renames {
            if let Some(v) = raw.remove(&read_as) {
                raw.insert(real, v);
            }
        }
        let metadata = Metadata::new(raw);
        let alignment = reader.tensor_alignment();
        // Tensor data starts after the descriptors, at the next multiple of the alignment.
        let data_start = reader.tensor_data_offset();

        let mut tensors = Vec::with_capacity(reader.tensor_count());
        for info in reader.tensor_infos() {
            let name = info.name().to_string();
            let type_id = info.tensor_type() as u32;
            let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
                let known: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
                bad(format!(
                    "tensor '{name}' has type {}, which kiln does not support (it reads {})",
                    ggml_type_name(type_id),
                    known.join(", ")
                ))
            })?;
            let dims: Vec<u64> = info.shape().dims().to_vec();
            let n: u64 = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| bad(format!("tensor '{name}': dimensions {dims:?} overflow")))?;
            if !dims[0].is_multiple_of(ggml_type.block_len() as u64) {
                return Err(bad(format!(
                    "tensor '{name}': row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    ggml_type,
                    ggml_type.block_len()
                )));
            }
            let nbytes = ggml_type
                .bytes_for(n)
                .ok_or_else(|| bad(format!("tensor '{name}': byte size overflows")))?;
            let start = data_start
                .checked_add(info.data_offset())
                .ok_or_else(|| bad(format!("tensor '{name}': offset overflows")))?;
            let end = start.checked_add(nbytes);
            if end.is_none_or(|end| end > file_size as u64) {
                return Err(bad(format!(
                    "tensor '{name}' ({nbytes} bytes at offset {start}) extends past the end of \
                     the file ({file_size} bytes); the file is truncated or corrupt"
                )));
            }
            tensors.push(GgufTensor {
                name,
                ggml_type,
                dims,
                offset: start as usize,
                nbytes: nbytes as usize,
            });
        }

        Ok(GgufFile {
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
            alignment,
            map,
            file_backed: false,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of a tensor, inside the mapping.
    pub fn tensor_bytes(&self, t: &GgufTensor) -> &[u8] {
        &self.map[t.offset..t.offset + t.nbytes]
    }

    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }
}

fn describe_gguf_error(e: gguf_rs_lib::GGUFError) -> String {
    match e {
        gguf_rs_lib::GGUFError::UnexpectedEof => {
            "the file ends inside its header, metadata or tensor descriptors (truncated?)".into()
        }
        gguf_rs_lib::GGUFError::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
            "the file ends inside its header, metadata or tensor descriptors (truncated?)".into()
        }
        other => other.to_string(),
    }
}

/// A reader over the mapped bytes that reports GGUF version 3 for a version-2 file (the two
/// versions share one layout; v3 only added big-endian files, which kiln rejects earlier), and
/// serves the bytes at `hyphens` (in metadata keys) as underscores.
struct AsVersion3<'a> {
    bytes: &'a [u8],
    hyphens: &'a [usize],
    pos: u64,
}

impl<'a> AsVersion3<'a> {
    fn new(bytes: &'a [u8], hyphens: &'a [usize]) -> Self {
        AsVersion3 {
            bytes,
            hyphens,
            pos: 0,
        }
    }
}

impl Read for AsVersion3<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = self.bytes.len() as u64;
        if self.pos >= len {
            return Ok(0);
        }
        let start = self.pos as usize;
        let n = buf.len().min(self.bytes.len() - start);
        buf[..n].copy_from_slice(&self.bytes[start..start + n]);
        // Byte 4 is the low byte of the little-endian version field.
        if start <= 4 && start + n > 4 && self.bytes[4] == 2 {
            buf[4 - start] = 3;
        }
        for &h in self.hyphens {
            if (start..start + n).contains(&h) {
                buf[h - start] = b'_';
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for AsVersion3<'_> {
    fn seek(&mut self, from: SeekFrom) -> io::Result<u64> {
        let len = self.bytes.len() as i128;
        let target = match from {
            SeekFrom::Start(p) => p as i128,
            SeekFrom::End(d) => len + d as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
        };
        if target < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before start",
            ));
        }
        self.pos = target as u64;
        Ok(self.pos)
    }
}
