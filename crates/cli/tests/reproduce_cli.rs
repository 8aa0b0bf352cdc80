//! End-to-end tests of `pmtx reproduce`.

use std::path::Path;
use std::process::{Command, Output};

fn pmtx(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmtx")).args(args).current_dir(dir).env("TMPDIR", dir).output().expect("run pmtx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--list` names every figure; a figure runs its benches (tiny with
/// --smoke), writes their reports and plots, and gives every claim a
/// figure of ours and a verdict.
#[test]
fn a_figure_runs_and_every_claim_gets_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let list = pmtx(dir.path(), &["reproduce", "--list"]);
    assert!(list.status.success());
    let listed = text(&list.stdout);
    for name in ["dbxn-fig9", "dbxn-fig11", "zen-fig8", "zen-fig17", "zen-fig20", "zen-fig22", "zen-fig23"] {
        assert!(listed.contains(name), "{name} missing from:\n{listed}");
    }
    let output = pmtx(dir.path(), &["reproduce", "dbxn-fig9", "--smoke", "--out", "out"]);
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("the paper's claims beside ours"), "{stdout}");
    let out = dir.path().join("out");
    assert!(out.join("dbxn-fig9-1.json").exists());
    assert!(out.join("dbxn-fig9-1.svg").exists());
    let verdicts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("verdicts.json")).unwrap()).unwrap();
    let verdicts = verdicts.as_array().unwrap();
    assert_eq!(verdicts.len(), 6);
    for claim in verdicts {
        assert!(claim["ours"].as_f64().is_some_and(|ours| ours > 0.0), "{claim}");
        let verdict = claim["verdict"].as_str().unwrap();
        assert!(["reproduced", "direction", "not reproduced"].contains(&verdict), "{claim}");
    }
}

#[test]
fn an_unknown_figure_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = pmtx(dir.path(), &["reproduce", "dbxn-fig99"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("unknown figure"), "{}", text(&output.stderr));
}
