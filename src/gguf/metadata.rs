//! Typed access to GGUF metadata. Numbers are accepted in any integer or float width (converters
//! differ in what they write); a value of the wrong kind is an error that names the key.

use gguf_rs_lib::format::metadata::{Metadata as RawMetadata, MetadataArray, MetadataValue};

use crate::error::{Error, Result};

pub struct Metadata {
    raw: RawMetadata,
}

impl Metadata {
    pub fn new(raw: RawMetadata) -> Self {
        Metadata { raw }
    }

    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.raw.get(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.raw.contains_key(key)
    }

    /// All keys, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.raw.keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        keys
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn alignment(&self) -> usize {
        self.raw.tensor_alignment().unwrap_or(32)
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.raw.get(key) {
            None => Ok(None),
            Some(MetadataValue::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_kind(key, "a string", v)),
        }
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>> {
        match self.raw.get(key) {
            None => Ok(None),
            Some(v) => integer(v)
                .and_then(|i| u64::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| wrong_kind(key, "a non-negative integer", v)),
        }
    }

    pub fn usize(&self, key: &str) -> Result<Option<usize>> {
        Ok(self.u64(key)?.map(|v| v.min(usize::MAX as u64) as usize))
    }

    pub fn f64(&self, key: &str) -> Result<Option<f64>> {
        match self.raw.get(key) {
            None => Ok(None),
            Some(v) => number(v)
                .map(Some)
                .ok_or_else(|| wrong_kind(key, "a number", v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.raw.get(key) {
            None => Ok(None),
            Some(MetadataValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => integer(v)
                .map(|i| Some(i != 0))
                .ok_or_else(|| wrong_kind(key, "a boolean", v)),
        }
    }

    fn array(&self, key: &str) -> Result<Option<&MetadataArray>> {
        match self.raw.get(key) {
            None => Ok(None),
            Some(MetadataValue::Array(a)) => Ok(Some(a)),
            Some(v) => Err(wrong_kind(key, "an array", v)),
        }
    }

    pub fn str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        a.values
            .iter()
            .map(|v| match v {
                MetadataValue::String(s) => Ok(s.as_str()),
                other => Err(wrong_kind(key, "an array of strings", other)),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    pub fn f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        a.values
            .iter()
            .map(|v| {
                number(v)
                    .map(|x| x as f32)
                    .ok_or_else(|| wrong_kind(key, "numbers", v))
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    pub fn i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        a.values
            .iter()
            .map(|v| integer(v).ok_or_else(|| wrong_kind(key, "integers", v)))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    pub fn bool_array(&self, key: &str) -> Result<Option<Vec<bool>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        a.values
            .iter()
            .map(|v| match v {
                MetadataValue::Bool(b) => Ok(*b),
                other => integer(other)
                    .map(|i| i != 0)
                    .ok_or_else(|| wrong_kind(key, "booleans", other)),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// A short human-readable rendering of a value (arrays abbreviated), for `kiln info`.
    pub fn display(&self, key: &str) -> String {
        self.raw.get(key).map(display_value).unwrap_or_default()
    }

    /// A JSON rendering of a value; long arrays are summarised as their length and type.
    pub fn to_json(&self, key: &str) -> serde_json::Value {
        self.raw
            .get(key)
            .map(|v| value_json(v, 0))
            .unwrap_or(serde_json::Value::Null)
    }
}

fn integer(v: &MetadataValue) -> Option<i64> {
    Some(match *v {
        MetadataValue::U8(x) => x as i64,
        MetadataValue::I8(x) => x as i64,
        MetadataValue::U16(x) => x as i64,
        MetadataValue::I16(x) => x as i64,
        MetadataValue::U32(x) => x as i64,
        MetadataValue::I32(x) => x as i64,
        MetadataValue::U64(x) => i64::try_from(x).ok()?,
        MetadataValue::I64(x) => x,
        _ => return None,
    })
}

fn number(v: &MetadataValue) -> Option<f64> {
    match *v {
        MetadataValue::F32(x) => Some(x as f64),
        MetadataValue::F64(x) => Some(x),
        _ => integer(v).map(|i| i as f64),
    }
}

fn kind_name(v: &MetadataValue) -> String {
    match v {
        MetadataValue::Array(a) => format!("array of {:?}", a.element_type),
        other => format!("{:?}", other.value_type()),
    }
}

fn wrong_kind(key: &str, expected: &str, found: &MetadataValue) -> Error {
    Error::Format(format!(
        "metadata key '{key}' should be {expected}, found {}",
        kind_name(found)
    ))
}

const MAX_SHOWN: usize = 8;

fn display_value(v: &MetadataValue) -> String {
    match v {
        MetadataValue::String(s) => {
            let one_line = s.replace('\n', "\\n");
            if one_line.chars().count() > 80 {
                let cut: String = one_line.chars().take(77).collect();
                format!("{cut:?}… ({} bytes)", s.len())
            } else {
                format!("{one_line:?}")
            }
        }
        MetadataValue::Array(a) => {
            let shown: Vec<String> = a.values.iter().take(MAX_SHOWN).map(display_value).collect();
            let more = if a.values.len() > MAX_SHOWN {
                ", …"
            } else {
                ""
            };
            format!(
                "[{}{}] ({} × {:?})",
                shown.join(", "),
                more,
                a.values.len(),
                a.element_type
            )
        }
        MetadataValue::Bool(b) => b.to_string(),
        MetadataValue::F32(x) => x.to_string(),
        MetadataValue::F64(x) => x.to_string(),
        other => integer(other).map(|i| i.to_string()).unwrap_or_default(),
    }
}

fn value_json(v: &MetadataValue, depth: usize) -> serde_json::Value {
    use serde_json::{Value, json};
    match v {
        MetadataValue::String(s) => Value::String(s.clone()),
        MetadataValue::Bool(b) => Value::Bool(*b),
        MetadataValue::F32(x) => json!(*x),
        MetadataValue::F64(x) => json!(*x),
        MetadataValue::Array(a) if a.values.len() > 64 || depth > 4 => json!({
            "array_of": format!("{:?}", a.element_type),
            "len": a.values.len(),
        }),
        MetadataValue::Array(a) => {
            Value::Array(a.values.iter().map(|x| value_json(x, depth + 1)).collect())
        }
        other => integer(other).map(|i| json!(i)).unwrap_or(Value::Null),
    }
}
