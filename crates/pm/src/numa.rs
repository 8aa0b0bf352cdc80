//! The machine's NUMA nodes, for engines that place data and threads on
//! them (`zen+`'s soft partitions): how many nodes Linux reports, binding
//! the calling thread to a node's CPUs (`sched_setaffinity`), and binding a
//! pool chunk's pages to a node (`mbind`, [`crate::Pool::bind_chunk_to_numa_node`]).
//!
//! These act only on a machine with several nodes; on one node (this
//! project's machines) an engine emulates nodes instead, through the media
//! model (`--pm-numa-nodes`, [`crate::set_thread_numa_node`]) or by
//! bookkeeping alone.

use crate::error::{PoolError, PoolResult};
use std::path::{Path, PathBuf};

const NODE_ROOT: &str = "/sys/devices/system/node";

/// `mbind` flag: also move the pages already present (linux/mempolicy.h;
/// the libc crate does not define it). A chunk's pages were touched when it
/// was zeroed, before it is bound.
const MPOL_MF_MOVE: libc::c_ulong = 1 << 1;

/// Parses a Linux list such as `0-3,8,10-11` (node and CPU lists in sysfs).
pub fn parse_id_list(text: &str) -> Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for part in text.trim().split(',').map(str::trim).filter(|part| !part.is_empty()) {
        let number = |text: &str| text.trim().parse::<u32>().map_err(|_| format!("bad id {text:?} in list {part:?}"));
        match part.split_once('-') {
            Some((low, high)) => {
                let (low, high) = (number(low)?, number(high)?);
                if low > high || high - low > 1 << 16 {
                    return Err(format!("bad range {part:?}"));
                }
                ids.extend(low..=high);
            }
            None => ids.push(number(part)?),
        }
    }
    Ok(ids)
}

/// The NUMA nodes online on this machine (`/sys/devices/system/node/online`;
/// `[0]` when it cannot be read, e.g. a kernel without NUMA).
pub fn machine_numa_nodes() -> Vec<u32> {
    std::fs::read_to_string(Path::new(NODE_ROOT).join("online"))
        .ok()
        .and_then(|text| parse_id_list(&text).ok())
        .filter(|nodes| !nodes.is_empty())
        .unwrap_or_else(|| vec![0])
}

fn io_error(path: PathBuf, operation: &'static str, source: std::io::Error) -> PoolError {
    PoolError::Io { path, operation, source }
}

/// The CPUs of node `node`.
pub fn numa_node_cpus(node: u32) -> PoolResult<Vec<u32>> {
    let path = Path::new(NODE_ROOT).join(format!("node{node}")).join("cpulist");
    let text = std::fs::read_to_string(&path).map_err(|error| io_error(path.clone(), "read", error))?;
    parse_id_list(&text).map_err(|detail| PoolError::InvalidOption(format!("{}: {detail}", path.display())))
}

/// Binds the calling thread to the CPUs of node `node`.
pub fn bind_thread_to_numa_node(node: u32) -> PoolResult<()> {
    let cpus = numa_node_cpus(node)?;
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside
    // it for ids below its capacity (checked).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for cpu in cpus.iter().map(|&cpu| cpu as usize).filter(|&cpu| cpu < capacity) {
        // SAFETY: `cpu` is below the set's capacity.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size given; 0 is the
    // calling thread.
    let result = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if result != 0 {
        return Err(io_error(PathBuf::from(NODE_ROOT), "sched_setaffinity", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Binds the pages of `len` bytes at `address` (page-aligned, inside a
/// mapping) to node `node` with `mbind(MPOL_BIND)`.
///
/// # Safety
/// `address..address + len` must lie inside one live mapping.
pub(crate) unsafe fn bind_range_to_numa_node(address: *mut u8, len: u64, node: u32) -> PoolResult<()> {
    if node >= 64 {
        return Err(PoolError::InvalidOption(format!("NUMA node {node}: at most 64 nodes are supported")));
    }
    let mask: u64 = 1 << node;
    // SAFETY: the caller guarantees the range; the mask outlives the call
    // and `maxnode` (65) covers its 64 bits.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            address as libc::c_ulong,
            len as libc::c_ulong,
            libc::MPOL_BIND as libc::c_ulong,
            &mask as *const u64,
            65 as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    if result != 0 {
        return Err(io_error(PathBuf::from(NODE_ROOT), "mbind", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_like_sysfs_writes_them() {
        assert_eq!(parse_id_list("0\n"), Ok(vec![0]));
        assert_eq!(parse_id_list("0-3,8,10-11"), Ok(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_id_list(""), Ok(vec![]));
        assert!(parse_id_list("3-1").is_err());
        assert!(parse_id_list("x").unwrap_err().contains("bad id"));
    }

    /// A chunk binds to a node the machine has (every machine has its
    /// first online node); a node beyond the mask and a chunk beyond the
    /// pool are typed errors.
    #[test]
    fn chunks_bind_to_an_existing_node() {
        use crate::{ChunkId, Direct, PmOptions, Pool};
        let pool = Pool::<Direct>::create_in_memory(8 << 20, 2 << 20, &PmOptions::default()).unwrap();
        let node = machine_numa_nodes()[0];
        if Path::new(NODE_ROOT).exists() {
            pool.bind_chunk_to_numa_node(ChunkId(0), node).unwrap();
        }
        assert!(pool.bind_chunk_to_numa_node(ChunkId(0), 64).unwrap_err().to_string().contains("at most 64"));
        assert!(pool.bind_chunk_to_numa_node(ChunkId(99), node).unwrap_err().to_string().contains("not in the pool"));
    }

    /// Every machine has at least node 0, and its CPUs are listed.
    #[test]
    fn this_machine_has_a_node_with_cpus() {
        let nodes = machine_numa_nodes();
        assert!(!nodes.is_empty());
        if Path::new(NODE_ROOT).join("node0").exists() {
            assert!(!numa_node_cpus(nodes[0]).unwrap().is_empty());
        }
    }
}
