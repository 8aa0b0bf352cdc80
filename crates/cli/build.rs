//! Records the git revision the `pmtx` binary is built from as
//! `PMTX_GIT_REVISION`, so bench and soak reports name the code that ran,
//! not whatever checkout the binary later runs in. `PMTX_GIT_REVISION` set
//! in the build's environment wins (a build from a source archive); without
//! git the revision is `unknown`.

use std::path::Path;
use std::process::{Command, Stdio};

fn git(directory: &Path, arguments: &[&str]) -> Option<std::process::Output> {
    Command::new("git")
        .arg("-C")
        .arg(directory)
        .args(arguments)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
}

fn text(output: Option<std::process::Output>) -> Option<String> {
    output
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|text| !text.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=PMTX_GIT_REVISION");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let manifest = Path::new(&manifest);
    let revision = match std::env::var("PMTX_GIT_REVISION") {
        Ok(given) if !given.trim().is_empty() => given.trim().to_string(),
        _ => match text(git(manifest, &["rev-parse", "--short", "HEAD"])) {
            Some(revision) => {
                let dirty = git(manifest, &["diff", "--quiet", "HEAD", "--"])
                    .is_some_and(|output| output.status.code() == Some(1));
                if dirty {
                    format!("{revision}-dirty")
                } else {
                    revision
                }
            }
            None => "unknown".to_string(),
        },
    };
    println!("cargo:rustc-env=PMTX_GIT_REVISION={revision}");
    // Again after a commit or checkout (HEAD, the branch, the index) and
    // after any edit of the workspace's sources (the dirty mark).
    if let Some(git_dir) = text(git(manifest, &["rev-parse", "--absolute-git-dir"])) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        println!("cargo:rerun-if-changed={git_dir}/index");
        if let Some(branch) = text(git(manifest, &["symbolic-ref", "-q", "HEAD"])) {
            println!("cargo:rerun-if-changed={git_dir}/{branch}");
        }
    }
    if let Some(crates) = manifest.parent() {
        println!("cargo:rerun-if-changed={}", crates.display());
    }
}
