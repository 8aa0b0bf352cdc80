//! include/pmtx.h is what cbindgen makes of this crate: the checked-in
//! header cannot drift from the functions the library exports.
//! `PMTX_BLESS=1 cargo test -p pmtx-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn checked_in_header_is_what_cbindgen_generates() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let header = crate_dir.join("../../include/pmtx.h");
    if std::env::var_os("PMTX_BLESS").is_some() {
        std::fs::write(&header, &generated).expect("write include/pmtx.h");
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in.lines().zip(generated.lines()).position(|(a, b)| a != b);
        panic!(
            "include/pmtx.h differs from what cbindgen generates (first differing line: {}); \
             regenerate it with PMTX_BLESS=1 cargo test -p pmtx-capi --test header",
            line.map_or_else(|| "past the shorter one's end".to_string(), |line| (line + 1).to_string())
        );
    }
    // Every exported function is declared.
    for name in ["pmtx_open", "pmtx_close", "pmtx_run", "pmtx_txn_begin", "pmtx_txn_commit", "pmtx_iter_next"] {
        assert!(generated.contains(&format!("{name}(")), "the header declares {name}");
    }
}
