//! The child process of the kill mode, for the crate's own tests (the
//! `pmtx` binary has the same entry as `pmtx crashtest --child`).
//!
//! Usage: `pmtx-crashtest-child <ChildConfig::to_args flags>`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match pmtx_crashtest::ChildConfig::parse(&args) {
        Ok(config) => pmtx_crashtest::child_main(&config),
        Err(error) => {
            eprintln!("pmtx-crashtest-child: {error}");
            2
        }
    };
    std::process::exit(code);
}
