//! Writes `pmtx.pc` beside the libraries (`target/<profile>/`), pointing at
//! them and at the checked-in headers, so that
//! `PKG_CONFIG_PATH=target/release pkg-config --cflags --libs pmtx` works
//! right after `cargo build --release -p pmtx-capi`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=pc_file.rs");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is target/<profile>/build/<package>-<hash>/out.
    let Some(profile_dir) = out_dir.ancestors().nth(3) else { return };
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../include");
    let include = include.canonicalize().unwrap_or(include);
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let pc = pc_file(profile_dir, &include, &version);
    // A read-only target directory only loses the convenience file.
    if let Err(error) = std::fs::write(profile_dir.join("pmtx.pc"), pc) {
        println!("cargo:warning=could not write pmtx.pc: {error}");
    }
}

include!("pc_file.rs");
