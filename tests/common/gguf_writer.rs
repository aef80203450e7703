//! A minimal GGUF v3 writer for tests: builds valid files (synthetic models) and, by patching the
//! bytes afterwards, malformed ones.

use gguf_rs_lib::format::metadata::{MetadataArray, MetadataValue};
use gguf_rs_lib::format::types::GGUFValueType;

pub struct GgufWriter {
    pub version: u32,
    pub alignment: usize,
    pub kv: Vec<(String, MetadataValue)>,
    /// name, GGML type id, GGML-order dims, data
    pub tensors: Vec<(String, u32, Vec<u64>, Vec<u8>)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter {
            version: 3,
            alignment: 32,
            kv: Vec::new(),
            tensors: Vec::new(),
        }
    }
}

pub fn string(s: &str) -> MetadataValue {
    MetadataValue::String(s.to_string())
}

pub fn array(element_type: GGUFValueType, values: Vec<MetadataValue>) -> MetadataValue {
    MetadataValue::Array(Box::new(MetadataArray {
        element_type,
        length: values.len() as u64,
        values,
    }))
}

impl GgufWriter {
    pub fn kv(&mut self, key: &str, v: MetadataValue) -> &mut Self {
        self.kv.retain(|(k, _)| k != key);
        self.kv.push((key.to_string(), v));
        self
    }

    pub fn tensor(&mut self, name: &str, type_id: u32, dims: &[u64], data: Vec<u8>) -> &mut Self {
        self.tensors
            .push((name.to_string(), type_id, dims.to_vec(), data));
        self
    }

    pub fn f32_tensor(&mut self, name: &str, dims: &[u64], values: &[f32]) -> &mut Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, 0, dims, data)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (name, ty, dims, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len()).next_multiple_of(self.alignment);
        }
        let data_start = out.len().next_multiple_of(self.alignment);
        out.resize(data_start, 0);
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetadataValue) {
    match v {
        MetadataValue::U8(x) => out.push(*x),
        MetadataValue::I8(x) => out.push(*x as u8),
        MetadataValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::Bool(x) => out.push(*x as u8),
        MetadataValue::String(s) => put_str(out, s),
        MetadataValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::Array(a) => {
            out.extend_from_slice(&(a.element_type as u32).to_le_bytes());
            out.extend_from_slice(&(a.values.len() as u64).to_le_bytes());
            for x in &a.values {
                put_value(out, x);
            }
        }
    }
}
