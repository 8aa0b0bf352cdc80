//! The C interface as C and C++ programs use it: the programs under
//! crates/capi/c/ compiled with the system's compilers against
//! include/pmtx.h and the built libpmtx, then run: bank transfers from
//! several threads checked after a reopen, the key-value example, the
//! error paths, the C++ wrapper, the SPS benchmark against libpmemobj, a
//! build through pkg-config, a static link, and runs under valgrind's
//! memcheck (no leak, no invalid access).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where cargo left libpmtx.so and libpmtx.a for this test (the test
/// binary runs from target/<profile>/deps).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory").to_path_buf();
    for dir in [deps.clone(), deps.parent().expect("target/<profile>").to_path_buf()] {
        if dir.join("libpmtx.so").exists() {
            return dir;
        }
    }
    panic!("libpmtx.so is not in {} or its parent: cargo builds it with this test", deps.display());
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    crate_dir().join("../../include")
}

fn source(name: &str) -> PathBuf {
    crate_dir().join("c").join(name)
}

/// Compiles `sources` into `out/name` with the C compiler (or `c++` for
/// C++) and `extra` flags, warnings as errors.
fn compile(out: &Path, name: &str, sources: &[PathBuf], extra: &[String]) -> PathBuf {
    let cxx = sources.iter().any(|source| source.extension().is_some_and(|ext| ext == "cpp"));
    let binary = out.join(name);
    let mut command = Command::new(if cxx { "c++" } else { "cc" });
    command.arg(if cxx { "-std=c++17" } else { "-std=gnu11" });
    command.args(["-Wall", "-Wextra", "-Werror", "-O1", "-g"]);
    command.args(sources).arg("-o").arg(&binary).args(extra);
    let output =
        command.output().unwrap_or_else(|e| panic!("cannot run the {} compiler: {e}", if cxx { "C++" } else { "C" }));
    assert!(output.status.success(), "compiling {name} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    binary
}

/// Flags that link the shared library from the build directory.
fn shared_flags() -> Vec<String> {
    let lib = library_dir();
    vec![
        format!("-I{}", include_dir().display()),
        format!("-L{}", lib.display()),
        format!("-Wl,-rpath,{}", lib.display()),
        "-lpmtx".into(),
        "-lpthread".into(),
    ]
}

/// A command running `program` against the library this test built:
/// cargo's `LD_LIBRARY_PATH` for tests also names target/<profile>, where
/// an older `cargo build` may have left another libpmtx.so, and it outranks
/// the program's run path.
fn program(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command.env("LD_LIBRARY_PATH", library_dir());
    command
}

/// Runs `binary` with `args`; panics with its output unless it exits 0.
fn run(binary: &Path, args: &[&str]) -> String {
    let output = program(binary).args(args).output().expect("run the program");
    expect_success(binary, &output);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn expect_success(binary: &Path, output: &Output) {
    assert!(
        output.status.success(),
        "{} exited with {}:\n--- stdout\n{}--- stderr\n{}",
        binary.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn bank_transfers_from_threads_keep_the_total_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let bank = compile(dir.path(), "bank", &[source("bank.c")], &shared_flags());
    // Engines that acknowledge each commit on its own (group commit's
    // 40 ms epochs would make each thread's pmtx_run wait one).
    for engine in ["zen", "sp3", "dbxn"] {
        let pool = dir.path().join(format!("{engine}.pool"));
        let printed = run(&bank, &[pool.to_str().unwrap(), "4", "1500", engine]);
        assert!(printed.contains("after reopen: 64 accounts, total 64000"), "{engine}: {printed}");
        assert!(printed.contains("4 threads: "), "{engine}: {printed}");
    }
}

#[test]
fn key_value_example_persists_between_runs() {
    let dir = tempfile::tempdir().unwrap();
    let kv = compile(dir.path(), "kv", &[source("kv.c")], &shared_flags());
    let pool = dir.path().join("kv.pool");
    let pool = pool.to_str().unwrap();
    let status = |args: &[&str]| program(&kv).arg(pool).args(args).output().unwrap();
    // Reading a store that does not exist is an error, not a new store.
    let missing = status(&["get", "apple"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("PMTX_ERR_POOL_NOT_FOUND"));
    for (key, value) in [("banana", "yellow"), ("apple", "red"), ("cherry", "dark red"), ("apple", "green")] {
        run(&kv, &[pool, "put", key, value]);
    }
    assert_eq!(run(&kv, &[pool, "get", "apple"]), "green\n");
    assert_eq!(run(&kv, &[pool, "scan", "a", "c"]), "apple = green\nbanana = yellow\n");
    assert_eq!(run(&kv, &[pool, "delete", "banana"]), "banana: deleted\n");
    assert_eq!(status(&["delete", "banana"]).status.code(), Some(1));
    assert_eq!(run(&kv, &[pool, "scan"]), "apple = green\ncherry = dark red\n");
    let too_long = "v".repeat(1025);
    let refused = status(&["put", "big", &too_long]);
    assert_eq!(refused.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("PMTX_ERR_VALUE_TOO_LARGE"));
}

#[test]
fn error_paths_return_typed_statuses_with_messages() {
    let dir = tempfile::tempdir().unwrap();
    let errors = compile(dir.path(), "errors", &[source("errors.c")], &shared_flags());
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let printed = run(&errors, &[scratch.to_str().unwrap()]);
    assert!(printed.contains(", 0 failed"), "{printed}");
}

#[test]
fn cpp_wrapper_runs_lambdas_explicit_transactions_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = compile(dir.path(), "inventory", &[source("inventory.cpp")], &shared_flags());
    let pool = dir.path().join("inventory.pool");
    let printed = run(&inventory, &[pool.to_str().unwrap()]);
    assert!(printed.contains("sold 6 pears: no (rolled back)"), "{printed}");
    assert!(printed.contains("refused: PMTX_ERR_VALUE_TOO_LARGE"), "{printed}");
    assert!(printed.contains("after reopen: apples=7 pears=4 plums=7"), "{printed}");
}

/// Whether libpmemobj's development files are installed.
fn have_pmemobj() -> bool {
    Command::new("pkg-config").args(["--exists", "libpmemobj"]).status().is_ok_and(|status| status.success())
        || Path::new("/usr/include/libpmemobj.h").exists()
}

#[test]
fn sps_benchmark_runs_pmtx_and_libpmemobj_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = shared_flags();
    let pmemobj = have_pmemobj();
    if pmemobj {
        flags.extend(["-DPMTX_HAVE_PMEMOBJ".to_string(), "-lpmemobj".to_string()]);
    }
    let bench = compile(dir.path(), "sps_bench", &[source("sps_bench.c")], &flags);
    let args = ["--dir", dir.path().to_str().unwrap(), "--entries", "2000", "--seconds", "0.2", "--rounds", "1"];
    let printed = run(&bench, &[&args[..], &["--threads", "1,2", "--engines", "zen"]].concat());
    assert!(printed.contains("| pmtx zen | 1 |"), "{printed}");
    assert!(printed.contains("| pmtx zen | 2 |"), "{printed}");
    assert_eq!(printed.contains("| libpmemobj"), pmemobj, "{printed}");
}

/// What `pkg-config ARGS pmtx` prints for the pmtx.pc the build script
/// wrote beside the libraries, as words.
fn pkg_config(args: &[&str]) -> Vec<String> {
    let profile_dir = library_dir();
    let profile_dir =
        if profile_dir.ends_with("deps") { profile_dir.parent().unwrap().to_path_buf() } else { profile_dir };
    assert!(profile_dir.join("pmtx.pc").exists(), "the build script writes pmtx.pc to {}", profile_dir.display());
    // `cargo test` leaves the libraries it built for this test in deps/
    // (only `cargo build` copies them beside pmtx.pc): point libdir there.
    let output = Command::new("pkg-config")
        .arg(format!("--define-variable=libdir={}", library_dir().display()))
        .args(args)
        .arg("pmtx")
        .env("PKG_CONFIG_PATH", &profile_dir)
        .output()
        .expect("pkg-config runs");
    expect_success(Path::new("pkg-config"), &output);
    String::from_utf8(output.stdout).unwrap().split_whitespace().map(String::from).collect()
}

#[test]
fn pkg_config_file_beside_the_libraries_builds_a_program() {
    let dir = tempfile::tempdir().unwrap();
    let flags = pkg_config(&["--cflags", "--libs"]);
    assert!(flags.iter().any(|flag| flag == "-lpmtx"), "{flags:?}");
    let kv = compile(dir.path(), "kv", &[source("kv.c")], &flags);
    let pool = dir.path().join("kv.pool");
    run(&kv, &[pool.to_str().unwrap(), "put", "k", "v"]);
    assert_eq!(run(&kv, &[pool.to_str().unwrap(), "get", "k"]), "v\n");
}

#[test]
fn static_library_links_into_a_program() {
    let dir = tempfile::tempdir().unwrap();
    let lib = library_dir();
    let archive = [lib.join("libpmtx.a"), lib.parent().unwrap().join("libpmtx.a")]
        .into_iter()
        .find(|path| path.exists())
        .expect("cargo builds libpmtx.a beside libpmtx.so");
    // The libraries the archive needs besides itself, as pmtx.pc's
    // Libs.private gives them (docs/c-api.md says to link this way).
    let private = pkg_config(&["--static", "--libs-only-l"]);
    assert!(private.iter().any(|flag| flag == "-lgcc_s"), "{private:?}");
    let flags: Vec<String> = [format!("-I{}", include_dir().display()), archive.display().to_string()]
        .into_iter()
        .chain(private.into_iter().filter(|flag| flag != "-lpmtx"))
        .collect();
    let bank = compile(dir.path(), "bank-static", &[source("bank.c")], &flags);
    let needed =
        Command::new("ldd").arg(&bank).output().map(|output| String::from_utf8_lossy(&output.stdout).into_owned());
    if let Ok(needed) = needed {
        assert!(!needed.contains("libpmtx"), "a static link needs no libpmtx.so: {needed}");
    }
    let pool = dir.path().join("bank.pool");
    let printed = run(&bank, &[pool.to_str().unwrap(), "2", "300"]);
    assert!(printed.contains("after reopen: 64 accounts, total 64000"), "{printed}");
}

/// Runs `binary` under valgrind's memcheck; panics on any error it reports
/// (invalid reads or writes, uses of uninitialized memory, definite or
/// indirect leaks).
fn memcheck(binary: &Path, args: &[&str]) {
    let output = program("valgrind")
        .args([
            "--tool=memcheck",
            "--error-exitcode=99",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect",
            "--track-origins=yes",
        ])
        .arg(binary)
        .args(args)
        .output()
        .expect("valgrind runs");
    assert!(
        output.status.success(),
        "memcheck of {} failed ({}):\n{}",
        binary.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(report.contains("ERROR SUMMARY: 0 errors"), "{report}");
}

#[test]
fn memcheck_finds_no_leak_or_invalid_access() {
    let installed = Command::new("valgrind").arg("--version").output().is_ok_and(|output| output.status.success());
    if !installed {
        // CI installs valgrind and sets PMTX_REQUIRE_VALGRIND, so there this
        // check cannot be skipped.
        assert!(std::env::var_os("PMTX_REQUIRE_VALGRIND").is_none(), "valgrind is required but not installed");
        eprintln!("memcheck NOT RUN: valgrind is not installed (apt-get install valgrind)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bank = compile(dir.path(), "bank", &[source("bank.c")], &shared_flags());
    let pool = dir.path().join("bank.pool");
    memcheck(&bank, &[pool.to_str().unwrap(), "2", "200", "zen"]);
    let errors = compile(dir.path(), "errors", &[source("errors.c")], &shared_flags());
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    memcheck(&errors, &[scratch.to_str().unwrap()]);
}
