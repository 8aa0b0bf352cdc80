//! Which part of a transaction an instruction belongs to, by the name of
//! the function it executes in (after inlining).
//!
//! Each function of the engine, the client or the allocator is classified
//! by its name ([`classify`]). A helper shared by every part (the standard
//! library, `memcpy`, hash maps, CRC) is no part of its own: its cost is
//! split over its callers in proportion to what each caller's calls of it
//! cost, up to the first classified caller ([`split`]).

use crate::callgrind::{add, Profile};
use std::collections::HashMap;

/// The parts of a transaction, in report order.
pub const COMPONENTS: [&str; 11] = [
    "client",
    "begin and other",
    "index",
    "reads",
    "scans",
    "writes and inserts",
    "commit: validate",
    "commit: persist",
    "commit: install",
    "commit: other",
    "allocation",
];

fn component(name: &str) -> usize {
    COMPONENTS.iter().position(|component| *component == name).expect("a listed component")
}

/// The method name: the last path segment, closures and generics left out.
fn method(name: &str) -> &str {
    let mut name = name;
    while let Some(stripped) = name.strip_suffix("::{{closure}}") {
        name = stripped;
    }
    let name = name.rsplit("::").next().unwrap_or(name);
    name.split('<').next().unwrap_or(name)
}

/// The part a function belongs to; `None` for a shared helper.
pub fn classify(name: &str) -> Option<usize> {
    let starts = |prefixes: &[&str]| {
        prefixes.iter().any(|prefix| name.starts_with(prefix) || name.starts_with(&format!("<{prefix}")))
    };
    let method = method(name);
    let method_has = |words: &[&str]| words.iter().any(|word| method.contains(word));
    if starts(&["pmtx_workloads::", "pmtx::", "hdrhistogram::", "rand::", "rand_chacha::", "rand_core::"]) {
        return Some(component("client"));
    }
    let allocator = [
        "malloc",
        "free",
        "realloc",
        "calloc",
        "cfree",
        "_int_malloc",
        "_int_free",
        "_int_realloc",
        "malloc_consolidate",
        "unlink_chunk",
        "sysmalloc",
        "systrim",
        "tcache_init",
        "alloc_perturb",
        "__default_morecore",
        "__libc_malloc",
        "__libc_free",
        "__libc_realloc",
        "__libc_calloc",
        "__mprotect",
        "mprotect",
        "__brk",
        "__sbrk",
        "grow_heap",
        "new_heap",
    ];
    if allocator.contains(&name)
        || starts(&["__rust_alloc", "__rust_dealloc", "__rust_realloc", "__rdl_", "alloc::raw_vec::", "alloc::alloc::"])
        // mimalloc (the pmtx binary's allocator) and its Rust wrapper.
        || starts(&["mi_", "_mi_", "<mimalloc::MiMalloc"])
    {
        return Some(component("allocation"));
    }
    if !starts(&["pmtx_engine::", "pmtx_pm::", "pmtx_htm::"]) {
        return None;
    }
    if name.contains("pmtx_engine::index::") {
        return Some(component("index"));
    }
    if method_has(&["validate", "lock_rows", "sort_by_row", "check_read"]) {
        return Some(component("commit: validate"));
    }
    if method_has(&["persist", "flush", "fence", "encode_tuple", "tuple_crc", "append", "crc"])
        || starts(&["pmtx_pm::", "pmtx_engine::durability::"])
    {
        return Some(component("commit: persist"));
    }
    if method_has(&["install", "retire", "reclaim", "sweep", "tombstone", "drain_inbox", "release"])
        || (name.contains("CommitSteps") && method == "finish")
    {
        return Some(component("commit: install"));
    }
    if method_has(&["commit", "prepare", "acknowledge", "after_attempt", "timestamp"]) || name.contains("::pipeline::")
    {
        return Some(component("commit: other"));
    }
    if method_has(&["scan"]) {
        return Some(component("scans"));
    }
    if method_has(&["get", "read", "lookup", "prefetch", "version_at", "copy_into", "find"]) {
        return Some(component("reads"));
    }
    if method_has(&["write", "insert", "update", "delete", "put", "push", "secondar", "overwrite", "remove"]) {
        return Some(component("writes and inserts"));
    }
    Some(component("begin and other"))
}

/// The profile's cost (every event) split by part.
pub fn split(profile: &Profile) -> Vec<Vec<u64>> {
    let ir = profile.event("Ir").unwrap_or(0);
    // Who calls each function, and what those calls cost (instructions).
    let mut callers: HashMap<&str, Vec<(&str, u64)>> = HashMap::new();
    for (caller, function) in &profile.functions {
        for (callee, cost) in &function.calls {
            callers.entry(callee.as_str()).or_default().push((caller.as_str(), cost.get(ir).copied().unwrap_or(0)));
        }
    }
    let mut shares: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut parts = vec![Vec::new(); COMPONENTS.len()];
    let mut names: Vec<&String> = profile.functions.keys().collect();
    names.sort();
    for name in names {
        let function = &profile.functions[name];
        let share = shares_of(name, &callers, &mut shares, &mut Vec::new());
        for (part, weight) in parts.iter_mut().zip(&share) {
            if *weight > 0.0 {
                let cost: Vec<u64> =
                    function.self_cost.iter().map(|&cost| (cost as f64 * weight).round() as u64).collect();
                add(part, &cost);
            }
        }
    }
    for part in &mut parts {
        part.resize(profile.events.len(), 0);
    }
    parts
}

/// The share of each part in the cost of `name`: one part for a classified
/// function, its callers' shares weighted by their calls for a helper (a
/// helper no classified function calls counts as "begin and other").
fn shares_of<'a>(
    name: &'a str,
    callers: &HashMap<&'a str, Vec<(&'a str, u64)>>,
    memo: &mut HashMap<&'a str, Vec<f64>>,
    visiting: &mut Vec<&'a str>,
) -> Vec<f64> {
    if let Some(share) = memo.get(name) {
        return share.clone();
    }
    let mut share = vec![0.0; COMPONENTS.len()];
    if let Some(part) = classify(name) {
        share[part] = 1.0;
    } else if visiting.contains(&name) {
        // A cycle of helpers: its callers outside the cycle decide.
        return share;
    } else {
        visiting.push(name);
        let mut total = 0.0;
        for &(caller, weight) in callers.get(name).map(Vec::as_slice).unwrap_or(&[]) {
            let caller_share = shares_of(caller, callers, memo, visiting);
            let weight = weight as f64;
            for (sum, part) in share.iter_mut().zip(&caller_share) {
                *sum += part * weight;
            }
            total += caller_share.iter().sum::<f64>() * weight;
        }
        visiting.pop();
        if total > 0.0 {
            share.iter_mut().for_each(|part| *part /= total);
        } else {
            share[component("begin and other")] = 1.0;
        }
    }
    memo.insert(name, share.clone());
    share
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str) -> Option<&'static str> {
        classify(name).map(|index| COMPONENTS[index])
    }

    #[test]
    fn names_classify() {
        assert_eq!(part("pmtx_workloads::tpcc::client::TpccClient::new_order"), Some("client"));
        assert_eq!(
            part("<pmtx_workloads::tpcc::client::TpccClient as pmtx_workloads::Client>::run_next"),
            Some("client")
        );
        assert_eq!(part("malloc"), Some("allocation"));
        assert_eq!(part("__rust_alloc"), Some("allocation"));
        assert_eq!(part("mi_malloc_aligned"), Some("allocation"));
        assert_eq!(part("_mi_page_malloc_zero"), Some("allocation"));
        assert_eq!(part("<mimalloc::MiMalloc as core::alloc::global::GlobalAlloc>::alloc"), Some("allocation"));
        assert_eq!(part("pmtx_engine::index::btree::OrderedIndex<W>::descend"), Some("index"));
        assert_eq!(
            part("pmtx_engine::index::btree::write::<impl pmtx_engine::index::btree::OrderedIndex<W>>::write::{{closure}}"),
            Some("index")
        );
        assert_eq!(part("pmtx_engine::cc::transaction::TxState<R>::validate_reads"), Some("commit: validate"));
        assert_eq!(part("pmtx_engine::durability::zen_persist::persist_tuples"), Some("commit: persist"));
        assert_eq!(
            part("pmtx_engine::engines::zen::worker::commit::<impl pmtx_engine::engines::pipeline::CommitSteps for pmtx_engine::engines::zen::worker::ZenWorker<B>>::finish"),
            Some("commit: install")
        );
        assert_eq!(part("pmtx_engine::engines::pipeline::commit"), Some("commit: other"));
        assert_eq!(part("pmtx_engine::cc::transaction::TxState<R>::scan"), Some("scans"));
        assert_eq!(part("pmtx_engine::cc::transaction::TxState<R>::get_with"), Some("reads"));
        assert_eq!(part("pmtx_engine::cc::transaction::TxState<R>::buffer_write"), Some("writes and inserts"));
        assert_eq!(part("pmtx_engine::db::Worker::attempt"), Some("begin and other"));
        assert_eq!(part("memcpy"), None);
        assert_eq!(part("hashbrown::map::HashMap<K,V,S,A>::insert"), None);
    }

    #[test]
    fn helpers_follow_their_callers() {
        let text = "events: Ir
fn=(1) pmtx_engine::cc::transaction::TxState<R>::get_with
1 10
cfn=(3) memcpy
calls=1 1
1 30
fn=(2) pmtx_workloads::ycsb::run
1 5
cfn=(3)
calls=1 1
1 10
fn=(3)
1 40
";
        let profile = Profile::parse(text).unwrap();
        let parts = split(&profile);
        // memcpy's 40: three quarters from the read, one from the client.
        assert_eq!(parts[component("reads")], [40]);
        assert_eq!(parts[component("client")], [15]);
        let sum: u64 = parts.iter().map(|part| part[0]).sum();
        assert_eq!(sum, 55);
    }
}
