//! Running archivists: waiting for one run (logging its non-fatal errors), repeating short
//! runs at an interval, adding up reports, and supervising a set of tasks until they finish,
//! one fails, or a signal asks them to stop (then waiting for them under a timeout).

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use archivist::{ArchivistError, ArchivistHandle, Cause, Ended, Pace, Report};
use messagebus::BusError;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::values::usage;

/// Runs given up on (their waiting task aborted at the shutdown timeout), each watched until
/// it has dropped what it held: [`supervise`] waits for them, so that the bus is closed
/// (and releases their deliveries) only after that.
static GIVEN_UP: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);

/// The errors channel of a run being waited for; if the wait is dropped before the run
/// ended, it goes on watching the run (see [`GIVEN_UP`]).
struct Watched {
    errors: mpsc::Receiver<ArchivistError>,
    ended: bool,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The run drops its end of the channel when it is dropped, with all it held. (It
        // stops because its done channel, dropped with the wait, is closed.)
        let (_, placeholder) = mpsc::channel(1);
        let mut errors = std::mem::replace(&mut self.errors, placeholder);
        runtime.spawn(GIVEN_UP.track_future(async move { while errors.recv().await.is_some() {} }));
    }
}

/// Waits for a started archivist's report, logging its non-fatal errors as they come.
pub(crate) async fn wait(name: &str, handle: ArchivistHandle) -> Report {
    let ArchivistHandle { errors, done } = handle;
    let mut watched = Watched {
        errors,
        ended: false,
    };
    tokio::pin!(done);
    let mut errors_open = true;
    let report = loop {
        tokio::select! {
            biased;
            e = watched.errors.recv(), if errors_open => match e {
                Some(e) => log_error(name, &e),
                None => errors_open = false,
            },
            r = &mut done => break r,
        }
    };
    watched.ended = true;
    while let Ok(e) = watched.errors.try_recv() {
        log_error(name, &e);
    }
    report.unwrap_or_else(|_| {
        Report::new(Ended::Failed(ArchivistError::Transient(format!(
            "the {name} archivist stopped without a report"
        ))))
    })
}

/// The library already logs retries and dead letters as warnings; repeat them only for
/// debugging.
fn log_error(name: &str, e: &ArchivistError) {
    tracing::debug!(archivist = name, "{e}");
}

/// What the runs of the archivists did, added up.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) runs: u64,
    pub(crate) received: u64,
    pub(crate) stored: u64,
    pub(crate) duplicates: u64,
    pub(crate) dead_lettered: u64,
    pub(crate) released: u64,
    pub(crate) published: u64,
    pub(crate) leases_created: u64,
    pub(crate) pairs_reclaimed: u64,
    pub(crate) leases_renewed: u64,
    pub(crate) leases_revoked: u64,
}

impl Totals {
    fn add(&mut self, r: &Report) {
        self.runs += 1;
        self.received += r.received;
        self.stored += r.stored;
        self.duplicates += r.duplicates;
        self.dead_lettered += r.dead_lettered;
        self.released += r.released;
        self.published += r.published;
        self.leases_created += r.leases_created;
        self.pairs_reclaimed += r.pairs_reclaimed;
        self.leases_renewed += r.leases_renewed;
        self.leases_revoked += r.leases_revoked;
    }
}

/// Totals shared between a running archivist and whoever reports on it.
pub(crate) type SharedTotals = Arc<Mutex<Totals>>;

fn add(totals: &SharedTotals, report: &Report) {
    // A poisoned lock only means another task panicked while adding; the counts are still
    // usable for a summary.
    let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
    t.add(report);
}

/// Reads the totals.
pub(crate) fn read(totals: &SharedTotals) -> Totals {
    *totals.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs an archivist with `start`, then again every `every` (when given) until the token is
/// cancelled. A run that fails ends the repetition with an error.
pub(crate) async fn repeat(
    name: &'static str,
    token: CancellationToken,
    every: Option<Duration>,
    totals: SharedTotals,
    mut start: impl FnMut() -> ArchivistHandle,
) -> anyhow::Result<()> {
    let pace = every.map(|every| Pace {
        every,
        wake: None,
        min_gap: Duration::ZERO,
    });
    repeat_paced(name, token, pace, totals, move |_| start()).await
}

/// Runs an archivist with `start`, then again as `pace` says (when given: after its interval,
/// or sooner when its wake-up is raised) until the token is cancelled. `start` is told why
/// each run starts (`None` for the first). A run that fails ends the repetition with an error.
pub(crate) async fn repeat_paced(
    name: &'static str,
    token: CancellationToken,
    pace: Option<Pace>,
    totals: SharedTotals,
    mut start: impl FnMut(Option<Cause>) -> ArchivistHandle,
) -> anyhow::Result<()> {
    let mut cause = None;
    loop {
        let started = tokio::time::Instant::now();
        let report = wait(name, start(cause)).await;
        add(&totals, &report);
        match report.ended {
            Ended::Finished => {}
            Ended::Cancelled => return Ok(()),
            Ended::Failed(e) => return Err(failed(name, e)),
            // A future way of ending: treat it as finished, the report says what happened.
            #[allow(unreachable_patterns)]
            _ => {}
        }
        let Some(pace) = &pace else { return Ok(()) };
        let ended = tokio::time::Instant::now();
        match pace.wait(started, ended, &token).await {
            Some(c) => cause = Some(c),
            None => return Ok(()),
        }
    }
}

/// The error for a run that ended with a fatal error: a configuration problem (a missing
/// queue, an unsupported operation) is a usage error, anything else fatal.
fn failed(name: &str, e: ArchivistError) -> anyhow::Error {
    match &e {
        ArchivistError::Bus(BusError::QueueNotFound(q)) => usage(format!(
            "the {name} archivist: queue {q:?} does not exist: create it with `archivist queues`"
        )),
        ArchivistError::Bus(BusError::Unsupported(_)) | ArchivistError::Config(_) => {
            usage(format!("the {name} archivist: {e}"))
        }
        ArchivistError::DataStore(d) if d.is_retryable() => anyhow::Error::new(e).context(format!(
            "the {name} archivist gave up: the datastore (DATABASE_URL) was unreachable or \
                 failing past ARCHIVIST_RETRY_BUDGET; what it did not finish comes back to its \
                 queue"
        )),
        ArchivistError::Bus(b) if b.is_retryable() => anyhow::Error::new(e).context(format!(
            "the {name} archivist gave up: the bus was unreachable or failing past \
             ARCHIVIST_RETRY_BUDGET; what it did not finish comes back to its queue"
        )),
        _ => anyhow::Error::new(e).context(format!("the {name} archivist failed")),
    }
}

/// How long aborted tasks get to drop what they hold.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// Waits for the tasks in `set`: until all finish, one fails (the others are then asked to
/// stop), or the token is cancelled. Then waits at most `shutdown_timeout` for the rest.
/// Returns the first failure.
pub(crate) async fn supervise(
    token: &CancellationToken,
    mut set: JoinSet<anyhow::Result<()>>,
    shutdown_timeout: Duration,
) -> anyhow::Result<()> {
    let mut first_error: Option<anyhow::Error> = None;
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            joined = set.join_next() => match joined {
                None => return Ok(()),
                Some(result) => {
                    if let Some(e) = flatten(result) {
                        first_error = Some(e);
                        token.cancel();
                        break;
                    }
                }
            }
        }
    }
    let rest = async {
        while let Some(result) = set.join_next().await {
            if let Some(e) = flatten(result) {
                if first_error.is_none() {
                    first_error = Some(e);
                } else {
                    tracing::error!("{e:#}");
                }
            }
        }
    };
    if tokio::time::timeout(shutdown_timeout, rest).await.is_err() {
        set.abort_all();
        // Aborted tasks give up on their runs, which then drop what they hold (their
        // deliveries ask the bus to release them); a run stuck outside an await point
        // cannot be waited for.
        let dropped = async {
            while set.join_next().await.is_some() {}
            GIVEN_UP.close();
            GIVEN_UP.wait().await;
            GIVEN_UP.reopen();
        };
        let _ = tokio::time::timeout(ABORT_GRACE, dropped).await;
        let timeout = anyhow!(
            "archivists did not stop within {} (ARCHIVIST_SHUTDOWN_TIMEOUT)",
            humantime::format_duration(shutdown_timeout)
        );
        return Err(first_error.unwrap_or(timeout));
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn flatten(joined: Result<anyhow::Result<()>, tokio::task::JoinError>) -> Option<anyhow::Error> {
    match joined {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(e) => Some(anyhow!("a task ended abnormally: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::values::UsageError;
    use archivist::Wake;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::sync::{mpsc, oneshot};

    fn handle(ended: Ended) -> ArchivistHandle {
        let (_tx, errors) = mpsc::channel(1);
        let (done_tx, done) = oneshot::channel();
        let mut report = Report::new(ended);
        report.stored = 2;
        done_tx.send(report).unwrap();
        ArchivistHandle { errors, done }
    }

    #[tokio::test(start_paused = true)]
    async fn repeat_runs_at_the_interval_until_cancelled_and_adds_up() {
        let token = CancellationToken::new();
        let runs = AtomicU32::new(0);
        let totals = SharedTotals::default();
        let t = token.clone();
        repeat(
            "test",
            token.clone(),
            Some(Duration::from_secs(60)),
            totals.clone(),
            || {
                if runs.fetch_add(1, Ordering::SeqCst) == 2 {
                    t.cancel();
                }
                handle(Ended::Finished)
            },
        )
        .await
        .unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let t = read(&totals);
        assert_eq!((t.runs, t.stored), (3, 6));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_starts_the_next_run_without_waiting_for_the_interval() {
        let token = CancellationToken::new();
        let wake = Wake::new();
        let started = Arc::new(Mutex::new(Vec::new()));
        let t0 = tokio::time::Instant::now();
        let pace = Pace {
            every: Duration::from_secs(3600),
            wake: Some(wake.clone()),
            min_gap: Duration::from_millis(20),
        };
        let (t, w, s) = (token.clone(), wake.clone(), started.clone());
        repeat_paced(
            "test",
            token.clone(),
            Some(pace),
            Default::default(),
            move |cause| {
                let mut s = s.lock().unwrap();
                s.push((cause, t0.elapsed()));
                match s.len() {
                    // The first run finishes an item: the recorder raises the wake-up.
                    1 => w.wake(),
                    // Woken once, at the gap; the next one is the timer's.
                    2 => {}
                    _ => t.cancel(),
                }
                handle(Ended::Finished)
            },
        )
        .await
        .unwrap();
        let started = started.lock().unwrap().clone();
        assert_eq!(
            started,
            [
                (None, Duration::ZERO),
                (Some(Cause::Woken), Duration::from_millis(20)),
                (
                    Some(Cause::Timer),
                    Duration::from_millis(20) + Duration::from_secs(3600)
                ),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn repeat_without_interval_runs_once() {
        let runs = AtomicU32::new(0);
        repeat(
            "test",
            CancellationToken::new(),
            None,
            Default::default(),
            || {
                runs.fetch_add(1, Ordering::SeqCst);
                handle(Ended::Finished)
            },
        )
        .await
        .unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_configuration_failure_is_a_usage_error_and_others_are_fatal() {
        let e = repeat(
            "test",
            CancellationToken::new(),
            None,
            Default::default(),
            || handle(Ended::Failed(ArchivistError::Config("no count".into()))),
        )
        .await
        .unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
        let e = repeat(
            "test",
            CancellationToken::new(),
            None,
            Default::default(),
            || handle(Ended::Failed(ArchivistError::Transient("down".into()))),
        )
        .await
        .unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_none(), "{e:#}");
    }

    #[tokio::test(start_paused = true)]
    async fn supervise_stops_the_others_when_one_fails() {
        let token = CancellationToken::new();
        let mut set = JoinSet::new();
        let t = token.clone();
        set.spawn(async move {
            t.cancelled().await;
            Ok(())
        });
        set.spawn(async { Err(anyhow!("boom")) });
        let e = supervise(&token, set, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "boom");
        assert!(token.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn supervise_gives_up_after_the_shutdown_timeout() {
        let token = CancellationToken::new();
        let mut set = JoinSet::new();
        set.spawn(async {
            // Ignores the token.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        });
        token.cancel();
        let e = supervise(&token, set, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("did not stop within 5s"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn supervise_returns_when_all_finish() {
        let token = CancellationToken::new();
        let mut set = JoinSet::new();
        set.spawn(async { Ok(()) });
        set.spawn(async { Ok(()) });
        supervise(&token, set, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!token.is_cancelled());
    }
}
