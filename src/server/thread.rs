//! Starting the gateway's own threads: each by its name, through `logging::thread` (so it logs where the
//! gateway logs); a thread that cannot be started is a [`ThreadError`] that stops the start.

use std::fmt;

use crate::http;

/// A thread of the gateway that could not be started.
#[derive(Debug)]
pub enum ThreadError {
    /// One of the gateway's own threads, by its name.
    Spawn {
        /// The thread's name.
        name: &'static str,
        /// Why it could not be started.
        error: std::io::Error,
    },
    /// The HTTP layer's (its poller, workers, timer, accept loop).
    Http(http::HttpStartError),
}

impl fmt::Display for ThreadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThreadError::Spawn { name, error } => {
                write!(f, "could not start the {name} thread: {error}")
            }
            ThreadError::Http(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ThreadError {}

/// Starts a thread of the gateway (logging where the gateway logs).
pub(super) fn spawn(
    name: &'static str,
    f: impl FnOnce() + Send + 'static,
) -> Result<(), ThreadError> {
    crate::logging::thread(std::thread::Builder::new().name(name.into()), f)
        .map(drop)
        .map_err(|error| ThreadError::Spawn { name, error })
}
