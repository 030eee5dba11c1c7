//! [`Analyser`]: what runs the analysis of one work item, whatever it is (a child process, an
//! HTTP service, and later the reference analyser in this process). The researcher owns the
//! rest: the stall timeout (between two lines), validation of each line, results, the bus.

use async_trait::async_trait;

/// How an analysis run ended, once its output ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Done (exit 0, the whole response): clips left unanswered are researched again later.
    Done,
    /// Try the item again later (exit 75, HTTP 429 or 503): released, not a failure.
    TryLater(String),
    /// The run failed (another exit code, a signal, a broken response): the item is released
    /// for another try, up to the queue's receive limit.
    Failed(String),
}

/// Starts analysis runs. One per researcher process, shared by its slots.
#[async_trait]
pub(crate) trait Analyser: Send + Sync {
    /// Starts analysing one work item: `input` is the item as the analyser reads it (one JSON
    /// object and a newline, media paths included; see `protocol::analyser_input`). An error
    /// here (the program cannot be started, the service cannot be reached) fails the item.
    /// The caller bounds the wait (the stall timeout, the drain) and drops the future when
    /// either runs out: a service that never answers must not hold the slot.
    async fn start(&self, input: Vec<u8>, lease: &str) -> anyhow::Result<Box<dyn Run>>;

    /// Names the analyser in logs and the status, as `exec python3` (never a secret: URLs
    /// are shown with their credentials masked).
    fn describe(&self) -> String;
}

/// One analysis run: its output lines, then how it ended.
#[async_trait]
pub(crate) trait Run: Send {
    /// The next line of output (without its newline); `Ok(None)` at the end of the output.
    /// Dropping the future loses nothing: the next call goes on where this one stopped.
    async fn next_line(&mut self) -> anyhow::Result<Option<String>>;

    /// After the output ended: how the run ended (waits for the program to exit). The run
    /// stays the caller's: when the wait is given up on (a timeout, the drain), it calls
    /// [`stop`](Self::stop).
    async fn finish(&mut self) -> Ending;

    /// Stops the run now (a stall, a bad line, the drain timeout): a child gets SIGTERM, then
    /// SIGKILL after the grace period; a request is dropped.
    async fn stop(self: Box<Self>);
}
