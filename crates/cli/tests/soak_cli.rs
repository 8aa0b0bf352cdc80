//! End-to-end tests of `pmtx soak`: short runs on a volatile and a durable
//! engine with their JSON report, another workload, and bad options.

use std::path::Path;
use std::process::{Command, Output};

fn pmtx(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmtx"))
        .args(args)
        .current_dir(dir)
        // Temporary pools go to the test's own directory.
        .env("TMPDIR", dir)
        .output()
        .expect("run pmtx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "pmtx failed with {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid JSON")
}

#[track_caller]
fn number(value: &serde_json::Value, field: &str) -> f64 {
    value[field].as_f64().unwrap_or_else(|| panic!("{field} missing or not a number in {value}"))
}

#[test]
fn soak_reports_intervals_summary_and_verdict_on_a_volatile_and_a_durable_engine() {
    for engine in ["silo", "group-commit"] {
        let dir = tempfile::tempdir().unwrap();
        let stdout = assert_ok(&pmtx(
            dir.path(),
            &[
                "soak",
                "--minutes",
                "0.05",
                "--interval-s",
                "1",
                "--engine",
                engine,
                "--pm",
                "direct",
                "--checkpoint-s",
                "1",
                "--json",
                "soak.json",
            ],
        ));
        for needle in ["pmtx soak: queue on", "rows unlinked", "peek p99", "summary:", "verdict: ", "check: passed"] {
            assert!(stdout.contains(needle), "{engine}: missing {needle:?} in:\n{stdout}");
        }
        assert!(stdout.contains("verdict: flat") || stdout.contains("verdict: growing"), "{stdout}");

        let report = read_json(&dir.path().join("soak.json"));
        let config = &report["config"];
        assert_eq!(config["engine"], engine);
        assert_eq!(config["workload"], "queue");
        assert_eq!(config["threads"], 2);
        assert_eq!(config["probe"], "peek");
        assert_eq!(config["workload_options"]["queue_mix"], "enqueue=45,dequeue=45,peek=10");
        assert_eq!(config["workload_options"]["queue_length"], 1000);
        assert_eq!(config["backend"], if engine == "silo" { "none" } else { "direct" });
        assert_eq!(number(config, "minutes"), 0.05);
        assert_eq!(number(config, "interval_s"), 1.0);

        // 3 s in intervals of 1 s.
        let intervals = report["intervals"].as_array().expect("intervals");
        assert_eq!(intervals.len(), 3, "{intervals:?}");
        let mut committed = 0.0;
        for (index, interval) in intervals.iter().enumerate() {
            assert_eq!(interval["index"], index);
            assert!(number(interval, "end_s") > number(interval, "start_s"));
            for field in [
                "throughput_tps",
                "rss_bytes",
                "rss_anon_bytes",
                "rss_file_bytes",
                "rows_indexed",
                "rows_indexed_mean",
                "rows_indexed_max",
                "live_rows",
                "absent_rows_mean",
                "rows_unlinked",
                "probe_count",
                "probe_p50_us",
                "probe_p99_us",
            ] {
                number(interval, field);
            }
            assert!(number(interval, "rss_bytes") > 0.0);
            assert!(number(interval, "probe_p99_us") >= number(interval, "probe_p50_us"));
            committed += number(interval, "committed");
        }
        assert!(committed > 0.0, "{engine}: nothing committed");

        let summary = &report["summary"];
        assert_eq!(summary["baseline"]["first_interval"], 0, "a run of 3 s has no interval after the first minute");
        assert_eq!(summary["last"]["first_interval"], 2);
        number(&summary["baseline"], "rss_bytes");
        number(&summary["last"], "probe_p99_us");
        assert_eq!(summary["baseline_after_first_minute"], false);
        assert!(["flat", "growing"].contains(&summary["verdict"].as_str().unwrap()));
        for field in
            ["rss_growth_bytes", "rss_growth_percent", "probe_p50_ratio", "probe_p99_ratio", "rows_indexed_ratio"]
        {
            number(summary, field);
        }
        assert_eq!(number(&summary["thresholds"], "probe_p99_ratio_max"), 1.5);
        assert_eq!(number(&summary["thresholds"], "rss_growth_mib_max"), 32.0);

        for name in ["enqueue", "dequeue", "peek"] {
            let per_type = &report["per_type"][name];
            assert!(number(per_type, "committed") > 0.0, "{engine}: no {name} committed");
            number(&per_type["execution_us"], "p99");
        }
        assert_eq!(report["check_passed"], true, "{report}");
        if engine == "group-commit" {
            let files: Vec<_> =
                std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
            assert!(
                !files.iter().any(|name| name.to_string_lossy().ends_with(".pool")),
                "temporary pool left: {files:?}"
            );
        }
    }
}

#[test]
fn soak_runs_other_workloads_with_every_transaction_as_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "soak",
            "--workload",
            "smallbank",
            "--accounts",
            "1000",
            "--engine",
            "silo",
            "--threads",
            "1",
            "--minutes",
            "0.02",
            "--interval-s",
            "0.4",
            "--json",
            "s.json",
        ],
    ));
    assert!(stdout.contains("all p99") && stdout.contains("verdict: "), "{stdout}");
    let report = read_json(&dir.path().join("s.json"));
    assert_eq!(report["config"]["probe"], "all");
    assert!(report["intervals"][0]["live_rows"].is_null(), "smallbank does not count its rows");
    assert!(report["intervals"][0]["absent_rows_mean"].is_null());
    assert_eq!(report["config"]["workload"], "smallbank");
    assert_eq!(report["intervals"].as_array().unwrap().len(), 3, "1.2 s in intervals of 0.4 s");
    assert_eq!(report["check_passed"], true);
}

#[test]
fn bad_soak_options_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (&["--minutes", "0"][..], "more than 0"),
        (&["--minutes", "ten"], "expected minutes"),
        (&["--interval-s", "0"], "more than 0"),
        (&["--minutes", "0.05", "--interval-s", "10"], "longer than the run"),
        (&["--engine", "dbxn-ablation"], "soak runs one engine"),
        (&["--engine", "nope"], "valid engines"),
        (&["--engine", "silo,zen"], "unknown engine"),
        (&["--engine", "zen:nt=off"], "valid keys of zen"),
        (&["--workload", "tpch"], "valid workloads"),
        (&["--threads", "0"], "invalid thread count"),
        (&["--pm", "sim"], "soak on direct or emulated"),
        (&["--pool-size", "1MiB"], "too small"),
        (&["--queue-mix", "push=1"], "unknown transaction type \"push\""),
        (&["--queue-scan", "0"], "positive integer"),
        (&["--workload", "tpcc", "--queue-length", "5"], "--queue-length applies to --workload queue only"),
        (&["--tpcc-mix", "new_order=1"], "--tpcc-mix applies to --workload tpcc only"),
    ] {
        let mut command = vec!["soak"];
        command.extend_from_slice(args);
        let output = pmtx(dir.path(), &command);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: stdout:\n{}\nstderr:\n{stderr}", text(&output.stdout));
        assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn soak_help_documents_the_options_and_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let help = assert_ok(&pmtx(dir.path(), &["soak", "--help"]));
    for needle in
        ["--minutes", "--interval-s", "--engine", "--queue-mix", "--queue-length", "--pool-size", "flat =", "< 1.5"]
    {
        assert!(help.contains(needle), "missing {needle:?} in:\n{help}");
    }
    let top = assert_ok(&pmtx(dir.path(), &["--help"]));
    assert!(top.contains("soak"), "{top}");
}
