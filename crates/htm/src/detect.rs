//! Run-time detection of Intel RTM.
//!
//! Contract: [`rtm_support`] never executes `xbegin` unless CPUID leaf 7
//! reports RTM (EBX bit 11) and does not report RTM_ALWAYS_ABORT (EDX bit 11).
//! Only then does it run a short probe of empty transactions, because TSX can
//! also be switched off through `IA32_TSX_CTRL` without clearing the CPUID
//! flag, in which case every transaction aborts.

use std::fmt;

/// Whether RTM can be used on this machine, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RtmSupport {
    /// CPUID reports RTM, it is not forced to abort, and the probe committed
    /// transactions.
    Available,
    /// CPUID leaf 7 EBX bit 11 (RTM) is clear: the CPU has no TSX, or it is
    /// hidden (for example Linux `tsx=off`, or an AMD CPU).
    NoCpuFlag,
    /// CPUID leaf 7 EDX bit 11 (RTM_ALWAYS_ABORT) is set: microcode disabled
    /// TSX and every transaction aborts.
    AlwaysAbort,
    /// CPUID reports RTM but too few probe transactions committed.
    ProbeFailed,
    /// The build target is not x86-64.
    NotX86,
}

impl RtmSupport {
    /// True only for [`RtmSupport::Available`].
    pub fn is_available(self) -> bool {
        self == RtmSupport::Available
    }
}

impl fmt::Display for RtmSupport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            RtmSupport::Available => "RTM is available (CPUID reports it and a probe committed transactions)",
            RtmSupport::NoCpuFlag => {
                "the CPU does not report RTM (CPUID leaf 7 EBX bit 11 is clear: no TSX, or TSX disabled, e.g. tsx=off)"
            }
            RtmSupport::AlwaysAbort => {
                "the CPU reports RTM_ALWAYS_ABORT (CPUID leaf 7 EDX bit 11): TSX is disabled by microcode"
            }
            RtmSupport::ProbeFailed => {
                "the CPU reports RTM but probe transactions did not commit (TSX is likely disabled in IA32_TSX_CTRL)"
            }
            RtmSupport::NotX86 => "RTM exists only on x86-64 and this build targets another architecture",
        })
    }
}

/// CPUID leaf 7 sub-leaf 0, EBX bit 11: RTM.
const CPUID_EBX_RTM: u32 = 1 << 11;
/// CPUID leaf 7 sub-leaf 0, EDX bit 11: RTM_ALWAYS_ABORT.
const CPUID_EDX_RTM_ALWAYS_ABORT: u32 = 1 << 11;
/// Number of empty transactions the probe attempts.
const PROBE_ATTEMPTS: u32 = 128;
/// Commits the probe needs to declare RTM usable. Empty transactions abort
/// only on interrupts, so a working RTM commits nearly all of them.
const PROBE_COMMITS_MIN: u32 = PROBE_ATTEMPTS / 4;

/// Interprets CPUID leaf 7 sub-leaf 0. `None` means "the flags allow RTM; a
/// probe must decide".
pub(crate) fn classify_cpuid_leaf7(ebx: u32, edx: u32) -> Option<RtmSupport> {
    if ebx & CPUID_EBX_RTM == 0 {
        Some(RtmSupport::NoCpuFlag)
    } else if edx & CPUID_EDX_RTM_ALWAYS_ABORT != 0 {
        Some(RtmSupport::AlwaysAbort)
    } else {
        None
    }
}

/// Detects whether RTM can be used (see the module contract). Cheap enough to
/// call at start-up; it is not cached so that there is no global state.
pub fn rtm_support() -> RtmSupport {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID exists on every x86-64 CPU; leaf 7 is read only after leaf 0
        // says it exists.
        let max_leaf = core::arch::x86_64::__cpuid(0).eax;
        if max_leaf < 7 {
            return RtmSupport::NoCpuFlag;
        }
        let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
        if let Some(verdict) = classify_cpuid_leaf7(leaf7.ebx, leaf7.edx) {
            return verdict;
        }
        if probe_commits() >= PROBE_COMMITS_MIN {
            RtmSupport::Available
        } else {
            RtmSupport::ProbeFailed
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        RtmSupport::NotX86
    }
}

/// Runs [`PROBE_ATTEMPTS`] empty transactions and counts the commits.
#[cfg(target_arch = "x86_64")]
fn probe_commits() -> u32 {
    let mut commits = 0;
    for _ in 0..PROBE_ATTEMPTS {
        // SAFETY: only called after CPUID reported RTM without
        // RTM_ALWAYS_ABORT, so `xbegin` is a valid instruction here.
        let status = unsafe { crate::rtm::begin() };
        if status == crate::rtm::STARTED {
            // SAFETY: a transaction was just started on this path.
            unsafe { crate::rtm::end() };
            commits += 1;
        }
    }
    commits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_classification_follows_the_flags() {
        assert_eq!(classify_cpuid_leaf7(0, 0), Some(RtmSupport::NoCpuFlag));
        assert_eq!(classify_cpuid_leaf7(0, CPUID_EDX_RTM_ALWAYS_ABORT), Some(RtmSupport::NoCpuFlag));
        assert_eq!(classify_cpuid_leaf7(CPUID_EBX_RTM, CPUID_EDX_RTM_ALWAYS_ABORT), Some(RtmSupport::AlwaysAbort));
        assert_eq!(classify_cpuid_leaf7(CPUID_EBX_RTM, 0), None);
        assert_eq!(classify_cpuid_leaf7(!CPUID_EBX_RTM, !CPUID_EDX_RTM_ALWAYS_ABORT), Some(RtmSupport::NoCpuFlag));
    }

    #[test]
    fn detection_returns_without_faulting() {
        let first = rtm_support();
        assert_eq!(first.is_available(), first == RtmSupport::Available);
        assert!(!first.to_string().is_empty());
    }
}
