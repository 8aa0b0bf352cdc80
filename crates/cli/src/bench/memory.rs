//! Memory use of a run: the process's resident set size around the load
//! phase and the rows the load left, measured once per run.
//!
//! The resident set covers everything mapped into the process that is in
//! memory: the engine's DRAM structures and, for durable engines, the pool
//! pages the load touched (the pool is a shared file mapping). The figure
//! is Linux-only (`/proc/self/statm`); elsewhere it is `None`.

use pmtx_engine::{Database, DbError, TableId};

/// The resident set size of this process in bytes: the second field of
/// `/proc/self/statm` (resident pages) times the page size.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(page_size()?)
}

/// The resident set split by kind, in bytes (the `RssAnon`, `RssFile` and
/// `RssShmem` lines of `/proc/self/status`): anonymous memory is the
/// process's own heap and stacks; file pages are mapped files, the pool of
/// a durable engine among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResidentKinds {
    /// Anonymous pages (heap, stacks).
    pub anon_bytes: u64,
    /// Pages of mapped files (the pool file, the binary).
    pub file_bytes: u64,
    /// Shared-memory pages (files on tmpfs, among others).
    pub shmem_bytes: u64,
}

/// [`ResidentKinds`] of this process (None where `/proc/self/status` has
/// no such lines).
pub fn resident_kinds() -> Option<ResidentKinds> {
    parse_resident_kinds(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn parse_resident_kinds(status: &str) -> Option<ResidentKinds> {
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    };
    Some(ResidentKinds {
        anon_bytes: field("RssAnon:")?,
        file_bytes: field("RssFile:")?,
        shmem_bytes: field("RssShmem:")?,
    })
}

fn page_size() -> Option<u64> {
    // SAFETY: sysconf takes no pointers and only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&size| size > 0)
}

/// Rows present in the first `tables` tables of a quiescent database.
pub fn count_rows(database: &Database, tables: usize) -> Result<u64, DbError> {
    let mut rows = 0u64;
    for table in 0..tables {
        database.for_each_row(TableId(table as u32), |_, _| rows += 1)?;
    }
    Ok(rows)
}

/// What the load cost: (RSS delta, bytes per loaded row).
pub fn load_cost(before: Option<u64>, after: Option<u64>, rows: u64) -> (Option<i64>, Option<f64>) {
    let delta = before.zip(after).map(|(before, after)| after as i64 - before as i64);
    let per_row = delta.filter(|_| rows > 0).map(|delta| delta as f64 / rows as f64);
    (delta, per_row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_set_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            let before = resident_bytes().expect("/proc/self/statm");
            // Touch 16 MiB so the resident set grows.
            let block = vec![1u8; 16 << 20];
            let after = resident_bytes().unwrap();
            assert!(block.iter().map(|&b| b as u64).sum::<u64>() == 16 << 20);
            assert!(after > before, "{before} -> {after}");
        }
    }

    #[test]
    fn resident_kinds_are_parsed_from_status() {
        let status = "Name:\tpmtx\nVmRSS:\t  3000 kB\nRssAnon:\t  2000 kB\nRssFile:\t   900 kB\nRssShmem:\t   100 kB\n";
        let kinds = parse_resident_kinds(status).unwrap();
        assert_eq!(kinds, ResidentKinds { anon_bytes: 2000 << 10, file_bytes: 900 << 10, shmem_bytes: 100 << 10 });
        assert_eq!(parse_resident_kinds("Name:\tx\n"), None);
        if cfg!(target_os = "linux") {
            assert!(resident_kinds().is_some_and(|kinds| kinds.anon_bytes > 0));
        }
    }

    #[test]
    fn load_cost_per_row() {
        assert_eq!(load_cost(Some(1000), Some(3000), 10), (Some(2000), Some(200.0)));
        assert_eq!(load_cost(Some(3000), Some(1000), 10), (Some(-2000), Some(-200.0)));
        assert_eq!(load_cost(None, Some(1000), 10), (None, None));
        assert_eq!(load_cost(Some(1), Some(2), 0), (Some(1), None));
    }
}
