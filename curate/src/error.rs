//! [`CurateError`]: what stops a curator or one of its passes. A feed or a path that fails
//! alone is no error of the curator's: its report says why, and the pass goes on.

use std::path::PathBuf;

/// A failure of the curator itself: its settings, its state file, its sink. One bad feed or
/// path never comes back as one (see [`FeedReport::error`](crate::feeds::FeedReport::error)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CurateError {
    /// A setting cannot be used: a feed address that is not http(s), a base URL that is no
    /// folder's address. The message says what was expected.
    #[error("{0}")]
    Setting(String),
    /// The state file exists but cannot be read as one. It is never overwritten unread.
    #[error(
        "the state file {} cannot be read ({source}): give another with --state, or move it \
         away to start afresh (everything is then sent again, which is harmless)",
        path.display()
    )]
    BadState {
        /// The state file.
        path: PathBuf,
        /// Why it cannot be read (the file system's error, or the JSON's).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The state file cannot be written; what was sent is sent again at the next pass.
    #[error("cannot write the state file {}", path.display())]
    StateWrite {
        /// The state file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The messages of one feed or path could not be sent: all of them stay unrecorded, so
    /// that the next pass sends them again (some may have been sent already).
    #[error("{unit}: {count} {items} not sent (they will be at the next {next})")]
    NotSent {
        /// The feed or path, as shown: `feed https://…` or `clips /srv/clips`.
        unit: String,
        /// How many messages were to be sent.
        count: usize,
        /// What they are: `episodes` or `clips`.
        items: &'static str,
        /// When they are sent again: `pass` or `run`.
        next: &'static str,
        /// Why (boxed: the bus's errors are large, and this one is rare).
        source: Box<SendError>,
    },
    /// The messages of one feed or path could not be written by a dry run's sink (standard
    /// output closed, say). Said as [`CurateError::NotSent`] is; the writer's error is the
    /// source, so that a host can tell a closed pipe.
    #[error("{unit}: {count} {items} not sent (they will be at the next {next})")]
    NotWritten {
        /// The feed or path, as shown.
        unit: String,
        /// How many messages were to be written.
        count: usize,
        /// What they are: `episodes` or `clips`.
        items: &'static str,
        /// `pass` or `run`.
        next: &'static str,
        /// What the writer said.
        source: std::io::Error,
    },
    /// The HTTP client could not be built (its TLS setup failed).
    #[error("{error}")]
    HttpClient {
        /// Why.
        error: net::fetch::FetchError,
    },
    /// A task the curator runs off the async threads (parsing, hashing, walking a folder)
    /// stopped before it finished: it panicked, or the runtime is shutting down.
    #[error("{what} stopped")]
    Stopped {
        /// What the task was doing.
        what: String,
        /// How it ended.
        source: tokio::task::JoinError,
    },
}

impl CurateError {
    /// Whether the caller's settings are at fault (a feed address, the base URL, an
    /// unreadable state file): another setting is the fix, not another try.
    pub fn is_configuration(&self) -> bool {
        match self {
            CurateError::Setting(_) | CurateError::BadState { .. } => true,
            CurateError::StateWrite { .. }
            | CurateError::NotSent { .. }
            | CurateError::NotWritten { .. }
            | CurateError::HttpClient { .. }
            | CurateError::Stopped { .. } => false,
        }
    }

    /// Whether the same pass may succeed if tried again (the bus was briefly away).
    pub fn is_retryable(&self) -> bool {
        match self {
            CurateError::NotSent { source, .. } => source.is_retryable(),
            CurateError::Setting(_)
            | CurateError::BadState { .. }
            | CurateError::StateWrite { .. }
            | CurateError::NotWritten { .. }
            | CurateError::HttpClient { .. }
            | CurateError::Stopped { .. } => false,
        }
    }
}

/// Why the messages of a feed or path were not delivered to the bus.
#[derive(Debug, thiserror::Error)]
#[error("sending to {queue}")]
pub struct SendError {
    /// The queue.
    pub queue: String,
    /// The bus's error (after the retry policy gave up, or was cancelled).
    pub source: messagebus::BusError,
}

impl SendError {
    /// Whether sending may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        self.source.is_retryable()
    }
}
