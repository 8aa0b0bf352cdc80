//! `cargo xtask install-capi --prefix DIR`: builds the C interface and
//! installs it the way C programs expect: `DIR/lib/libpmtx.so`,
//! `DIR/lib/libpmtx.a`, `DIR/include/pmtx.h`, `DIR/include/pmtx.hpp` and
//! `DIR/lib/pkgconfig/pmtx.pc`, so that
//! `PKG_CONFIG_PATH=DIR/lib/pkgconfig cc app.c $(pkg-config --cflags --libs pmtx)` works.

use std::path::{Path, PathBuf};
use std::process::Command;

include!("../../crates/capi/pc_file.rs");

#[derive(clap::Args)]
pub struct InstallArgs {
    /// Where to install (lib/, include/ and lib/pkgconfig/ below it).
    #[arg(long)]
    prefix: PathBuf,
    /// Build with the dev profile instead of release (faster to build,
    /// much slower to run; for tests of the install itself).
    #[arg(long)]
    debug: bool,
}

pub fn install(args: &InstallArgs) -> Result<(), String> {
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build.args(["build", "--locked", "-p", "pmtx-capi"]);
    if !args.debug {
        build.arg("--release");
    }
    eprintln!("building the C interface ({}) ...", if args.debug { "dev profile" } else { "release" });
    let status = build.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("cargo build -p pmtx-capi failed".into());
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace.join("target"), PathBuf::from);
    let built = target.join(if args.debug { "debug" } else { "release" });
    let (lib, include, pkgconfig) =
        (args.prefix.join("lib"), args.prefix.join("include"), args.prefix.join("lib").join("pkgconfig"));
    for dir in [&lib, &include, &pkgconfig] {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let copies = [
        (built.join("libpmtx.so"), lib.join("libpmtx.so")),
        (built.join("libpmtx.a"), lib.join("libpmtx.a")),
        (workspace.join("include/pmtx.h"), include.join("pmtx.h")),
        (workspace.join("include/pmtx.hpp"), include.join("pmtx.hpp")),
    ];
    for (from, to) in &copies {
        std::fs::copy(from, to).map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))?;
        eprintln!("installed {}", to.display());
    }
    let lib = lib.canonicalize().unwrap_or(lib);
    let include = include.canonicalize().unwrap_or(include);
    let pc = pkgconfig.join("pmtx.pc");
    std::fs::write(&pc, pc_file(&lib, &include, env!("CARGO_PKG_VERSION")))
        .map_err(|e| format!("{}: {e}", pc.display()))?;
    eprintln!("installed {}", pc.display());
    eprintln!("compile with: PKG_CONFIG_PATH={} cc app.c $(pkg-config --cflags --libs pmtx)", pkgconfig.display());
    Ok(())
}
