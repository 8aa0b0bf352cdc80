//! pmtx-htm: hardware transactional memory regions with first-class
//! software paths.
//!
//! DBXN (via DBX) and PHyTM are built around Intel RTM, which most machines
//! today lack or have disabled. This crate gives engines one region API,
//! [`Htm::atomic`] / [`Htm::try_atomic`], with three interchangeable
//! backends chosen when an [`Htm`] is created ([`HtmBackendKind`]):
//!
//! * `rtm`: real hardware transactions (stable-Rust `asm!`), enabled only
//!   when [`rtm_support`] finds the CPUID flag, no RTM_ALWAYS_ABORT, and a
//!   probe that commits. Requesting it elsewhere fails with
//!   [`HtmError::RtmUnavailable`]; `xbegin` is never executed otherwise.
//! * `none`: every region runs on the fallback path.
//! * `sim`: every region runs on the fallback path, but aborts (at begin, at
//!   commit, and capacity aborts past a footprint threshold) are injected
//!   from a seeded generator, so retry and fallback logic runs on any
//!   machine.
//!
//! Two lower-level entries serve protocols with their own fine-grained
//! locking: [`Htm::elide`] (hardware attempts, then the *same* body on a
//! fallback path that takes no global lock; DBX's commit region) and
//! [`Htm::attempt_hardware`] (one attempt, the caller retries; PHyTM's
//! whole-transaction paths).
//!
//! # Contract
//!
//! * A region body is an `FnMut` that may run several times. Each run is
//!   told its [`RegionPath`] through [`RegionContext::path`]:
//!   `Hardware` runs are transactions whose effects vanish on abort;
//!   `Fallback` runs hold the instance's fallback lock and are never rolled
//!   back, so a body returning `Err` there must have made no visible effects.
//! * Any two regions of one [`Htm`] instance are atomic with respect to each
//!   other on every backend. Atomicity against code outside regions is the
//!   caller's protocol's business (hardware regions get it from the cache
//!   coherence protocol, fallback runs do not).
//! * Aborts of hardware attempts are never visible. The `sim` backend models
//!   them as attempts without effects: it decides about an injected abort
//!   before running the body, so injected aborts cannot break correctness,
//!   they only exercise the retry and fallback accounting.
//! * Retry policy (DBX/DrTM): after `xbegin` a hardware region reads the
//!   fallback lock and aborts if it is held; conflicts are retried up to
//!   [`HtmConfig::max_conflict_retries`] times, capacity aborts up to
//!   [`HtmConfig::max_capacity_retries`] times, lock-held aborts after
//!   waiting for the lock, other aborts fall back at once; every retry first
//!   waits for the fallback lock to be free.
//! * Inside a hardware region never flush, fence, allocate or make a system
//!   call: these abort it. Persist after the region returns.
//! * Each [`Htm`] owns its fallback lock, statistics ([`HtmStats`]) and
//!   abort generator; there is no global mutable state. Regions must not nest.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use pmtx_htm::{Htm, HtmConfig, RegionAbort, RegionPath};
//!
//! // RTM where the CPU has it, otherwise every region takes the fallback path.
//! let htm = Htm::new(HtmConfig::auto()).expect("auto never requests an unavailable backend");
//! let balance = AtomicU64::new(10);
//!
//! let withdrawn = htm.try_atomic(|context| {
//!     let current = balance.load(Ordering::Relaxed);
//!     if current < 3 {
//!         // No effects yet, so this is correct on both paths.
//!         return Err(RegionAbort::Explicit(1));
//!     }
//!     balance.store(current - 3, Ordering::Relaxed);
//!     Ok(context.path())
//! });
//! assert!(matches!(withdrawn, Ok(RegionPath::Hardware | RegionPath::Fallback)));
//! assert_eq!(balance.load(Ordering::Relaxed), 7);
//! println!("{}", htm.stats().snapshot());
//! ```

#![deny(missing_docs)]

mod config;
mod detect;
mod error;
mod lock;
mod region;
mod rtm;
mod stats;

pub use config::{HtmBackendKind, HtmConfig, ParseHtmBackendError, SimAbortConfig, PER_MILLION};
pub use detect::{rtm_support, RtmSupport};
pub use error::HtmError;
pub use region::{AttemptAbort, ExplicitAbort, Htm, RegionAbort, RegionContext, RegionPath, MAX_EXPLICIT_ABORT_CODE};
pub use stats::{HtmStats, HtmStatsSnapshot};
