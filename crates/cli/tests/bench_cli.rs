//! End-to-end tests of `pmtx bench` and `pmtx plot`.

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

#[track_caller]
fn assert_fails(output: &Output, code: i32) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stdout:\n{}\nstderr:\n{stderr}", text(&output.stdout));
    assert!(!stderr.contains("panicked"), "pmtx panicked:\n{stderr}");
    stderr
}

#[track_caller]
fn number(value: &serde_json::Value, field: &str) -> f64 {
    value[field].as_f64().unwrap_or_else(|| panic!("{field} missing or not a number in {value}"))
}

/// The cell of `column` in data row `row` (1 = the first after the
/// header) of a CSV without quoted commas.
#[track_caller]
fn csv_cell(csv: &str, row: usize, column: &str) -> String {
    let header: Vec<&str> = csv.lines().next().expect("a header").split(',').collect();
    let index = header.iter().position(|name| *name == column).unwrap_or_else(|| panic!("no {column} in {csv}"));
    let line = csv.lines().nth(row).unwrap_or_else(|| panic!("no row {row} in {csv}"));
    line.split(',').nth(index).unwrap_or_else(|| panic!("row {row} has no {column}: {csv}")).to_string()
}

#[test]
fn bench_two_engines_two_thread_counts_then_plot() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "smallbank",
            "--accounts",
            "1000",
            "--engine",
            "silo,group-commit",
            "--threads",
            "1,2",
            "--duration",
            "0.5",
            "--warmup",
            "0.1",
            "--json",
            "r.json",
            "--csv",
            "r.csv",
        ],
    ));
    for needle in ["engine", "p99.9 µs", "flush/txn", "vs first", "durability:", "git revision:", "silo is not durable"]
    {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).expect("valid JSON");
    let config = &report["config"];
    for field in ["workload", "engines", "threads", "backend", "latency_model", "seed", "git_revision", "durability"] {
        assert!(!config[field].is_null(), "config.{field} missing: {config}");
    }
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4);
    let combinations: Vec<(String, u64)> = runs
        .iter()
        .map(|run| (run["engine"].as_str().unwrap().to_string(), run["threads"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        combinations,
        [("silo".into(), 1), ("silo".into(), 2), ("group-commit".into(), 1), ("group-commit".into(), 2)]
    );
    for run in runs {
        assert_eq!(run["workload"], "smallbank");
        assert_eq!(run["seed"], 42);
        assert_eq!(run["check_passed"], true, "{run}");
        for field in ["backend", "latency_model", "git_revision"] {
            assert!(run[field].is_string(), "{field} missing in {run}");
        }
        assert!(number(run, "duration_s") > 0.4);
        assert!(number(run, "committed") > 0.0, "{run}");
        assert!(number(run, "aborted") >= 0.0);
        assert!(number(run, "throughput_tps") > 0.0);
        let latency = &run["latency_us"];
        for field in ["mean", "p50", "p90", "p99", "p999", "max"] {
            assert!(number(latency, field) > 0.0, "latency_us.{field} in {run}");
        }
        assert!(number(latency, "p50") <= number(latency, "p99") && number(latency, "p99") <= number(latency, "max"));
        let per_type = run["per_type"].as_object().expect("per_type");
        assert!(!per_type.is_empty());
        let (mut committed, mut aborted) = (0.0, 0.0);
        for entry in per_type.values() {
            for field in ["mean", "p50", "p90", "p99", "p999", "max", "committed"] {
                number(entry, field);
            }
            committed += number(entry, "committed");
            aborted += number(entry, "aborted_attempts");
            let rate = number(entry, "abort_rate");
            assert!((0.0..1.0).contains(&rate), "abort_rate {rate} in {entry}");
            assert_eq!(rate > 0.0, number(entry, "aborted_attempts") > 0.0, "{entry}");
        }
        assert_eq!(committed, number(run, "committed"));
        // The aborts by type are the run's aborts of completed transactions:
        // never more than the run counts in all.
        assert!(aborted <= number(run, "aborted"), "{aborted} aborts by type, {} in all", number(run, "aborted"));
        for field in [
            "flushes_per_txn",
            "fences_per_txn",
            "bytes_per_txn",
            "blocks_256_per_txn",
            "nt_bytes_per_txn",
            "stall_ns_per_txn",
        ] {
            number(&run["pm"], field);
        }
        for field in ["hw_commits", "aborts", "fallbacks"] {
            number(&run["htm"], field);
        }
        // Memory after the load: 3 rows per account plus a ledger row per
        // load thread.
        assert!(number(run, "rss_after_load_bytes") > 0.0, "{run}");
        assert!(number(run, "rss_before_load_bytes") > 0.0, "{run}");
        assert!(run["rss_load_delta_bytes"].is_i64(), "{run}");
        let rows = number(run, "rows_loaded");
        assert!((3000.0..=3002.0).contains(&rows), "{run}");
        let per_row = number(run, "bytes_per_loaded_row");
        assert!((per_row - number(run, "rss_load_delta_bytes") / rows).abs() < 1e-6, "{run}");
        // The workers' CPU time fits in the phase, and steal is a share.
        let cpu = number(run, "worker_cpu_s");
        let threads = number(run, "threads");
        assert!(cpu > 0.0 && cpu <= number(run, "duration_s") * threads * 1.05 + 0.05, "{run}");
        let steal = number(run, "host_steal_share");
        assert!((0.0..=1.0).contains(&steal), "{run}");
        let reasons = run["aborts_by_reason"].as_object().expect("aborts_by_reason");
        assert!(reasons.contains_key("read_validation"));
        assert_eq!(reasons.values().map(|v| v.as_f64().unwrap()).sum::<f64>(), number(run, "aborted"));
    }
    // Silo never touches the pool; group commit writes its log there.
    assert_eq!(runs[0]["backend"], "none");
    assert_eq!(number(&runs[0]["pm"], "bytes_per_txn"), 0.0);
    assert_eq!(runs[2]["backend"], "emulated", "bench defaults to the emulated backend");
    assert!(number(&runs[2]["pm"], "bytes_per_txn") > 0.0);
    // Temporary pools are gone.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".pool"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    assert!(csv.starts_with("engine,workload,threads,"));
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for line in csv.lines().skip(1) {
        assert_eq!(line.split(',').count(), header.len(), "{csv}");
    }
    for column in [
        "rss_after_load_bytes",
        "rss_load_delta_bytes",
        "rows_loaded",
        "bytes_per_loaded_row",
        "tpcc_mix",
        "worker_cpu_s",
        "host_steal_share",
    ] {
        assert!(header.contains(&column), "CSV lacks {column}: {csv}");
    }
    assert!(stdout.contains("memory after load: RSS") && stdout.contains("bytes/row"), "{stdout}");
    assert!(stdout.contains("commits per worker CPU-second; host steal"), "{stdout}");
    assert!(report["config"]["workload_options"]["tpcc_mix_standard"] == true);

    let out = assert_ok(&pmtx(dir.path(), &["plot", "r.json", "-o", "r.svg"]));
    assert!(out.contains("r.svg"));
    let svg = std::fs::read_to_string(dir.path().join("r.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.contains("silo") && svg.contains("group-commit") && svg.contains("p99.9"));

    let out = assert_ok(&pmtx(dir.path(), &["plot", "r.json", "-o", "r.png"]));
    assert!(out.contains("r.png"));
    let png = std::fs::read(dir.path().join("r.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000, "{} bytes", png.len());

    let stderr = assert_fails(&pmtx(dir.path(), &["plot", "r.json", "-o", "r.gif"]), 2);
    assert!(stderr.contains("unknown output format") && stderr.contains(".png"), "{stderr}");
}

#[test]
fn bad_names_and_numbers_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "smallbank", "--engine", "silo,nosuch"]), 2);
    assert!(stderr.contains("unknown engine \"nosuch\"") && stderr.contains("group-commit"), "{stderr}");
    let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "tpch"]), 2);
    assert!(stderr.contains("unknown workload") && stderr.contains("smallbank"), "{stderr}");
    for bad in [
        &["--threads", "0"][..],
        &["--threads", "1,x"],
        &["--duration", "-1"],
        &["--warmup", "abc"],
        &["--pool-size", "1MiB"],
        &["--ycsb", "Z"],
        &["--accounts", "1"],
        &["--pm", "direct", "--pm-model", "optane"],
    ] {
        let mut args = vec!["bench", "--workload", "smallbank"];
        args.extend_from_slice(bad);
        let stderr = assert_fails(&pmtx(dir.path(), &args), 2);
        assert!(stderr.contains("error"), "{bad:?}: {stderr}");
    }
}

#[test]
fn given_pool_is_kept_and_foreign_files_are_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "--workload",
        "smallbank",
        "--accounts",
        "500",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--pool-size",
        "64MiB",
        "--pool",
        "b.pool",
    ];
    assert_ok(&pmtx(dir.path(), &args));
    assert!(dir.path().join("b.pool").exists());
    // A second run replaces the pool it left.
    assert_ok(&pmtx(dir.path(), &args));
    std::fs::write(dir.path().join("b.pool"), b"precious").unwrap();
    let stderr = assert_fails(&pmtx(dir.path(), &args), 1);
    assert!(stderr.contains("not a pmtx pool"), "{stderr}");
    assert_eq!(std::fs::read(dir.path().join("b.pool")).unwrap(), b"precious");
}

/// `dbx-disk` keeps its redo log in `<pool>.log` beside the pool: kept with
/// `--pool` like the pool, replaced by the next run, refused when it holds
/// something else; `--recover` reopens it; the report counts fdatasyncs.
#[test]
fn dbx_disk_log_directory_lives_and_goes_with_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "--workload",
        "smallbank",
        "--accounts",
        "500",
        "--engine",
        "dbx-disk",
        "--duration",
        "0.3",
        "--warmup",
        "0",
        "--pool-size",
        "64MiB",
        "--pool",
        "d.pool",
        "--recover",
        "--json",
        "r.json",
    ];
    let stdout = assert_ok(&pmtx(dir.path(), &args));
    assert!(stdout.contains("redo log on files"), "{stdout}");
    let log = dir.path().join("d.pool.log");
    assert!(dir.path().join("d.pool").exists() && log.join("pool-id").exists(), "kept with --pool");
    let report = read_json(&dir.path().join("r.json"));
    let run = &report["runs"][0];
    assert_eq!(run["check_passed"], true, "{run}");
    assert_eq!(run["recovery"]["check_passed"], true, "{run}");
    let syncs = run["log_file"]["fdatasyncs"].as_u64().unwrap();
    let committed = run["committed"].as_u64().unwrap();
    // One fdatasync per epoch (40 ms) and segment, far fewer than commits.
    assert!(syncs > 0 && syncs < committed / 10, "{syncs} fdatasyncs for {committed} commits");
    // A second run replaces pool and log.
    assert_ok(&pmtx(dir.path(), &args));
    // Anything but a log in the directory is not removed.
    std::fs::write(log.join("notes.txt"), b"precious").unwrap();
    let stderr = assert_fails(&pmtx(dir.path(), &args), 1);
    assert!(stderr.contains("not a pmtx redo log file"), "{stderr}");
    assert_eq!(std::fs::read(log.join("notes.txt")).unwrap(), b"precious");
    assert!(dir.path().join("d.pool").exists(), "the pool is kept when its log directory is refused");
}

/// The report names the revision the binary was built from, found at
/// build time: with no `git` to run (an empty PATH) and outside any
/// checkout it still does.
#[test]
fn reports_name_the_revision_the_binary_was_built_from() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pmtx"))
        .args(["bench", "--workload", "smallbank", "--accounts", "100", "--engine", "silo"])
        .args(["--duration", "0.1", "--warmup", "0", "--json", "r.json"])
        .current_dir(dir.path())
        .env("TMPDIR", dir.path())
        .env("PATH", "")
        .output()
        .expect("run pmtx");
    assert_ok(&output);
    let report = read_json(&dir.path().join("r.json"));
    let built = env!("PMTX_GIT_REVISION");
    assert_eq!(report["config"]["git_revision"], built, "{}", report["config"]);
    assert_eq!(report["runs"][0]["git_revision"], built);
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid JSON")
}

#[test]
fn engine_options_give_distinct_labelled_runs() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "smallbank",
            "--accounts",
            "500",
            "--engine",
            "dbxn,dbxn:nt=off:pad64=off:align256=off,dbx-naive:align256=off,dbxn:htm=sim:htm-abort=20,zen:cache=1MiB",
            "--duration",
            "0.2",
            "--warmup",
            "0",
            "--pool-size",
            "64MiB",
            "--json",
            "r.json",
            "--csv",
            "r.csv",
        ],
    ));
    assert!(stdout.contains("dbxn:nt=off:pad64=off:align256=off"), "{stdout}");
    assert!(stdout.contains("HTM regions"), "{stdout}");
    let report = read_json(&dir.path().join("r.json"));
    let labels: Vec<&str> =
        report["runs"].as_array().unwrap().iter().map(|run| run["engine"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "dbxn",
            "dbxn:nt=off:pad64=off:align256=off",
            "dbx-naive:align256=off",
            "dbxn:htm=sim:htm-abort=20",
            "zen:cache=1MiB"
        ]
    );
    assert_eq!(report["config"]["engines"].as_array().unwrap().len(), 5);
    let runs = &report["runs"];
    for (index, name) in ["dbxn", "dbxn", "dbx-naive", "dbxn", "zen"].iter().enumerate() {
        assert_eq!(runs[index]["engine_name"], *name, "{}", runs[index]);
        assert_eq!(runs[index]["check_passed"], true, "{}", runs[index]);
        assert!(runs[index]["recovery"].is_null());
    }
    // Every option in effect, defaults included.
    let full = &runs[0]["engine_options"];
    assert_eq!(
        (full["nt"].as_str(), full["pad64"].as_str(), full["align256"].as_str()),
        (Some("on"), Some("on"), Some("on"))
    );
    assert_eq!(full["htm"], "none");
    let off = &runs[1]["engine_options"];
    assert_eq!(
        (off["nt"].as_str(), off["pad64"].as_str(), off["align256"].as_str()),
        (Some("off"), Some("off"), Some("off"))
    );
    // Without nt, the log is written with ordinary stores.
    assert!(number(&runs[0]["pm"], "nt_bytes_per_txn") > 0.0, "{}", runs[0]);
    assert_eq!(number(&runs[1]["pm"], "nt_bytes_per_txn"), 0.0, "{}", runs[1]);
    assert_eq!(runs[2]["engine_options"]["align256"], "off");
    assert_eq!(runs[4]["engine_options"]["cache"], "1048576");
    // HTM: no instance by default (every commit on the software path); the
    // simulated backend counts its regions.
    let htm = &runs[0]["htm"];
    assert_eq!(htm["backend"], "none");
    assert_eq!(number(htm, "hw_commits"), 0.0);
    assert_eq!(number(htm, "software_path_commits"), number(&runs[0], "committed"));
    let sim = &runs[3]["htm"];
    assert_eq!(sim["backend"], "sim");
    assert!(number(sim, "regions") > 0.0 && number(sim, "hw_commits") > 0.0, "{sim}");
    assert!(number(sim, "aborts") > 0.0, "20% injected aborts: {sim}");
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    assert!(csv.lines().nth(2).unwrap().starts_with("dbxn:nt=off:pad64=off:align256=off,"), "{csv}");
    // The temporary pools (with file-safe names) are gone.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".pool"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn dbxn_ablation_preset_expands_to_the_fig_11_rows() {
    let dir = tempfile::tempdir().unwrap();
    assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "smallbank",
            "--accounts",
            "200",
            "--engine",
            "dbxn-ablation",
            "--duration",
            "0.1",
            "--warmup",
            "0",
            "--pool-size",
            "64MiB",
            "--json",
            "r.json",
        ],
    ));
    let report = read_json(&dir.path().join("r.json"));
    let labels: Vec<&str> =
        report["runs"].as_array().unwrap().iter().map(|run| run["engine"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "silo",
            "group-commit",
            "dbx-naive:nt=off:pad64=off:align256=off:medium=disk",
            "dbx-naive:nt=off:pad64=off:align256=off",
            "dbxn:nt=off:pad64=off:align256=off",
            "dbxn:nt=off:pad64=on:align256=off",
            "dbxn:nt=on:pad64=on:align256=off",
            "dbxn"
        ]
    );
    // The disk row syncs its log file for every writing commit, reports it,
    // and leaves no log directory behind; the other rows have no log file.
    for run in report["runs"].as_array().unwrap() {
        let log = &run["log_file"];
        if run["engine"].as_str().unwrap().contains("medium=disk") {
            let per_txn = log["fdatasyncs_per_txn"].as_f64().unwrap();
            assert!(per_txn > 0.5 && per_txn <= 1.01, "fdatasyncs per transaction: {per_txn}");
            assert_eq!(run["engine_options"]["medium"], "disk");
            let directory = log["directory"].as_str().unwrap();
            assert!(directory.ends_with(".pool.log"), "{directory}");
            assert!(!Path::new(directory).exists(), "{directory} was left behind");
        } else {
            assert!(log.is_null(), "{}: {log}", run["engine"]);
        }
    }
    let help = text(&pmtx(dir.path(), &["bench", "--help"]).stdout);
    for needle in ["dbxn-ablation", "pad64=on|off", "align256=on|off", "cache=<size>", "--recover"] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn cc_option_runs_each_protocol_under_its_own_label() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "smallbank",
            "--accounts",
            "200",
            "--engine",
            "silo:cc=no-wait,zen:cc=occ,group-commit:cc=dl-detect",
            "--threads",
            "2",
            "--duration",
            "0.1",
            "--warmup",
            "0",
            "--pool-size",
            "64MiB",
            "--json",
            "r.json",
        ],
    ));
    assert!(stdout.contains("zen:cc=occ"), "{stdout}");
    let report = read_json(&dir.path().join("r.json"));
    let runs = report["runs"].as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|run| run["engine"].as_str().unwrap()).collect();
    assert_eq!(labels, ["silo:cc=no-wait", "zen:cc=occ", "group-commit:cc=dl-detect"]);
    for (run, (name, cc)) in runs.iter().zip([("silo", "no-wait"), ("zen", "occ"), ("group-commit", "dl-detect")]) {
        assert_eq!(run["engine_name"], name, "{run}");
        assert_eq!(run["engine_options"]["cc"], cc, "{run}");
        assert_eq!(run["check_passed"], true, "{run}");
        assert!(number(run, "committed") > 0.0, "{run}");
    }
    let help = text(&pmtx(dir.path(), &["bench", "--help"]).stdout);
    for needle in ["cc=<protocol>", "zen-cc-matrix", "zen:cc=silo,zen:cc=occ", "cc-matrix", "silo:cc=no-wait"] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn bad_engine_specs_exit_2_and_list_the_valid_keys() {
    let dir = tempfile::tempdir().unwrap();
    for (spec, needles) in [
        (
            "dbxn:foo=1",
            &["unknown option \"foo\"", "nt=on|off", "pad64=on|off", "align256=on|off", "htm=none|sim|rtm"][..],
        ),
        ("dbxn:nt=maybe", &["expected on or off"]),
        ("dbxn:nt", &["not KEY=VALUE", "nt=on|off"]),
        ("silo:nt=off", &["valid keys of silo: cc=<protocol>"]),
        ("zen:cc=2pl", &["unknown concurrency-control protocol \"2pl\"", "no-wait", "dl-detect"]),
        ("zen:pad64=off", &["valid keys of zen: cache=<size>"]),
        ("zen:cache=lots", &["invalid size"]),
        ("dbxn:htm-abort=5", &["needs htm=sim"]),
        ("nosuch:nt=off", &["unknown engine \"nosuch\"", "dbxn-ablation"]),
    ] {
        let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "smallbank", "--engine", spec]), 2);
        for needle in needles {
            assert!(stderr.contains(needle), "{spec}: missing {needle:?} in {stderr}");
        }
    }
}

#[test]
fn recover_crashes_recovers_and_checks_durable_engines() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "smallbank",
            "--accounts",
            "500",
            "--engine",
            "silo,group-commit,dbxn:nt=off,zen",
            "--threads",
            "2",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            // Room for the log of a fast machine between checkpoints; no
            // periodic checkpoint in the run, so the crash always leaves
            // durable records after the last one (a checkpoint just before
            // the crash left none to apply on a loaded machine).
            "--pool-size",
            "256MiB",
            "--checkpoint-s",
            "1",
            "--recover",
            "--json",
            "r.json",
        ],
    ));
    assert!(stdout.contains("recovery (crash after the measured phase"), "{stdout}");
    let report = read_json(&dir.path().join("r.json"));
    assert_eq!(report["config"]["recover"], true);
    let runs = report["runs"].as_array().unwrap();
    assert!(runs[0]["recovery"].is_null(), "silo is not durable: {}", runs[0]);
    for run in &runs[1..] {
        assert_eq!(run["check_passed"], true, "{run}");
        assert!(number(run, "committed") > 0.0, "{run}");
        let recovery = &run["recovery"];
        assert!(number(recovery, "duration_ms") > 0.0, "{run}");
        assert!(number(recovery, "engine_duration_ms") > 0.0, "{run}");
        assert!(number(recovery, "duration_ms") >= number(recovery, "engine_duration_ms"), "{run}");
        assert_eq!(recovery["check_passed"], true, "{run}");
        assert_eq!(recovery["clean_shutdown"], false, "a crash is not a clean shutdown: {run}");
        assert_eq!(number(recovery, "pool_size_bytes"), (256u64 << 20) as f64);
        assert!(number(recovery, "pool_used_bytes_at_crash") > 0.0, "{run}");
        assert!(number(recovery, "crash_after_s") > 0.0);
    }
    // Log engines replay their logs; zen scans its heap.
    for run in &runs[1..3] {
        assert!(number(&run["recovery"], "log_records_scanned") > 0.0, "{run}");
        assert!(number(&run["recovery"], "log_records_applied") > 0.0, "{run}");
    }
    assert!(number(&runs[3]["recovery"], "heap_slots_scanned") > 0.0, "{}", runs[3]);
    assert!(number(&runs[3]["recovery"], "heap_tuples_recovered") >= 500.0, "{}", runs[3]);

    // A kept pool is closed cleanly after its recovery and stays valid.
    let kept = [
        "bench",
        "--workload",
        "smallbank",
        "--accounts",
        "300",
        "--engine",
        "group-commit",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--pool-size",
        "64MiB",
        "--pool",
        "b.pool",
        "--recover",
    ];
    assert_ok(&pmtx(dir.path(), &kept));
    let info = assert_ok(&pmtx(dir.path(), &["pool", "check", "b.pool"]));
    assert!(!info.is_empty());
}

#[test]
fn counted_runs_measure_exactly_n_transactions_per_worker_and_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let counted = |json: &str, engines: &str, threads: &str, extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--workload",
            "smallbank",
            "--accounts",
            "500",
            "--engine",
            engines,
            "--threads",
            threads,
            "--transactions",
            "300",
            "--warmup-transactions",
            "50",
            "--pool-size",
            "256MiB",
            "--json",
            json,
        ];
        args.extend_from_slice(extra);
        let stdout = assert_ok(&pmtx(dir.path(), &args));
        (stdout, read_json(&dir.path().join(json)))
    };
    let (stdout, report) = counted("c.json", "silo,group-commit,zen", "1,2", &["--recover"]);
    assert!(stdout.contains("300 transactions measured + 50 warm-up per worker"), "{stdout}");
    assert_eq!(report["config"]["transactions"], 300);
    assert_eq!(report["config"]["warmup_transactions"], 50);
    for run in report["runs"].as_array().unwrap() {
        // Every measured transaction ends one way: committed (and
        // acknowledged), rolled back or given up.
        let ended = number(run, "committed") + number(run, "rolled_back") + number(run, "gave_up");
        assert_eq!(ended, 300.0 * number(run, "threads"), "{run}");
        assert_eq!(run["check_passed"], true, "{run}");
        if run["durable"] == true {
            assert_eq!(run["recovery"]["check_passed"], true, "{run}");
        }
    }
    // One thread and one seed: the same work, transaction for transaction.
    let types = |report: &serde_json::Value| -> Vec<(String, f64, f64)> {
        let per_type = report["runs"][0]["per_type"].as_object().unwrap();
        per_type
            .iter()
            .map(|(name, figures)| (name.clone(), number(figures, "committed"), number(figures, "rolled_back")))
            .collect()
    };
    let (_, first) = counted("d1.json", "zen", "1", &[]);
    let (_, second) = counted("d2.json", "zen", "1", &[]);
    assert_eq!(types(&first), types(&second));

    // Counted and timed phases do not mix; counts are whole and positive.
    for bad in [
        &["--transactions", "0"][..],
        &["--transactions", "1.5"],
        &["--transactions", "10", "--duration", "1"],
        &["--transactions", "10", "--warmup", "1"],
        &["--warmup-transactions", "10"],
    ] {
        let mut args = vec!["bench", "--workload", "smallbank", "--engine", "silo"];
        args.extend_from_slice(bad);
        let stderr = assert_fails(&pmtx(dir.path(), &args), 2);
        assert!(stderr.contains("--transactions") || stderr.contains("--warmup"), "{bad:?}: {stderr}");
    }
}

#[test]
fn tpcc_mix_runs_only_the_given_types_and_is_marked_non_standard() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "tpcc",
            "--tpcc-items",
            "1000",
            "--tpcc-customers",
            "30",
            "--tpcc-mix",
            "new_order=50,payment=50",
            "--engine",
            "silo",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--json",
            "r.json",
            "--csv",
            "r.csv",
        ],
    ));
    assert!(stdout.contains("NON-STANDARD TPC-C mix new_order=50,payment=50"), "{stdout}");
    assert!(stdout.contains("NON-STANDARD mix new_order=50,payment=50"), "workload line: {stdout}");
    let report = read_json(&dir.path().join("r.json"));
    let options = &report["config"]["workload_options"];
    assert_eq!(options["tpcc_mix"], serde_json::json!({"new_order": 50, "payment": 50}), "{options}");
    assert_eq!(options["tpcc_mix_standard"], false, "{options}");
    let run = &report["runs"][0];
    assert_eq!(run["check_passed"], true, "{run}");
    let per_type = &run["per_type"];
    assert!(number(&per_type["new_order"], "committed") > 0.0, "{run}");
    assert!(number(&per_type["payment"], "committed") > 0.0, "{run}");
    for other in ["order_status", "delivery", "stock_level"] {
        assert_eq!(number(&per_type[other], "committed"), 0.0, "{other} must not run: {run}");
    }
    // 1 warehouse, 10 districts, 1000 items and stock rows, 30 customers,
    // history rows and orders per district, 9 new orders per district and
    // 5..=15 lines per order.
    let fixed = 1.0 + 10.0 + 2.0 * 1000.0 + 10.0 * (3.0 * 30.0 + 9.0);
    let rows = number(run, "rows_loaded");
    assert!((fixed + 300.0 * 5.0..=fixed + 300.0 * 15.0).contains(&rows), "{run}");
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    assert_eq!(csv_cell(&csv, 1, "tpcc_mix"), "new_order=50;payment=50", "{csv}");
    assert_eq!(csv_cell(&csv, 1, "tpcc_mix_standard"), "false", "{csv}");

    // The standard mix given explicitly is the standard mix.
    let standard = "new_order=45,payment=43,order_status=4,delivery=4,stock_level=4";
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "tpcc",
            "--tpcc-items",
            "1000",
            "--tpcc-customers",
            "30",
            "--tpcc-mix",
            standard,
            "--engine",
            "silo",
            "--duration",
            "0.1",
            "--warmup",
            "0",
            "--json",
            "s.json",
        ],
    ));
    assert!(!stdout.contains("NON-STANDARD TPC-C mix"), "{stdout}");
    let report = read_json(&dir.path().join("s.json"));
    assert_eq!(report["config"]["workload_options"]["tpcc_mix_standard"], true);
    assert_eq!(report["config"]["workload_options"]["tpcc_mix"]["delivery"], 4);
}

#[test]
fn bad_tpcc_mixes_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    for (mix, needle) in [
        ("new_order=0,payment=50", "from 1 to"),
        ("new_order=-1", "from 1 to"),
        ("new_order=50,paymnet=50", "unknown transaction type \"paymnet\""),
        ("payment=1,payment=2", "payment is given twice"),
        ("new_order", "not TYPE=WEIGHT"),
        ("", "empty"),
    ] {
        let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "tpcc", "--tpcc-mix", mix]), 2);
        assert!(stderr.contains("--tpcc-mix") && stderr.contains(needle), "{mix:?}: {stderr}");
        assert!(stderr.contains("new_order, payment, order_status, delivery, stock_level"), "{mix:?}: {stderr}");
    }
    let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "smallbank", "--tpcc-mix", "new_order=1"]), 2);
    assert!(stderr.contains("--tpcc-mix applies to --workload tpcc only"), "{stderr}");
    let help = text(&pmtx(dir.path(), &["bench", "--help"]).stdout);
    assert!(help.contains("--tpcc-mix") && help.contains("NON-STANDARD mix"), "{help}");
}

#[test]
fn queue_workload_reports_per_type_and_checks_after_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "queue",
            "--queue-length",
            "200",
            "--queue-mix",
            "enqueue=40,dequeue=40,peek=20",
            "--engine",
            "silo,group-commit",
            "--threads",
            "2",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--pool-size",
            "256MiB",
            "--checkpoint-s",
            "0.2",
            "--recover",
            "--json",
            "q.json",
        ],
    ));
    assert!(stdout.contains("200 items of 100 B per partition"), "{stdout}");
    let report = read_json(&dir.path().join("q.json"));
    assert_eq!(report["config"]["workload_options"]["queue_mix"], "enqueue=40,dequeue=40,peek=20");
    for run in report["runs"].as_array().unwrap() {
        assert_eq!(run["check_passed"], true, "{run}");
        for name in ["enqueue", "dequeue", "peek"] {
            assert!(number(&run["per_type"][name], "committed") > 0.0, "no {name} in {run}");
        }
    }
    // The durable run was checked on the recovered database, where commits
    // that were not yet durable are gone.
    assert_eq!(report["runs"][1]["recovery"]["check_passed"], true);
    let stderr = text(&pmtx(dir.path(), &["bench", "--workload", "ycsb", "--queue-scan", "3"]).stderr);
    assert!(stderr.contains("--queue-scan applies to --workload queue only"), "{stderr}");
}

#[test]
fn pmdk_applies_to_the_micro_workloads_only() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "smallbank", "--pmdk"]), 2);
    assert!(stderr.contains("--pmdk applies to the micro workloads") && stderr.contains("not smallbank"), "{stderr}");
}

#[test]
fn pmdk_baseline_runs_after_the_engines() {
    if let Err(error) = pmtx_pmdk::available() {
        eprintln!("skipping the PMDK baseline test: {error}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "hash",
            "--engine",
            "sp3",
            "--pmdk",
            "--threads",
            "1",
            "--duration",
            "0.2",
            "--warmup",
            "0",
            "--micro-entries",
            "2000",
            "--pm",
            "direct",
            "--json",
            "r.json",
            "--csv",
            "r.csv",
        ],
    ));
    for needle in ["note: PMDK baseline", "pmdk x1: ", "sp3/pmdk x1: ", "PMDK: 1 of 1 passed"] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let report = read_json(&dir.path().join("r.json"));
    assert_eq!(report["runs"].as_array().unwrap().len(), 1);
    let pmdk_runs = report["pmdk_runs"].as_array().expect("pmdk_runs");
    assert_eq!(pmdk_runs.len(), 1, "{report}");
    let run = &pmdk_runs[0];
    assert_eq!(run["check_passed"], true, "{run}");
    assert_eq!(
        (run["workload"].as_str(), run["threads"].as_u64(), run["seed"].as_u64()),
        (Some("hash"), Some(1), Some(42))
    );
    assert!(number(run, "committed") > 0.0, "{run}");
    assert!(number(run, "throughput_tps") > 0.0, "{run}");
    let per_type: f64 = ["insert", "search"].iter().map(|name| number(&run["per_type"], name)).sum();
    assert_eq!(per_type, number(run, "committed"), "{run}");
    assert!(number(&run["engine_over_pmdk"], "sp3") > 0.0, "{run}");
    // The pool was a temporary file (TMPDIR is the test's directory), removed.
    let mut left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, ["r.csv", "r.json"], "files left behind");
    // The CSV has a pmdk row with as many columns as the header.
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[2].starts_with("pmdk,hash,1,"), "{csv}");
    assert!(lines.iter().all(|line| line.split(',').count() == lines[0].split(',').count()), "{csv}");

    // A file at the PMDK pool path of --pool is refused before any run starts.
    std::fs::write(dir.path().join("b.pool.pmdk"), b"precious").unwrap();
    let args = ["bench", "--workload", "sps", "--pmdk", "--pool", "b.pool", "--duration", "0.2"];
    let stderr = assert_fails(&pmtx(dir.path(), &args), 1);
    assert!(stderr.contains("b.pool.pmdk already exists"), "{stderr}");
    assert!(!stderr.contains("[1/"), "a run started:\n{stderr}");
    assert_eq!(std::fs::read(dir.path().join("b.pool.pmdk")).unwrap(), b"precious");
    assert!(!dir.path().join("b.pool").exists());
}

/// `nvm-ideal` has no concurrency control: two threads on the shared queue
/// break it (lost updates), which the bench reports without failing the
/// command, after a note that says so up front.
#[test]
fn a_failed_check_of_the_engine_without_concurrency_control_does_not_fail_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "sp3-queue",
            "--engine",
            "nvm-ideal",
            "--threads",
            "2",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--micro-entries",
            "1000",
            "--pm",
            "direct",
            "--json",
            json.to_str().unwrap(),
        ],
    ));
    assert!(stdout.contains("nvm-ideal has no concurrency control"), "{stdout}");
    let report = read_json(&json);
    assert_eq!(report["runs"][0]["engine_name"], "nvm-ideal");
}

#[test]
fn long_threads_report_short_and_long_throughput_apart() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "ycsb",
            "--ycsb",
            "srq",
            "--long-threads",
            "1",
            "--records",
            "2000",
            "--engine",
            "silo",
            "--threads",
            "2",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--json",
            "r.json",
            "--csv",
            "r.csv",
        ],
    ));
    assert!(stdout.contains("--long-threads 1: worker 0 runs lrq (256 rows"), "{stdout}");
    // The per-type table has a throughput column and a row per class.
    let table: Vec<&str> = stdout.lines().skip_while(|line| !line.starts_with("per transaction type")).collect();
    let header: Vec<&str> = table[1].split_whitespace().collect();
    assert_eq!(header[..5], ["engine", "threads", "type", "committed", "tps"], "{stdout}");
    for class in ["short", "long"] {
        let row: Vec<&str> = table
            .iter()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|cells| cells.get(2) == Some(&class))
            .unwrap_or_else(|| panic!("no {class} row in {stdout}"));
        assert!(row[4].parse::<f64>().unwrap() > 0.0, "{class}: {row:?}");
    }

    let report = read_json(&dir.path().join("r.json"));
    assert_eq!(report["config"]["workload_options"]["long_threads"], 1);
    let run = &report["runs"][0];
    assert_eq!(run["check_passed"], true, "{run}");
    let per_type = run["per_type"].as_object().unwrap();
    let mut names: Vec<&str> = per_type.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["long", "short"], "{run}");
    let duration = number(run, "duration_s");
    let mut committed = 0.0;
    for class in ["short", "long"] {
        let entry = &per_type[class];
        assert!(number(entry, "committed") > 0.0, "no {class} commits: {run}");
        let tps = number(entry, "throughput_tps");
        assert!((tps - number(entry, "committed") / duration).abs() < 1e-6 * tps.max(1.0), "{class}: {entry}");
        committed += number(entry, "committed");
    }
    assert_eq!(committed, number(run, "committed"), "the classes add up to the run: {run}");
    // One thread scans 256 rows per transaction, the other 16.
    assert!(number(&per_type["short"], "committed") > number(&per_type["long"], "committed"), "{run}");

    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    assert_eq!(csv_cell(&csv, 1, "long_threads"), "1", "{csv}");
    let tps = csv_cell(&csv, 1, "per_type_tps");
    assert!(tps.starts_with("long=") && tps.contains(";short="), "{csv}");
}

#[test]
fn long_threads_refuse_other_workloads_variants_and_too_few_threads() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (&["--workload", "ycsb", "--ycsb", "A", "--threads", "2"][..], "needs --ycsb srq, lrq, sru or lru"),
        (&["--workload", "ycsb", "--threads", "2"], "not --ycsb A"),
        (&["--workload", "smallbank", "--threads", "2"], "applies to --workload ycsb"),
        (
            &["--workload", "ycsb", "--ycsb", "sru", "--threads", "1,2"],
            "at --threads 1: every thread count must be at least 2",
        ),
        (&["--workload", "ycsb", "--ycsb", "lrq"], "at --threads 1:"),
    ] {
        let mut full = vec!["bench", "--long-threads", "1", "--engine", "silo", "--duration", "0.1"];
        full.extend_from_slice(args);
        let stderr = assert_fails(&pmtx(dir.path(), &full), 2);
        assert!(stderr.contains("--long-threads") && stderr.contains(needle), "{args:?}: {stderr}");
    }
    let stderr = assert_fails(&pmtx(dir.path(), &["bench", "--workload", "ycsb", "--long-threads", "1024"]), 2);
    assert!(stderr.contains("from 0 to 1023"), "{stderr}");
    let stderr = assert_fails(
        &pmtx(dir.path(), &["soak", "--workload", "ycsb", "--ycsb", "srq", "--long-threads", "2", "--threads", "2"]),
        2,
    );
    assert!(stderr.contains("--long-threads 2 leaves no thread for short transactions"), "{stderr}");
    let help = text(&pmtx(dir.path(), &["bench", "--help"]).stdout);
    assert!(help.contains("--long-threads <N>") && help.contains("Fig. 5e"), "{help}");
}

/// `--provision auto` populates free chunks at the end of the warm-up of a
/// durable run (at least the prefault window) and reports what the measured
/// phase allocated; `off` provisions nothing; engines without a pool report
/// no pool figures.
#[test]
fn provision_populates_free_chunks_before_the_measured_phase() {
    let dir = tempfile::tempdir().unwrap();
    let run = |provision: &str, json: &str| {
        let stdout = assert_ok(&pmtx(
            dir.path(),
            &[
                "bench",
                "--workload",
                "smallbank",
                "--accounts",
                "500",
                "--engine",
                "silo,dbxn",
                "--duration",
                "0.3",
                "--warmup",
                "0.2",
                "--pool-size",
                "256MiB",
                "--provision",
                provision,
                "--json",
                json,
            ],
        ));
        (stdout, read_json(&dir.path().join(json)))
    };
    let (stdout, report) = run("auto", "auto.json");
    let runs = report["runs"].as_array().unwrap();
    assert!(runs[0]["pool_allocated_measured_bytes"].is_null(), "silo has no pool: {}", runs[0]);
    assert_eq!(number(&runs[0], "pool_provisioned_bytes"), 0.0);
    // At least the prefault window (8 chunks of 2 MiB) is provisioned.
    assert!(number(&runs[1], "pool_provisioned_bytes") >= (16u64 << 20) as f64, "{}", runs[1]);
    assert!(runs[1]["pool_provision_error"].is_null(), "{}", runs[1]);
    assert!(number(&runs[1], "pool_allocated_measured_bytes") >= 0.0);
    assert!(stdout.contains("of free chunks provisioned before it"), "{stdout}");
    let (stdout, report) = run("off", "off.json");
    assert_eq!(number(&report["runs"][1], "pool_provisioned_bytes"), 0.0, "{}", report["runs"][1]);
    assert!(stdout.contains("not provisioned"), "{stdout}");
    assert_fails(&pmtx(dir.path(), &["bench", "--workload", "smallbank", "--provision", "always"]), 2);
}

/// `--route-by-partition`: zen+ on two (logical) nodes assigns each
/// transaction a worker (Algorithm 3; δ = 1 turns off its load balance,
/// so about half the transactions belong to the other worker's node) and
/// the workers hand each other the ones assigned elsewhere; every transaction drawn runs exactly once and
/// the per-worker commits add up to the run's. An engine without a
/// preference runs every transaction where it was drawn.
#[test]
fn route_by_partition_forwards_and_runs_every_transaction_once() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "ycsb",
            "--records",
            "2000",
            "--engine",
            "zen+:numa=2:delta=1,silo",
            "--threads",
            "2",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--route-by-partition",
            "--json",
            "r.json",
        ],
    ));
    assert!(stdout.contains("routing: "), "{stdout}");
    let report = read_json(&dir.path().join("r.json"));
    assert_eq!(report["config"]["route_by_partition"], true);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        let routing = &run["routing"];
        let workers = routing["workers"].as_array().unwrap();
        assert_eq!(workers.len(), 2, "{routing}");
        let sum = |field: &str| workers.iter().map(|worker| number(worker, field)).sum::<f64>();
        // Nothing lost, nothing run twice.
        assert_eq!(number(routing, "executed"), number(routing, "generated"), "{routing}");
        assert_eq!(sum("generated"), number(routing, "generated"), "{routing}");
        assert_eq!(sum("executed"), number(routing, "executed"), "{routing}");
        assert_eq!(sum("received"), number(routing, "forwarded"), "every forwarded transaction ran once: {routing}");
        assert_eq!(sum("forwarded"), number(routing, "forwarded"), "{routing}");
        assert_eq!(sum("committed"), number(run, "committed"), "{routing}");
        assert!(number(run, "committed") > 0.0);
        assert_eq!(run["check_passed"], true, "{run}");
    }
    let (zen, silo) = (&runs[0]["routing"], &runs[1]["routing"]);
    assert!(number(zen, "forwarded") > 0.0, "zen+ on two nodes forwards: {zen}");
    assert_eq!(number(zen, "assigned"), number(zen, "generated"), "{zen}");
    assert!(number(&runs[0]["engine_counters"], "numa_assigned") > 0.0);
    assert_eq!(number(silo, "assigned"), 0.0, "silo has no preference: {silo}");
    assert_eq!(number(silo, "forwarded"), 0.0, "{silo}");
}

#[test]
fn route_by_partition_needs_a_workload_that_plans_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = assert_fails(
        &pmtx(dir.path(), &["bench", "--workload", "smallbank", "--accounts", "1000", "--route-by-partition"]),
        2,
    );
    assert!(stderr.contains("--route-by-partition"), "{stderr}");
}

/// `--nvm-dram-ratio` with TPC-C: the loaded tuples over P set every
/// engine's DRAM budget, and the runs pass their checks.
#[test]
fn nvm_dram_ratio_applies_to_tpcc() {
    let dir = tempfile::tempdir().unwrap();
    assert_ok(&pmtx(
        dir.path(),
        &[
            "bench",
            "--workload",
            "tpcc",
            "--tpcc-items",
            "1000",
            "--tpcc-customers",
            "30",
            "--engine",
            "zen,mmdb",
            "--nvm-dram-ratio",
            "4",
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--json",
            "r.json",
        ],
    ));
    let report = read_json(&dir.path().join("r.json"));
    let config = &report["config"];
    let loaded = number(config, "loaded_database_bytes");
    assert!(loaded > 0.0, "{config}");
    assert_eq!(number(config, "dram_budget_bytes"), (loaded / 4.0).floor(), "{config}");
    for run in report["runs"].as_array().unwrap() {
        assert_eq!(run["check_passed"], true, "{run}");
        assert!(number(run, "committed") > 0.0);
    }
}
