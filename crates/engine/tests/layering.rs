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
//! own small config built in `engines/`. The direction holds for items
//! named through a re-export too (`crate::EngineKind` counts as an arrow
//! to the file that defines it).
//!
//! And the crate is a tree of imports: inside every directory, no
//! submodules import each other, directly or round a circle (the graph is
//! described above `module_of`; `the_circle_check_fails_on_a_circle`
//! shows the check failing on small crates that have one). The test prints
//! each circle with the file arrows that close it.

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

// ---------------------------------------------------------------------
// Circles: the import graph of the crate's modules.
//
// A module is a source file; a directory is the module its `mod.rs` (the
// crate's root: `lib.rs`) opens, with every file under it. An arrow runs
// from a file to the file that defines what it names: a `use` (grouped,
// renamed, glob), an inline `crate::`, `super::` or `self::` path, or a
// path through one of its own submodules (`child::item`), followed
// through `pub use` re-exports to the file that defines the item (a
// re-export is itself an arrow from the file that has it). Inside every
// directory, the graph of its direct submodules (a file, or a
// subdirectory with everything in it) must have no circle: a circle
// means neither side can be read, tested or changed alone. A directory's
// own module file is left out of its directory's graph (it declares and
// re-exports the files under it, which may use its items through
// `super::`); its arrows count one level up, as the directory's.

/// A file's module path (`["cc", "transaction"]`; the crate root: `[]`).
fn module_of(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    let last = parts.last().map(String::as_str);
    if last == Some("mod") || (parts.len() == 1 && last == Some("lib")) {
        parts.pop();
    }
    parts
}

/// Identifiers, `::` and single characters of `code` (comments and
/// literals already removed by `code_of`).
fn tokens(code: &str) -> Vec<&str> {
    let bytes = code.as_bytes();
    let word = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        if bytes[at].is_ascii_whitespace() {
            at += 1;
            continue;
        } else if word(bytes[at]) {
            while at < bytes.len() && word(bytes[at]) {
                at += 1;
            }
        } else if bytes[at] == b':' && bytes.get(at + 1) == Some(&b':') {
            at += 2;
        } else {
            at += code[at..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(&code[start..at]);
    }
    out
}

fn is_ident(token: &str) -> bool {
    token.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// Parses the use tree at `tokens[at..]` under `prefix`, adding every leaf
/// (its path, and the name it is imported as; `*` for a glob) to `out`;
/// returns the position after the tree.
fn use_tree(tokens: &[&str], mut at: usize, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) -> usize {
    let depth = prefix.len();
    loop {
        match tokens.get(at).copied() {
            Some("::") => at += 1,
            Some("{") => {
                at += 1;
                while tokens.get(at).is_some_and(|token| *token != "}") {
                    at = use_tree(tokens, at, prefix, out);
                    if tokens.get(at) == Some(&",") {
                        at += 1;
                    }
                }
                prefix.truncate(depth);
                return at + 1;
            }
            Some("*") => {
                out.push((prefix.clone(), "*".to_string()));
                prefix.truncate(depth);
                return at + 1;
            }
            Some(token) if is_ident(token) => {
                prefix.push(token.to_string());
                at += 1;
                if tokens.get(at) == Some(&"::") {
                    continue;
                }
                if prefix.last().is_some_and(|last| last == "self") {
                    prefix.pop();
                }
                let mut alias = prefix.last().cloned().unwrap_or_default();
                if tokens.get(at) == Some(&"as") {
                    alias = tokens.get(at + 1).map_or(alias, |name| name.to_string());
                    at += 2;
                }
                out.push((prefix.clone(), alias));
                prefix.truncate(depth);
                return at;
            }
            _ => {
                prefix.truncate(depth);
                return at + 1;
            }
        }
    }
}

/// What one file names: absolute module paths (each possibly ending in
/// an item), and its `pub use` re-exports (name, absolute path).
#[derive(Default)]
struct Scan {
    paths: Vec<Vec<String>>,
    reexports: Vec<(String, Vec<String>)>,
}

/// Scans the code of the file of module `module`, whose submodules are
/// `children`.
fn scan(code: &str, module: &[String], children: &BTreeSet<String>) -> Scan {
    let tokens = tokens(code);
    // Inline modules (`mod tests { ... }`) with the brace depth they open.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut found = Scan::default();
    let absolute = |segments: &[String], inline: &[(String, usize)]| -> Option<Vec<String>> {
        let mut current: Vec<String> = module.to_vec();
        current.extend(inline.iter().map(|(name, _)| name.clone()));
        let first = segments.first()?.as_str();
        let mut rest = &segments[1..];
        match first {
            "crate" => current.clear(),
            "self" | "super" => {
                if first == "super" {
                    current.pop();
                }
                while rest.first().is_some_and(|segment| segment == "super") {
                    current.pop();
                    rest = &rest[1..];
                }
            }
            _ if inline.is_empty() && children.contains(first) => rest = segments,
            _ => return None,
        }
        Some([current, rest.to_vec()].concat())
    };
    let path_at = |at: usize| -> (Vec<String>, usize) {
        let mut segments = vec![tokens[at].to_string()];
        let mut next = at + 1;
        while tokens.get(next) == Some(&"::") && tokens.get(next + 1).is_some_and(|token| is_ident(token)) {
            segments.push(tokens[next + 1].to_string());
            next += 2;
        }
        (segments, next)
    };
    let mut at = 0;
    while at < tokens.len() {
        let token = tokens[at];
        let after_path = at > 0 && tokens[at - 1] == "::";
        if token == "mod" && tokens.get(at + 2) == Some(&"{") {
            depth += 1;
            inline.push((tokens[at + 1].to_string(), depth));
            at += 3;
            continue;
        }
        match token {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, opened)| *opened == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "use" => {
                let public = match at.checked_sub(1).map(|before| tokens[before]) {
                    Some("pub") => true,
                    Some(")") => tokens[..at - 1]
                        .iter()
                        .rposition(|token| *token == "(")
                        .is_some_and(|open| open > 0 && tokens[open - 1] == "pub"),
                    _ => false,
                };
                let mut leaves = Vec::new();
                let end = use_tree(&tokens, at + 1, &mut Vec::new(), &mut leaves);
                for (segments, alias) in leaves {
                    let Some(path) = absolute(&segments, &inline) else { continue };
                    if public && inline.is_empty() && alias != "*" {
                        found.reexports.push((alias, path.clone()));
                    }
                    found.paths.push(path);
                }
                at = end.max(at + 1);
                continue;
            }
            "crate" | "super" | "self" if !after_path && tokens.get(at + 1) == Some(&"::") => {
                let (segments, next) = path_at(at);
                found.paths.extend(absolute(&segments, &inline));
                at = next;
                continue;
            }
            _ if !after_path
                && inline.is_empty()
                && children.contains(token)
                && tokens.get(at + 1) == Some(&"::")
                && at.checked_sub(1).is_none_or(|before| tokens[before] != ".") =>
            {
                let (segments, next) = path_at(at);
                found.paths.extend(absolute(&segments, &inline));
                at = next;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    found
}

/// The crate's files and the arrows between them.
struct ModuleGraph {
    /// Each file's path under `src/`, by node.
    files: Vec<String>,
    /// Each file's module path, by node.
    modules: Vec<Vec<String>>,
    /// (from, to) -> the items named through that arrow.
    arrows: std::collections::BTreeMap<(usize, usize), BTreeSet<String>>,
}

impl ModuleGraph {
    /// The graph of the files `sources` (path under `src/`, code).
    fn build(sources: &[(String, String)]) -> Self {
        use std::collections::BTreeMap;
        let files: Vec<String> = sources.iter().map(|(path, _)| path.clone()).collect();
        let modules: Vec<Vec<String>> = files.iter().map(|path| module_of(path)).collect();
        let node_of: BTreeMap<&[String], usize> =
            modules.iter().enumerate().map(|(node, module)| (module.as_slice(), node)).collect();
        let mut scans = Vec::new();
        let mut reexports: BTreeMap<&[String], BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for (node, (_, text)) in sources.iter().enumerate() {
            let module = &modules[node];
            let children: BTreeSet<String> = modules
                .iter()
                .filter(|other| other.len() == module.len() + 1 && other.starts_with(module))
                .map(|other| other[module.len()].clone())
                .collect();
            let found = scan(&code_of(text), module, &children);
            reexports.entry(module.as_slice()).or_default().extend(found.reexports.iter().cloned());
            scans.push(found);
        }
        // The file that defines what `path` names.
        let resolve = |path: &[String]| -> usize {
            let mut path = path.to_vec();
            for _hop in 0..16 {
                let (length, node) = (0..=path.len())
                    .rev()
                    .find_map(|length| node_of.get(&path[..length]).map(|node| (length, *node)))
                    .expect("the crate root is a module");
                let target = path.get(length).and_then(|name| reexports.get(&path[..length])?.get(name));
                match target {
                    Some(target) if *target != path[..=length] => {
                        path = [target.clone(), path[length + 1..].to_vec()].concat();
                    }
                    _ => return node,
                }
            }
            panic!("re-exports of {path:?} go round");
        };
        let mut arrows: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
        for (node, found) in scans.iter().enumerate() {
            for path in &found.paths {
                let target = resolve(path);
                if target != node {
                    arrows.entry((node, target)).or_default().insert(path.join("::"));
                }
            }
        }
        Self { files, modules, arrows }
    }

    /// The circles of the graph inside every directory module (the
    /// crate's root included) between its direct submodules, each as the
    /// directory, its submodules on the circle, and the file arrows
    /// between them.
    fn circles(&self) -> Vec<String> {
        let mut reports = Vec::new();
        let directories: BTreeSet<&[String]> = self
            .modules
            .iter()
            .filter(|module| self.modules.iter().any(|other| other.len() > module.len() && other.starts_with(module)))
            .map(Vec::as_slice)
            .collect();
        for directory in directories {
            // The direct submodule of `directory` a node lies in.
            let entry = |node: usize| -> Option<&str> {
                let module = &self.modules[node];
                (module.len() > directory.len() && module.starts_with(directory))
                    .then(|| module[directory.len()].as_str())
            };
            let names: Vec<&str> =
                (0..self.files.len()).filter_map(entry).collect::<BTreeSet<_>>().into_iter().collect();
            let index = |name: &str| names.iter().position(|other| *other == name).expect("an entry");
            let mut edges = vec![BTreeSet::new(); names.len()];
            for &(from, to) in self.arrows.keys() {
                if let (Some(a), Some(b)) = (entry(from), entry(to)) {
                    if a != b {
                        edges[index(a)].insert(index(b));
                    }
                }
            }
            for component in strongly_connected(&edges) {
                let members: BTreeSet<&str> = component.iter().map(|member| names[*member]).collect();
                let place = if directory.is_empty() { "crate".to_string() } else { directory.join("::") };
                let mut report = format!(
                    "circle in `{place}` between {}:",
                    members.iter().map(|name| format!("`{name}`")).collect::<Vec<_>>().join(", ")
                );
                for ((from, to), items) in &self.arrows {
                    match (entry(*from), entry(*to)) {
                        (Some(a), Some(b)) if a != b && members.contains(a) && members.contains(b) => {
                            let items: Vec<&str> = items.iter().map(String::as_str).collect();
                            report.push_str(&format!(
                                "\n    {} -> {} ({})",
                                self.files[*from],
                                self.files[*to],
                                items.join(", ")
                            ));
                        }
                        _ => {}
                    }
                }
                reports.push(report);
            }
        }
        reports
    }
}

/// The strongly connected components of more than one node (Tarjan).
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct Search<'e> {
        edges: &'e [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    impl Search<'_> {
        fn visit(&mut self, node: usize) {
            self.index[node] = Some(self.next);
            self.low[node] = self.next;
            self.next += 1;
            self.stack.push(node);
            self.on_stack[node] = true;
            for &next in self.edges[node].iter() {
                match self.index[next] {
                    None => {
                        self.visit(next);
                        self.low[node] = self.low[node].min(self.low[next]);
                    }
                    Some(index) if self.on_stack[next] => self.low[node] = self.low[node].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[node]) == self.index[node] {
                let mut component = Vec::new();
                loop {
                    let member = self.stack.pop().expect("on the stack");
                    self.on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    self.components.push(component);
                }
            }
        }
    }
    let nodes = edges.len();
    let mut search = Search {
        edges,
        index: vec![None; nodes],
        low: vec![0; nodes],
        stack: Vec::new(),
        on_stack: vec![false; nodes],
        next: 0,
        components: Vec::new(),
    };
    for node in 0..nodes {
        if search.index[node].is_none() {
            search.visit(node);
        }
    }
    search.components
}

/// The engine crate's sources (path under `src/`, text).
fn crate_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    files
        .iter()
        .map(|file| {
            let relative = file.strip_prefix(&src).expect("under src");
            let relative = relative.components().map(|part| part.as_os_str().to_string_lossy()).collect::<Vec<_>>();
            (relative.join("/"), fs::read_to_string(file).expect("read source"))
        })
        .collect()
}

#[test]
fn the_engine_crate_has_no_import_circle() {
    let graph = ModuleGraph::build(&crate_sources());
    assert!(graph.arrows.len() > 300, "found only {} arrows: is the scan broken?", graph.arrows.len());
    let circles = graph.circles();
    assert!(circles.is_empty(), "{} import circles:\n{}", circles.len(), circles.join("\n"));
}

#[test]
fn no_arrow_runs_up_through_a_re_export() {
    // `the_engine_crate_imports_only_downwards` reads module names; an
    // item re-exported by the crate root (`crate::EngineKind`) is checked
    // here, at the file that defines it.
    let graph = ModuleGraph::build(&crate_sources());
    let layer = |node: usize| {
        let top = graph.modules[node].first().map_or("lib", String::as_str);
        layer_of_module(top).unwrap_or_else(|| panic!("module `{top}` has no layer in this test"))
    };
    let mut violations = Vec::new();
    for ((from, to), items) in &graph.arrows {
        let (source, target) = (layer(*from), layer(*to));
        if !source.may_import(target) {
            let items: Vec<&str> = items.iter().map(String::as_str).collect();
            violations.push(format!(
                "{} ({source:?}) -> {} ({target:?}): {}",
                graph.files[*from],
                graph.files[*to],
                items.join(", ")
            ));
        }
    }
    assert!(violations.is_empty(), "{} arrows run up:\n{}", violations.len(), violations.join("\n"));
}

/// A crate of `files` (path under `src/`, code).
fn toy(files: &[(&str, &str)]) -> ModuleGraph {
    let sources: Vec<(String, String)> =
        files.iter().map(|(path, code)| (path.to_string(), code.to_string())).collect();
    ModuleGraph::build(&sources)
}

#[test]
fn the_circle_check_fails_on_a_circle() {
    // a -> b (a use) -> c::D, which `c/mod.rs` re-exports from `c/d.rs`
    // (an inline path) -> a (through `super::super`): a circle between
    // `a`, `b` and `c` at the crate's root.
    let files = [
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::{B, other::{self as o}};\npub struct A;"),
        ("b.rs", "pub struct B(crate::c::D); // crate::a\npub mod other {}"),
        ("c/mod.rs", "mod d;\npub(crate) use d::D;\nfn helper() {}"),
        ("c/d.rs", "use super::super::a::A;\nuse super::helper;\npub struct D;"),
    ];
    let graph = toy(&files);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(circles[0].starts_with("circle in `crate` between `a`, `b`, `c`:"), "{}", circles[0]);
    for arrow in ["a.rs -> b.rs", "b.rs -> c/d.rs (c::D)", "c/d.rs -> a.rs (a::A)"] {
        assert!(circles[0].contains(arrow), "{arrow} missing from {}", circles[0]);
    }
    // The re-export is an arrow of `c/mod.rs`; it and `c/d.rs`'s `super::`
    // path stay inside `c`, and the comment names nothing.
    assert!(graph.arrows.keys().any(|&(from, to)| graph.files[from] == "c/mod.rs" && graph.files[to] == "c/d.rs"));
    assert!(!circles[0].contains("b.rs -> a.rs"), "{}", circles[0]);

    // Without `d`'s import of `a` there is no circle.
    let mut files = files;
    files[4].1 = "use super::helper;\npub struct D;";
    assert_eq!(toy(&files).circles(), Vec::<String>::new());

    // A circle inside a directory, through `self::` and an inline path
    // from a test module; and one between two directories.
    let inner = toy(&[
        ("lib.rs", "mod p; mod q;"),
        ("p/mod.rs", "mod x; mod y;"),
        ("p/x.rs", "use self::super::y::Y; pub struct X;"),
        ("p/y.rs", "pub struct Y;\n#[cfg(test)]\nmod tests { use super::*; fn f() -> crate::p::x::X { todo!() } }"),
        ("q/mod.rs", "pub fn f() -> crate::p::x::X { todo!() }"),
    ]);
    let circles = inner.circles();
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(circles[0].starts_with("circle in `p` between `x`, `y`:"), "{}", circles[0]);
    let across = toy(&[
        ("lib.rs", "mod p; mod q;"),
        ("p/mod.rs", "mod x; pub use x::X; pub fn g() -> crate::q::Q { todo!() }"),
        ("p/x.rs", "pub struct X;"),
        ("q/mod.rs", "pub struct Q(crate::p::X);"),
    ]);
    let circles = across.circles();
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(circles[0].contains("q/mod.rs -> p/x.rs (p::X)"), "{}", circles[0]);
    assert!(circles[0].contains("p/mod.rs -> q/mod.rs (q::Q)"), "{}", circles[0]);
}

#[test]
fn the_scan_reads_use_trees_and_skips_literals() {
    let children = BTreeSet::from(["child".to_string()]);
    let module = vec!["m".to_string()];
    let code = "pub(crate) use child::{A as B, deep::{self, C}};\nuse std::fmt;\nlet s = \"crate::x::Y\";\n\
                fn f() { crate::z::f(); self::child::g(); v.child::h(); }";
    let found = scan(&code_of(code), &module, &children);
    let paths: Vec<String> = found.paths.iter().map(|path| path.join("::")).collect();
    assert_eq!(paths, ["m::child::A", "m::child::deep", "m::child::deep::C", "z::f", "m::child::g"]);
    let reexports: Vec<String> =
        found.reexports.iter().map(|(name, path)| format!("{name}={}", path.join("::"))).collect();
    assert_eq!(reexports, ["B=m::child::A", "deep=m::child::deep", "C=m::child::deep::C"]);
}
