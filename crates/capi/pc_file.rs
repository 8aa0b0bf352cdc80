// The text of pmtx.pc, shared by crates/capi/build.rs (which writes it
// beside the built libraries) and `cargo xtask install-capi` (which writes
// it under an install prefix). Included with `include!`.

/// A pkg-config file for libraries in `libdir` and headers in `includedir`.
/// The run path lets programs find libpmtx.so outside the system's
/// library directories.
pub fn pc_file(libdir: &std::path::Path, includedir: &std::path::Path, version: &str) -> String {
    format!(
        "libdir={}\nincludedir={}\n\nName: pmtx\nDescription: Embedded transactional storage engine for persistent memory\n\
         Version: {version}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lpmtx\n\
         Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc\n",
        libdir.display(),
        includedir.display()
    )
}
