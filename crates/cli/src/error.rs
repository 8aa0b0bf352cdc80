//! The CLI's error type: a message plus the exit code it maps to.

use pmtx_pm::PoolError;
use std::fmt;

/// An error reported as `error: <message>` on stderr.
#[derive(Debug)]
pub enum CliError {
    /// The user asked for something invalid (exit code 2, like clap's errors).
    Usage(String),
    /// The operation failed (exit code 1).
    Runtime(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::Runtime(_) => 1,
        }
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::Usage(message.into())
    }

    /// A runtime error.
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::Runtime(message.into())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(message) | Self::Runtime(message) => f.write_str(message),
        }
    }
}

impl From<PoolError> for CliError {
    fn from(error: PoolError) -> Self {
        match error {
            PoolError::InvalidOption(_) => Self::Usage(error.to_string()),
            other => Self::Runtime(other.to_string()),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(error: std::io::Error) -> Self {
        Self::Runtime(error.to_string())
    }
}

impl From<serde_json::Error> for CliError {
    fn from(error: serde_json::Error) -> Self {
        Self::Runtime(format!("JSON output failed: {error}"))
    }
}
