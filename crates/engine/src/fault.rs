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
    /// zen: a pipelined commit is acknowledged when it returns, its LP line
    /// flushed but its fence still left to a later one.
    ZenAckBeforeNextFence,
    /// zen: a transaction that read or overwrites a version of another
    /// worker's pipelined commit whose LP line is not yet fenced commits
    /// without making that commit durable first, so it can be durable (and
    /// acknowledged) while the commit it depends on is lost.
    ZenCommitsOnUnfencedWrites,
    /// group-commit: persist (and acknowledge) the durable epoch before the
    /// epoch's log lines are durable: each group commit flushes only the
    /// log bytes the previous one saw.
    GroupCommitEpochBeforeLog,
    /// sp3: acknowledge once the own log record is durable, without waiting
    /// for the transactions it depends on. The committer is also held
    /// between its unlock and its log (see [`FaultWindow`]), as a
    /// descheduled one would be, so dependents commit in that window.
    Sp3AckBeforeDependencies,
    /// phytm family: release the row locks and leave the versions even
    /// before the log record is durable, so a reader on any path can commit
    /// on a write a crash then loses. The committer is held in that window
    /// (see [`FaultWindow`]).
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
    /// dbxn-nvm: the one fence of the commit is issued after the value
    /// copies, before the redo record's (non-temporal) stores, so the
    /// record is acknowledged unfenced.
    DbxnNvmFenceBeforeRecord,
    /// dbx-naive: the record's fence is moved out of the commit region
    /// (to shorten it) and left to the worker's next commit, so a commit
    /// is acknowledged with its record not yet fenced.
    DbxNaiveFenceLeftToNextCommit,
    /// zen-naive-alloc: Algorithm 1's second fence (after the LP bit) is
    /// left out, as the paper does, relying on the next allocation's bitmap
    /// fence to persist the LP bit; the commit is acknowledged before it
    /// (a pipelined one as soon as it returns).
    ZenNaiveAllocLpUnfenced,
    /// nvm-tx: the flush of the redo record stops one line short (the
    /// record's last line stays in the cache) before the fence.
    NvmTxSkipLastLineFlush,
    /// phtm: no fence after the redo record, as if the hardware commit
    /// (`xend`) made the record durable (the PHyTM paper's assumption).
    PhtmXendPersistsLog,
    /// 2pl: one fence per two commits (the second commit's fence covers
    /// the first's record), so every other commit is acknowledged before
    /// its record is fenced.
    TwoPlFencePerTwoCommits,
    /// mnemosyne: the commit's one fence is left out (the fragment is
    /// written, never fenced before the acknowledgement).
    MnemosyneAckBeforeFence,
    /// pisces: the commit's versions become visible (and are acknowledged
    /// and written back) without the log's fence: the persist stage is
    /// skipped.
    PiscesVisibleBeforePersist,
    /// foedus: the log gleaner writes its snapshot pages with ordinary
    /// stores and flushes them only after it switched the snapshot root, so
    /// a crash in between finds the root naming pages that never reached
    /// the media.
    FoedusRootBeforePages,
    /// mnemosyne, pisces: recovery takes every home slot that fails its
    /// check for a write-back the crash tore (and a zero slot for one never
    /// written), without asking the logs whether a write since the last
    /// truncation can have torn it: a damaged slot of an older version is
    /// then lost silently. Not in [`Fault::ALL`]: it breaks a check of
    /// damage, not a protocol step, so the crash harness has nothing to
    /// catch; the corruption matrix's control requires its home-slot cells
    /// to fail under it.
    UncheckedHomeSlots,
}

#[cfg(feature = "fault-injection")]
impl Fault {
    /// Every broken protocol step, which the crash harness must catch (the
    /// damage-check controls are in [`Fault::DAMAGE_CHECKS`]).
    pub const ALL: [Fault; 21] = [
        Fault::DbxnAckBeforeFence,
        Fault::ZenSkipFirstFence,
        Fault::ZenLpOnFirstTuple,
        Fault::ZenAckBeforeNextFence,
        Fault::ZenCommitsOnUnfencedWrites,
        Fault::GroupCommitEpochBeforeLog,
        Fault::Sp3AckBeforeDependencies,
        Fault::HybridUnlockBeforeLog,
        Fault::MmdbAckBeforeFence,
        Fault::WblAckBeforeWindow,
        Fault::WblKeepDirtyWindow,
        Fault::ZenPlusSpillWithLp,
        Fault::DbxnNvmFenceBeforeRecord,
        Fault::DbxNaiveFenceLeftToNextCommit,
        Fault::ZenNaiveAllocLpUnfenced,
        Fault::NvmTxSkipLastLineFlush,
        Fault::PhtmXendPersistsLog,
        Fault::TwoPlFencePerTwoCommits,
        Fault::MnemosyneAckBeforeFence,
        Fault::PiscesVisibleBeforePersist,
        Fault::FoedusRootBeforePages,
    ];

    /// The faults that skip a check of damage (the corruption matrix's
    /// controls).
    pub const DAMAGE_CHECKS: [Fault; 1] = [Fault::UncheckedHomeSlots];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Fault::DbxnAckBeforeFence => "dbxn-ack-before-fence",
            Fault::ZenSkipFirstFence => "zen-skip-first-fence",
            Fault::ZenLpOnFirstTuple => "zen-lp-on-first-tuple",
            Fault::ZenAckBeforeNextFence => "zen-ack-before-next-fence",
            Fault::ZenCommitsOnUnfencedWrites => "zen-commits-on-unfenced-writes",
            Fault::GroupCommitEpochBeforeLog => "group-commit-epoch-before-log",
            Fault::Sp3AckBeforeDependencies => "sp3-ack-before-dependencies",
            Fault::HybridUnlockBeforeLog => "hybrid-unlock-before-log",
            Fault::MmdbAckBeforeFence => "mmdb-ack-before-fence",
            Fault::WblAckBeforeWindow => "wbl-ack-before-window",
            Fault::WblKeepDirtyWindow => "wbl-keep-dirty-window",
            Fault::ZenPlusSpillWithLp => "zen-plus-spill-with-lp",
            Fault::DbxnNvmFenceBeforeRecord => "dbxn-nvm-fence-before-record",
            Fault::DbxNaiveFenceLeftToNextCommit => "dbx-naive-fence-left-to-next-commit",
            Fault::ZenNaiveAllocLpUnfenced => "zen-naive-alloc-lp-unfenced",
            Fault::NvmTxSkipLastLineFlush => "nvm-tx-skip-last-line-flush",
            Fault::PhtmXendPersistsLog => "phtm-xend-persists-log",
            Fault::TwoPlFencePerTwoCommits => "2pl-fence-per-two-commits",
            Fault::MnemosyneAckBeforeFence => "mnemosyne-ack-before-fence",
            Fault::PiscesVisibleBeforePersist => "pisces-visible-before-persist",
            Fault::FoedusRootBeforePages => "foedus-root-before-pages",
            Fault::UncheckedHomeSlots => "unchecked-home-slots",
        }
    }

    /// The engine whose durability step the fault breaks (the others may
    /// share the code but are not what it models).
    pub fn engine(self) -> crate::engine_kind::EngineKind {
        use crate::engine_kind::EngineKind as E;
        match self {
            Fault::DbxnAckBeforeFence => E::Dbxn,
            Fault::ZenSkipFirstFence
            | Fault::ZenLpOnFirstTuple
            | Fault::ZenAckBeforeNextFence
            | Fault::ZenCommitsOnUnfencedWrites => E::Zen,
            Fault::GroupCommitEpochBeforeLog => E::GroupCommit,
            Fault::Sp3AckBeforeDependencies => E::Sp3,
            Fault::HybridUnlockBeforeLog => E::Phytm,
            Fault::MmdbAckBeforeFence => E::Mmdb,
            Fault::WblAckBeforeWindow | Fault::WblKeepDirtyWindow => E::Wbl,
            Fault::ZenPlusSpillWithLp => E::ZenPlus,
            Fault::DbxnNvmFenceBeforeRecord => E::DbxnNvm,
            Fault::DbxNaiveFenceLeftToNextCommit => E::DbxNaive,
            Fault::ZenNaiveAllocLpUnfenced => E::ZenNaiveAlloc,
            Fault::NvmTxSkipLastLineFlush => E::NvmTx,
            Fault::PhtmXendPersistsLog => E::Phtm,
            Fault::TwoPlFencePerTwoCommits => E::TwoPl,
            Fault::MnemosyneAckBeforeFence => E::Mnemosyne,
            Fault::PiscesVisibleBeforePersist => E::Pisces,
            Fault::FoedusRootBeforePages => E::Foedus,
            Fault::UncheckedHomeSlots => E::Mnemosyne,
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().chain(Fault::DAMAGE_CHECKS).find(|fault| fault.name() == name)
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

    /// zen: pipelined commits acknowledged before their LP line's fence.
    #[inline(always)]
    pub(crate) fn ack_before_next_fence(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::ZenAckBeforeNextFence))
    }

    /// zen: commits on another worker's unfenced versions without making
    /// them durable.
    #[inline(always)]
    pub(crate) fn commits_on_unfenced_writes(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::ZenCommitsOnUnfencedWrites))
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

    /// dbxn-nvm: the fence before the record's stores.
    #[inline(always)]
    pub(crate) fn fence_before_record(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::DbxnNvmFenceBeforeRecord))
    }

    /// dbx-naive: the record's fence left to the next commit.
    #[inline(always)]
    pub(crate) fn fence_left_to_next_commit(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::DbxNaiveFenceLeftToNextCommit))
    }

    /// zen-naive-alloc: no fence after the LP bit.
    #[inline(always)]
    pub(crate) fn lp_unfenced(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::ZenNaiveAllocLpUnfenced))
    }

    /// nvm-tx: the record's last line is not flushed.
    #[inline(always)]
    pub(crate) fn skip_last_line_flush(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::NvmTxSkipLastLineFlush))
    }

    /// phtm: no fence after the record.
    #[inline(always)]
    pub(crate) fn xend_persists_log(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::PhtmXendPersistsLog))
    }

    /// 2pl: one fence per two commits.
    #[inline(always)]
    pub(crate) fn fence_per_two_commits(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::TwoPlFencePerTwoCommits))
    }

    /// mnemosyne: no fence at commit.
    #[inline(always)]
    pub(crate) fn mnemosyne_ack_before_fence(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::MnemosyneAckBeforeFence))
    }

    /// pisces: no fence before the versions become visible.
    #[inline(always)]
    pub(crate) fn pisces_visible_before_persist(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::PiscesVisibleBeforePersist))
    }

    /// foedus: snapshot pages are flushed after the root switch.
    #[inline(always)]
    pub(crate) fn foedus_root_before_pages(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::FoedusRootBeforePages))
    }

    /// mnemosyne, pisces: recovery does not check the home slots that fail
    /// their CRC against the logs.
    #[inline(always)]
    pub(crate) fn unchecked_home_slots(&self) -> bool {
        self.is(|f| matches!(f, FaultKind::UncheckedHomeSlots))
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
    ZenAckBeforeNextFence,
    ZenCommitsOnUnfencedWrites,
    GroupCommitEpochBeforeLog,
    Sp3AckBeforeDependencies,
    HybridUnlockBeforeLog,
    MmdbAckBeforeFence,
    WblAckBeforeWindow,
    WblKeepDirtyWindow,
    ZenPlusSpillWithLp,
    DbxnNvmFenceBeforeRecord,
    DbxNaiveFenceLeftToNextCommit,
    ZenNaiveAllocLpUnfenced,
    NvmTxSkipLastLineFlush,
    PhtmXendPersistsLog,
    TwoPlFencePerTwoCommits,
    MnemosyneAckBeforeFence,
    PiscesVisibleBeforePersist,
    FoedusRootBeforePages,
    UncheckedHomeSlots,
}

/// The window of the broken variants whose bug needs a second transaction
/// inside it (`sp3-ack-before-dependencies`, `hybrid-unlock-before-log`):
/// a committer in that window (its writes visible, its log not yet
/// written) is held there, as a descheduled one would be, instead of for a
/// fixed time. It waits until another transaction overwrote one of its
/// writes (so that one committed on them; it is acknowledged while the
/// held log is missing), and then until one of the workers existing when
/// it was held went away (a worker finished its run) or the database
/// closed: every acknowledgement in between depends on a log a crash then
/// loses, whatever the machine's load. A committer whose writes nobody
/// overwrites within [`FaultWindow::HELD_FOR`] commits of the others is let
/// go, and the next writing commit is held instead. One committer is held
/// at a time, and only while at least two workers exist (a single worker
/// would wait for itself). Without a fault nothing is ever held.
#[derive(Debug, Default)]
pub(crate) struct FaultWindow {
    live: std::sync::atomic::AtomicUsize,
    holding: std::sync::atomic::AtomicBool,
    commits: std::sync::atomic::AtomicU64,
}

/// A worker's registration with a [`FaultWindow`] (deregisters on drop).
#[derive(Debug)]
pub(crate) struct FaultWindowWorker(std::sync::Arc<FaultWindow>);

impl Drop for FaultWindowWorker {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl FaultWindow {
    /// Commits of the other workers a held committer waits for an
    /// overwrite of its writes.
    pub(crate) const HELD_FOR: u64 = 64;

    /// Only a safety net against a run that can no longer make progress
    /// while a committer is held (the releases are counted in commits and
    /// workers).
    const SAFETY_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

    /// Registers a worker (for as long as the result lives).
    pub(crate) fn register(self: &std::sync::Arc<Self>) -> FaultWindowWorker {
        self.live.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        FaultWindowWorker(std::sync::Arc::clone(self))
    }

    /// A writing commit finished.
    pub(crate) fn committed(&self) {
        self.commits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds the calling committer (see the type's documentation);
    /// `overwritten`: whether another transaction overwrote one of its
    /// writes.
    pub(crate) fn hold(&self, closed: impl Fn() -> bool, overwritten: impl Fn() -> bool) {
        use std::sync::atomic::Ordering::SeqCst;
        let live = self.live.load(SeqCst);
        if live < 2 || self.holding.swap(true, SeqCst) {
            return;
        }
        let started = std::time::Instant::now();
        let first = self.commits.load(SeqCst);
        let going = || self.live.load(SeqCst) >= live && !closed() && started.elapsed() < Self::SAFETY_LIMIT;
        let mut seen = false;
        while going() {
            seen = seen || overwritten();
            if !seen && self.commits.load(SeqCst) - first >= Self::HELD_FOR {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        self.holding.store(false, SeqCst);
    }
}
