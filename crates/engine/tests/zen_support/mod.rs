//! The former helpers of the `zen_*` tests now live in the shared
//! `tests/support` module; this shim re-exports them for the test files
//! that still say `mod zen_support;` (`zen_cache`).

#[path = "../support/mod.rs"]
mod support;

pub use support::*;
