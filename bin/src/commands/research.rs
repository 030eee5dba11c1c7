//! `archivist research`: its options, and the wiring of the researcher runtime (crate
//! `research`) to them: the analyser from `--exec`/`--http`, the media cache, the bus, the
//! `--metrics-addr` server, and the run's end as an exit code. The demo's researchers run
//! through [`run_on`] too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use research::exec::ExecAnalyser;
use research::http::HttpAnalyser;
use research::reference::ReferenceAnalyser;
use research::{Analyser, Later, Media, MediaConfig};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::researcher::{from_library, run_on, Setup};
use crate::values::usage;
use crate::values::{parse_duration, parse_size, RemoteArgs};

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
at once. The researcher needs the bus and the media, never the datastore.\n\n\
With --media-archive DIR or s3://bucket/prefix (ARCHIVIST_MEDIA_ARCHIVE), each episode's media \
is fetched from the show once, checked, kept by its SHA-256 and recorded as a version of the \
episode; every later item of that episode (its prints, their ranges) reads the kept copy of \
the episode's chosen version, and its results' episode_hash name that copy. The show's URL is \
fetched again only for a new media_uri (recorded as another version, not researched until \
chosen). A kept copy that does not hash to its name is never analysed: its pairs fail, naming \
the copy (`archivist archive verify`).\n\n\
Anywhere else: --server URL (ARCHIVIST_SERVER) with a researcher's token (ARCHIVIST_TOKEN) \
takes work items, extends them while they are worked on, and sends results through the API of \
`archivist serve --api` instead of the bus: no bus or database credentials. Everything else \
is the same (the book's chapter docs/src/remote.md). A refused token exits 2, naming the \
scope needed.";

/// `research --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
    archivist research --exec python3 my_analyser.py\n  \
    archivist research --concurrency 4 --cache-dir /var/cache/archivist --exec ./analyse.sh --fast\n  \
    archivist research --http http://127.0.0.1:8080/analyse\n  \
    archivist research --once --exec ./analyse.sh      # what is waiting, then exit\n  \
    ARCHIVIST_TOKEN=… archivist research --server https://archivist.example.org --concurrency 2";

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
    pub(crate) addresses: crate::values::AddressArgs,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
    #[command(flatten)]
    pub(crate) prints: crate::values::PrintStoreArgs,
    #[command(flatten)]
    pub(crate) archive: crate::values::MediaArchiveArgs,
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

/// After the researcher stops, how long the bus may take to release what it held.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// Runs the researcher until SIGINT/SIGTERM (or, with `--once`, until the queue is drained).
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: ResearchArgs,
) -> anyhow::Result<()> {
    let analyser: Arc<dyn Analyser> =
        match (&args.exec, &args.http) {
            (Some(command), None) => {
                let (program, rest) = command
                    .split_first()
                    .ok_or_else(|| usage("--exec needs a command"))?;
                Arc::new(ExecAnalyser::new(
                    program.clone(),
                    rest.to_vec(),
                    args.kill_grace,
                ))
            }
            (None, Some(url)) => {
                Arc::new(HttpAnalyser::new(url, args.fetch_connect_timeout).map_err(from_library)?)
            }
            (Some(_), Some(_)) => return Err(usage(
                "give one analyser: --exec CMD or --http URL (ARCHIVIST_ANALYSER_URL), not both",
            )),
            // The reference analyser (crate `analysis`), in this process, with its prints.
            (None, None) => {
                let store = connect::print_store(&args.prints, true).await?;
                Arc::new(match store {
                    Some(store) => ReferenceAnalyser::with_prints(store),
                    None => ReferenceAnalyser::new(),
                })
            }
        };
    let concurrency = args.concurrency.map(|n| n as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let cache_dir = match args.cache_dir.clone() {
        Some(dir) => dir,
        None => default_cache_dir()?,
    };
    let media = Media::new(MediaConfig {
        cache_dir,
        cache_size: args.cache_size,
        max_size: args.max_media_size,
        media_roots: args.media_root.clone(),
        connect_timeout: args.fetch_connect_timeout,
        read_timeout: args.fetch_read_timeout,
        attempts: args.fetch_attempts,
        addresses: args.addresses.policy(),
        min_rate: args.fetch_min_rate,
    })
    .map_err(from_library)?;
    // With an archive, each episode is fetched from the show once, kept, and researched
    // from the kept copy after that.
    let media = match connect::media_archive(&args.archive).await? {
        Some(archive) => {
            tracing::info!(archive = %archive.describe(), "episodes are kept in the media archive");
            media.with_archive(archive)
        }
        None => media,
    };

    let bus = if args.remote.remote()? {
        // Through the API: work items, their extensions and results over HTTPS, with a
        // researcher's token; the runtime sees a bus like any other.
        connect::api_bus(config, &args.remote, &token).await?
    } else if config.bus == crate::config::BusKind::Rabbitmq {
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
        print_counters: Default::default(),
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

/// The cache directory when `--cache-dir` is not given: `archivist/media` under
/// `$XDG_CACHE_HOME` (when absolute, as the XDG spec asks), else under `~/.cache`.
fn default_cache_dir() -> anyhow::Result<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|home| home.join(".cache")))
        .ok_or_else(|| {
            usage(
                "no cache directory: neither XDG_CACHE_HOME nor HOME is set; give --cache-dir \
                 (ARCHIVIST_CACHE_DIR)",
            )
        })?;
    Ok(base.join("archivist").join("media"))
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
}
