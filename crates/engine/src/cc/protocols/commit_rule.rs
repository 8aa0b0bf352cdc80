//! The commit rules: what an engine's writing commit does around its
//! protocol's validation. The protocol (`cc=`) decides how reads are
//! validated and which timestamp a commit may take; the commit rule,
//! chosen by the engine (never by `cc=`), decides whether that validation
//! runs at all, how the TID is stamped, and whether the commit collects
//! the transactions it depends on. [`Validating`] is every engine's rule
//! but SP^3's (`sp3.rs`) and NVM-Ideal's (`none.rs`).

use crate::cc::tx_sets::TxSets;
use crate::storage::record::RowKind;

/// A commit rule (see the module comment). Every item is resolved at
/// compile time: an engine's commit is monomorphized over its rule.
pub(crate) trait CommitRule: Send + Sync + 'static {
    /// Whether a commit validates its reads through the protocol's hooks
    /// (false only for `nvm-ideal`, the bound without concurrency control).
    const VALIDATES: bool = true;
    /// Whether a commit collects the transactions it depends on
    /// ([`CommitRule::collect_dependencies`]): SP^3 releases its locks
    /// before its log is durable.
    const TRACKS_DEPENDENCIES: bool = false;

    /// The commit TID of worker `worker`, given the smallest TID the
    /// protocol allows.
    #[inline]
    fn stamp_tid(tid: u64, worker: usize) -> u64 {
        let _ = worker;
        tid
    }

    /// Collects into `dependencies` the TIDs of the transactions the
    /// attempt of worker `own` depends on; `durable(tid)` says whether
    /// `tid` is durable with everything it depends on (the durability
    /// scheme knows).
    fn collect_dependencies<R: RowKind>(
        tx: &TxSets<R>,
        own: usize,
        durable: impl Fn(u64) -> bool,
        dependencies: &mut Vec<u64>,
    ) {
        let _ = (tx, own, durable);
        dependencies.clear();
    }
}

/// The rule of every engine but the SP^3 family's: the protocol validates,
/// the TID is the protocol's, nothing is tracked.
pub(crate) struct Validating;

impl CommitRule for Validating {}
