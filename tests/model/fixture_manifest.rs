//! The fixture manifest check (tests/fixtures/make_all.py, run by scripts/make-fixtures.sh before
//! any test): a written fixture that differs by one byte, or is missing, fails the check by name.

use std::path::Path;
use std::process::Command;

use crate::common;

const FILE: &str = "phi3-vocab.gguf";

/// `make_all.py check DIR MANIFEST`: its exit code and standard error.
fn check(dir: &Path, manifest: &Path) -> (Option<i32>, String) {
    let out = Command::new("python3")
        .arg(common::fixture("make_all.py"))
        .arg("check")
        .arg(dir)
        .arg(manifest)
        .output()
        .expect("python3 runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn manifest_check_names_a_fixture_one_byte_off_or_missing() {
    let line = include_str!("../fixtures/manifest.sha256")
        .lines()
        .find(|l| l.ends_with(&format!("  {FILE}")))
        .expect("the manifest lists the fixture");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.sha256");
    std::fs::write(&manifest, format!("{line}\n")).unwrap();
    let copy = dir.path().join(FILE);
    let mut bytes = std::fs::read(common::fixture(&format!("models/{FILE}"))).unwrap();
    std::fs::write(&copy, &bytes).unwrap();
    assert_eq!(
        check(dir.path(), &manifest).0,
        Some(0),
        "the written file matches"
    );

    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&copy, &bytes).unwrap();
    let (code, stderr) = check(dir.path(), &manifest);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(FILE) && stderr.contains("sha256"),
        "{stderr}"
    );

    std::fs::remove_file(&copy).unwrap();
    let (code, stderr) = check(dir.path(), &manifest);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(FILE) && stderr.contains("missing"),
        "{stderr}"
    );
}
