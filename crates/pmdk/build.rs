//! Detects libpmemobj (PMDK) at build time.
//!
//! Found (by `pkg-config --exists libpmemobj`, or failing that by
//! `/usr/include/libpmemobj.h`): links `pmemobj` and sets `cfg(pmemobj)`.
//! Not found: prints a cargo warning and builds the crate without the
//! library; every entry point then returns `PmdkError::Unavailable`.
//! `PMTX_PMDK_DISABLE=1` forces the second case (to test the fallback build on
//! a machine that has the library).

use std::path::Path;
use std::process::Command;

/// The text of the warning; `PmdkError::Unavailable` says the same.
const NOT_FOUND: &str = "libpmemobj was not found when pmtx-pmdk was built (install the Debian package \
libpmemobj-dev and rebuild); the PMDK micro workloads will report PmdkError::Unavailable";

fn pkg_config(args: &[&str]) -> Option<String> {
    let output = Command::new("pkg-config").args(args).arg("libpmemobj").output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(pmemobj)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=PMTX_PMDK_DISABLE");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo::rerun-if-changed=/usr/include/libpmemobj.h");

    if std::env::var_os("PMTX_PMDK_DISABLE").is_some_and(|value| !value.is_empty() && value != "0") {
        println!("cargo::warning={NOT_FOUND} [disabled by PMTX_PMDK_DISABLE]");
        return;
    }

    let found = if pkg_config(&["--exists"]).is_some() {
        // Library directories outside the default search path (a PMDK built
        // from source under /usr/local or a prefix named by PKG_CONFIG_PATH).
        for flag in pkg_config(&["--libs-only-L"]).unwrap_or_default().split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo::rustc-link-search=native={dir}");
            }
        }
        true
    } else {
        Path::new("/usr/include/libpmemobj.h").exists()
    };

    if found {
        println!("cargo::rustc-link-lib=pmemobj");
        println!("cargo::rustc-cfg=pmemobj");
    } else {
        println!("cargo::warning={NOT_FOUND}");
    }
}
