//! A `kiln serve` child process for the tests (tests/cli/serve.rs, the GPU tests): started on
//! 127.0.0.1 with `--port 0`, its address read from its stderr, spoken to over HTTP with ureq,
//! killed when dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `kiln serve` child process and everything it has written to stderr so far.
pub struct Server {
    pub child: Child,
    pub url: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("kiln"))
            .args(["serve", "--port", "0", "-m"])
            .arg(model)
            .args(args)
            .env_remove("KILN_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("http://") {
                    let url: String = line[at..].split_whitespace().next().unwrap().into();
                    let _ = tx.send(url);
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("kiln serve did not start: {}", log.lock().unwrap()));
        Server { child, url, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Wait until the log has `text` (the engine logs a request after its reply is written).
    pub fn wait_for_log(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.contains(text) {
                return log;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no `{text}` in the log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        key: Option<&str>,
    ) -> (u16, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}{path}", self.url);
        let auth = key.map(|k| format!("Bearer {k}"));
        let response = match (method, body) {
            ("GET", _) => {
                let mut r = agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            (_, body) => {
                let mut r = agent.post(&url).header("Content-Type", "application/json");
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(body.unwrap_or_default())
            }
        };
        let mut response = response.unwrap();
        let status = response.status().as_u16();
        let mut text = String::new();
        response
            .body_mut()
            .as_reader()
            .read_to_string(&mut text)
            .unwrap();
        (status, text)
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = self.request("POST", path, Some(body.to_string().as_bytes()), None);
        let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        (status, v)
    }

    pub fn ok(&self, path: &str, body: &Value) -> Value {
        let (status, v) = self.post(path, body);
        assert_eq!(status, 200, "{v}");
        v
    }

    /// A streamed request's `data:` payloads, up to and without `[DONE]` (which must come).
    pub fn stream(&self, path: &str, body: &Value) -> Vec<Value> {
        let (status, text) = self.request("POST", path, Some(body.to_string().as_bytes()), None);
        assert_eq!(status, 200, "{text}");
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
        data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
