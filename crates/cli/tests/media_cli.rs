//! End-to-end tests of `pmtx media` and the media-model flags.

use std::path::Path;
use std::process::{Command, Output};

fn pmtx(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmtx")).args(args).current_dir(dir).env("TMPDIR", dir).output().expect("run pmtx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `pmtx media validate` prints the published figures beside the model's
/// and writes them as JSON, each marked fitted or held out; the `optane`
/// preset reproduces each row it was fitted to within 15 %.
#[test]
fn validate_reproduces_the_published_figures() {
    let dir = tempfile::tempdir().unwrap();
    let output = pmtx(dir.path(), &["media", "validate", "--accesses", "500", "--json", "v.json"]);
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("DBXN Table 2"), "{stdout}");
    assert!(stdout.contains("write nt seq"), "{stdout}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("v.json")).unwrap()).unwrap();
    let published = json["published"].as_array().unwrap();
    assert!(published.len() >= 10);
    for row in published.iter().filter(|row| row["held_out"] == false) {
        assert_eq!(row["within_15_percent"], true, "{row}");
    }
    let held_out: Vec<_> = published.iter().filter(|row| row["held_out"] == true).collect();
    assert!(held_out.len() >= 2, "held-out rows in {published:?}");
    for row in held_out {
        assert!(row["ratio"].as_f64().is_some_and(|ratio| ratio > 0.0), "{row}");
    }
    assert!(stdout.contains("held out") && stdout.contains("fitted"), "{stdout}");
    assert!(!json["curves"].as_array().unwrap().is_empty());
    assert!(json["real"].as_array().unwrap().is_empty(), "no --real, no real runs");
}

/// The media flags apply to the `optane` media model of the emulated
/// backend only, and bad layouts are usage errors (exit 2).
#[test]
fn media_flags_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [&[&str]; 6] = [
        &["smoke", "--pm", "emulated", "--pm-numa-nodes", "4"],
        &["smoke", "--pm", "direct", "--pm-remote-ns", "100"],
        &["smoke", "--pm", "direct", "--pm-dimms", "2"],
        &["smoke", "--pm", "emulated", "--pm-model", "simple", "--pm-dimms", "2"],
        &["smoke", "--pm", "emulated", "--pm-interleave", "1000"],
        &["bench", "--workload", "smallbank", "--pm", "direct", "--pm-interleave", "4KiB"],
    ];
    for args in cases {
        let output = pmtx(dir.path(), args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output.stderr));
        assert!(!text(&output.stderr).contains("panicked"));
    }
    // A valid layout runs, and the header names it.
    let output = pmtx(
        dir.path(),
        &[
            "smoke",
            "--pm",
            "emulated",
            "--pm-dimms",
            "2",
            "--pm-interleave",
            "8KiB",
            "--seconds",
            "0.2",
            "--pool",
            "s.pool",
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("2 DIMMs interleaved every 8192 B"), "{stdout}");
    let output = pmtx(
        dir.path(),
        &[
            "smoke",
            "--pm",
            "emulated",
            "--pm-numa-nodes",
            "2",
            "--pm-remote-ns",
            "200",
            "--seconds",
            "0.2",
            "--pool",
            "n.pool",
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("2 NUMA nodes, remote access +200 ns"), "{}", text(&output.stdout));
    let output = pmtx(
        dir.path(),
        &["smoke", "--pm", "emulated", "--pm-model", "simple", "--seconds", "0.2", "--pool", "s.pool"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("simple: 170 ns per sequential line"), "{}", text(&output.stdout));
}
