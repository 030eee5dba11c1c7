//! `archivist curate`: the curators of the `curate` crate on the command line. `curate feed
//! URL…` reads podcast feeds and sends one `EpisodeInfo` per audio item; `curate clips PATH…`
//! sends one `ClipInfo` per audio file. Here: the options, the sink (the configured bus, or
//! standard output for `--dry-run`), the `--every` loop, the text and JSON reports, the
//! curator's page server (`--every --metrics-addr`), and the exit codes.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use clap::{Args, Subcommand};
use curate::clips::{ClipCurator, ClipSettings, PathReport};
use curate::feeds::{FeedCurator, FeedReport, FeedSettings};
use curate::page::Board;
use curate::{CurateError, Sink};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::values::{parse_duration, parse_interval, parse_size_kmg};
use crate::values::{usage, RemoteArgs};

/// The configuration options `curate` reads, for its `--help` (see `cli::USED_OPTIONS`).
pub(crate) const USED_OPTIONS: &[&[&str]] = &[
    &["database_url"],
    &["bus", "bus_url", "max_receives"],
    &["episodes_queue", "clips_queue"],
    &["connect_timeout"],
    &["retry_budget"],
    &["metrics_addr"],
    &["log_format"],
];

/// Options of `curate`.
#[derive(Debug, Args)]
pub(crate) struct CurateArgs {
    #[command(subcommand)]
    pub(crate) command: CurateCommand,
}

/// The curators.
#[derive(Debug, Subcommand)]
pub(crate) enum CurateCommand {
    /// Read podcast feeds (RSS, Atom) and send one EpisodeInfo per audio item not yet sent
    /// (or changed since), to the episodes queue
    #[command(after_help = "Examples:\n  \
        archivist curate feed https://feeds.example.org/show.xml          # one pass\n  \
        archivist curate feed --dry-run https://feeds.example.org/show.xml | jq .title\n  \
        archivist curate feed --every 30m --priority 5 URL1 URL2          # poll until SIGTERM\n  \
        archivist curate feed --server https://archivist.example.org URL  # through the API (ARCHIVIST_TOKEN)\n\n\
Exit codes: 0 every feed was read (or answered 304 Not Modified, or is waiting out a \
Retry-After it gave earlier), 1 some feed failed (each is named), 2 bad usage. One bad feed never \
stops the others. What was sent, and the feeds' ETag and Last-Modified, are kept in the --state \
file: a feed that has not changed costs one request and no body. With --every and --metrics-addr, \
the curator serves its own page on / (each feed's last poll, outcome, items sent, not modified, \
errors), the same as JSON on /api/curator, /metrics and /healthz.")]
    Feed(FeedArgs),
    /// Send one ClipInfo per audio file (mp3, m4a, aac, ogg, oga, flac, wav) in the files and
    /// folders given, titled by its title tag or else its file name, when new or changed since
    /// it was sent, to the clips queue
    #[command(after_help = "Examples:\n  \
        archivist curate clips ~/clips                                     # file:// addresses\n  \
        archivist curate clips --base-url https://media.example.org/clips/ /srv/clips\n  \
        archivist curate clips --dry-run intro.mp3 outro.wav\n  \
        archivist curate clips --server https://archivist.example.org --base-url https://media.example.org/clips/ /srv/clips\n\n\
Folders are walked recursively (hidden files and folders skipped, symbolic links to folders not \
followed); Opus files are skipped and named (the reference analyser cannot decode Opus). A \
clip's title is its title tag (ID3 TIT2, Vorbis TITLE, MP4 ©nam, RIFF INAM), else its file name \
without the extension; its artist and album tags become its description. Clips are identified \
by title, so of two files with one title the second is reported and skipped, and a file sent \
before keeps its title. Exit codes: 0 every path was read, 1 some path failed (each is named), \
2 bad usage.")]
    Clips(ClipsArgs),
}

/// Options of `curate feed`.
#[derive(Debug, Args)]
pub(crate) struct FeedArgs {
    /// The feeds' addresses (http:// or https://)
    #[arg(required = true, value_name = "URL")]
    pub(crate) urls: Vec<String>,
    /// Poll the feeds at this interval (as 15m, 1h) until SIGINT/SIGTERM, instead of once
    #[arg(long, value_parser = parse_interval, conflicts_with = "dry_run")]
    pub(crate) every: Option<Duration>,
    /// The priority of the episodes sent (higher is more urgent)
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i32,
    /// The state file: what was sent per feed, and each feed's ETag and Last-Modified
    #[arg(long, default_value = "archivist-feeds.json", value_name = "FILE")]
    pub(crate) state: PathBuf,
    /// Print the EpisodeInfo messages that would be sent (JSON lines); send nothing, change
    /// no state
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print a summary object (per feed: items found, sent, unchanged, skipped with reasons,
    /// not modified, error) on standard output, one per pass
    #[arg(long)]
    pub(crate) json: bool,
    /// How long one feed's request may take, body included
    #[arg(long, default_value = "30s", value_parser = parse_interval)]
    pub(crate) timeout: Duration,
    /// The largest feed read, in bytes after decompression (as 200000, 512K, 64M): a larger one
    /// fails without being parsed
    #[arg(long, default_value = "64M", value_parser = parse_size_kmg)]
    pub(crate) max_feed_size: u64,
    /// The most episodes taken from one feed: its newest (by publication date); the rest are
    /// counted as skipped
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) max_items: u64,
    /// The longest Retry-After (of a 429 or 503) waited for within a pass; a longer one puts
    /// the feed off until then (kept in the state file), for a day at most (or this, if
    /// longer), whether it is given in seconds or as a date
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub(crate) max_retry_wait: Duration,
    #[command(flatten)]
    pub(crate) addresses: crate::values::AddressArgs,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
}

/// Options of `curate clips`.
#[derive(Debug, Args)]
pub(crate) struct ClipsArgs {
    /// Audio files, or folders (walked recursively)
    #[arg(required = true, value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
    /// Address the files under this URL instead of as file:// URLs: a file's path relative
    /// to the folder given (for a file given by itself: its name), percent-encoded, is
    /// appended to it. For a folder served to researchers on other machines
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// The priority of the clips sent (higher is more urgent)
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i32,
    /// The state file: what was sent per file (size, modification time, content hash)
    #[arg(long, default_value = "archivist-clips.json", value_name = "FILE")]
    pub(crate) state: PathBuf,
    /// Print the ClipInfo messages that would be sent (JSON lines); send nothing, change no
    /// state
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print a summary object (per path: files found, sent, unchanged, skipped with reasons,
    /// error) on standard output
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
}

/// Runs `curate feed` or `curate clips`.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: CurateArgs,
) -> anyhow::Result<()> {
    match args.command {
        CurateCommand::Feed(args) => feed(config, token, args).await,
        CurateCommand::Clips(args) => clips(config, token, args).await,
    }
}

/// The curator's error for the command line: a setting or state file at fault is bad usage
/// (exit 2), anything else a failure (exit 1).
fn error(e: CurateError) -> anyhow::Error {
    if e.is_configuration() {
        usage(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// Runs `curate feed`: one pass, or one every `--every` until SIGINT/SIGTERM.
async fn feed(config: &Config, token: CancellationToken, args: FeedArgs) -> anyhow::Result<()> {
    let mut settings = FeedSettings::new(args.urls.clone(), args.state.clone());
    settings.priority = args.priority;
    settings.timeout = args.timeout;
    settings.max_feed_size = args.max_feed_size;
    settings.max_items = usize::try_from(args.max_items).unwrap_or(usize::MAX);
    settings.max_retry_wait = args.max_retry_wait;
    settings.addresses = args.addresses.policy();
    let mut curator = FeedCurator::new(settings).map_err(error)?;
    let long_running = args.every.is_some();
    let sink = open_sink(
        config,
        &token,
        &config.queues.episodes,
        args.dry_run,
        long_running,
        "curate feed",
        &args.remote,
    )
    .await?;
    let board = args.every.map(|every| curator.board(every));
    if let (Some(board), Some(addr)) = (board, config.metrics_addr) {
        serve(addr, board, &token).await?;
    }
    let feeds = curator.feeds().len();
    loop {
        let outcome = curator
            .pass(&sink, &token, |report| {
                if !args.json {
                    say_feed(report, args.dry_run);
                }
            })
            .await
            .map_err(error)
            .and_then(|pass| {
                if args.json {
                    print_json(&serde_json::to_value(&pass)?)?;
                }
                Ok(pass.failures())
            });
        match (args.every, outcome) {
            (None, Ok(failed)) if failed.is_empty() => return Ok(()),
            (None, Ok(failed)) => {
                return Err(anyhow!(
                    "{} of {} feeds failed: {}",
                    failed.len(),
                    feeds,
                    failed.join("; ")
                ))
            }
            (None, Err(e)) => return Err(e),
            (Some(_), Ok(_)) => {}
            // Another pass would be refused the same way: the token is the fix.
            (Some(_), Err(e)) if crate::values::refused_token(&e) => return Err(e),
            // A long-running curator outlives a bad pass; the next one tries again.
            (Some(_), Err(e)) => {
                tracing::error!(error = %crate::values::describe(&e), "the pass failed; trying again at the next");
            }
        }
        let Some(every) = args.every else {
            return Ok(());
        };
        tokio::select! {
            _ = token.cancelled() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
        if token.is_cancelled() {
            return Ok(());
        }
    }
}

/// Runs `curate clips`: one pass over the paths.
async fn clips(config: &Config, token: CancellationToken, args: ClipsArgs) -> anyhow::Result<()> {
    if args.remote.remote()? && args.base_url.is_none() {
        return Err(usage(
            "curate clips --server needs --base-url: the API takes http(s) media addresses \
             only (a curator's token must not make a researcher read its own disk), and \
             without --base-url clips are addressed as file:// URLs of this machine. Serve the \
             folder over HTTP(S) and give its address, as --base-url \
             https://media.example.org/clips/",
        ));
    }
    let mut settings = ClipSettings::new(args.paths.clone(), args.state.clone());
    settings.base_url = args.base_url.clone();
    settings.priority = args.priority;
    let mut curator = ClipCurator::new(settings).map_err(error)?;
    let sink = open_sink(
        config,
        &token,
        &config.queues.clips,
        args.dry_run,
        false,
        "curate clips",
        &args.remote,
    )
    .await?;
    let pass = curator
        .pass(&sink, &token, |report| {
            if !args.json {
                say_path(report, args.dry_run);
            }
        })
        .await
        .map_err(error)?;
    if args.json {
        print_json(&serde_json::to_value(&pass)?)?;
    }
    let failed = pass.failures();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "{} of {} paths failed: {}",
            failed.len(),
            args.paths.len(),
            failed.join("; ")
        ))
    }
}

/// The sink for `queue`: standard output when `dry_run`, else the configured bus, or the API
/// with `--server` (connected to here, so that a dry run needs no bus at all).
async fn open_sink(
    config: &Config,
    token: &CancellationToken,
    queue: &str,
    dry_run: bool,
    long_running: bool,
    subcommand: &str,
    remote: &RemoteArgs,
) -> anyhow::Result<Sink> {
    let remote = remote_given(remote)?;
    if dry_run {
        return Ok(Sink::dry_run(std::io::stdout()));
    }
    let bus = match remote {
        Some(remote) => connect::api_bus(config, remote, token).await?,
        None => connect::shared_bus(config, subcommand, token).await?,
    };
    let sender = connect::sender(bus.as_ref(), queue).await?;
    Ok(Sink::bus(sender, queue, config.retry(long_running)))
}

/// `remote` when the command works through the API.
fn remote_given(remote: &RemoteArgs) -> anyhow::Result<Option<&RemoteArgs>> {
    Ok(remote.remote()?.then_some(remote))
}

/// Prints a line on standard error (standard output carries only `--dry-run` lines and the
/// `--json` summary); a closed standard error is no failure.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Prints one JSON object as a line on standard output.
fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value).context("writing the summary")?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// A feed's report for people, on standard error.
fn say_feed(report: &FeedReport, dry_run: bool) {
    let sent = if dry_run { "would be sent" } else { "sent" };
    let head = if let Some(e) = &report.error {
        format!("feed {}: FAILED: {e}", report.feed)
    } else if let Some(t) = report.deferred_until {
        format!(
            "feed {}: put off until {} (the server's Retry-After)",
            report.feed,
            t.to_rfc3339()
        )
    } else if report.not_modified {
        format!(
            "feed {}: not modified since the last read (304)",
            report.feed
        )
    } else {
        format!(
            "feed {}: {} items, {} {sent}, {} unchanged, {} skipped",
            report.feed, report.items_found, report.sent, report.unchanged, report.skipped_count
        )
    };
    say(&head);
    say_details(&report.notes, &report.skipped, report.skipped_count);
}

/// A path's report for people, on standard error.
fn say_path(report: &PathReport, dry_run: bool) {
    let sent = if dry_run { "would be sent" } else { "sent" };
    match &report.error {
        Some(e) => say(&format!("clips {}: FAILED: {e}", report.path)),
        None => say(&format!(
            "clips {}: {} audio files, {} {sent}, {} unchanged, {} skipped",
            report.path, report.files_found, report.sent, report.unchanged, report.skipped_count
        )),
    }
    for clip in &report.clips {
        say(&format!("  {:?}: {}", clip.title, clip.findability));
    }
    say_details(&report.notes, &report.skipped, report.skipped_count);
}

/// A report's notes, the items skipped by name, and how many more were skipped.
fn say_details(notes: &[String], skipped: &[curate::Skipped], skipped_count: usize) {
    for note in notes {
        say(&format!("  note: {note}"));
    }
    for s in skipped {
        say(&format!("  skipped {}: {}", s.item, s.reason));
    }
    if skipped_count > skipped.len() {
        say(&format!(
            "  and {} more skipped",
            skipped_count - skipped.len()
        ));
    }
}

/// Serves the curator's page (`/`, `/curator`, `/api/curator`), `/metrics` and `/healthz`
/// on `addr` (`--metrics-addr`) until `token` is cancelled, through the archivists' server
/// guard (bounded connections, deadlines, own host names only on loopback); returns the
/// bound address.
async fn serve(
    addr: SocketAddr,
    board: Board,
    token: &CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    metrics::gauge!("archivist_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on ARCHIVIST_METRICS_ADDR (--metrics-addr) {addr}")
    })?;
    let bound = listener.local_addr().context("the listener's address")?;
    let router = axum::Router::new()
        .route("/metrics", get(scrape))
        .with_state(prometheus)
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(curate::page::router(board));
    tracing::info!(
        "serving the curator's page (/), /api/curator, /metrics and /healthz on http://{bound}"
    );
    net::server::spawn(listener, router, token)?;
    Ok(bound)
}

async fn scrape(State(prometheus): State<PrometheusHandle>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        prometheus.render(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_kmg("512K").unwrap(), 512 * 1024);
        assert_eq!(parse_size_kmg("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size_kmg("1000").unwrap(), 1000);
        assert!(parse_size_kmg("0").is_err());
        assert!(parse_size_kmg("lots").is_err());
    }
}
