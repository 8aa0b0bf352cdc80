//! Errors of [`crate::Htm::new`].

use crate::detect::RtmSupport;

/// Why an [`crate::Htm`] instance could not be created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HtmError {
    /// The `rtm` backend was requested but cannot be used here. The caller
    /// decides whether to fall back to `none` or `sim`.
    #[error("the rtm backend was requested but RTM cannot be used: {0}; use the none or sim backend instead")]
    RtmUnavailable(RtmSupport),
    /// The injected abort rates of the `sim` backend add up to more than one
    /// million per million.
    #[error(
        "sim abort rates add up to more than 1000000 per million \
         (begin {begin_abort_per_million} + commit {commit_abort_per_million})"
    )]
    InvalidSimAbortRate {
        /// The configured begin abort rate.
        begin_abort_per_million: u32,
        /// The configured commit abort rate.
        commit_abort_per_million: u32,
    },
}
