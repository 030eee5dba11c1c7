use std::time::Duration;

/// What went wrong on the bus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// The named queue does not exist (and was not created).
    #[error("queue {0:?} does not exist")]
    QueueNotFound(String),
    /// A message body is larger than the bus accepts; nothing was sent.
    #[error("message body of {size} bytes exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The body's size in bytes.
        size: usize,
        /// The bus's limit in bytes.
        limit: usize,
    },
    /// A message body the bus cannot carry (for SQS: not valid UTF-8, or characters it rejects).
    #[error("message body rejected: {0}")]
    InvalidBody(String),
    /// The bus could not be reached or timed out; trying again later may work.
    #[error("bus unavailable: {message}")]
    Unavailable {
        /// What happened, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The bus refused the request for a lasting reason (permissions, bad configuration).
    #[error("bus rejected the request: {message}")]
    Rejected {
        /// What happened, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The API server (a remote participant's bus, feature `api`) refused the token: none,
    /// an unknown or revoked one (HTTP 401), or one of another scope (HTTP 403). Another
    /// token is the fix, not another try.
    #[error("{message}")]
    Unauthorized {
        /// The scope the request needs: `curator`, `researcher` or `reader`.
        scope: String,
        /// What happened and what to do, without the token.
        message: String,
    },
    /// The operation is not possible on this bus (for example counting consumers on SQS).
    #[error("not supported by this bus: {0}")]
    Unsupported(String),
    /// The wait for the operation ran out.
    #[error("bus operation timed out after {0:?}")]
    Timeout(Duration),
    /// The bus was closed (the process is shutting down).
    #[error("bus closed")]
    Closed,
    /// The delivery can no longer settle its message: its visibility ran out and the message
    /// went back to the queue (perhaps already to another receiver, whose delivery settles
    /// it). Nothing was done. Reported by the batch settlements ([`crate::ack_all`]).
    #[error("stale delivery of message {message_id}: its visibility ran out before it was settled; nothing done")]
    Stale {
        /// The bus's id of the message.
        message_id: String,
    },
}

impl BusError {
    /// Whether the same operation may succeed if tried again later.
    ///
    /// The match is exhaustive on purpose: a new variant must decide.
    pub fn is_retryable(&self) -> bool {
        match self {
            BusError::Unavailable { .. } | BusError::Timeout(_) => true,
            BusError::QueueNotFound(_)
            | BusError::BodyTooLarge { .. }
            | BusError::InvalidBody(_)
            | BusError::Rejected { .. }
            | BusError::Unauthorized { .. }
            | BusError::Unsupported(_)
            | BusError::Closed
            | BusError::Stale { .. } => false,
        }
    }

    /// An [`BusError::Unavailable`] with a message and no source.
    pub fn unavailable(message: impl Into<String>) -> Self {
        BusError::Unavailable {
            message: message.into(),
            source: None,
        }
    }
}
