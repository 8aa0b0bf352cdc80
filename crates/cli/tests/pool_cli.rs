//! End-to-end tests of the `pmtx` binary.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Command, Output};

fn pmtx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmtx")).args(args).output().expect("run pmtx")
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

/// Asserts a clean failure with `code` and returns stderr.
#[track_caller]
fn assert_fails(output: &Output, code: i32) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stdout:\n{}\nstderr:\n{stderr}", text(&output.stdout));
    assert!(!stderr.contains("panicked"), "pmtx panicked:\n{stderr}");
    stderr
}

fn create(path: &Path) {
    assert_ok(&pmtx(&["pool", "create", path.to_str().unwrap(), "--size", "16MiB", "--chunk-size", "1MiB"]));
}

#[test]
fn create_info_check_on_a_fresh_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.pool");
    let p = path.to_str().unwrap();
    let out = assert_ok(&pmtx(&["pool", "create", p, "--size", "16MiB", "--chunk-size", "1MiB"]));
    assert!(out.contains("created pool"), "{out}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 << 20);

    let info = assert_ok(&pmtx(&["pool", "info", p]));
    for needle in
        ["chunk size        1 MiB", "clean shutdown    yes", "open count        0", "flush instruction", "durability"]
    {
        assert!(info.contains(needle), "missing {needle:?} in:\n{info}");
    }
    // info does not count as an open.
    let json = assert_ok(&pmtx(&["pool", "info", p, "--json"]));
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["open_count"], 0);
    assert_eq!(value["clean_shutdown"], true);
    assert_eq!(value["chunk_size_bytes"], 1 << 20);
    assert_eq!(value["size_bytes"], 16 << 20);
    assert_eq!(value["chunks_used"], 0);
    assert_eq!(value["backend"]["dax"], false);
    assert!(value["backend"]["durability"].as_str().unwrap().contains("process crash only"));

    let check = assert_ok(&pmtx(&["pool", "check", p]));
    assert!(check.contains("is consistent"), "{check}");
}

#[test]
fn create_refuses_an_existing_file_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exists.pool");
    std::fs::write(&path, b"precious").unwrap();
    let p = path.to_str().unwrap();
    let stderr = assert_fails(&pmtx(&["pool", "create", p, "--size", "16MiB"]), 1);
    assert!(stderr.contains("already exists") && stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    assert_ok(&pmtx(&["pool", "create", p, "--size", "16MiB", "--force"]));
    assert_ok(&pmtx(&["pool", "check", p]));
}

#[test]
fn create_rejects_bad_sizes_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.pool");
    let p = p.to_str().unwrap();
    for args in [
        &["--size", "12XB"][..],
        &["--size", "lots"],
        &["--size", "1GB"],
        &["--chunk-size", "3MiB"],
        &["--chunk-size", "4KiB"],
        &["--size", "100KiB"],
    ] {
        let mut full = vec!["pool", "create", p];
        full.extend_from_slice(args);
        let stderr = assert_fails(&pmtx(&full), 2);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
    assert!(!Path::new(p).exists(), "a refused create must not leave a file");
}

#[test]
fn check_rejects_damaged_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();

    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, vec![0x5Au8; 1 << 20]).unwrap();
    let stderr = assert_fails(&pmtx(&["pool", "check", garbage.to_str().unwrap()]), 1);
    assert!(stderr.starts_with("error: ") && stderr.contains("not a pmtx pool"), "{stderr}");

    let truncated = dir.path().join("truncated.pool");
    create(&truncated);
    std::fs::OpenOptions::new().write(true).open(&truncated).unwrap().set_len(4 << 20).unwrap();
    let stderr = assert_fails(&pmtx(&["pool", "check", truncated.to_str().unwrap()]), 1);
    assert!(stderr.contains("truncated"), "{stderr}");

    let flipped = dir.path().join("flipped.pool");
    create(&flipped);
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&flipped).unwrap();
    file.seek(SeekFrom::Start(pmtx_pm::layout::header::POOL_ID as u64)).unwrap();
    file.write_all(&[0xFF]).unwrap();
    drop(file);
    let stderr = assert_fails(&pmtx(&["pool", "check", flipped.to_str().unwrap()]), 1);
    assert!(stderr.contains("checksum mismatch"), "{stderr}");
    // info refuses it the same way.
    let stderr = assert_fails(&pmtx(&["pool", "info", flipped.to_str().unwrap()]), 1);
    assert!(stderr.contains("damaged"), "{stderr}");

    let missing = dir.path().join("missing.pool");
    let stderr = assert_fails(&pmtx(&["pool", "check", missing.to_str().unwrap()]), 1);
    assert!(stderr.contains("no such pool file"), "{stderr}");

    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert_fails(&pmtx(&["pool", "check", empty.to_str().unwrap()]), 1);
}

#[test]
fn smoke_runs_and_reports_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("smoke.pool");
    let p = path.to_str().unwrap();
    let output = pmtx(&["smoke", "--pool", p, "--seconds", "0.2"]);
    let stdout = assert_ok(&output);
    for needle in ["ops/s", "median ns", "append 64 B, flush+fence", "random 64 B", "durability:", "backend: direct"] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    assert!(text(&output.stderr).contains("[7/7]"), "no progress on stderr");
    // The pool it created is left consistent, clean and without a leaked chunk.
    let json = assert_ok(&pmtx(&["pool", "info", p, "--json"]));
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["clean_shutdown"], true);
    assert_eq!(value["chunks_used"], 0);
    assert_eq!(value["size_bytes"], 64 << 20);

    let json = assert_ok(&pmtx(&["smoke", "--pool", p, "--seconds", "0.2", "--pm", "emulated", "--json"]));
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["backend"]["kind"], "emulated");
    assert_eq!(value["latency_model"]["name"], "optane");
    let cases = value["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 7);
    for case in cases {
        assert!(case["ops"].as_u64().unwrap() > 0, "{case}");
        assert!(case["ops_per_second"].as_f64().unwrap() > 0.0, "{case}");
        assert_eq!(case["per_op"]["fences"], 1.0, "{case}");
        assert!(case["per_op"]["stall_ns"].as_f64().unwrap() > 100.0, "optane must stall: {case}");
    }
}

#[test]
fn smoke_rejects_bad_options() {
    for args in [
        &["smoke", "--bogus"][..],
        &["smoke", "--pm", "sim"],
        &["smoke", "--pm-model", "dram"], // model without --pm emulated
        &["smoke", "--seconds", "0"],
        &["smoke", "--seconds", "soon"],
        &["smoke", "--eadr", "--flush", "clwb"],
    ] {
        let stderr = assert_fails(&pmtx(args), 2);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn smoke_leaves_an_unclean_pool_unclean() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unclean.pool");
    {
        let options = pmtx_pm::PmOptions::default();
        pmtx_pm::Pool::<pmtx_pm::Direct>::create(&path, 16 << 20, 1 << 20, &options).unwrap().close();
        // Opened and dropped without close: a crash as far as the pool knows.
        drop(pmtx_pm::Pool::<pmtx_pm::Direct>::open(&path, &options).unwrap());
    }
    let p = path.to_str().unwrap();
    let output = pmtx(&["smoke", "--pool", p, "--seconds", "0.05"]);
    assert_ok(&output);
    assert!(text(&output.stderr).contains("left marked unclean"));
    let info = assert_ok(&pmtx(&["pool", "info", p]));
    assert!(info.contains("clean shutdown    no"), "{info}");
}

#[test]
fn help_works_for_every_subcommand() {
    for args in [
        &["--help"][..],
        &["pool", "--help"],
        &["pool", "create", "--help"],
        &["pool", "info", "--help"],
        &["pool", "check", "--help"],
        &["smoke", "--help"],
    ] {
        let stdout = assert_ok(&pmtx(args));
        assert!(stdout.contains("Usage: pmtx"), "{args:?}:\n{stdout}");
    }
    let stdout = assert_ok(&pmtx(&["smoke", "--help"]));
    for flag in ["--pool", "--pm", "--pm-model", "--msync", "--eadr", "--seconds", "--seed"] {
        assert!(stdout.contains(flag), "smoke --help lacks {flag}");
    }
    // No subcommand is a usage error.
    assert_fails(&pmtx(&[]), 2);
}

#[test]
fn a_pool_open_elsewhere_is_neither_replaced_nor_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.pool");
    create(&path);
    let held = pmtx_pm::Pool::<pmtx_pm::Direct>::open(&path, &pmtx_pm::PmOptions::default()).unwrap();
    let p = path.to_str().unwrap();
    let stderr = assert_fails(&pmtx(&["pool", "create", p, "--size", "16MiB", "--force"]), 1);
    assert!(stderr.contains("open in another process"), "{stderr}");
    let stderr = assert_fails(&pmtx(&["pool", "info", p]), 1);
    assert!(stderr.contains("already open"), "{stderr}");
    held.close();
    assert_ok(&pmtx(&["pool", "check", p]));
}

fn by_prefix(_: &[u8], value: &[u8]) -> Vec<u8> {
    value[..1].to_vec()
}

/// A group-commit pool written by a program: two tables, three rows.
fn database_pool(path: &Path) {
    use pmtx_engine::{Database, DbOptions, EngineKind, PoolLocation, TableSchema};
    let tables = vec![
        TableSchema::ordered("notes").max_value_len(32).secondary("by_first_byte", by_prefix),
        TableSchema::hashed("counters").max_value_len(8),
    ];
    let mut options = DbOptions::new(EngineKind::GroupCommit, tables, path).create_if_missing(true);
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: 16 << 20 };
    options.chunk_size = 1 << 20;
    options.prefault_chunks = 0;
    let db = Database::open(options).unwrap();
    let notes = db.table_id("notes").unwrap();
    let counters = db.table_id("counters").unwrap();
    db.run(|tx| {
        tx.put(notes, b"n1", b"hello")?;
        tx.put(notes, b"n2", b"world!")?;
        tx.put(counters, b"c", &[0, 1, 2, 0xFF])
    })
    .unwrap();
    db.close().unwrap();
}

#[test]
fn info_lists_the_stored_tables_with_row_counts_and_dump_prints_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.pool");
    database_pool(&path);
    let pool = path.to_str().unwrap();
    let stdout = assert_ok(&pmtx(&["pool", "info", pool]));
    assert!(stdout.contains("engine            group-commit"), "{stdout}");
    assert!(stdout.contains("catalog           format version 1"), "{stdout}");
    let notes = stdout.lines().find(|line| line.trim_start().starts_with("notes")).expect("a notes line");
    assert!(
        notes.contains("ordered") && notes.contains("secondary by_first_byte") && notes.contains("2 rows"),
        "{notes}"
    );
    let counters = stdout.lines().find(|line| line.trim_start().starts_with("counters")).expect("a counters line");
    assert!(counters.contains("hash") && counters.contains("1 rows"), "{counters}");

    let json: serde_json::Value = serde_json::from_str(&assert_ok(&pmtx(&["pool", "info", pool, "--json"]))).unwrap();
    let tables = json["database"]["tables"].as_array().unwrap();
    assert_eq!(tables[0]["rows"], 2);
    assert_eq!(tables[0]["value_bytes"], 11);
    assert_eq!(tables[1]["name"], "counters");

    let output = pmtx(&["pool", "dump", pool, "notes"]);
    let stdout = assert_ok(&output);
    assert_eq!(stdout, "\"n1\"\t\"hello\"\n\"n2\"\t\"world!\"\n");
    assert!(text(&output.stderr).contains("2 of 2 rows"), "{}", text(&output.stderr));
    let stdout = assert_ok(&pmtx(&["pool", "dump", pool, "counters"]));
    assert_eq!(stdout, "\"c\"\t0x000102ff\n", "binary values print as hex");
    let stdout = assert_ok(&pmtx(&["pool", "dump", pool, "notes", "--limit", "1", "--hex"]));
    assert_eq!(stdout, "0x6e31\t0x68656c6c6f\n");
    let stderr = assert_fails(&pmtx(&["pool", "dump", pool, "nope"]), 2);
    assert!(stderr.contains("no table `nope`") && stderr.contains("notes, counters"), "{stderr}");
    // The rows are still there after inspection (it closed cleanly).
    let stdout = assert_ok(&pmtx(&["pool", "info", pool]));
    assert!(stdout.contains("clean shutdown    yes"), "{stdout}");
}

#[test]
fn info_without_row_counts_only_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.pool");
    database_pool(&path);
    // Mark the pool unclean, as a crash would leave it.
    {
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(pmtx_pm::layout::CLEAN_SHUTDOWN_OFFSET)).unwrap();
        file.write_all(&[0u8; 8]).unwrap();
    }
    let pool = path.to_str().unwrap();
    for _ in 0..2 {
        let stdout = assert_ok(&pmtx(&["pool", "info", pool, "--no-rows"]));
        assert!(stdout.contains("clean shutdown    no"), "{stdout}");
        assert!(stdout.contains("rows not counted"), "{stdout}");
    }
}
