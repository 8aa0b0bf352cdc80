//! The engine crate's import direction, checked from its source so that it
//! stays true (ARCHITECTURE.md, "Layers"):
//!
//! ```text
//! base (error, schema, stats, epoch, fault, log_files, ticket, engine_kind)
//!   <- index <- storage <- (cc | durability, side by side)
//!   <- engine interface (engine, engine_catalog, options, catalog, background, fuzz)
//!   <- engines <- db (the API) and lib
//! ```
//!
//! A file may name (in a `use` or an inline `crate::` path) only modules of
//! its own layer or below; `cc` and `durability` never name each other; and
//! no file under `index/`, `storage/`, `cc/` or `durability/` names the
//! engine kind or the database options, so each part is configured by its
//! own small config built in `engines/`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// A layer's rank: a file may import ranks at or below its own, except
/// that the two ranks marked side by side may not import each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    Base,
    Index,
    Storage,
    Cc,
    Durability,
    Interface,
    Engines,
    Api,
}

impl Layer {
    fn may_import(self, other: Layer) -> bool {
        match (self, other) {
            (Layer::Cc, Layer::Durability) | (Layer::Durability, Layer::Cc) => false,
            _ => other <= self,
        }
    }
}

/// The layer of a top-level module of the crate (`crate::NAME`), or of a
/// source file named by its first path component under `src/`.
fn layer_of_module(name: &str) -> Option<Layer> {
    Some(match name {
        "error" | "schema" | "stats" | "epoch" | "fault" | "log_files" | "ticket" | "engine_kind" => Layer::Base,
        "index" => Layer::Index,
        "storage" => Layer::Storage,
        "cc" => Layer::Cc,
        "durability" => Layer::Durability,
        "engine" | "engine_catalog" | "options" | "catalog" | "background" | "fuzz" => Layer::Interface,
        "engines" => Layer::Engines,
        "db" | "lib" | "internals" => Layer::Api,
        _ => return None,
    })
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The file's code without comments, string and char literals (a message
/// may name an option for the user; only code counts).
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        match chars[at] {
            '/' if chars.get(at + 1) == Some(&'/') => {
                while at < chars.len() && chars[at] != '\n' {
                    at += 1;
                }
            }
            '"' => {
                at += 1;
                while at < chars.len() && chars[at] != '"' {
                    at += if chars[at] == '\\' { 2 } else { 1 };
                }
                code.push_str("\"\"");
                at += 1;
            }
            '\'' if chars.get(at + 1) == Some(&'\\') => {
                at += 2;
                while at < chars.len() && chars[at] != '\'' {
                    at += 1;
                }
                at += 1;
            }
            '\'' if chars.get(at + 2) == Some(&'\'') => at += 3,
            ch => {
                code.push(ch);
                at += 1;
            }
        }
    }
    code
}

/// Every top-level module the code names through `crate::` (inline paths
/// and `use` lines, grouped `use crate::{a::x, b}` included).
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if after.starts_with('{') {
            // A grouped import: every first component inside the braces at
            // depth one.
            let mut depth = 0usize;
            let mut item_start = true;
            let mut current = String::new();
            for ch in after.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        item_start = depth == 1;
                    }
                    '}' => {
                        if depth == 1 && !current.is_empty() {
                            names.insert(std::mem::take(&mut current));
                        }
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        if !current.is_empty() {
                            names.insert(std::mem::take(&mut current));
                        }
                        item_start = true;
                    }
                    c if depth == 1 && item_start && (c.is_alphanumeric() || c == '_') => current.push(c),
                    c if depth == 1 && item_start && c.is_whitespace() && current.is_empty() => {}
                    _ => {
                        if depth == 1 && item_start && !current.is_empty() {
                            names.insert(std::mem::take(&mut current));
                        }
                        if depth == 1 {
                            item_start = false;
                        }
                    }
                }
            }
        } else {
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
        rest = after;
    }
    names
}

/// The parts an engine is composed of: they get their own small configs.
fn is_part(layer: Layer) -> bool {
    matches!(layer, Layer::Index | Layer::Storage | Layer::Cc | Layer::Durability)
}

/// Identifiers no part below `engines/` may name.
const ENGINE_WIDE: [&str; 2] = ["EngineKind", "DbOptions"];

fn names_identifier(code: &str, ident: &str) -> bool {
    code.match_indices(ident).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + ident.len()..].chars().next();
        let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !is_ident(before) && !is_ident(after)
    })
}

#[test]
fn the_engine_crate_imports_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 20, "found only {} source files under {}", files.len(), src.display());
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative.components().next().expect("a component").as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs");
        let Some(layer) = layer_of_module(module) else {
            violations.push(format!("{}: module `{module}` has no layer in this test", relative.display()));
            continue;
        };
        let code = code_of(&fs::read_to_string(file).expect("read source"));
        for name in named_modules(&code) {
            // `crate::Name` re-exports from lib.rs and macros are checked
            // by what they re-export; only lower-case module names count.
            if name.chars().next().is_some_and(|c| c.is_uppercase()) {
                if is_part(layer) && ENGINE_WIDE.contains(&name.as_str()) {
                    violations.push(format!("{}: names crate::{name}", relative.display()));
                }
                continue;
            }
            match layer_of_module(&name) {
                Some(target) if layer.may_import(target) => {}
                Some(target) => {
                    violations.push(format!("{} ({layer:?}) imports crate::{name} ({target:?})", relative.display()))
                }
                None => {}
            }
        }
        if is_part(layer) {
            for ident in ENGINE_WIDE {
                if names_identifier(&code, ident) {
                    violations.push(format!("{} ({layer:?}) names `{ident}`", relative.display()));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{} import-direction violations:\n{}", violations.len(), violations.join("\n"));
}

#[test]
fn the_checker_sees_grouped_and_inline_paths() {
    let code =
        "use crate::{cc::silo::WriteSet, durability::{log, checkpoint}, error};\nlet x = crate::engines::open();";
    let names = named_modules(code);
    for expected in ["cc", "durability", "error", "engines"] {
        assert!(names.contains(expected), "{expected} missing from {names:?}");
    }
    let message = code_of("let e = format!(\"set DbOptions::x\"); // DbOptions\nlet q = '\"'; use crate::cc;");
    assert!(!names_identifier(&message, "DbOptions"), "{message}");
    assert!(named_modules(&message).contains("cc"), "{message}");
    assert!(!names.contains("log"), "{names:?}");
    assert!(names_identifier("fn f(o: &DbOptions)", "DbOptions"));
    assert!(!names_identifier("struct DbOptionsLite;", "DbOptions"));
    assert!(!Layer::Cc.may_import(Layer::Durability));
    assert!(!Layer::Storage.may_import(Layer::Cc));
    assert!(Layer::Engines.may_import(Layer::Cc));
}
