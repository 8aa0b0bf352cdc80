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
/// --smoke) in three rounds, writes each round's reports and plots, and
/// gives every claim its source in the paper, our median and spread over
/// the rounds and a verdict.
#[test]
fn a_figure_runs_and_every_claim_gets_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let list = pmtx(dir.path(), &["reproduce", "--list"]);
    assert!(list.status.success());
    let listed = text(&list.stdout);
    for name in [
        "dbxn-fig9",
        "dbxn-fig11",
        "zen-fig8",
        "zen-fig9",
        "zen-fig10",
        "zen-fig17",
        "zen-fig20",
        "zen-fig22",
        "zen-fig23",
        "zen-fig27",
    ] {
        assert!(listed.contains(name), "{name} missing from:\n{listed}");
    }
    // A budget of a second leaves nothing after the three rounds; --report
    // writes the page of the run.
    let output = pmtx(
        dir.path(),
        &["reproduce", "dbxn-fig9", "--smoke", "--out", "out", "--budget", "1s", "--report", "page/results.md"],
    );
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("the paper's claims beside ours"), "{stdout}");
    assert!(stdout.contains("estimated time"), "{stdout}");
    let out = dir.path().join("out");
    // One report and plot per round (the default three).
    for round in 1..=3 {
        assert!(out.join(format!("dbxn-fig9-1-round{round}.json")).exists(), "round {round}");
        assert!(out.join(format!("dbxn-fig9-1-round{round}.svg")).exists(), "round {round}");
    }
    assert!(!out.join("dbxn-fig9-1-round4.json").exists());
    let verdicts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("verdicts.json")).unwrap()).unwrap();
    let verdicts = verdicts.as_array().unwrap();
    assert_eq!(verdicts.len(), 6);
    for claim in verdicts {
        assert_eq!(claim["figure"], "dbxn-fig9", "{claim}");
        assert!(claim["source"].as_str().is_some_and(|source| source.starts_with("Fig. 9")), "{claim}");
        assert_eq!(claim["rounds"], 3, "{claim}");
        assert_eq!(claim["smoke"], true, "{claim}");
        let [median, min, max] =
            ["ours_median", "ours_min", "ours_max"].map(|field| claim[field].as_f64().unwrap_or(f64::NAN));
        assert!(min > 0.0 && min <= median && median <= max, "{claim}");
        let per_round: Vec<f64> =
            claim["ours_per_round"].as_array().unwrap().iter().map(|ratio| ratio.as_f64().unwrap()).collect();
        assert_eq!(per_round.len(), 3, "{claim}");
        assert!(per_round.contains(&min) && per_round.contains(&median) && per_round.contains(&max), "{claim}");
        assert!(claim["paper_low"].as_f64().unwrap() <= claim["paper_high"].as_f64().unwrap(), "{claim}");
        let verdict = claim["verdict"].as_str().unwrap();
        assert!(["reproduced", "direction", "inconclusive", "not reproduced"].contains(&verdict), "{claim}");
        // Three rounds: the interval of the median is their min-max.
        assert_eq!((&claim["ci_low"], &claim["ci_high"]), (&claim["ours_min"], &claim["ours_max"]), "{claim}");
        assert_eq!(claim["ci_level"], 0.75, "{claim}");
        let outlook = claim["outlook"]["kind"].as_str().unwrap();
        assert_eq!(outlook == "decided", verdict != "inconclusive", "{claim}");
    }
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["budget_s"], 1.0, "{run}");
    assert!(run["command"].as_str().unwrap().starts_with("pmtx reproduce dbxn-fig9"), "{run}");
    let page = std::fs::read_to_string(dir.path().join("page/results.md")).unwrap();
    assert!(page.contains("## dbxn-fig9: DBXN Fig. 9") && page.contains("**Smoke run**"), "{page}");
    assert!(dir.path().join("page/results/dbxn-fig9.svg").exists());
}

/// A full run needs three rounds; --smoke may run fewer, and says so in
/// every verdict.
#[test]
fn fewer_than_three_rounds_only_with_smoke() {
    let dir = tempfile::tempdir().unwrap();
    let output = pmtx(dir.path(), &["reproduce", "phytm-fig5e", "--rounds", "2", "--out", "out"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("at least 3 rounds"), "{}", text(&output.stderr));
    let output = pmtx(dir.path(), &["reproduce", "phytm-fig5e", "--smoke", "--rounds", "1", "--out", "out"]);
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let verdicts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/verdicts.json")).unwrap()).unwrap();
    for claim in verdicts.as_array().unwrap() {
        assert_eq!(claim["rounds"], 1, "{claim}");
        assert_eq!(claim["smoke"], true, "{claim}");
        assert_eq!(claim["ours_min"], claim["ours_max"], "{claim}");
    }
}

#[test]
fn an_unknown_figure_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = pmtx(dir.path(), &["reproduce", "dbxn-fig99"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("unknown figure"), "{}", text(&output.stderr));
}

/// `--list` names the figures of SP^3, DBXN's Smallbank latency and Zen+'s
/// long transactions, and the figures that cannot be scaled here with the
/// reason; asking for one of those is a usage error that gives it.
#[test]
fn the_added_figures_are_listed_and_the_unscaled_ones_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let list = pmtx(dir.path(), &["reproduce", "--list"]);
    assert!(list.status.success());
    let listed = text(&list.stdout);
    for name in ["sp3-fig5", "sp3-fig6", "sp3-fig7", "sp3-fig8", "dbxn-fig10a", "zen-fig11", "zen-fig12", "zen-fig24"] {
        assert!(listed.lines().any(|line| line.starts_with(name)), "{name} missing from:\n{listed}");
    }
    let (runnable, unscaled) = listed.split_once("Not reproduced here").expect("a section of unscaled figures");
    // The figures of the baselines built since (Mnemosyne, Pisces) run.
    assert!(runnable.lines().any(|line| line.starts_with("dbxn-fig10b")), "dbxn-fig10b not runnable:\n{listed}");
    assert!(!unscaled.contains("sp3-fig5-mnemosyne"), "{unscaled}");
    for name in ["zen-fig25", "zen-fig27"] {
        assert!(runnable.lines().any(|line| line.starts_with(name)), "{name} missing from:\n{listed}");
    }
    // The NUMA figure says what it measures on emulated nodes.
    assert!(runnable.contains("WHAT IT MEASURES HERE"), "{runnable}");
    let remote: Vec<&str> = unscaled.lines().skip_while(|line| !line.starts_with("zen-fig27-remote")).take(2).collect();
    assert!(remote.len() == 2 && remote[1].contains("why not:"), "{unscaled}");
    let output = pmtx(dir.path(), &["reproduce", "zen-fig27-remote"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("not reproduced here"), "{}", text(&output.stderr));
}

/// A smoke run of two of the added figures gives every claim its source,
/// the paper's range, our value over the round and a verdict; absolute
/// claims (entries into zen+'s exclusive stage) carry the run's own value.
#[test]
fn the_added_figures_run_and_their_claims_have_the_required_fields() {
    let dir = tempfile::tempdir().unwrap();
    let output = pmtx(dir.path(), &["reproduce", "zen-fig25", "sp3-fig8", "--smoke", "--rounds", "1", "--out", "out"]);
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let verdicts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/verdicts.json")).unwrap()).unwrap();
    let verdicts = verdicts.as_array().unwrap();
    assert_eq!(verdicts.iter().filter(|claim| claim["figure"] == "zen-fig25").count(), 4);
    assert_eq!(verdicts.iter().filter(|claim| claim["figure"] == "sp3-fig8").count(), 2);
    for claim in verdicts {
        let figure = claim["figure"].as_str().unwrap();
        let source = claim["source"].as_str().unwrap();
        let expected = if figure == "zen-fig25" { "Fig. 25, §" } else { "Fig. 8, §" };
        assert!(source.starts_with(expected), "{claim}");
        assert!(claim["claim"].as_str().unwrap().contains("paper"), "{claim}");
        assert_eq!(claim["smoke"], true, "{claim}");
        assert_eq!(claim["rounds"], 1, "{claim}");
        assert!(claim["paper_low"].as_f64().unwrap() <= claim["paper_high"].as_f64().unwrap(), "{claim}");
        let verdict = claim["verdict"].as_str().unwrap();
        assert!(["reproduced", "direction", "inconclusive", "not reproduced", "not run"].contains(&verdict), "{claim}");
        if verdict != "not run" {
            let value = claim["ours_median"].as_f64().unwrap();
            assert_eq!(claim["ours_per_round"].as_array().unwrap().len(), 1, "{claim}");
            assert_eq!(claim["ours_min"].as_f64(), Some(value), "{claim}");
        }
    }
    // zen+'s exclusive-stage entries are counts of the run itself.
    let entries: Vec<&serde_json::Value> =
        verdicts.iter().filter(|claim| claim["claim"].as_str().unwrap().contains("exclusive-stage entries")).collect();
    assert_eq!(entries.len(), 2);
    for claim in entries {
        assert_eq!(claim["absolute"], true, "{claim}");
        let count = claim["ours_median"].as_f64().unwrap();
        assert!(count >= 0.0 && count.fract() == 0.0, "{claim}");
    }
    // sp3's recovery claims are ratios of two runs, both measured.
    for claim in verdicts.iter().filter(|claim| claim["figure"] == "sp3-fig8") {
        assert_eq!(claim["absolute"], false, "{claim}");
        assert!(claim["of_median"].as_f64().is_some_and(|ms| ms > 0.0), "{claim}");
        assert!(claim["over_median"].as_f64().is_some_and(|ms| ms > 0.0), "{claim}");
    }
}
