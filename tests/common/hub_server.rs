//! A local HTTP server on 127.0.0.1 that answers like the Hugging Face hub, for the download
//! tests: the repo API (`/api/models/OWNER/REPO/revision/main` with `sha` and `siblings`), and
//! `/OWNER/REPO/resolve/main/FILE` with the headers hf-hub reads (`x-repo-commit`, `etag` — the
//! git blob SHA-1 for small files — or, for large "LFS" files, a 302 to a CDN URL with
//! `x-linked-etag` = the SHA-256), HTTP ranges (206 + `Content-Range`), and 404s. It can cut a
//! transfer halfway once, or serve corrupt bytes, to test resume and the checksum.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha1::Digest;

#[derive(Clone)]
pub struct HubFile {
    pub name: String,
    pub bytes: Arc<Vec<u8>>,
    /// Served through a redirect to the CDN, with the SHA-256 as etag (as the hub does for LFS).
    pub lfs: bool,
}

impl HubFile {
    pub fn new(name: &str, bytes: Arc<Vec<u8>>) -> HubFile {
        let lfs = name.ends_with(".gguf") || name.ends_with(".safetensors");
        HubFile {
            name: name.to_string(),
            bytes,
            lfs,
        }
    }

    fn sha256(&self) -> String {
        hex(&sha2::Sha256::digest(self.bytes.as_slice()))
    }

    fn git_sha1(&self) -> String {
        let mut h = sha1::Sha1::new();
        h.update(format!("blob {}\0", self.bytes.len()).as_bytes());
        h.update(self.bytes.as_slice());
        hex(&h.finalize())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, (String, Vec<HubFile>)>,
    log: Vec<Seen>,
    /// CDN transfers (by SHA-256) to cut halfway, once.
    cut_once: Vec<String>,
    /// CDN blobs (by SHA-256) served with one byte flipped.
    corrupt: Vec<String>,
}

pub struct HubServer {
    pub url: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HubServer {
    pub fn start() -> HubServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp, base) = (state.clone(), stop.clone(), url.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (st, base) = (st.clone(), base.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &st, &base);
                });
            }
        });
        HubServer {
            url,
            state,
            stop,
            thread: Some(thread),
        }
    }

    pub fn add_repo(&self, repo: &str, files: Vec<HubFile>) {
        let commit = hex(&sha1::Sha1::digest(repo.as_bytes()));
        self.state
            .lock()
            .unwrap()
            .repos
            .insert(repo.to_string(), (commit, files));
    }

    pub fn commit_of(&self, repo: &str) -> String {
        self.state.lock().unwrap().repos[repo].0.clone()
    }

    pub fn cut_once(&self, file: &HubFile) {
        self.state.lock().unwrap().cut_once.push(file.sha256());
    }

    pub fn corrupt(&self, file: &HubFile) {
        self.state.lock().unwrap().corrupt.push(file.sha256());
    }

    pub fn log(&self) -> Vec<Seen> {
        self.state.lock().unwrap().log.clone()
    }
}

impl Drop for HubServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close (a cut connection).
    cut_at: Option<usize>,
}

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: body.as_bytes().to_vec(),
        cut_at: None,
    }
}

/// `bytes=A-` or `bytes=A-B` against `len`: the inclusive range served.
fn parse_range(range: &str, len: usize) -> Option<(usize, usize)> {
    let spec = range.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let a: usize = a.parse().ok()?;
    let b: usize = if b.is_empty() {
        len.checked_sub(1)?
    } else {
        b.parse().ok()?
    };
    (a <= b && b < len).then_some((a, b))
}

fn ranged(bytes: &[u8], range: Option<&str>, mut headers: Vec<(String, String)>) -> Reply {
    match range.and_then(|r| parse_range(r, bytes.len())) {
        Some((a, b)) => {
            headers.push((
                "Content-Range".into(),
                format!("bytes {a}-{b}/{}", bytes.len()),
            ));
            Reply {
                status: 206,
                headers,
                body: bytes[a..=b].to_vec(),
                cut_at: None,
            }
        }
        None => Reply {
            status: 200,
            headers,
            body: bytes.to_vec(),
            cut_at: None,
        },
    }
}

fn serve(conn: TcpStream, state: &Mutex<State>, base: &str) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned();
    let mut st = state.lock().unwrap();
    st.log.push(Seen {
        path: path.clone(),
        range: range.clone(),
        authorization: headers.get("authorization").cloned(),
    });

    let rep = if let Some(rest) = path.strip_prefix("/api/models/") {
        let repo = rest.strip_suffix("/revision/main").unwrap_or(rest);
        match st.repos.get(repo) {
            Some((commit, files)) => {
                let siblings: Vec<_> = files
                    .iter()
                    .map(|f| serde_json::json!({ "rfilename": f.name }))
                    .collect();
                reply(
                    200,
                    &serde_json::json!({ "id": repo, "sha": commit, "siblings": siblings })
                        .to_string(),
                )
            }
            None => reply(404, r#"{"error":"Repository not found"}"#),
        }
    } else if let Some(sha) = path.strip_prefix("/cdn/") {
        let file = st
            .repos
            .values()
            .flat_map(|(_, files)| files.iter())
            .find(|f| f.sha256() == sha)
            .cloned();
        match file {
            Some(f) => {
                let mut bytes = f.bytes.as_slice().to_vec();
                if st.corrupt.contains(&f.sha256()) {
                    let mid = bytes.len() / 2;
                    bytes[mid] ^= 0xff;
                }
                let mut rep = ranged(&bytes, range.as_deref(), Vec::new());
                let whole_from_start = rep.body.len() == bytes.len();
                if whole_from_start
                    && let Some(i) = st.cut_once.iter().position(|s| *s == f.sha256())
                {
                    st.cut_once.remove(i);
                    rep.cut_at = Some(bytes.len() / 2);
                }
                rep
            }
            None => reply(404, "{}"),
        }
    } else {
        // /OWNER/REPO/resolve/main/FILE
        let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
        match parts.as_slice() {
            [owner, repo, "resolve", "main", file] => {
                match st.repos.get(&format!("{owner}/{repo}")) {
                    Some((commit, files)) => match files.iter().find(|f| f.name == *file) {
                        Some(f) if f.lfs => Reply {
                            status: 302,
                            headers: vec![
                                ("Location".into(), format!("{base}/cdn/{}", f.sha256())),
                                ("x-repo-commit".into(), commit.clone()),
                                ("x-linked-etag".into(), format!("\"{}\"", f.sha256())),
                                ("x-linked-size".into(), f.bytes.len().to_string()),
                                ("etag".into(), format!("\"{}\"", f.git_sha1())),
                            ],
                            body: Vec::new(),
                            cut_at: None,
                        },
                        Some(f) => ranged(
                            &f.bytes,
                            range.as_deref(),
                            vec![
                                ("x-repo-commit".into(), commit.clone()),
                                ("etag".into(), format!("\"{}\"", f.git_sha1())),
                            ],
                        ),
                        None => {
                            let mut r = reply(404, r#"{"error":"Entry not found"}"#);
                            r.headers
                                .push(("x-error-code".into(), "EntryNotFound".into()));
                            r
                        }
                    },
                    None => {
                        let mut r = reply(404, r#"{"error":"Repository not found"}"#);
                        r.headers
                            .push(("x-error-code".into(), "RepoNotFound".into()));
                        r
                    }
                }
            }
            _ => reply(404, "{}"),
        }
    };
    drop(st);

    let mut out = conn;
    let reason = match rep.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        _ => "Not Found",
    };
    write!(out, "HTTP/1.1 {} {reason}\r\n", rep.status)?;
    for (k, v) in &rep.headers {
        write!(out, "{k}: {v}\r\n")?;
    }
    write!(
        out,
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        rep.body.len()
    )?;
    let body = &rep.body[..rep.cut_at.unwrap_or(rep.body.len())];
    out.write_all(body)?;
    out.flush()?;
    Ok(())
}
