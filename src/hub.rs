//! Models by name from the Hugging Face hub: `hf:OWNER/REPO[:QUANT]` or `hf:OWNER/REPO/FILE.gguf`,
//! downloaded with the `hf-hub` crate into the standard Hugging Face cache, so Python tools and
//! kiln share one copy.
//!
//! - The cache is `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`
//!   (`models--OWNER--REPO/{blobs,snapshots/COMMIT,refs/main}`, as huggingface_hub lays it out).
//! - `HF_ENDPOINT` replaces `https://huggingface.co`; `HF_TOKEN` (else the cache's `token` file)
//!   is sent as a bearer token; `HF_HUB_OFFLINE=1` uses the cache only.
//! - A repo with GGUF files gives one of them: the one named, the one whose name carries
//!   `:QUANT`, the only one, or `Q4_K_M` (llama.cpp's and ollama's default) among several. Several
//!   matches or none is an error listing what the repo has. A repo without GGUF files gives a
//!   Hugging Face directory: config.json, the tokenizer files and the safetensors (all shards).
//! - Downloads resume from the partial file a cut connection left (hf-hub's `.part` file, with
//!   HTTP ranges), and each file is checked against the checksum the hub reports (its etag: the
//!   SHA-256 of LFS files, the git blob SHA-1 of small ones); a mismatch deletes it.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{Api, ApiBuilder, ApiError, ApiRepo};
use hf_hub::{Cache, Repo};
use sha1::Digest;

use crate::error::{Error, Result};

const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The quantization picked when a repo has several GGUF files and none is asked for.
const DEFAULT_QUANT: &str = "Q4_K_M";
/// Files of a safetensors model besides the weights; those present are downloaded.
const HF_DIR_FILES: [&str; 5] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
];

/// A model named on the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModel {
    /// OWNER/REPO.
    pub repo: String,
    pub pick: Pick,
}

/// Which file of the repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// The repo's only GGUF file, its Q4_K_M, or its safetensors model.
    Default,
    /// The GGUF file whose name carries this quantization (`Q4_K_M`, `q8_0`).
    Quant(String),
    /// This file.
    File(String),
}

/// Where and how to reach the hub, from the environment.
struct HubEnv {
    endpoint: String,
    cache: Cache,
    token: Option<String>,
    offline: bool,
}

impl HubEnv {
    fn from_env() -> HubEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let cache = match var("HF_HUB_CACHE") {
            Some(dir) => Cache::new(dir.into()),
            None => match var("HF_HOME") {
                Some(_) => Cache::from_env(),
                None => match dirs::home_dir() {
                    Some(home) => Cache::new(home.join(".cache/huggingface/hub")),
                    None => Cache::new(PathBuf::from(".cache/huggingface/hub")),
                },
            },
        };
        let token = var("HF_TOKEN").or_else(|| cache.token());
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        HubEnv {
            endpoint: var("HF_ENDPOINT")
                .map(|e| e.trim_end_matches('/').to_string())
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            cache,
            token,
            offline,
        }
    }
}

fn hub_err(msg: impl Into<String>) -> Error {
    Error::Hub(msg.into())
}

impl HubModel {
    /// `Some` when `name` starts with `hf:`; the error says what a valid name looks like.
    pub fn parse(name: &str) -> Option<Result<HubModel, String>> {
        let rest = name.strip_prefix("hf:")?;
        let usage = || {
            format!(
                "{name:?} is not a hub model name: use hf:OWNER/REPO, hf:OWNER/REPO:QUANT or \
                 hf:OWNER/REPO/FILE.gguf"
            )
        };
        let (path, quant) = match rest.split_once(':') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let mut parts = path.splitn(3, '/');
        let (Some(owner), Some(repo)) = (parts.next(), parts.next()) else {
            return Some(Err(usage()));
        };
        let file = parts.next();
        let valid = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        if !valid(owner) || !valid(repo) {
            return Some(Err(usage()));
        }
        let pick = match (quant, file) {
            (Some(_), Some(_)) => return Some(Err(usage())),
            (Some(q), None) if valid(q) => Pick::Quant(q.to_string()),
            (Some(_), None) => return Some(Err(usage())),
            (None, Some(f))
                if !f.is_empty() && !f.split('/').any(|c| c.is_empty() || c == "..") =>
            {
                Pick::File(f.to_string())
            }
            (None, Some(_)) => return Some(Err(usage())),
            (None, None) => Pick::Default,
        };
        Some(Ok(HubModel {
            repo: format!("{owner}/{repo}"),
            pick,
        }))
    }

    fn display(&self) -> String {
        match &self.pick {
            Pick::Default => format!("hf:{}", self.repo),
            Pick::Quant(q) => format!("hf:{}:{q}", self.repo),
            Pick::File(f) => format!("hf:{}/{f}", self.repo),
        }
    }

    /// The model's local path, downloading what the cache lacks: a GGUF file, or the snapshot
    /// directory of a safetensors model.
    pub fn fetch(&self) -> Result<PathBuf> {
        let l = self.listing()?;
        let choice = self.choose(&l.files, l.where_)?;
        choice.local(&l.cached, l.online(), &self.repo)
    }

    /// The repo's multimodal projector (an `mmproj*.gguf`), downloaded if the cache lacks it, as
    /// llama.cpp's `-hf` fetches it with the model: the only one, else of several the F16 one
    /// (then BF16, F32); None when the repo has none. Several without one of those is an error
    /// listing them.
    pub fn fetch_mmproj(&self) -> Result<Option<PathBuf>> {
        let l = self.listing()?;
        let projectors: Vec<&String> = l.files.iter().filter(|f| is_mmproj(f)).collect();
        let name = match projectors.as_slice() {
            [] => return Ok(None),
            [one] => (*one).clone(),
            several => match ["F16", "BF16", "F32"]
                .iter()
                .find_map(|q| several.iter().find(|f| names_quant(f, q)))
            {
                Some(f) => (*f).clone(),
                None => {
                    return Err(hub_err(format!(
                        "{} has several projectors {}: {}; choose one with --mmproj",
                        self.repo,
                        l.where_,
                        several
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            },
        };
        Choice::Gguf(name)
            .local(&l.cached, l.online(), &self.repo)
            .map(Some)
    }

    /// The hub model whose Hugging Face cache snapshot holds `path`
    /// (`…/models--OWNER--REPO/snapshots/COMMIT/FILE`), if it is in one.
    pub fn of_cached_file(path: &Path) -> Option<HubModel> {
        // The file may sit in a folder of the repo (`snapshots/COMMIT/Q4_K_M/FILE`).
        let snapshot = path
            .ancestors()
            .skip(1)
            .find(|a| a.parent().and_then(Path::file_name) == Some("snapshots".as_ref()))?;
        let name = snapshot.parent()?.parent()?.file_name()?.to_str()?;
        let (owner, repo) = name.strip_prefix("models--")?.split_once("--")?;
        let file = path.strip_prefix(snapshot).ok()?.to_str()?.to_string();
        Some(HubModel {
            repo: format!("{owner}/{repo}"),
            pick: Pick::File(file),
        })
    }

    /// The repo's files: from the hub, or from the cache when offline or the hub cannot be
    /// reached (with a warning).
    fn listing(&self) -> Result<Listing> {
        let env = HubEnv::from_env();
        let repo = Repo::model(self.repo.clone());
        let cached = CachedRepo::new(&env.cache, &repo);
        let from_cache = |cached: CachedRepo| -> Result<Listing> {
            match cached.files() {
                Some(files) => Ok(Listing {
                    files,
                    where_: "in the cache",
                    cached,
                    online: None,
                }),
                None => Err(hub_err(format!(
                    "HF_HUB_OFFLINE is set and {} is not in the Hugging Face cache ({})",
                    self.repo,
                    cached.dir.display()
                ))),
            }
        };
        if env.offline {
            return from_cache(cached);
        }

        let api = ApiBuilder::from_cache(env.cache.clone())
            .with_endpoint(env.endpoint.clone())
            .with_token(env.token.clone())
            .with_progress(false)
            .with_retries(3)
            .build()
            .map_err(|e| hub_err(format!("cannot set up the hub client: {e}")))?;
        let api_repo = api.repo(repo.clone());
        let info_url = format!("{}/api/models/{}/revision/main", env.endpoint, self.repo);
        let files: Vec<String> = match api_repo.info() {
            Ok(info) => info.siblings.into_iter().map(|s| s.rfilename).collect(),
            Err(e) => match status(&e) {
                Some(404) => {
                    return Err(hub_err(format!(
                        "{} was not found on the hub ({info_url} answered 404 Not Found)",
                        self.repo
                    )));
                }
                Some(401 | 403) => {
                    return Err(hub_err(format!(
                        "{} needs access ({info_url} answered {}): accept its terms on the hub \
                         and set HF_TOKEN",
                        self.repo,
                        status(&e).unwrap_or_default()
                    )));
                }
                Some(code) => {
                    return Err(hub_err(format!("{info_url} answered HTTP {code}")));
                }
                // No network: what the cache holds still serves.
                None => {
                    if cached.files().is_none() {
                        return Err(hub_err(format!("cannot reach {info_url}: {e}")));
                    }
                    eprintln!(
                        "warning: cannot reach {info_url} ({e}); using the cached copy of {}",
                        self.repo
                    );
                    return from_cache(cached);
                }
            },
        };
        Ok(Listing {
            files,
            where_: "on the hub",
            cached,
            online: Some((api, api_repo)),
        })
    }

    /// The file(s) to fetch among the repo's `files`.
    fn choose(&self, files: &[String], where_: &str) -> Result<Choice> {
        // A repo's projectors are not models (`fetch_mmproj` takes them).
        let ggufs: Vec<&String> = files
            .iter()
            .filter(|f| f.ends_with(".gguf") && !is_mmproj(f))
            .collect();
        let list = |names: &[&String]| {
            names
                .iter()
                .map(|s| format!("  {s}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let gguf = |name: &String| -> Result<Choice> {
            if is_split_part(name) {
                return Err(hub_err(format!(
                    "{name} is one part of a split GGUF file, which kiln does not read yet; \
                     merge the parts with llama-gguf-split --merge"
                )));
            }
            Ok(Choice::Gguf(name.clone()))
        };
        match &self.pick {
            Pick::File(f) => match files.iter().find(|x| *x == f) {
                Some(f) if is_mmproj(f) => Err(hub_err(format!(
                    "{f} is a multimodal projector, not a model: give it with --mmproj"
                ))),
                Some(f) => {
                    if f.ends_with(".gguf") {
                        gguf(f)
                    } else {
                        Err(hub_err(format!(
                            "{f} is not a GGUF file; name a .gguf file"
                        )))
                    }
                }
                None => Err(hub_err(format!(
                    "{} has no file {f} {where_}; its GGUF files:\n{}",
                    self.repo,
                    list(&ggufs)
                ))),
            },
            Pick::Quant(q) => {
                let matches: Vec<&String> = ggufs
                    .iter()
                    .copied()
                    .filter(|f| names_quant(f, q))
                    .collect();
                match matches.as_slice() {
                    [one] => gguf(one),
                    [] => Err(hub_err(format!(
                        "{} has no GGUF file for {q} {where_}; it has:\n{}",
                        self.repo,
                        if ggufs.is_empty() {
                            "  (no GGUF files)".to_string()
                        } else {
                            list(&ggufs)
                        }
                    ))),
                    several => Err(hub_err(format!(
                        "several GGUF files of {} match {q}:\n{}\nname one: hf:{}/FILE",
                        self.repo,
                        list(several),
                        self.repo
                    ))),
                }
            }
            Pick::Default => {
                if let [one] = ggufs.as_slice() {
                    return gguf(one);
                }
                if !ggufs.is_empty() {
                    let default: Vec<&String> = ggufs
                        .iter()
                        .copied()
                        .filter(|f| names_quant(f, DEFAULT_QUANT))
                        .collect();
                    if let [one] = default.as_slice() {
                        return gguf(one);
                    }
                    return Err(hub_err(format!(
                        "{} has several GGUF files {where_}:\n{}\npick one: {}:QUANT or {}/FILE",
                        self.repo,
                        list(&ggufs),
                        self.display(),
                        self.display()
                    )));
                }
                let has = |name: &str| files.iter().any(|f| f == name);
                let weights = if has("model.safetensors.index.json") {
                    Weights::Sharded
                } else if has("model.safetensors") {
                    Weights::Single
                } else {
                    return Err(hub_err(format!(
                        "{} has neither GGUF files nor model.safetensors {where_}; it has:\n{}",
                        self.repo,
                        list(&files.iter().collect::<Vec<_>>())
                    )));
                };
                let mut wanted: Vec<String> = HF_DIR_FILES
                    .iter()
                    .filter(|f| has(f))
                    .map(|f| f.to_string())
                    .collect();
                for required in ["config.json", "tokenizer.json"] {
                    if !has(required) {
                        return Err(hub_err(format!(
                            "{} has safetensors but no {required} {where_}",
                            self.repo
                        )));
                    }
                }
                wanted.sort();
                Ok(Choice::HfDir {
                    files: wanted,
                    weights,
                })
            }
        }
    }
}

/// `name` carries the quantization `quant` as a whole word (`Q4_K` does not match `Q4_K_M`).
fn names_quant(name: &str, quant: &str) -> bool {
    let (name, quant) = (name.to_ascii_uppercase(), quant.to_ascii_uppercase());
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    name.match_indices(&quant).any(|(i, _)| {
        !word(name[..i].chars().next_back()) && !word(name[i + quant.len()..].chars().next())
    })
}

/// A multimodal projector by llama.cpp's naming: `mmproj*.gguf` (in any folder of the repo).
fn is_mmproj(name: &str) -> bool {
    let file = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    file.starts_with("mmproj") && file.ends_with(".gguf")
}

/// `…-00001-of-00003.gguf`.
fn is_split_part(name: &str) -> bool {
    let stem = name.trim_end_matches(".gguf");
    let parts: Vec<&str> = stem.rsplitn(3, '-').collect();
    parts.len() == 3
        && parts[1] == "of"
        && parts[0].len() == 5
        && parts[0].chars().all(|c| c.is_ascii_digit())
        && parts[2].len() >= 5
        && parts[2][parts[2].len() - 5..]
            .chars()
            .all(|c| c.is_ascii_digit())
}

enum Weights {
    Single,
    Sharded,
}

/// A repo's files and where they come from.
struct Listing {
    files: Vec<String>,
    /// "on the hub" or "in the cache", for messages.
    where_: &'static str,
    cached: CachedRepo,
    /// The hub client, when the listing came from the hub.
    online: Option<(Api, ApiRepo)>,
}

impl Listing {
    fn online(&self) -> Option<(&Api, &ApiRepo)> {
        self.online.as_ref().map(|(a, r)| (a, r))
    }
}

/// What to fetch.
enum Choice {
    Gguf(String),
    HfDir {
        files: Vec<String>,
        weights: Weights,
    },
}

impl Choice {
    /// Fetch (or find in the cache) and return the local path.
    fn local(
        &self,
        cached: &CachedRepo,
        online: Option<(&Api, &ApiRepo)>,
        repo: &str,
    ) -> Result<PathBuf> {
        let get = |file: &str| -> Result<PathBuf> {
            if let Some(p) = cached.get(file) {
                return Ok(p);
            }
            match online {
                Some((api, api_repo)) => download(api, api_repo, file, repo),
                None => Err(hub_err(format!(
                    "{file} of {repo} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE \
                     is set (or the hub cannot be reached)",
                    cached.dir.display()
                ))),
            }
        };
        match self {
            Choice::Gguf(file) => get(file),
            Choice::HfDir { files, weights } => {
                let mut dir = None;
                for f in files {
                    let p = get(f)?;
                    dir.get_or_insert_with(|| p.parent().map(Path::to_path_buf));
                }
                let weight_files = match weights {
                    Weights::Single => vec!["model.safetensors".to_string()],
                    Weights::Sharded => {
                        let index = get("model.safetensors.index.json")?;
                        shard_names(&index)?
                    }
                };
                for f in &weight_files {
                    get(f)?;
                }
                dir.flatten()
                    .ok_or_else(|| hub_err(format!("{repo}: nothing was downloaded")))
            }
        }
    }
}

/// The shard files a safetensors index names, each once.
fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index).map_err(|e| Error::io(index, e))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::invalid(index, format!("not JSON: {e}")))?;
    let map = v["weight_map"]
        .as_object()
        .ok_or_else(|| Error::invalid(index, "no weight_map"))?;
    let mut names: Vec<String> = Vec::new();
    for f in map.values() {
        let f = f
            .as_str()
            .filter(|f| !f.contains("..") && !f.starts_with('/'))
            .ok_or_else(|| Error::invalid(index, format!("bad shard name {f}")))?;
        if !names.iter().any(|n| n == f) {
            names.push(f.to_string());
        }
    }
    Ok(names)
}

/// The HTTP status of a failed request, if the server answered.
fn status(e: &ApiError) -> Option<u16> {
    match e {
        ApiError::RequestError(e) => match e.as_ref() {
            ureq::Error::StatusCode(code) => Some(*code),
            _ => None,
        },
        _ => None,
    }
}

/// Download `file` into the cache, with a progress bar on a terminal, and check its checksum.
fn download(api: &Api, api_repo: &ApiRepo, file: &str, repo: &str) -> Result<PathBuf> {
    let url = api_repo.url(file);
    let failed = |e: ApiError| match status(&e) {
        Some(404) => hub_err(format!("{url} answered 404 Not Found")),
        Some(code) => hub_err(format!("{url} answered HTTP {code}")),
        None => hub_err(format!("downloading {url}: {e}")),
    };
    let meta = api.metadata(&url).map_err(failed)?;
    eprintln!(
        "downloading {file} from {repo} ({:.1} MB)",
        meta.size() as f64 / 1e6
    );
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(0)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let path = api_repo.download_with_progress(file, bar).map_err(failed)?;
    verify(&path, meta.etag()).inspect_err(|_| {
        // A corrupt file must not be found in the cache next time.
        if let Ok(blob) = std::fs::canonicalize(&path) {
            let _ = std::fs::remove_file(blob);
        }
        let _ = std::fs::remove_file(&path);
    })?;
    Ok(path)
}

/// Check a downloaded file against the hub's etag: SHA-256 (LFS files) or the git blob SHA-1
/// (files kept in git). Other etags are not checksums and are not checked.
fn verify(path: &Path, etag: &str) -> Result<()> {
    let etag = etag
        .trim_matches('"')
        .trim_start_matches("W/")
        .trim_matches('"');
    let is_hex = |n: usize| etag.len() == n && etag.chars().all(|c| c.is_ascii_hexdigit());
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut buf = vec![0u8; 1 << 20];
    let mut feed = |update: &mut dyn FnMut(&[u8])| -> Result<()> {
        loop {
            let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                return Ok(());
            }
            update(&buf[..n]);
        }
    };
    let got = if is_hex(64) {
        let mut h = sha2::Sha256::new();
        feed(&mut |b| h.update(b))?;
        hex(&h.finalize())
    } else if is_hex(40) {
        let mut h = sha1::Sha1::new();
        h.update(format!("blob {len}\0").as_bytes());
        feed(&mut |b| h.update(b))?;
        hex(&h.finalize())
    } else {
        return Ok(());
    };
    if !got.eq_ignore_ascii_case(etag) {
        return Err(hub_err(format!(
            "{}: the download is corrupt (checksum {got}, the hub says {etag}); it was removed, \
             run again to download it anew",
            path.display()
        )));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A repo's folder in the cache.
struct CachedRepo {
    dir: PathBuf,
    cache: hf_hub::CacheRepo,
}

impl CachedRepo {
    fn new(cache: &Cache, repo: &Repo) -> CachedRepo {
        CachedRepo {
            dir: cache.path().join(repo.folder_name()),
            cache: cache.repo(repo.clone()),
        }
    }

    fn get(&self, file: &str) -> Option<PathBuf> {
        self.cache.get(file)
    }

    /// The files of the cached snapshot of `main`, if there is one.
    fn files(&self) -> Option<Vec<String>> {
        let commit = std::fs::read_to_string(self.dir.join("refs/main")).ok()?;
        let root = self.cache.pointer_path(commit.trim());
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).ok()?.flatten() {
                let p = entry.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(rel) = p.strip_prefix(&root) {
                    out.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        out.sort();
        (!out.is_empty()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        let p = |s| HubModel::parse(s);
        assert_eq!(p("model.gguf"), None);
        assert_eq!(
            p("hf:bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M"),
            Some(Ok(HubModel {
                repo: "bartowski/SmolLM2-135M-Instruct-GGUF".into(),
                pick: Pick::Quant("Q4_K_M".into())
            }))
        );
        assert_eq!(
            p("hf:a/b/sub/x.gguf").unwrap().unwrap().pick,
            Pick::File("sub/x.gguf".into())
        );
        assert_eq!(p("hf:a/b").unwrap().unwrap().pick, Pick::Default);
        for bad in [
            "hf:",
            "hf:a",
            "hf:a/",
            "hf:a/b:",
            "hf:a/b/x.gguf:Q4",
            "hf:a/b/../x",
            "hf:a b/c",
        ] {
            assert!(p(bad).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn projectors_and_cached_files_are_recognised() {
        assert!(is_mmproj("mmproj-F16.gguf") && is_mmproj("vision/MMPROJ-model-f32.gguf"));
        assert!(!is_mmproj("model-F16.gguf") && !is_mmproj("mmproj-F16.bin"));
        let snap = Path::new("/c/hub/models--unsloth--Qwen3.5-2B-GGUF/snapshots/0a1b");
        let hub = HubModel::of_cached_file(&snap.join("Q4_K_M/m.gguf")).unwrap();
        assert_eq!(hub.repo, "unsloth/Qwen3.5-2B-GGUF");
        assert_eq!(hub.pick, Pick::File("Q4_K_M/m.gguf".into()));
        assert_eq!(
            HubModel::of_cached_file(&snap.join("m.gguf")).unwrap().pick,
            Pick::File("m.gguf".into())
        );
        assert_eq!(HubModel::of_cached_file(Path::new("/models/m.gguf")), None);
        assert_eq!(
            HubModel::of_cached_file(Path::new("/x/snapshots/c/m.gguf")),
            None
        );
    }

    #[test]
    fn quant_names_are_whole_words() {
        assert!(names_quant("SmolLM2-135M-Instruct-Q4_K_M.gguf", "q4_k_m"));
        assert!(names_quant("model.Q8_0.gguf", "Q8_0"));
        assert!(!names_quant("model-Q4_K_M.gguf", "Q4_K"));
        assert!(!names_quant("model-IQ4_XS.gguf", "Q4_XS"));
        assert!(is_split_part("big-Q4_K_M-00001-of-00003.gguf"));
        assert!(!is_split_part("model-Q4_K_M.gguf"));
    }
}
