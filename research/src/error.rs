//! [`ResearchError`]: what went wrong in a researcher, fatal or not.

use messagebus::BusError;

/// A problem a researcher met.
///
/// Non-fatal ones (a work item failed, a poison item set aside, a passing bus failure) come
/// on [`ResearcherHandle::errors`](crate::ResearcherHandle::errors) as they happen; the
/// researcher dealt with them already (and logged them). A fatal one ends the run and comes
/// back in [`Report::ended`](crate::Report::ended). Constructors ([`Media::new`],
/// [`HttpAnalyser::new`]) fail with [`ResearchError::Config`] or
/// [`ResearchError::HttpClient`].
///
/// Messages name the `archivist research` option or variable behind a setting
/// (`ARCHIVIST_RETRY_BUDGET`, `--cache-dir`): they are what the command's users read, and
/// each setting's documentation names its option.
///
/// [`Media::new`]: crate::Media::new
/// [`HttpAnalyser::new`]: crate::http::HttpAnalyser::new
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResearchError {
    /// A work item was set aside on the dead-letter queue: it is poison (not a work item),
    /// or its last allowed try failed.
    #[error("work item {message_id} dead-lettered: {reason}")]
    DeadLettered {
        /// The bus's id for the message.
        message_id: String,
        /// Why, as given to the bus.
        reason: String,
    },
    /// A work item failed and was released for another try (up to the queue's receive
    /// limit).
    #[error("work item of lease {lease_id} failed: {reason}")]
    ItemFailed {
        /// The item's lease.
        lease_id: uuid::Uuid,
        /// Why.
        reason: String,
    },
    /// The bus failed: a receive that is retried, or settling a delivery (the bus then
    /// settles it by itself: the item comes back, or is set aside at its next receive).
    #[error(transparent)]
    Bus(#[from] BusError),
    /// A receive failed in a way that will not pass: the run ends.
    #[error("cannot receive from {queue:?}")]
    Receive {
        /// The queue received from.
        queue: String,
        /// What the bus said.
        #[source]
        source: BusError,
    },
    /// With [`ResearcherSettings::once`](crate::ResearcherSettings::once): the bus stayed
    /// unreachable for longer than the retry budget; the run ends.
    #[error("the bus is unreachable (queue {queue:?}) for longer than ARCHIVIST_RETRY_BUDGET")]
    Unreachable {
        /// The queue received from.
        queue: String,
        /// The last failure.
        #[source]
        source: BusError,
    },
    /// A setting cannot be used (a cache directory that cannot be created, a media root
    /// that is no folder, an analyser URL that is not http(s), no slots). Lasting: the
    /// setting must change.
    #[error("{0}")]
    Config(String),
    /// The HTTP client for media downloads or an HTTP analyser could not be built (the
    /// system's TLS roots).
    #[error("cannot build the HTTP client")]
    HttpClient(#[source] reqwest::Error),
    /// A slot's task stopped without finishing (a panic).
    #[error("a slot stopped: {0}")]
    SlotStopped(String),
}

impl ResearchError {
    /// Whether what failed may succeed if tried again: a passing bus failure, a work item
    /// released for another try, a bus that was unreachable for a while. A new variant
    /// must decide here (the match is exhaustive).
    pub fn is_retryable(&self) -> bool {
        match self {
            ResearchError::DeadLettered { .. } => false,
            ResearchError::ItemFailed { .. } => true,
            ResearchError::Bus(e) => e.is_retryable(),
            ResearchError::Receive { .. } => false,
            ResearchError::Unreachable { .. } => true,
            ResearchError::Config(_) => false,
            ResearchError::HttpClient(_) => false,
            ResearchError::SlotStopped(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn retryable_by_meaning() {
        assert!(ResearchError::ItemFailed {
            lease_id: uuid::Uuid::nil(),
            reason: "exit 1".into()
        }
        .is_retryable());
        assert!(!ResearchError::Config("no slots".into()).is_retryable());
        assert!(!ResearchError::DeadLettered {
            message_id: "m".into(),
            reason: "poison".into()
        }
        .is_retryable());
    }
}
