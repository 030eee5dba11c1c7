//! `archivist research`: a researcher. It takes work items off `pending_research`, fetches
//! their media, runs an analyser on each and sends one `CompletedResearchItem` per clip to
//! `completed_research` as each is found, the last one revoking the lease; the item is
//! acknowledged once all its results are sent, or released for another try when it failed.
//!
//! # Layout
//!
//! - `mod.rs`: options, the slots (`--concurrency`: one receiver each, so one consumer each on
//!   the buses that count them; a slot receives only when it is free), shutdown (stop taking
//!   items, `--drain-timeout` for those in hand, then stop the analysers and release at once).
//! - `work.rs`: one work item from delivery to acknowledgement.
//! - `media.rs`: fetching, caching and hashing media.
//! - `analyser.rs`: the [`analyser::Analyser`] trait every analyser implements;
//!   `exec.rs` (`--exec`, a child process per item), `http.rs` (`--http`, a POST per item) and
//!   `reference.rs` (the reference analyser, in this process: the default).
//! - `protocol.rs`: the analyser protocol's lines, and the item as the analyser reads it.
//! - `serve.rs`: `--metrics-addr`: `/metrics`, `/healthz` and `/api/researcher` (each slot's
//!   work and since when).

pub(crate) mod analyser;
mod exec;
mod http;
pub(crate) mod media;
mod protocol;
pub(crate) mod reference;
mod serve;
mod work;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use archivist::messages::PendingResearchItem;
use chrono::{DateTime, Utc};
use clap::Args;
use messagebus::{Bus, Receiver, Sender};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::values::usage;
use crate::values::{parse_duration, parse_size};

use analyser::Analyser;
use media::{Media, MediaConfig};

/// `research --help`'s long description.
pub(crate) const ABOUT: &str = "A researcher: takes work items off the pending-research queue, \
fetches their media (http(s):// URLs into --cache-dir, file:// URLs and paths where they are), \
runs an analyser on each item and sends one result per clip to the completed-research queue as \
each is found, the last one ending the lease. The item is acknowledged once every result is \
sent; when the analyser fails (a crash, an exit code other than 0 and 75, a line that breaks \
the protocol, no output within --stall-timeout) the item is released for another try, up to \
the queue's receive limit (ARCHIVIST_MAX_RECEIVES). When it asks to try later (exit 75, HTTP \
429 or 503) the item is held for --later-backoff (doubled at each receive of the item, at most \
--later-max-backoff), then released; that try counts toward the limit too. On the item's last \
allowed try, an analyser that fails or asks for later again gives the item up: its unanswered \
pairs become failed research with the analyser's reason (`archivist retry-failed` brings them \
back), the lease ends, and the item is dead-lettered with that reason. Media that is gone (HTTP \
404 or 410, a missing file, a local one that is not a regular file or is outside --media-root, \
over --max-media-size, an address that is not public) makes those pairs failed research: not leased again until \
`archivist retry-failed` or a new media_uri.\n\n\
Media addresses come from feeds written by others: downloads connect only to public addresses, \
checked after DNS resolution and at every redirect (not loopback, private, link-local, \
unique-local…), unless --allow-private-addresses (a show on your own network); without it, \
HTTP_PROXY/HTTPS_PROXY are not used. A download slower than --fetch-min-rate is cut off and \
tried again; one whose item's lease ends stops.\n\n\
The analyser: without --exec or --http, the reference analyser (the one `archivist analyse` \
runs), in this process. --exec CMD [ARGS…] starts CMD per item instead (everything after \
--exec is the command: give it last), the item as one JSON line on its standard input; --http \
URL POSTs the item and reads the response. Both answer with one JSON line per clip (the \
book's chapter docs/src/researchers.md).\n\n\
--concurrency N items at once (default: the cores); each counts as one researcher on the \
buses that count consumers (the database bus, RabbitMQ), so the pending-research archivist \
hands out as much work as the researchers can take. SIGINT/SIGTERM stop taking items; items \
in hand get --drain-timeout to finish, then their analysers are stopped and the items released \
at once. The researcher needs the bus and the media, never the datastore.";

/// `research --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
    archivist research --exec python3 my_analyser.py\n  \
    archivist research --concurrency 4 --cache-dir /var/cache/archivist --exec ./analyse.sh --fast\n  \
    archivist research --http http://127.0.0.1:8080/analyse\n  \
    archivist research --once --exec ./analyse.sh      # what is waiting, then exit";

/// Options of `research`.
#[derive(Debug, Args)]
pub(crate) struct ResearchArgs {
    /// Work items at once, each one researcher on the buses that count consumers
    /// [default: the number of cores]
    #[arg(long, env = "ARCHIVIST_CONCURRENCY", hide_env_values = true,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) concurrency: Option<u32>,
    /// Take the items waiting now, finish them, and exit
    #[arg(long)]
    pub(crate) once: bool,
    /// The analyser: a program started per work item, with its arguments (everything after
    /// --exec: give it last)
    #[arg(long, value_name = "CMD [ARGS…]", num_args = 1.., allow_hyphen_values = true,
          conflicts_with = "http")]
    pub(crate) exec: Option<Vec<String>>,
    /// The analyser as an HTTP service: each item is POSTed to this URL
    #[arg(
        long,
        value_name = "URL",
        env = "ARCHIVIST_ANALYSER_URL",
        hide_env_values = true
    )]
    pub(crate) http: Option<String>,
    /// Where downloaded media is kept, across restarts; researchers on one machine may share
    /// it [default: $XDG_CACHE_HOME/archivist/media, else ~/.cache/archivist/media]
    #[arg(long, env = "ARCHIVIST_CACHE_DIR", hide_env_values = true)]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Read local media (file:// URLs, paths) only inside this folder; repeat it for more, or
    /// separate them with ':' in the variable. A path outside every root is failed research
    /// [default: local media anywhere]
    #[arg(
        long,
        value_name = "DIR",
        env = "ARCHIVIST_MEDIA_ROOT",
        hide_env_values = true,
        value_delimiter = ':'
    )]
    pub(crate) media_root: Vec<PathBuf>,
    /// The most downloaded media kept, as 500MB, 10GiB (least recently used evicted)
    #[arg(long, env = "ARCHIVIST_CACHE_SIZE", hide_env_values = true, default_value = "10GiB",
          value_parser = parse_size)]
    pub(crate) cache_size: u64,
    /// The largest media file fetched; a larger one is failed research ("media too large")
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub(crate) max_media_size: u64,
    /// Stop an analyser that writes no line (progress lines count) for this long; the item
    /// fails
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub(crate) stall_timeout: Duration,
    /// Between SIGTERM and SIGKILL when an analyser is stopped
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_grace: Duration,
    /// After SIGINT/SIGTERM, how long items in hand may take to finish before their analysers
    /// are stopped and the items released
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) drain_timeout: Duration,
    /// The longest wait to connect to a media server (or the --http analyser)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) fetch_connect_timeout: Duration,
    /// The longest wait for the next bytes of a download
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) fetch_read_timeout: Duration,
    /// On RabbitMQ: how long a work item in hand stays invisible to other researchers before
    /// the bus gives it to another (the database bus and SQS extend it while the item is in
    /// hand). Keep it above the longest item, and RabbitMQ's consumer_timeout above it
    #[arg(long, default_value = "6h", value_parser = parse_duration)]
    pub(crate) visibility_timeout: Duration,
    /// Tries of one download (connection errors, timeouts, HTTP 429 and 5xx) before the item
    /// fails
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) fetch_attempts: u32,
    /// The slowest a download may be, as bytes a second on average after its first 30 s (as
    /// 16KiB; 0: no minimum): a slower one is cut off and tried again, so that a download's
    /// time follows its size. A download also stops when its item's lease ends
    #[arg(long, env = "ARCHIVIST_FETCH_MIN_RATE", hide_env_values = true, default_value = "16KiB",
          value_parser = parse_size)]
    pub(crate) fetch_min_rate: u64,
    #[command(flatten)]
    pub(crate) addresses: crate::cli::AddressArgs,
    /// When the analyser asks to try an item later (exit 75, HTTP 429 or 503), how long the
    /// item is held before it is released, at its first receive; doubled at each receive
    /// after, up to --later-max-backoff. Each try counts toward ARCHIVIST_MAX_RECEIVES: the
    /// last one gives the item up
    #[arg(long, env = "ARCHIVIST_LATER_BACKOFF", hide_env_values = true,
          default_value = "1m", value_parser = parse_duration)]
    pub(crate) later_backoff: Duration,
    /// The longest hold of an item whose analyser asked to try it later
    #[arg(long, env = "ARCHIVIST_LATER_MAX_BACKOFF", hide_env_values = true,
          default_value = "15m", value_parser = parse_duration)]
    pub(crate) later_max_backoff: Duration,
}

/// How long an item whose analyser asked for a later try is held before it is released.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Later {
    /// The hold at the item's first receive; doubled at each receive after.
    pub(crate) first: Duration,
    /// The longest hold.
    pub(crate) max: Duration,
}

impl Default for Later {
    fn default() -> Self {
        Later {
            first: Duration::from_secs(60),
            max: Duration::from_secs(15 * 60),
        }
    }
}

impl Later {
    /// The hold at the item's `receive`th receive (1 on the first).
    pub(crate) fn wait(&self, receive: u32) -> Duration {
        let doublings = receive.saturating_sub(1).min(30);
        self.first
            .saturating_mul(1 << doublings)
            .min(self.max.max(self.first))
    }
}

/// What one slot is doing, as `/api/researcher` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum SlotState {
    Idle,
    Working {
        lease_id: uuid::Uuid,
        episode_title: String,
        episode_date_aired: DateTime<Utc>,
        clips: usize,
        since: DateTime<Utc>,
        /// The analyser's latest progress line.
        #[serde(skip_serializing_if = "Option::is_none")]
        progress: Option<String>,
    },
}

impl SlotState {
    fn working(item: &PendingResearchItem) -> Self {
        SlotState::Working {
            lease_id: item.lease_id,
            episode_title: item.episode.title.clone(),
            episode_date_aired: item.episode.date_aired,
            clips: item.clips.len(),
            since: Utc::now(),
            progress: None,
        }
    }
}

/// What every slot shares.
pub(crate) struct Context {
    analyser: Arc<dyn Analyser>,
    media: Media,
    results: Arc<dyn Sender>,
    /// Cancelled at the drain timeout after the shutdown signal (or at once when the
    /// researcher stops for another reason): analysers are stopped, items released.
    hard_stop: CancellationToken,
    stall_timeout: Duration,
    drain_timeout: Duration,
    slots: Mutex<Vec<SlotState>>,
    /// The queue's receive limit (ARCHIVIST_MAX_RECEIVES): an item received this many times
    /// is on its last allowed try.
    max_receives: u32,
    /// Holds of items whose analyser asked for a later try.
    later: Later,
    /// Cancelled at the shutdown signal: an item held for a later try is released at once.
    stopping: CancellationToken,
}

impl Context {
    fn set_slot(&self, slot: usize, state: SlotState) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = slots.get_mut(slot) {
            *s = state;
        }
    }

    fn set_progress(&self, slot: usize, text: String) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(SlotState::Working { progress, .. }) = slots.get_mut(slot) {
            *progress = Some(text);
        }
    }

    pub(crate) fn slots(&self) -> Vec<SlotState> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn analyser_shown(&self) -> String {
        self.analyser.describe()
    }
}

/// How long a long-running slot waits in one receive (SQS's longest poll).
const RECEIVE_WAIT: Duration = Duration::from_secs(20);
/// How long a `--once` slot waits for an item before it decides the queue is drained.
const ONCE_WAIT: Duration = Duration::from_secs(2);
/// A slot's pause after an item went back to the queue; doubled for each such item in a row.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// After the slots stop, how long the bus may take to release what they held.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// Runs the researcher until SIGINT/SIGTERM (or, with `--once`, until the queue is drained).
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: ResearchArgs,
) -> anyhow::Result<()> {
    let analyser: Arc<dyn Analyser> = match (&args.exec, &args.http) {
        (Some(command), None) => Arc::new(exec::ExecAnalyser::new(command, args.kill_grace)?),
        (None, Some(url)) => Arc::new(http::HttpAnalyser::new(url, args.fetch_connect_timeout)?),
        (Some(_), Some(_)) => {
            return Err(usage(
                "give one analyser: --exec CMD or --http URL (ARCHIVIST_ANALYSER_URL), not both",
            ))
        }
        // The reference analyser (crate `analysis`), in this process.
        (None, None) => Arc::new(reference::ReferenceAnalyser::new()),
    };
    let concurrency = args.concurrency.map(|n| n as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let cache_dir = match args.cache_dir.clone() {
        Some(dir) => dir,
        None => media::default_cache_dir()?,
    };
    let media = Media::new(MediaConfig {
        cache_dir,
        cache_size: args.cache_size,
        max_size: args.max_media_size,
        media_roots: media::media_roots(&args.media_root)?,
        connect_timeout: args.fetch_connect_timeout,
        read_timeout: args.fetch_read_timeout,
        attempts: args.fetch_attempts,
        addresses: args.addresses.policy(),
        min_rate: args.fetch_min_rate,
    })?;

    let bus = if config.bus == crate::config::BusKind::Rabbitmq {
        // RabbitMQ cannot extend a delivery's visibility: it must outlast the analysis.
        connect::rabbitmq_bus_with(config, &token, true, args.visibility_timeout).await?
    } else {
        connect::shared_bus(config, "research", &token).await?
    };
    let setup = Setup {
        analyser,
        media,
        concurrency,
        once: args.once,
        stall_timeout: args.stall_timeout,
        drain_timeout: args.drain_timeout,
        later: Later {
            first: args.later_backoff,
            max: args.later_max_backoff,
        },
    };
    let outcome = run_on(config, bus.as_ref(), setup, &token).await;
    match tokio::time::timeout(RELEASE_GRACE, bus.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not close the bus"),
        Err(_) => tracing::warn!("the bus did not close in time"),
    }
    tracing::info!("researcher stopped");
    outcome
}

/// What a researcher runs with, besides the bus: from `research`'s options, or the demo's.
pub(crate) struct Setup {
    pub(crate) analyser: Arc<dyn Analyser>,
    pub(crate) media: Media,
    /// Slots: work items at once, one receiver (one consumer) each.
    pub(crate) concurrency: usize,
    /// Take what is waiting, finish it, and return.
    pub(crate) once: bool,
    pub(crate) stall_timeout: Duration,
    pub(crate) drain_timeout: Duration,
    /// Holds of items whose analyser asked for a later try.
    pub(crate) later: Later,
}

/// Runs the researcher's slots on `bus` until `token` is cancelled (then the drain) or, with
/// `once`, until the queue is drained. The caller owns the bus and closes it.
pub(crate) async fn run_on(
    config: &Config,
    bus: &dyn Bus,
    setup: Setup,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let concurrency = setup.concurrency;
    let results = connect::sender(bus, &config.queues.completed_research).await?;
    // One receiver per slot, made before any receives: each counts as a researcher from the
    // start, so work assignment sees the whole capacity at once.
    let mut receivers: Vec<Arc<dyn Receiver>> = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        receivers.push(connect::receiver(bus, &config.queues.pending_research).await?);
    }
    let ctx = Arc::new(Context {
        analyser: setup.analyser,
        media: setup.media,
        results,
        hard_stop: CancellationToken::new(),
        stall_timeout: setup.stall_timeout,
        drain_timeout: setup.drain_timeout,
        slots: Mutex::new(vec![SlotState::Idle; concurrency]),
        max_receives: config.max_receives,
        later: setup.later,
        stopping: token.clone(),
    });
    if let Some(addr) = config.metrics_addr {
        serve::spawn(addr, ctx.clone(), concurrency, token).await?;
    }
    metrics::gauge!("archivist_researcher_slots").set(concurrency as f64);
    tracing::info!(
        analyser = %ctx.analyser.describe(),
        concurrency,
        once = setup.once,
        "researcher started"
    );

    // The drain: once the token is cancelled, items in hand get the drain timeout.
    let drain = {
        let (token, hard_stop, timeout) =
            (token.clone(), ctx.hard_stop.clone(), setup.drain_timeout);
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                // The slots ended by themselves (`--once`, a fatal error).
                _ = hard_stop.cancelled() => return,
            }
            tokio::select! {
                _ = hard_stop.cancelled() => {}
                _ = tokio::time::sleep(timeout) => {
                    tracing::info!("drain timeout: stopping the analysers and releasing their items");
                    hard_stop.cancel();
                }
            }
        })
    };

    let mut set = JoinSet::new();
    for (slot, receiver) in receivers.into_iter().enumerate() {
        let (ctx, token) = (ctx.clone(), token.clone());
        let budget = config.retry_budget;
        let once = setup.once;
        set.spawn(async move { run_slot(&ctx, slot, receiver, &token, once, budget).await });
    }
    let mut outcome = Ok(());
    while let Some(joined) = set.join_next().await {
        let result = joined.unwrap_or_else(|e| Err(anyhow::anyhow!("a slot stopped: {e}")));
        if let Err(e) = result {
            if outcome.is_ok() {
                // One slot cannot reach the bus: the others cannot either. Stop them all.
                token.cancel();
                ctx.hard_stop.cancel();
                outcome = Err(e);
            }
        }
    }
    ctx.hard_stop.cancel();
    let _ = drain.await;
    outcome
}

/// One slot: receives one item when free, handles it, and again, until the token is
/// cancelled (or with `once`, until a receive finds nothing).
async fn run_slot(
    ctx: &Context,
    slot: usize,
    receiver: Arc<dyn Receiver>,
    token: &CancellationToken,
    once: bool,
    retry_budget: Duration,
) -> anyhow::Result<()> {
    let wait = if once { ONCE_WAIT } else { RECEIVE_WAIT };
    let mut backoff = Duration::from_millis(200);
    let mut failing_since: Option<tokio::time::Instant> = None;
    let mut pause = Duration::ZERO;
    loop {
        if token.is_cancelled() {
            return Ok(());
        }
        let received = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            r = receiver.receive(1, wait) => r,
        };
        let deliveries = match received {
            Ok(d) => {
                failing_since = None;
                backoff = Duration::from_millis(200);
                d
            }
            Err(e) if e.is_retryable() => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                if once && since.elapsed() >= retry_budget {
                    return Err(anyhow::Error::new(e).context(format!(
                        "the bus is unreachable (queue {:?}) for longer than \
                         ARCHIVIST_RETRY_BUDGET",
                        receiver.queue()
                    )));
                }
                tracing::warn!(slot, error = %e, retry_in = ?backoff, "cannot receive work items; trying again");
                tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot receive from {:?}", receiver.queue())))
            }
        };
        let Some(delivery) = deliveries.into_iter().next() else {
            if once {
                return Ok(());
            }
            continue;
        };
        if work::handle(ctx, slot, delivery).await {
            pause = Duration::ZERO;
        } else {
            // What went back would come straight back to this free slot: give it (and a
            // busy analyser asking for later) a moment, longer after each failure in a row.
            pause = (pause * 2).clamp(FIRST_PAUSE, MAX_PAUSE);
            tokio::select! {
                _ = token.cancelled() => return Ok(()),
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10GiB").unwrap(), 10 * 1024 * 1024 * 1024);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size("1.5 kb").unwrap(), 1500);
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn later_holds_double_at_each_receive_up_to_the_max() {
        let later = Later::default();
        let minutes: Vec<u64> = (1..=6).map(|r| later.wait(r).as_secs() / 60).collect();
        assert_eq!(minutes, [1, 2, 4, 8, 15, 15]);
        assert_eq!(later.wait(u32::MAX), Duration::from_secs(15 * 60));
        let odd = Later {
            first: Duration::from_secs(10),
            max: Duration::from_secs(1),
        };
        assert_eq!(
            odd.wait(3),
            Duration::from_secs(10),
            "never below the first"
        );
    }
}
