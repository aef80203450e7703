//! Metadata keys that gguf-rs-lib refuses but llama.cpp writes: the library accepts only
//! lower_snake_case components, while an architecture named with a hyphen (`gpt-oss`) prefixes
//! its keys with it (`gpt-oss.expert_count`). Before the library reads a file, kiln walks the
//! metadata section itself to find such keys; the reader then serves their hyphens as
//! underscores, and the keys get their real names back once read.

/// Where the hyphens of the file's metadata keys are, by byte offset, and the keys as the
/// library will see them (hyphens as underscores) with their real names.
#[derive(Default)]
pub(super) struct HyphenatedKeys {
    pub offsets: Vec<usize>,
    pub renames: Vec<(String, String)>,
}

/// The hyphenated keys of the metadata of `bytes` (a GGUF file whose header has been checked).
/// A section that does not parse gives none: the library then reports what is wrong with it.
pub(super) fn find(bytes: &[u8]) -> HyphenatedKeys {
    let mut found = HyphenatedKeys::default();
    let mut walk = Walk { bytes, pos: 16 };
    let Some(count) = walk.u64() else {
        return found;
    };
    for _ in 0..count {
        let Some((start, key)) = walk.string() else {
            return HyphenatedKeys::default();
        };
        if key.contains(&b'-') {
            let real = String::from_utf8_lossy(key).into_owned();
            found.offsets.extend(
                key.iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'-')
                    .map(|(i, _)| start + i),
            );
            found.renames.push((real.replace('-', "_"), real));
        }
        let Some(ty) = walk.u32() else {
            return HyphenatedKeys::default();
        };
        if walk.skip_value(ty, 0).is_none() {
            return HyphenatedKeys::default();
        }
    }
    found
}

struct Walk<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Walk<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A length-prefixed string: its offset and bytes.
    fn string(&mut self) -> Option<(usize, &[u8])> {
        let len = usize::try_from(self.u64()?).ok()?;
        let start = self.pos;
        let end = start.checked_add(len)?;
        let s = self.bytes.get(start..end)?;
        self.pos = end;
        Some((start, s))
    }

    /// Past one value of GGUF type `ty` (arrays nest at most a few levels).
    fn skip_value(&mut self, ty: u32, depth: usize) -> Option<()> {
        let fixed = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => return self.string().map(|_| ()),
            9 if depth < 4 => {
                let inner = self.u32()?;
                let n = self.u64()?;
                return match inner {
                    0 | 1 | 7 => self.take(usize::try_from(n).ok()?).map(|_| ()),
                    2 | 3 => self
                        .take(usize::try_from(n.checked_mul(2)?).ok()?)
                        .map(|_| ()),
                    4..=6 => self
                        .take(usize::try_from(n.checked_mul(4)?).ok()?)
                        .map(|_| ()),
                    10..=12 => self
                        .take(usize::try_from(n.checked_mul(8)?).ok()?)
                        .map(|_| ()),
                    _ => {
                        // Each element at least as long as its own header: bounded by the file.
                        for _ in 0..n {
                            self.skip_value(inner, depth + 1)?;
                        }
                        Some(())
                    }
                };
            }
            _ => return None,
        };
        self.take(fixed).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(out: &mut Vec<u8>, key: &str, ty: u32, value: &[u8]) {
        out.extend((key.len() as u64).to_le_bytes());
        out.extend(key.as_bytes());
        out.extend(ty.to_le_bytes());
        out.extend(value);
    }

    #[test]
    fn hyphens_are_found_in_keys_and_not_in_values() {
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.extend(3u64.to_le_bytes());
        let mut s = (7u64).to_le_bytes().to_vec();
        s.extend(b"gpt-oss");
        kv(&mut f, "general.architecture", 8, &s);
        let mut arr = 8u32.to_le_bytes().to_vec();
        arr.extend(1u64.to_le_bytes());
        arr.extend(&s);
        kv(&mut f, "x.list", 9, &arr);
        let key_at = f.len() + 8;
        kv(&mut f, "gpt-oss.block_count", 4, &24u32.to_le_bytes());
        let found = find(&f);
        assert_eq!(found.offsets, vec![key_at + 3]);
        assert_eq!(
            found.renames,
            vec![(
                "gpt_oss.block_count".to_string(),
                "gpt-oss.block_count".to_string()
            )]
        );
        // A truncated section gives nothing.
        assert!(find(&f[..f.len() - 2]).offsets.is_empty());
    }
}
