//! End-to-end tests of `pmtx crashtest` (the harness itself is tested in
//! crates/crashtest): the summary line, the exit code on violations with the
//! replay information, the kill mode re-executing `pmtx crashtest --child`,
//! and usage errors.

use std::process::{Command, Output};

fn pmtx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmtx")).args(args).output().expect("run pmtx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn sim_run_prints_the_summary_line() {
    let output = pmtx(&[
        "crashtest",
        "--engine",
        "group-commit",
        "--workload",
        "ycsb",
        "--images",
        "24",
        "--seed",
        "0x5eed",
        "--pool-size",
        "8MiB",
        "--txns",
        "60",
        "--jobs",
        "1",
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.trim(), "crashtest: 24 images, 0 violations, seed 0x5eed");
}

#[test]
fn sim_run_with_a_locking_protocol() {
    let output = pmtx(&[
        "crashtest",
        "--engine",
        "dbxn",
        "--cc",
        "wait-die",
        "--workload",
        "smallbank",
        "--images",
        "16",
        "--seed",
        "0xcc",
        "--pool-size",
        "8MiB",
        "--txns",
        "60",
        "--jobs",
        "1",
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.trim(), "crashtest: 16 images, 0 violations, seed 0xcc");
    // The replay command line carries the protocol.
    assert!(stderr.contains("--engine dbxn --cc wait-die "), "{stderr}");
}

#[test]
fn violations_exit_nonzero_with_replay_information() {
    // The harness self-test: acknowledgements taken before durability.
    let output = pmtx(&[
        "crashtest",
        "--images",
        "40",
        "--seed",
        "3",
        "--pool-size",
        "8MiB",
        "--txns",
        "100",
        "--recovery-check-every",
        "0",
        "--fake-ack",
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.starts_with("crashtest: 40 images, ") && stdout.contains("seed 0x3"), "{stdout}");
    assert!(stderr.contains("[acknowledged-lost]"), "{stderr}");
    assert!(stderr.contains("replay: pmtx crashtest") && stderr.contains("crash state at event"), "{stderr}");
}

#[test]
fn kill_mode_reexecutes_pmtx_as_the_child() {
    let output = pmtx(&[
        "crashtest",
        "--kill",
        "--iterations",
        "3",
        "--engine",
        "group-commit",
        "--workload",
        "smallbank",
        "--seed",
        "9",
        "--pool-size",
        "8MiB",
        "--max-kill-ms",
        "60",
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.trim(), "crashtest: 3 kill iterations, 0 violations, seed 0x9");
}

#[test]
fn usage_errors() {
    let output = pmtx(&["crashtest", "--engine", "silo"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("not durable"));
    let output = pmtx(&["crashtest", "--workload", "tpcd"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("unknown workload"));
    let output = pmtx(&["crashtest", "--cc", "2pl"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("unknown concurrency-control protocol") && stderr.contains("dl-detect"), "{stderr}");
}
