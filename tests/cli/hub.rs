//! Models by hub name (`-m hf:OWNER/REPO[:QUANT]`), end to end against a local server on
//! 127.0.0.1 that answers like the Hugging Face hub (tests/common/hub_server.rs), with a fresh
//! HF_HOME per test. Nothing here reaches the network. The truth each download is checked
//! against: the served bytes, and what kiln does with the same model from a local path.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::hub_server::{HubFile, HubServer};

fn fixture_bytes(rel: &str) -> Arc<Vec<u8>> {
    Arc::new(std::fs::read(common::fixture(rel)).unwrap())
}

/// kiln with the hub pointed at `server` and the cache in `home`.
fn kiln_hub(server_url: &str, home: &Path) -> assert_cmd::Command {
    let mut c = common::kiln();
    c.env("HF_HOME", home)
        .env("HF_ENDPOINT", server_url)
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    c
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What `kiln tokenize` prints for the local fixture: the truth a downloaded copy must match.
fn local_tokens(model: &Path) -> String {
    let out = common::kiln()
        .args(["tokenize", "-m"])
        .arg(model)
        .arg("hello world, hello hub")
        .output()
        .unwrap();
    assert!(out.status.success());
    stdout_of(&out)
}

fn snapshot(home: &Path, repo: &str, commit: &str) -> PathBuf {
    home.join("hub")
        .join(format!("models--{}", repo.replace('/', "--")))
        .join("snapshots")
        .join(commit)
}

#[test]
fn gguf_by_quant_fresh_then_cached_then_offline() {
    let server = HubServer::start();
    let gguf = fixture_bytes("models/tiny-llama.gguf");
    let repo = "kiln-test/tiny-GGUF";
    server.add_repo(
        repo,
        vec![
            HubFile::new("README.md", Arc::new(b"# tiny\n".to_vec())),
            HubFile::new("tiny-Q4_K_M.gguf", gguf.clone()),
            HubFile::new("tiny-Q8_0.gguf", gguf.clone()),
        ],
    );
    let home = tempfile::tempdir().unwrap();
    let want = local_tokens(&common::fixture("models/tiny-llama.gguf"));

    // Fresh download of the :Q8_0 file, with the token sent.
    let out = kiln_hub(&server.url, home.path())
        .env("HF_TOKEN", "hf_secret")
        .args([
            "tokenize",
            "-m",
            "hf:kiln-test/tiny-GGUF:q8_0",
            "hello world, hello hub",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), want);
    let cached = snapshot(home.path(), repo, &server.commit_of(repo)).join("tiny-Q8_0.gguf");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        *gguf,
        "the cache holds the served bytes"
    );
    let log = server.log();
    assert!(log.iter().any(|s| s.path.starts_with("/cdn/")), "{log:?}");
    assert!(
        log.iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer hf_secret")),
        "HF_TOKEN is sent: {log:?}"
    );
    assert!(
        !log.iter().any(|s| s.path.contains("Q4_K_M")),
        "only the asked quant is fetched"
    );

    // No quant named: of several GGUF files, Q4_K_M.
    let out = kiln_hub(&server.url, home.path())
        .args([
            "tokenize",
            "-m",
            "hf:kiln-test/tiny-GGUF",
            "hello world, hello hub",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        server
            .log()
            .iter()
            .any(|s| s.path.ends_with("tiny-Q4_K_M.gguf"))
    );

    // Offline, the hub gone: the cache alone serves, without a request.
    let requests = server.log().len();
    let url = server.url.clone();
    drop(server);
    let out = kiln_hub(&url, home.path())
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "tokenize",
            "-m",
            "hf:kiln-test/tiny-GGUF:Q8_0",
            "hello world, hello hub",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), want);
    assert!(requests > 0);

    // Offline and not cached: a clear error naming the cache.
    let out = kiln_hub(&url, home.path())
        .env("HF_HUB_OFFLINE", "1")
        .args(["tokenize", "-m", "hf:kiln-test/other", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains("HF_HUB_OFFLINE") && err.contains("kiln-test/other"),
        "{err}"
    );
}

#[test]
fn a_cut_connection_resumes_and_a_corrupt_download_is_refused() {
    let server = HubServer::start();
    let gguf = fixture_bytes("models/tiny-llama.gguf");
    let file = HubFile::new("tiny-Q4_0.gguf", gguf.clone());
    let bad = HubFile::new("bad-Q4_0.gguf", Arc::new(gguf[..1 << 20].to_vec()));
    server.add_repo("kiln-test/cut", vec![file.clone()]);
    server.add_repo("kiln-test/bad", vec![bad.clone()]);
    server.cut_once(&file);
    server.corrupt(&bad);
    let home = tempfile::tempdir().unwrap();

    let out = kiln_hub(&server.url, home.path())
        .args([
            "tokenize",
            "-m",
            "hf:kiln-test/cut",
            "hello world, hello hub",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stdout_of(&out),
        local_tokens(&common::fixture("models/tiny-llama.gguf"))
    );
    // The second transfer asked for the bytes after those the cut one delivered.
    let half = gguf.len() / 2;
    let ranges: Vec<String> = server
        .log()
        .iter()
        .filter(|s| s.path.starts_with("/cdn/"))
        .filter_map(|s| s.range.clone())
        .collect();
    assert!(
        ranges.contains(&format!("bytes={half}-")),
        "resumed from byte {half}: {ranges:?}"
    );
    let cached = snapshot(
        home.path(),
        "kiln-test/cut",
        &server.commit_of("kiln-test/cut"),
    );
    assert_eq!(std::fs::read(cached.join("tiny-Q4_0.gguf")).unwrap(), *gguf);

    let out = kiln_hub(&server.url, home.path())
        .args(["info", "-m", "hf:kiln-test/bad"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("corrupt") && err.contains("checksum"), "{err}");
    let snap = snapshot(
        home.path(),
        "kiln-test/bad",
        &server.commit_of("kiln-test/bad"),
    );
    assert!(
        !snap.join("bad-Q4_0.gguf").exists(),
        "the corrupt file is not left in the cache"
    );
}

#[test]
fn missing_ambiguous_and_unreachable_repos_say_what_is_there() {
    let server = HubServer::start();
    let gguf = fixture_bytes("models/tiny-llama.gguf");
    server.add_repo(
        "kiln-test/many",
        vec![
            HubFile::new("a-Q4_0.gguf", gguf.clone()),
            HubFile::new("b-Q4_0.gguf", gguf.clone()),
            HubFile::new("c-Q8_0.gguf", gguf.clone()),
        ],
    );
    let home = tempfile::tempdir().unwrap();
    let fails = |model: &str, url: &str| {
        let out = kiln_hub(url, home.path())
            .args(["info", "-m", model])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{model}");
        assert!(out.stdout.is_empty());
        stderr_of(&out)
    };

    let err = fails("hf:kiln-test/nothing-here", &server.url);
    assert!(
        err.contains("not found") && err.contains(&server.url) && err.contains("404"),
        "{err}"
    );
    let err = fails("hf:kiln-test/many:Q4_0", &server.url);
    assert!(
        err.contains("a-Q4_0.gguf") && err.contains("b-Q4_0.gguf"),
        "{err}"
    );
    let err = fails("hf:kiln-test/many:Q2_K", &server.url);
    assert!(
        err.contains("no GGUF file for Q2_K") && err.contains("c-Q8_0.gguf"),
        "{err}"
    );
    let err = fails("hf:kiln-test/many", &server.url);
    assert!(
        err.contains("several GGUF files") && err.contains("c-Q8_0.gguf"),
        "{err}"
    );
    let err = fails("hf:kiln-test/many/d-Q4_0.gguf", &server.url);
    assert!(err.contains("no file d-Q4_0.gguf"), "{err}");
    assert!(
        !server.log().iter().any(|s| s.path.contains("resolve")),
        "nothing was downloaded"
    );

    // Nothing listens on port 1: the error names the URL.
    let err = fails("hf:kiln-test/many:Q8_0", "http://127.0.0.1:1");
    assert!(
        err.contains("http://127.0.0.1:1/api/models/kiln-test/many"),
        "{err}"
    );

    let out = kiln_hub(&server.url, home.path())
        .args(["info", "-m", "hf:just-a-name"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a malformed name is a flag error"
    );
}

#[test]
fn safetensors_repos_single_and_sharded_download_as_model_directories() {
    let server = HubServer::start();
    let src = common::fixture("models/tiny-llama-hf");
    let serve_dir = |repo: &str, dir: &Path| {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            files.push(HubFile::new(&name, Arc::new(std::fs::read(&path).unwrap())));
        }
        server.add_repo(repo, files);
    };
    serve_dir("kiln-test/tiny-llama-hf", &src);
    let sharded = tempfile::tempdir().unwrap();
    common::shard_safetensors_dir(&src, sharded.path());
    serve_dir("kiln-test/tiny-llama-sharded", sharded.path());
    let home = tempfile::tempdir().unwrap();
    let args = [
        "--temp",
        "0",
        "-n",
        "6",
        "--format",
        "json",
        "Once upon a time",
    ];
    let tokens = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", stderr_of(o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["tokens"].clone()
    };

    let local = common::kiln()
        .args(["run", "-m"])
        .arg(&src)
        .args(args)
        .output()
        .unwrap();
    for repo in ["kiln-test/tiny-llama-hf", "kiln-test/tiny-llama-sharded"] {
        let hub = kiln_hub(&server.url, home.path())
            .args(["run", "-m", &format!("hf:{repo}")])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(tokens(&hub), tokens(&local), "{repo}");
    }
    let log = server.log();
    for shard in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        assert!(
            log.iter().any(|s| s.path.ends_with(shard)),
            "{shard}: {log:?}"
        );
    }
}

/// A vision model's repo: its projectors are not models (`:F16` picks the model, not
/// mmproj-F16.gguf), and `--image` fetches the repo's projector (of several, the F16 one) as
/// llama.cpp's `-hf` does; the reply is the one the local files give, and the second run is
/// served from the cache.
#[test]
fn a_vision_repo_fetches_its_projector_for_an_image() {
    let server = HubServer::start();
    let model = fixture_bytes("models/qwen35-tiny.gguf");
    let mmproj = fixture_bytes("models/qwen35-mmproj-tiny.gguf");
    let repo = "kiln-test/tiny-vl-GGUF";
    server.add_repo(
        repo,
        vec![
            HubFile::new("tiny-vl-F16.gguf", model),
            HubFile::new("mmproj-F16.gguf", mmproj.clone()),
            HubFile::new("mmproj-F32.gguf", mmproj),
        ],
    );
    let home = tempfile::tempdir().unwrap();
    let image = common::fixture("models/vision-32x32.png");
    let args = ["-n", "4", "--temp", "0", "--format", "json", "Describe it."];
    let reply = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", stderr_of(o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["image_tokens"], 16, "{v}");
        v["tokens"].clone()
    };
    let local = common::kiln()
        .args(["run", "-m"])
        .arg(common::fixture("models/qwen35-tiny.gguf"))
        .arg("--mmproj")
        .arg(common::fixture("models/qwen35-mmproj-tiny.gguf"))
        .arg("--image")
        .arg(&image)
        .args(args)
        .output()
        .unwrap();
    let downloads = || {
        let log = server.log();
        let asked = |name: &str| {
            log.iter()
                .any(|s| s.path.ends_with(&format!("/resolve/main/{name}")))
        };
        let blobs = log.iter().filter(|s| s.path.starts_with("/cdn/")).count();
        (
            [
                asked("tiny-vl-F16.gguf"),
                asked("mmproj-F16.gguf"),
                asked("mmproj-F32.gguf"),
            ],
            blobs,
        )
    };
    let mut blobs_after_first = 0;
    for round in 0..2 {
        let hub = kiln_hub(&server.url, home.path())
            .args(["run", "-m", &format!("hf:{repo}:F16"), "--image"])
            .arg(&image)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(reply(&hub), reply(&local), "round {round}");
        let (asked, blobs) = downloads();
        assert_eq!(
            asked,
            [true, true, false],
            "the model and the F16 projector"
        );
        if round == 0 {
            blobs_after_first = blobs;
        } else {
            assert_eq!(blobs, blobs_after_first, "the second run reads the cache");
        }
    }

    // Without --image the projector is left alone; naming it as the model is an error.
    let out = kiln_hub(&server.url, home.path())
        .args(["run", "-m", &format!("hf:{repo}/mmproj-F32.gguf"), "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("--mmproj"), "{}", stderr_of(&out));
}
