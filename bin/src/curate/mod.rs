//! `archivist curate`: the curators. `curate feed URL…` reads podcast feeds (RSS 2.0 with the
//! iTunes and Podcasting 2.0 namespaces, Atom) and sends one `EpisodeInfo` per audio item;
//! `curate clips PATH…` sends one `ClipInfo` per audio file. Each sends an item only when it
//! is new or changed since it was last sent, which a small state file remembers.
//!
//! # Layout
//!
//! - `mod.rs`: the options, the sink (the bus, or standard output for `--dry-run`), and the
//!   text and JSON reports.
//! - `page.rs`: the server of `--every --metrics-addr`: `/metrics`, `/healthz`, and each
//!   feed's state as a page (`/`) and as JSON (`/api/curator`).
//! - `feeds.rs`: one pass over the feeds, and the `--every` loop.
//! - `fetch.rs`: HTTP, politely: User-Agent, conditional GET, gzip, 304, 429/503 with
//!   Retry-After, timeouts, a size limit, redirects followed by hand so 301/308 are seen.
//! - `parse.rs`: a feed's bytes to episodes (feed-rs), with the reason for each item skipped;
//!   HTML reduced to text; media types.
//! - `state.rs`: what was sent, per feed and per file, and the feeds' validators; written
//!   atomically after each feed or folder, so that a crash loses nothing (it re-sends).
//! - `clips.rs`: the folder walk, titles from tags (`analysis::read_tags`), content hashes,
//!   `file://` and `--base-url` addresses.
//!
//! Every message is checked with the archivists' own rules (`archivist::messages::decode`)
//! before it is sent: an item that would be poison is skipped with its reason instead.
//! Messages are sent before the state records them: a crash in between sends them again,
//! which the archivists' upserts make harmless.

mod clips;
mod feeds;
mod fetch;
mod page;
mod parse;
mod state;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use messagebus::{BusError, Sender};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::values::usage;
use crate::values::{parse_duration, parse_interval, parse_size_kmg};

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
        archivist curate feed --every 30m --priority 5 URL1 URL2          # poll until SIGTERM\n\n\
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
        archivist curate clips --dry-run intro.mp3 outro.wav\n\n\
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
    pub(crate) addresses: crate::cli::AddressArgs,
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
}

/// Runs `curate feed` or `curate clips`.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: CurateArgs,
) -> anyhow::Result<()> {
    match args.command {
        CurateCommand::Feed(args) => feeds::run(config, token, args).await,
        CurateCommand::Clips(args) => clips::run(config, token, args).await,
    }
}

/// Bodies sent in one call (the SQS adapter packs them ten to a request).
const BATCH: usize = 500;

/// Where curated messages go: the bus, or standard output (`--dry-run`).
pub(crate) enum Sink {
    /// Print each body as a line; send nothing.
    DryRun,
    /// Send to the queue, retrying passing failures as the configuration says.
    Bus {
        sender: Arc<dyn Sender>,
        queue: String,
        retry: archivist::RetryPolicy,
    },
}

impl Sink {
    /// The sink for `queue`: standard output when `dry_run`, else the configured bus (which
    /// is connected to here, so that a dry run needs no bus at all).
    pub(crate) async fn open(
        config: &Config,
        token: &CancellationToken,
        queue: &str,
        dry_run: bool,
        long_running: bool,
        subcommand: &str,
    ) -> anyhow::Result<Sink> {
        if dry_run {
            return Ok(Sink::DryRun);
        }
        let bus = connect::shared_bus(config, subcommand, token).await?;
        let sender = connect::sender(bus.as_ref(), queue).await?;
        Ok(Sink::Bus {
            sender,
            queue: queue.to_string(),
            retry: config.retry(long_running),
        })
    }

    /// Delivers every body, in order: all of them, or an error (some may have been sent;
    /// the caller records none of them, so that the next pass sends them again).
    pub(crate) async fn deliver(
        &self,
        token: &CancellationToken,
        bodies: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        match self {
            Sink::DryRun => {
                let mut out = std::io::stdout().lock();
                for body in bodies {
                    out.write_all(body)?;
                    out.write_all(b"\n")?;
                }
                out.flush()?;
                Ok(())
            }
            Sink::Bus {
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
                        let e = match e {
                            archivist::RetryError::Failed(e)
                            | archivist::RetryError::Cancelled(e) => e,
                        };
                        return Err(anyhow::Error::new(e).context(format!("sending to {queue}")));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Prints a line on standard error (standard output carries only `--dry-run` lines and the
/// `--json` summary); a closed standard error is no failure.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Prints one JSON object as a line on standard output.
pub(crate) fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value).context("writing the summary")?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// `text` cut to at most `max` characters, with an ellipsis as its last when cut; whether it
/// was cut.
pub(crate) fn cut(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_string(), false);
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    (out, true)
}

/// A fingerprint of what was sent (every field but the curation dates), to tell a changed
/// item from an unchanged one: 64 bits of SHA-256, as hex.
pub(crate) fn fingerprint(parts: &[&str]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    let digest = h.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Query parameters whose value is a secret, by a part of their name.
const SECRET_PARAMETERS: &[&str] = &[
    "token",
    "key",
    "auth",
    "secret",
    "pass",
    "sig",
    "session",
    "credential",
    "private",
];

/// A feed's address as shown (logs, reports, metrics, `curator_information`): the password
/// and the values of query parameters that look like keys masked. Private feeds (a
/// subscriber's own address) carry their key in the URL; only the state file keeps it.
pub(crate) fn shown_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url.trim()) else {
        return messagebus::redact_url(url);
    };
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let lower = k.to_ascii_lowercase();
                let secret = SECRET_PARAMETERS.iter().any(|s| lower.contains(s));
                (
                    k.into_owned(),
                    if secret {
                        "***".to_string()
                    } else {
                        v.into_owned()
                    },
                )
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// A usage error for a state file that cannot be read as one.
pub(crate) fn bad_state(path: &std::path::Path, why: impl std::fmt::Display) -> anyhow::Error {
    usage(format!(
        "the state file {} cannot be read ({why}): give another with --state, or move it \
         away to start afresh (everything is then sent again, which is harmless)",
        path.display()
    ))
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

    #[test]
    fn secrets_in_feed_addresses_are_masked() {
        assert_eq!(
            shown_url("https://me:pw@x.example/feed?token=abc&id=3&API_KEY=k"),
            "https://me:***@x.example/feed?token=***&id=3&API_KEY=***"
        );
        assert_eq!(
            shown_url("https://x.example/feed.xml"),
            "https://x.example/feed.xml"
        );
    }

    #[test]
    fn cutting() {
        assert_eq!(cut("abc", 3), ("abc".to_string(), false));
        let (c, was) = cut("abcdef", 4);
        assert!(was);
        assert_eq!(c.chars().count(), 4);
        assert!(c.ends_with('…'));
    }
}
