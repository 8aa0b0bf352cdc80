//! End-to-end test of `pmtx report`: the results page of a small fixed
//! results directory (`tests/fixtures/report/run`: a run.json, a
//! verdicts.json of two figures and a round's report) and a named bench
//! report, compared with the expected page. `PMTX_BLESS=1` rewrites the
//! expected page after a deliberate change.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

#[test]
fn the_page_of_a_fixed_results_directory_is_the_expected_one() {
    // The fixtures, copied: the page names the paths as given.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("run")).unwrap();
    for file in
        ["run/run.json", "run/verdicts.json", "run/zen-fig8-1-round1.json", "bench-smallbank.json", "section.md"]
    {
        std::fs::copy(fixtures().join(file), dir.path().join(file)).unwrap();
    }
    let page = dir.path().join("results.md");
    let output = Command::new(env!("CARGO_BIN_EXE_pmtx"))
        .args(["report", "run", "-o", "results.md", "--bench", "smallbank=bench-smallbank.json"])
        .args(["--section", "A table from elsewhere=section.md"])
        .current_dir(dir.path())
        .output()
        .expect("run pmtx");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let written = std::fs::read_to_string(&page).unwrap();
    assert!(
        written.ends_with("## A table from elsewhere\n\n| system | swaps/s |\n|---|---|\n| example | 1 |\n"),
        "{written}"
    );
    let expected_path = fixtures().join("expected.md");
    if std::env::var_os("PMTX_BLESS").is_some() {
        std::fs::write(&expected_path, &written).unwrap();
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap();
    if written != expected {
        for (line, (ours, theirs)) in written.lines().zip(expected.lines()).enumerate() {
            assert_eq!(ours, theirs, "line {} differs", line + 1);
        }
        assert_eq!(written.lines().count(), expected.lines().count(), "the pages differ in length");
    }

    // Every chart the page links is written, an SVG with real text.
    let charts = dir.path().join("results");
    for link in written.split("](results/").skip(1) {
        let file = link.split(')').next().unwrap();
        let svg = std::fs::read_to_string(charts.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"));
        assert!(svg.starts_with("<svg") && svg.contains("<text"), "{file}");
    }
    for file in ["zen-fig8.svg", "zen-fig11.svg", "zen-fig11-counts.svg", "bench-smallbank.svg"] {
        assert!(charts.join(file).exists(), "{file} missing");
    }
    let fig8 = std::fs::read_to_string(charts.join("zen-fig8.svg")).unwrap();
    for label in ["1. zen&apos;s throughput over mmdb&apos;s", "median: inconclusive", "interval of the median"] {
        assert!(fig8.contains(label), "{label} missing from zen-fig8.svg");
    }

    // Written again, the hand-edited method section is kept.
    let edited = written.replace("How to read this page.", "How to read this page (edited).");
    std::fs::write(&page, edited).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pmtx"))
        .args(["report", "run", "-o", "results.md"])
        .current_dir(dir.path())
        .output()
        .expect("run pmtx");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let again = std::fs::read_to_string(&page).unwrap();
    assert!(again.contains("How to read this page (edited)."));
    assert!(!again.contains("## Benchmarks"));
}
