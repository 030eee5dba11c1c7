//! [`Analyser`]: what runs the analysis of one work item, whatever it is (a child process,
//! an HTTP service, the reference analyser in this process, or your own). The researcher owns
//! the rest: the stall timeout (between two lines), validation of each line, results, the
//! bus.

use async_trait::async_trait;

use crate::episode::EpisodeMedia;

/// An analyser's error: any error, boxed (as `tower::BoxError`), so that an analyser can use
/// `?` on its own errors. Its text and its sources' texts, joined with `: `, become the work
/// item's failure reason.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How an analysis run ended, once its output ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// Done (exit 0, the whole response): clips left unanswered are researched again later.
    Done,
    /// Try the item again later (exit 75, HTTP 429 or 503): held for a while and released,
    /// not a failure (see [`Later`](crate::Later)).
    TryLater(String),
    /// The run failed (another exit code, a signal, a broken response): the item is released
    /// for another try, up to the queue's receive limit.
    Failed(String),
}

/// Starts analysis runs. One per researcher, shared by its slots.
#[async_trait]
pub trait Analyser: Send + Sync {
    /// Starts analysing one work item: `input` is the item as the analyser reads it (one JSON
    /// object and a newline, media paths included; see [`crate::protocol::analyser_input`]);
    /// `lease` is the item's lease id, for logs. An error here (the program cannot be
    /// started, the service cannot be reached) fails the item. The caller bounds the wait
    /// (the stall timeout, the drain) and drops the future when either runs out: a service
    /// that never answers must not hold the slot.
    async fn start(&self, input: Vec<u8>, lease: &str) -> Result<Box<dyn Run>, BoxError>;

    /// Names the analyser in logs and the status, as `exec python3` (never a secret: URLs
    /// are shown with their credentials masked).
    fn describe(&self) -> String;

    /// Whether this analyser fetches the episode itself, when it needs its audio (the
    /// reference analyser with a print store, which may answer from the episode's print):
    /// the runtime then fetches only the clips, and starts it with
    /// [`start_fetching`](Self::start_fetching).
    fn fetches_episode(&self) -> bool {
        false
    }

    /// Starts analysing one work item whose episode the runtime did not fetch (only when
    /// [`fetches_episode`](Self::fetches_episode)): `input` as for [`start`](Self::start)
    /// but with the episode's `media_path` empty; `episode` fetches it, or what a print
    /// needs of it. The run says the episode's hash ([`Run::episode_hash`]) before its first
    /// answer.
    async fn start_fetching(
        &self,
        input: Vec<u8>,
        lease: &str,
        episode: EpisodeMedia,
    ) -> Result<Box<dyn Run>, BoxError> {
        drop(episode);
        self.start(input, lease).await
    }
}

/// One analysis run: its output lines (the analyser protocol's, see [`crate::protocol`]),
/// then how it ended.
#[async_trait]
pub trait Run: Send {
    /// The next line of output (without its newline); `Ok(None)` at the end of the output.
    /// Dropping the future loses nothing: the next call goes on where this one stopped.
    async fn next_line(&mut self) -> Result<Option<String>, BoxError>;

    /// After the output ended: how the run ended (waits for the program to exit). The run
    /// stays the caller's: when the wait is given up on (a timeout, the drain), it calls
    /// [`stop`](Self::stop).
    async fn finish(&mut self) -> Ending;

    /// Stops the run now (a stall, a bad line, the drain timeout): a child gets SIGTERM, then
    /// SIGKILL after the grace period; a request is dropped.
    async fn stop(self: Box<Self>);

    /// The SHA-256 (lowercase hex) of the episode's bytes, once known, for a run started
    /// with [`Analyser::start_fetching`] (the runtime knows it otherwise): asked before each
    /// answer is recorded.
    fn episode_hash(&self) -> Option<String> {
        None
    }
}

/// `error` and its sources, joined with `: `, for a failure reason.
pub(crate) fn reason(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot start the analyser \"x\"")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_reason_names_the_sources() {
        let e: BoxError = Box::new(Outer(std::io::Error::other("no such file")));
        assert_eq!(reason(&*e), "cannot start the analyser \"x\": no such file");
        let e: BoxError = "plain".into();
        assert_eq!(reason(&*e), "plain");
    }
}
