//! [`Sink`]: where curated messages go, the bus or a writer (a dry run).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use archivist::{RetryError, RetryPolicy};
use messagebus::{BusError, Sender};
use tokio_util::sync::CancellationToken;

use crate::error::SendError;

/// Bodies sent in one call (the SQS adapter packs them ten to a request).
const BATCH: usize = 500;

/// Where curated messages go: a queue of the bus, or a writer that gets each message as a
/// JSON line (a dry run: nothing is sent, and the curator records nothing in its state file).
pub struct Sink {
    inner: Inner,
}

enum Inner {
    DryRun(Mutex<Box<dyn Write + Send>>),
    Bus {
        sender: Arc<dyn Sender>,
        queue: String,
        retry: RetryPolicy,
    },
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::DryRun(_) => f.write_str("Sink::DryRun"),
            Inner::Bus { queue, .. } => f.debug_struct("Sink::Bus").field("queue", queue).finish(),
        }
    }
}

impl Sink {
    /// Sends to `queue` through `sender`, retrying passing failures as `retry` says (a
    /// long-running curator retries for ever; a one-shot run within a budget).
    pub fn bus(sender: Arc<dyn Sender>, queue: impl Into<String>, retry: RetryPolicy) -> Sink {
        Sink {
            inner: Inner::Bus {
                sender,
                queue: queue.into(),
                retry,
            },
        }
    }

    /// Writes each message to `out` as a line (standard output, for `--dry-run`); sends
    /// nothing. A curator with this sink changes no state.
    pub fn dry_run(out: impl Write + Send + 'static) -> Sink {
        Sink {
            inner: Inner::DryRun(Mutex::new(Box::new(out))),
        }
    }

    /// Whether this is a dry run's sink.
    pub fn is_dry_run(&self) -> bool {
        matches!(self.inner, Inner::DryRun(_))
    }

    /// Delivers every body, in order: all of them, or an error (some may have been sent; the
    /// caller records none of them, so that the next pass sends them again).
    pub(crate) async fn deliver(
        &self,
        token: &CancellationToken,
        bodies: &[Vec<u8>],
    ) -> Result<(), Undelivered> {
        match &self.inner {
            Inner::DryRun(out) => {
                // A writer that panicked mid-line leaves lines that are still lines.
                let mut out = out.lock().unwrap_or_else(PoisonError::into_inner);
                let mut write = || -> std::io::Result<()> {
                    for body in bodies {
                        out.write_all(body)?;
                        out.write_all(b"\n")?;
                    }
                    out.flush()
                };
                write().map_err(Undelivered::Write)
            }
            Inner::Bus {
                sender,
                queue,
                retry,
            } => {
                for chunk in bodies.chunks(BATCH) {
                    let sent = retry
                        .run(token, BusError::is_retryable, || {
                            sender.send_batch(chunk.to_vec())
                        })
                        .await;
                    if let Err(e) = sent {
                        let source = match e {
                            RetryError::Failed(e) | RetryError::Cancelled(e) => e,
                        };
                        return Err(Undelivered::Bus(Box::new(SendError {
                            queue: queue.clone(),
                            source,
                        })));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Why [`Sink::deliver`] failed, for the caller to name the feed or path.
#[derive(Debug)]
pub(crate) enum Undelivered {
    Bus(Box<SendError>),
    Write(std::io::Error),
}

impl Undelivered {
    /// The curator's error for the messages of `unit` (`feed …`, `clips …`).
    pub(crate) fn into_error(
        self,
        unit: String,
        count: usize,
        items: &'static str,
        next: &'static str,
    ) -> crate::CurateError {
        match self {
            Undelivered::Bus(source) => crate::CurateError::NotSent {
                unit,
                count,
                items,
                next,
                source,
            },
            Undelivered::Write(source) => crate::CurateError::NotWritten {
                unit,
                count,
                items,
                next,
                source,
            },
        }
    }
}
