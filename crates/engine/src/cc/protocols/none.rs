//! `nvm-ideal`'s commit rule: no concurrency control at commit. The
//! protocol's hooks still run while the transaction executes, but a commit
//! locks its write set and takes the next TID without validating a read
//! (SP^3's §5 "NVM-Ideal", the bound no validating engine reaches). Not
//! serializable; the catalog says so. Its TIDs are the SP^3 family's
//! (they name their worker: `sp3::stamp_worker`).
//!
//! Explained in docs/engines/sp3.md (`nvm-ideal`).

use super::commit_rule::CommitRule;

/// No validation at commit.
pub(crate) struct NoValidation;

impl CommitRule for NoValidation {
    const VALIDATES: bool = false;

    #[inline]
    fn stamp_tid(tid: u64, worker: usize) -> u64 {
        super::sp3::stamp_worker(tid, worker)
    }
}
