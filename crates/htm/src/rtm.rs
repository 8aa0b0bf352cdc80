//! Raw Intel RTM instructions (`xbegin`, `xend`, `xabort`, `xtest`).
//!
//! This is the only module of the crate that executes `asm!`. Every function
//! here raises SIGILL on a CPU without RTM, so callers must only use them
//! after [`crate::rtm_support`] reported [`crate::RtmSupport::Available`]
//! (the probe in `detect.rs` is the one exception: it runs only after CPUID
//! said RTM exists and is not forced to abort).
//!
//! How an abort looks from Rust: when a transaction aborts, the CPU discards
//! every store made since `xbegin`, restores all registers except `eax` to
//! their values at `xbegin`, and jumps to the fallback label, which is the
//! instruction right after `xbegin`. To the compiler this is simply the
//! `xbegin` asm block "returning again" with a different `eax`, so the state
//! the compiler believes in (registers and memory as they were when the block
//! returned) is exactly the state the CPU restores. The asm is deliberately
//! not marked `nomem`: a transaction boundary orders memory accesses.

/// `eax` after `xbegin` when the transaction started (the value we load
/// before `xbegin`; an abort overwrites it with the abort status).
pub(crate) const STARTED: u32 = u32::MAX;

/// Abort status bit 0: the abort was caused by `xabort`; bits 31:24 hold its code.
pub(crate) const STATUS_EXPLICIT: u32 = 1 << 0;
/// Abort status bit 1: the transaction may succeed on a retry.
pub(crate) const STATUS_RETRY: u32 = 1 << 1;
/// Abort status bit 2: another logical processor conflicted with a memory access.
pub(crate) const STATUS_CONFLICT: u32 = 1 << 2;
/// Abort status bit 3: an internal buffer (read or write set) overflowed.
pub(crate) const STATUS_CAPACITY: u32 = 1 << 3;

/// The `xabort` code carried in bits 31:24 of an abort status.
pub(crate) fn status_code(status: u32) -> u8 {
    (status >> 24) as u8
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::asm;

    /// Starts a transaction. Returns [`super::STARTED`] inside the
    /// transaction; after an abort, execution resumes here and the abort
    /// status is returned instead.
    ///
    /// # Safety
    /// The CPU must support RTM (otherwise the process gets SIGILL). The
    /// caller must end a started transaction with [`end`] or an abort on every
    /// path, and must not make system calls, flush cache lines or allocate
    /// before then (those abort the transaction, which is safe but useless).
    #[inline(always)]
    pub(crate) unsafe fn begin() -> u32 {
        let status: u32;
        // SAFETY: the caller guarantees RTM is present. `mov eax, -1` marks
        // "started"; `xbegin 2f` names the very next instruction as the abort
        // target, so both the started and the aborted path leave the block at
        // its end with `eax` set, and the CPU restores every other register.
        // The block touches no stack memory.
        unsafe {
            asm!("mov eax, -1", "xbegin 2f", "2:", out("eax") status, options(nostack));
        }
        status
    }

    /// Commits the current transaction.
    ///
    /// # Safety
    /// The CPU must support RTM and a transaction must be active (`xend`
    /// outside a transaction raises #GP).
    #[inline(always)]
    pub(crate) unsafe fn end() {
        // SAFETY: the caller guarantees RTM is present and a transaction is
        // active; `xend` touches no registers and no stack memory.
        unsafe {
            asm!("xend", options(nostack));
        }
    }

    /// Reports whether the processor is executing a transaction.
    ///
    /// # Safety
    /// The CPU must support RTM (or HLE).
    #[inline(always)]
    pub(crate) unsafe fn test() -> bool {
        let inside: u8;
        // SAFETY: the caller guarantees RTM is present; `xtest` only sets
        // ZF (clear inside a transaction), which `setnz` copies out.
        unsafe {
            asm!("xtest", "setnz {inside}", inside = out(reg_byte) inside, options(nostack));
        }
        inside != 0
    }

    /// Aborts the current transaction with the constant code `CODE`.
    ///
    /// Never returns: control resumes after the `xbegin` of the aborted
    /// transaction. If no transaction is active (`xabort` is then a no-op)
    /// that is a bug in this crate and the process is aborted.
    ///
    /// # Safety
    /// The CPU must support RTM.
    #[inline(always)]
    pub(crate) unsafe fn abort<const CODE: u8>() -> ! {
        // SAFETY: the caller guarantees RTM is present, so `xtest` is valid.
        if unsafe { test() } {
            // SAFETY: inside a transaction `xabort` discards its effects and
            // jumps to the abort label of `begin`; it touches no stack memory.
            unsafe {
                asm!("xabort {code}", code = const CODE, options(nostack));
            }
        }
        // Only reachable when no transaction was active: a broken invariant.
        std::process::abort()
    }

    macro_rules! abort_dispatch {
        ($code:expr; $($value:literal)*) => {
            match $code {
                $(
                    // SAFETY: forwarded from the caller of `abort_with_code`.
                    $value => unsafe { abort::<$value>() },
                )*
            }
        };
    }

    /// Aborts the current transaction with a run-time code (`xabort` only
    /// takes an immediate, so this dispatches to one `xabort` per code).
    ///
    /// # Safety
    /// The CPU must support RTM.
    pub(crate) unsafe fn abort_with_code(code: u8) -> ! {
        abort_dispatch!(code;
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
            64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
            96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120
            121 122 123 124 125 126 127 128 129 130 131 132 133 134 135 136 137 138 139 140 141 142 143 144
            145 146 147 148 149 150 151 152 153 154 155 156 157 158 159 160 161 162 163 164 165 166 167 168
            169 170 171 172 173 174 175 176 177 178 179 180 181 182 183 184 185 186 187 188 189 190 191 192
            193 194 195 196 197 198 199 200 201 202 203 204 205 206 207 208 209 210 211 212 213 214 215 216
            217 218 219 220 221 222 223 224 225 226 227 228 229 230 231 232 233 234 235 236 237 238 239 240
            241 242 243 244 245 246 247 248 249 250 251 252 253 254 255
        )
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    //! Stand-ins for targets without RTM. The `rtm` backend can never be
    //! constructed there (`rtm_support()` returns `NotX86`), so none of these
    //! is ever called; they exist so the region code compiles unchanged.

    pub(crate) unsafe fn begin() -> u32 {
        unreachable!("RTM is never enabled on this architecture")
    }
    pub(crate) unsafe fn end() {
        unreachable!("RTM is never enabled on this architecture")
    }
    pub(crate) unsafe fn abort<const CODE: u8>() -> ! {
        unreachable!("RTM is never enabled on this architecture")
    }
    pub(crate) unsafe fn abort_with_code(_code: u8) -> ! {
        unreachable!("RTM is never enabled on this architecture")
    }
}

pub(crate) use imp::{abort, abort_with_code, begin, end};
