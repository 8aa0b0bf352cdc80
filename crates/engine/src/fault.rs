//! Deliberately broken variants of the durable engines, behind the
//! `fault-injection` cargo feature: the crash harness must report each one
//! (its self-tests in `pmtx-crashtest`), which shows it can catch the
//! mistakes each engine family could make. Without the feature no fault can
//! be selected and every check below is a constant `false`.

/// A protocol step each durable engine family must not skip.
#[cfg(feature = "fault-injection")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// dbxn family: acknowledge before the log record's fence.
    DbxnAckBeforeFence,
    /// zen: skip the first fence of Algorithm 1 (tuples before the LP bit).
    ZenSkipFirstFence,
    /// zen: set the LP bit on the first tuple of a transaction, written with
    /// the others, instead of on the last one after the fence.
    ZenLpOnFirstTuple,
    /// group-commit: persist the durable epoch before the epoch's log lines.
    GroupCommitEpochBeforeLog,
    /// sp3: acknowledge once the own log record is durable, without waiting
    /// for the transactions it depends on (the committer also sleeps 200 µs
    /// between its unlock and its log, as a descheduled one would).
    Sp3AckBeforeDependencies,
    /// phytm family: release the row locks and leave the versions even
    /// before the log record is durable, so a reader on any path can commit
    /// on a write a crash then loses (the committer also sleeps 200 µs in
    /// that window, as a descheduled one would).
    HybridUnlockBeforeLog,
    /// mmdb: acknowledge before the log record's fence (the record is
    /// written and `clwb`'d, never fenced before the acknowledgement).
    MmdbAckBeforeFence,
    /// wbl: acknowledge a commit when its versions are durable, before a
    /// group-commit record covers its timestamp.
    WblAckBeforeWindow,
    /// wbl: recovery keeps the versions in (c_p, c_d] instead of
    /// discarding them (it takes c_d for c_p).
    WblKeepDirtyWindow,
    /// zen+: the exclusive stage's direct NVM writes (tuples written to the
    /// heap before the commit, when the Met-Cache region is full) carry
    /// the LP bit, as if each were a transaction of its own, instead of
    /// waiting for the commit's LP tuple after the fence.
    ZenPlusSpillWithLp,
}

#[cfg(feature = "fault-injection")]
impl Fault {
    /// Every fault, for tests and `--help`.
    pub const ALL: [Fault; 10] = [
        Fault::DbxnAckBeforeFence,
        Fault::ZenSkipFirstFence,
        Fault::ZenLpOnFirstTuple,
        Fault::GroupCommitEpochBeforeLog,
        Fault::Sp3AckBeforeDependencies,
        Fault::HybridUnlockBeforeLog,
        Fault::MmdbAckBeforeFence,
        Fault::WblAckBeforeWindow,
        Fault::WblKeepDirtyWindow,
        Fault::ZenPlusSpillWithLp,
    ];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Fault::DbxnAckBeforeFence => "dbxn-ack-before-fence",
            Fault::ZenSkipFirstFence => "zen-skip-first-fence",
            Fault::ZenLpOnFirstTuple => "zen-lp-on-first-tuple",
            Fault::GroupCommitEpochBeforeLog => "group-commit-epoch-before-log",
            Fault::Sp3AckBeforeDependencies => "sp3-ack-before-dependencies",
            Fault::HybridUnlockBeforeLog => "hybrid-unlock-before-log",
            Fault::MmdbAckBeforeFence => "mmdb-ack-before-fence",
            Fault::WblAckBeforeWindow => "wbl-ack-before-window",
            Fault::WblKeepDirtyWindow => "wbl-keep-dirty-window",
            Fault::ZenPlusSpillWithLp => "zen-plus-spill-with-lp",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|fault| fault.name() == name)
    }
}

/// A failure of an engine's background work (`DbOptions::background_fault`),
/// for the tests that such failures reach the caller; unlike a [`Fault`]
/// it breaks no protocol step, so the crash harness does not run it.
#[cfg(feature = "fault-injection")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackgroundFault {
    /// The first periodic checkpoint fails with `DbError::OutOfSpace`.
    CheckpointError,
    /// The checkpointer panics at its first periodic checkpoint.
    CheckpointPanic,
    /// The epoch thread panics at its first tick (`wbl`: its window
    /// thread at its first window).
    EpochPanic,
}

/// The fault an engine instance runs with (none without the feature).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "fault-injection")]
    fault: Option<Fault>,
    #[cfg(feature = "fault-injection")]
    background: Option<BackgroundFault>,
}

impl Faults {
    /// An engine instance with `fault` and `background`.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn new(fault: Option<Fault>, background: Option<BackgroundFault>) -> Self {
        Faults { fault, background }
    }

    /// Background work: the first periodic checkpoint fails.
    #[inline(always)]
    pub(crate) fn checkpoint_fails(&self) -> bool {
        self.background_is(|f| matches!(f, BackgroundFaultKind::CheckpointError))
    }

    /// Background work: the checkpointer panics.
    #[inline(always)]
    pub(crate) fn checkpoint_panics(&self) -> bool {
        self.background_is(|f| matches!(f, BackgroundFaultKind::CheckpointPanic))
    }

    /// Background work: the epoch (or window) thread panics.
    #[inline(always)]
    pub(crate) fn epoch_panics(&self) -> bool {
        self.background_is(|f| matches!(f, BackgroundFaultKind::EpochPanic))
    }

    #[inline(always)]
    fn background_is(&self, test: impl Fn(BackgroundFaultKind) -> bool) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            self.background.is_some_and(test)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = test;
            false
        }
    }

    /// dbxn, mmdb: no fence before the acknowledgement.
    #[inline(always)]
    pub(crate) fn ack_before_fence(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::DbxnAckBeforeFence | FaultKind::MmdbAckBeforeFence))
    }

    /// zen: no fence between the tuples and the LP bit.
    #[inline(always)]
    pub(crate) fn skip_first_fence(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::ZenSkipFirstFence))
    }

    /// zen: the LP bit on the first tuple.
    #[inline(always)]
    pub(crate) fn lp_on_first_tuple(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::ZenLpOnFirstTuple))
    }

    /// group-commit: the durable epoch before the log lines.
    #[inline(always)]
    pub(crate) fn epoch_before_log(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::GroupCommitEpochBeforeLog))
    }

    /// sp3: acknowledge without waiting for the dependencies.
    #[inline(always)]
    pub(crate) fn ack_before_dependencies(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::Sp3AckBeforeDependencies))
    }

    /// phytm family: unlock (and no parity) before the log is durable.
    #[inline(always)]
    pub(crate) fn unlock_before_log(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::HybridUnlockBeforeLog))
    }

    /// wbl: acknowledge before the window's record.
    #[inline(always)]
    pub(crate) fn ack_before_window(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::WblAckBeforeWindow))
    }

    /// wbl: recovery keeps the dirty window.
    #[inline(always)]
    pub(crate) fn keep_dirty_window(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::WblKeepDirtyWindow))
    }

    /// zen+: direct NVM writes of the exclusive stage with the LP bit.
    #[inline(always)]
    pub(crate) fn spill_with_lp(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::ZenPlusSpillWithLp))
    }

    #[inline(always)]
    fn is(&self, test: impl Fn(FaultKind) -> bool) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            self.fault.is_some_and(test)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = test;
            false
        }
    }
}

#[cfg(feature = "fault-injection")]
use BackgroundFault as BackgroundFaultKind;
#[cfg(feature = "fault-injection")]
use Fault as FaultKind;

/// Stand-in for [`BackgroundFault`] without the feature (never
/// constructed).
#[cfg(not(feature = "fault-injection"))]
#[derive(Clone, Copy)]
#[allow(dead_code)]
enum BackgroundFaultKind {
    CheckpointError,
    CheckpointPanic,
    EpochPanic,
}

/// Stand-in so the checks above compile without the feature (never
/// constructed: every check is `false` then).
#[cfg(not(feature = "fault-injection"))]
#[derive(Clone, Copy)]
#[allow(dead_code)]
enum FaultKind {
    DbxnAckBeforeFence,
    ZenSkipFirstFence,
    ZenLpOnFirstTuple,
    GroupCommitEpochBeforeLog,
    Sp3AckBeforeDependencies,
    HybridUnlockBeforeLog,
    MmdbAckBeforeFence,
    WblAckBeforeWindow,
    WblKeepDirtyWindow,
    ZenPlusSpillWithLp,
}
