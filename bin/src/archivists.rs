//! The archivists' wiring, one copy for their five subcommands (`episodes`, `clips`,
//! `pending-research`, `completed-research`, each in its own process, and `run`, all four in
//! one) and for the demo: the options they share, the bus and datastore they open, each
//! archivist spawned on them with its settings, and the wait until they end.

use std::sync::Arc;
use std::time::Duration;

use archivist::completed_research::CompletedResearchConfig;
use archivist::ingest::IngestConfig;
use archivist::pending_research::{HoldBack, PendingResearchConfig};
use archivist::{Pace, RetryPolicy, Wake};
use clap::Args;
use datastore::DataStore;
use messagebus::Bus;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};
use crate::connect;
use crate::tasks::{self, SharedTotals};
use crate::values::{parse_interval, usage};
use crate::web;

/// How long a long-running ingestion archivist waits in one receive (SQS's longest poll).
pub(crate) const INGEST_WAIT: Duration = Duration::from_secs(20);
/// How long a draining run (`--once`, completed research) waits for more before it ends.
pub(crate) const DRAIN_WAIT: Duration = Duration::from_secs(1);
/// The shortest time between two work-assignment runs started by a wake-up (`run`): a storm
/// of results starts at most one run per this, so it cannot hammer the datastore.
pub(crate) const WAKE_MIN_GAP: Duration = Duration::from_millis(20);
/// How often `run` looks at the work queue for items taken (each look one cheap read; a
/// researcher that finishes an item in 50 ms takes the next one waiting at once, so the
/// queue must be topped up within that). SQS is asked less often: each look is a paid
/// request, and its counts are approximate anyway.
const WATCH_EVERY: Duration = Duration::from_millis(20);
const WATCH_EVERY_SQS: Duration = Duration::from_secs(1);
/// After the archivists stop (or are given up on at the shutdown timeout), how long the bus
/// may take to release the messages they still held.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// Options of the ingestion archivists.
#[derive(Debug, Args)]
pub(crate) struct IngestArgs {
    /// Drain the queue and exit instead of waiting for more
    #[arg(long)]
    pub(crate) once: bool,
}

/// Options of the short-run archivists.
#[derive(Debug, Args)]
pub(crate) struct RepeatArgs {
    /// Repeat the run at this interval (as 30s, 5m) until SIGINT/SIGTERM, instead of running
    /// once. A flag only: an ARCHIVIST_EVERY meant for `run` must not turn cron runs into loops
    #[arg(long, value_parser = parse_interval)]
    pub(crate) every: Option<Duration>,
}

/// The shared bus and the datastore (created or migrated) of one archivist subcommand, named
/// `subcommand`, with metrics and health checks served (and with `routes` everything) when
/// `--metrics-addr` is given, the counters of `archivists` there from the start.
pub(crate) async fn open(
    config: &Config,
    token: &CancellationToken,
    subcommand: &str,
    routes: web::Routes,
    archivists: &[&str],
) -> anyhow::Result<(Arc<dyn Bus>, Arc<dyn DataStore>)> {
    open_with_archive(config, token, subcommand, routes, archivists, None).await
}

/// [`open`], the pages served (with `routes` everything) playing the kept copies of
/// `archive` and showing its figures (`run --media-archive`).
pub(crate) async fn open_with_archive(
    config: &Config,
    token: &CancellationToken,
    subcommand: &str,
    routes: web::Routes,
    archivists: &[&str],
    archive: Option<Arc<dyn archive::MediaArchive>>,
) -> anyhow::Result<(Arc<dyn Bus>, Arc<dyn DataStore>)> {
    let bus = connect::shared_bus(config, subcommand, token).await?;
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::Migrate,
    )
    .await?;
    serve_metrics(config, &store, &bus, token, routes, archivists, archive).await?;
    Ok((bus, store))
}

/// Waits for the archivists in `set` (under the shutdown timeout once the token is
/// cancelled), then closes the bus: it releases what archivists given up on still held, so
/// that those messages are visible again at once rather than after their visibility timeout.
pub(crate) async fn supervise_then_close(
    token: &CancellationToken,
    set: JoinSet<anyhow::Result<()>>,
    config: &Config,
    bus: &dyn Bus,
) -> anyhow::Result<()> {
    let out = tasks::supervise(token, set, config.shutdown_timeout).await;
    match tokio::time::timeout(RELEASE_GRACE, bus.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not close the bus"),
        Err(_) => tracing::warn!(
            "messages held by the stopped archivists were not all released within {}; they \
             come back when their visibility timeout runs out",
            humantime::format_duration(RELEASE_GRACE)
        ),
    }
    out
}

/// With `--metrics-addr`, serves metrics and health checks while the subcommand runs (and
/// with `routes` everything, the status page and its API too).
async fn serve_metrics(
    config: &Config,
    store: &Arc<dyn DataStore>,
    bus: &Arc<dyn Bus>,
    token: &CancellationToken,
    routes: web::Routes,
    archivists: &[&str],
    archive: Option<Arc<dyn archive::MediaArchive>>,
) -> anyhow::Result<()> {
    let Some(addr) = config.metrics_addr else {
        return Ok(());
    };
    let sources = web::Sources::new(config, store.clone(), Some(bus.clone())).with_archive(archive);
    web::spawn(
        addr,
        "ARCHIVIST_METRICS_ADDR (--metrics-addr)",
        sources,
        routes,
        archivists,
        token,
    )
    .await?;
    Ok(())
}

/// Which ingestion archivist.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Episodes,
    Clips,
}

impl Kind {
    /// Its name, as its subcommand's.
    fn name(self) -> &'static str {
        match self {
            Kind::Episodes => "episodes",
            Kind::Clips => "clips",
        }
    }
}

/// `archivist episodes` and `archivist clips`: one ingestion archivist until SIGINT/SIGTERM,
/// or with `--once` until its queue is drained.
pub(crate) async fn ingest(
    config: &Config,
    token: CancellationToken,
    args: &IngestArgs,
    kind: Kind,
) -> anyhow::Result<()> {
    let once = args.once;
    let name = kind.name();
    let (bus, store) = open(config, &token, name, web::Routes::MetricsAndHealth, &[name]).await?;
    let mut set = JoinSet::new();
    let ingest = IngestConfig {
        once,
        retry: config.retry(!once),
        receive_wait: if once { DRAIN_WAIT } else { INGEST_WAIT },
        ..IngestConfig::default()
    };
    spawn_ingest(
        &mut set,
        &token,
        &*bus,
        store,
        config,
        ingest,
        kind,
        Default::default(),
    )
    .await?;
    supervise_then_close(&token, set, config, &*bus).await
}

#[allow(clippy::too_many_arguments)]
async fn spawn_ingest(
    set: &mut JoinSet<anyhow::Result<()>>,
    token: &CancellationToken,
    bus: &dyn Bus,
    store: Arc<dyn DataStore>,
    config: &Config,
    ingest: IngestConfig,
    kind: Kind,
    totals: SharedTotals,
) -> anyhow::Result<()> {
    let name = kind.name();
    let queue = match kind {
        Kind::Episodes => &config.queues.episodes,
        Kind::Clips => &config.queues.clips,
    };
    let receiver = connect::receiver(bus, queue).await?;
    let token = token.clone();
    set.spawn(async move {
        let t = token.clone();
        tasks::repeat(name, token, None, totals, move || {
            let (t, r, s, c) = (t.clone(), receiver.clone(), store.clone(), ingest.clone());
            match kind {
                Kind::Episodes => archivist::ingest::start_episodes(t, r, s, c),
                Kind::Clips => archivist::ingest::start_clips(t, r, s, c),
            }
        })
        .await
    });
    Ok(())
}

/// Work assignment's settings from the configuration, retrying as `retry` says.
pub(crate) fn pending_config(config: &Config, retry: RetryPolicy) -> PendingResearchConfig {
    PendingResearchConfig {
        lease_duration: config.lease(),
        max_clips: config.max_clips,
        researchers: config.researchers,
        start_jitter: config.start_jitter,
        retry,
        hold_back: None,
        presence_window: config.presence_window,
    }
}

/// The recorder's settings: it drains its queue, retrying as `retry` says.
pub(crate) fn completed_config(retry: RetryPolicy) -> CompletedResearchConfig {
    CompletedResearchConfig {
        receive_wait: DRAIN_WAIT,
        retry,
        ..CompletedResearchConfig::default()
    }
}

/// SQS cannot count the researchers listening on a queue: the operator must say how many.
pub(crate) fn require_researcher_count(config: &Config) -> anyhow::Result<()> {
    if config.bus == BusKind::Sqs && config.researchers.is_none() {
        return Err(usage(format!(
            "ARCHIVIST_RESEARCHERS (--researchers) is required with ARCHIVIST_BUS=sqs: SQS \
             cannot count the researchers listening on {:?}, so set it to their number",
            config.queues.pending_research
        )));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn spawn_pending(
    set: &mut JoinSet<anyhow::Result<()>>,
    token: &CancellationToken,
    bus: &dyn Bus,
    store: Arc<dyn DataStore>,
    config: &Config,
    mut pending: PendingResearchConfig,
    every: Option<Duration>,
    wake: Option<Wake>,
    totals: SharedTotals,
) -> anyhow::Result<()> {
    let sender = connect::sender(bus, &config.queues.pending_research).await?;
    if let Some(wake) = &wake {
        // Items taken and researchers started are seen only on the queue.
        let watch_every = if config.bus == BusKind::Sqs {
            WATCH_EVERY_SQS
        } else {
            WATCH_EVERY
        };
        let watch = archivist::watch_capacity(
            token.clone(),
            sender.clone(),
            pending.researchers,
            watch_every,
            wake.clone(),
        );
        set.spawn(async move {
            watch.await;
            Ok(())
        });
    }
    if config.max_results_waiting > 0 {
        // Holding back is a courtesy to the recorder: a results queue this process cannot
        // open (not created yet, another account's) leaves work assignment as it was.
        match bus.sender(&config.queues.completed_research).await {
            Ok(results) => {
                pending.hold_back = Some(HoldBack {
                    results,
                    max_waiting: u64::from(config.max_results_waiting),
                });
            }
            Err(e) => tracing::warn!(
                queue = %config.queues.completed_research,
                error = %e,
                "work assignment cannot see the results queue: it will not hold back while \
                 results wait to be recorded"
            ),
        }
    }
    let token = token.clone();
    set.spawn(async move {
        let t = token.clone();
        let woken = wake.is_some();
        let pace = every.map(|every| Pace {
            every,
            wake,
            min_gap: WAKE_MIN_GAP,
        });
        tasks::repeat_paced("pending-research", token, pace, totals, move |cause| {
            let mut pending = pending.clone();
            if woken && cause.is_some() {
                // The start jitter spreads the runs of processes started at the same moment
                // (cron, a fleet restarted); after the first, a woken process's runs follow
                // its own events, and a wait there would hold back the work it was woken for.
                pending.start_jitter = Duration::ZERO;
            }
            archivist::pending_research::start(t.clone(), sender.clone(), store.clone(), pending)
        })
        .await
    });
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn spawn_completed(
    set: &mut JoinSet<anyhow::Result<()>>,
    token: &CancellationToken,
    bus: &dyn Bus,
    store: Arc<dyn DataStore>,
    config: &Config,
    completed: CompletedResearchConfig,
    every: Option<Duration>,
    totals: SharedTotals,
) -> anyhow::Result<()> {
    let receiver = connect::receiver(bus, &config.queues.completed_research).await?;
    // A configured announcement queue must exist: a missing one is said at start (exit 2),
    // not found out at the first completion.
    let mut completed = completed;
    if let Some(queue) = &config.queues.announce {
        completed.announce = Some(connect::sender(bus, queue).await?);
    }
    let token = token.clone();
    set.spawn(async move {
        let t = token.clone();
        tasks::repeat("completed-research", token, every, totals, move || {
            archivist::completed_research::start(
                t.clone(),
                receiver.clone(),
                store.clone(),
                completed.clone(),
            )
        })
        .await
    });
    Ok(())
}

/// Totals of the four archivists of one process.
#[derive(Debug, Default, Clone)]
pub(crate) struct AllTotals {
    pub(crate) episodes: SharedTotals,
    pub(crate) clips: SharedTotals,
    pub(crate) pending: SharedTotals,
    pub(crate) completed: SharedTotals,
}

/// Settings of the four archivists when they run together.
pub(crate) struct Pipeline {
    pub(crate) every: Duration,
    pub(crate) pending: PendingResearchConfig,
    pub(crate) completed: CompletedResearchConfig,
    /// How many completed-research archivists record side by side (at least one).
    pub(crate) recorders: usize,
    pub(crate) ingest_wait: Duration,
    /// Work assignment woken when capacity frees (an item taken, a lease ended, new episodes
    /// or clips stored), `every` then only the fallback; else on the timer alone.
    pub(crate) wake: bool,
}

/// Spawns the four archivists on `bus` and `store` into `set`.
pub(crate) async fn spawn_all(
    set: &mut JoinSet<anyhow::Result<()>>,
    token: &CancellationToken,
    bus: &dyn Bus,
    store: Arc<dyn DataStore>,
    config: &Config,
    pipeline: Pipeline,
    totals: &AllTotals,
) -> anyhow::Result<()> {
    let wake = pipeline.wake.then(Wake::new);
    for (kind, totals) in [
        (Kind::Episodes, &totals.episodes),
        (Kind::Clips, &totals.clips),
    ] {
        // Running together, the archivists are long-running: they ride out outages.
        let ingest = IngestConfig {
            receive_wait: pipeline.ingest_wait,
            retry: RetryPolicy::forever(),
            wake: wake.clone(),
            ..IngestConfig::default()
        };
        spawn_ingest(
            set,
            token,
            bus,
            store.clone(),
            config,
            ingest,
            kind,
            totals.clone(),
        )
        .await?;
    }
    spawn_pending(
        set,
        token,
        bus,
        store.clone(),
        config,
        pipeline.pending,
        Some(pipeline.every),
        wake.clone(),
        totals.pending.clone(),
    )
    .await?;
    // Recorders side by side may record a researcher's last result (which revokes the lease)
    // before another of its results: safe, because a revoked lease keeps holding the pairs
    // whose results are still on their way until they are recorded or the lease expires.
    for _ in 0..pipeline.recorders.max(1) {
        spawn_completed(
            set,
            token,
            bus,
            store.clone(),
            config,
            CompletedResearchConfig {
                wake: wake.clone(),
                ..pipeline.completed.clone()
            },
            Some(pipeline.every),
            totals.completed.clone(),
        )
        .await?;
    }
    Ok(())
}
