//! ARCHITECTURE.md stays an overview with a page per engine: at most 800
//! lines, an engine table that links every engine of the catalog
//! (`EngineKind::ALL`) to a page under `docs/engines/` whose title names
//! it, and module docs (`//!`) in every crate that point only to pages
//! that exist.

use pmtx_engine::EngineKind;
use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_overview_is_short_and_every_engine_has_its_page() {
    let overview = fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let lines = overview.lines().count();
    assert!(lines <= 800, "ARCHITECTURE.md has {lines} lines: move detail to a page under docs/");
    for kind in EngineKind::ALL {
        let name = kind.name();
        let link = format!("[`{name}`](docs/engines/");
        let at = overview.find(&link).unwrap_or_else(|| panic!("the engine table does not link `{name}` to its page"));
        let page: String = overview[at + link.len()..].chars().take_while(|c| *c != ')').collect();
        let path = workspace().join("docs/engines").join(&page);
        let text = fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let title = text.lines().next().unwrap_or_default();
        assert!(
            title.starts_with("# ") && title.split([' ', ',']).any(|word| word == name),
            "docs/engines/{page} does not name `{name}` in its title: {title}"
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn module_docs_point_to_pages_that_exist() {
    let root = workspace();
    let mut files = Vec::new();
    for crate_dir in fs::read_dir(root.join("crates")).expect("read crates") {
        let src = crate_dir.expect("crate dir").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    rust_files(&root.join("xtask/src"), &mut files);
    let mut pointers = 0;
    let mut missing = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("read source");
        for line in text.lines().map(str::trim_start).filter(|line| line.starts_with("//!")) {
            for (at, _) in line.match_indices("docs/") {
                let page: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
                    .collect();
                let page = page.trim_end_matches('.');
                if !page.ends_with(".md") {
                    continue;
                }
                pointers += 1;
                if !root.join(page).is_file() {
                    missing.push(format!("{}: {page}", file.strip_prefix(&root).unwrap_or(file).display()));
                }
            }
        }
    }
    assert!(pointers > 40, "found only {pointers} pointers to pages in module docs");
    assert!(missing.is_empty(), "module docs point to pages that do not exist:\n{}", missing.join("\n"));
}
