//! `archivist analyse EPISODE CLIP…`: the reference analyser on local files or URLs, no
//! datastore and no bus. URLs are downloaded to temporary files first.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use analysis::findability::Findability;
use analysis::{Analyser, ClipInput, ClipOutcome, EpisodeReport, Params};
use anyhow::Context;
use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use research::reference::{analyse_episode, EpisodeOutcome};
use research::{EpisodeMedia, Media, MediaConfig};

use crate::connect;
use crate::values::parse_duration;
use crate::values::parse_size;
use crate::values::usage;
use net::fetch::{FetchConfig, FetchError, Status};
use nix::sys::resource::{getrusage, UsageWho};

pub(crate) const ABOUT: &str = "Where each clip occurs in an episode, found from the audio by \
the reference analyser: landmark fingerprints voted into an offset histogram per clip in one \
pass over the episode, each match refined by cross-correlation. Prints, per clip, the offsets \
found (several if it occurs several times, none if it is absent), the durations and the media \
hashes (SHA-256), and how findable each clip is: the level over its background from which \
the analyser finds it, predicted from the clip alone (a steady tone or a clip of a few \
landmarks only when louder than what plays under it: cut a longer or cleaner clip). No \
datastore, no bus.\n\n\
EPISODE and CLIP are local paths, file:// URLs or http(s):// URLs (downloaded to a temporary \
file first). Formats: MP3, AAC/M4A, Ogg Vorbis, FLAC, WAV.";

pub(crate) const EXAMPLES: &str = "Examples:\n  \
    archivist analyse episode.mp3 jingle.wav voicemail.m4a\n  \
    archivist analyse https://example.com/4012.mp3 file:///clips/intro.flac --json\n  \
    archivist analyse ep.mp3 intro.wav --json | jq '.clip_offsets_ns'\n\n\
Exit codes: 0 analysed (clips found or not), 2 bad usage or an input that cannot be read or \
decoded (named in the message; with --json, a failing clip gets a line with `failure`), \
1 another fatal error.";

/// `archivist analyse` arguments.
#[derive(Debug, Args)]
pub(crate) struct AnalyseArgs {
    /// The episode: a path, file:// URL or http(s):// URL
    pub(crate) episode: String,
    /// The clips to look for, each a path or URL
    #[arg(required = true)]
    pub(crate) clips: Vec<String>,
    /// One JSON object a line per clip, in the order given: `clip`, `clip_offsets_ns`
    /// (ascending), `matches` (each offset with its `score` and `votes`), `clip_duration_ns`,
    /// `clip_hash`, `clip_findable_from_db` (the level over its background, in dB, from which
    /// the clip is found, predicted from the clip alone; null: not even at +12 dB) and
    /// `clip_findability` (the same in words), `episode`, `episode_duration_ns`,
    /// `episode_hash`; or `failure`
    #[arg(long)]
    pub(crate) json: bool,
    /// The longest wait to connect to a media server
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) fetch_connect_timeout: Duration,
    /// The longest wait for the next bytes of a download (a server that stalls mid-body)
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) fetch_read_timeout: Duration,
    /// The longest a whole download may take (a server that trickles)
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub(crate) fetch_timeout: Duration,
    /// The largest file downloaded, as 500MB or 2GiB (a two-hour WAV at 48 kHz stereo is
    /// 1.4 GB)
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub(crate) max_media_size: u64,
    #[command(flatten)]
    pub(crate) addresses: crate::values::AddressArgs,
    /// Where episode prints are kept: with it, the episode is answered from its print when
    /// the print is of the same media, else analysed in full and printed (the episode is
    /// then fetched as a researcher fetches media: public addresses only, unless
    /// --allow-private-addresses). Without it, no print is read or written
    #[arg(
        long,
        value_name = "URL",
        env = "ARCHIVIST_PRINT_STORE",
        hide_env_values = true
    )]
    pub(crate) print_store: Option<String>,
    /// The most a directory print store keeps, as 500MB or 10GiB (least recently used
    /// evicted)
    #[arg(long, env = "ARCHIVIST_PRINT_STORE_SIZE", hide_env_values = true,
          default_value = "10GiB", value_parser = parse_size)]
    pub(crate) print_store_size: u64,
}

/// A local file for an input, downloaded if it was a URL (the temporary file lives as long).
struct Local {
    path: PathBuf,
    _temp: Option<tempfile::TempPath>,
}

pub(crate) async fn run(args: &AnalyseArgs, token: &CancellationToken) -> anyhow::Result<()> {
    // A URL typed here is fetched as given; where it redirects, as a media address is
    // (public addresses only), unless it answered from the user's own network.
    let policy = args.addresses.policy();
    let config = FetchConfig::media(
        args.fetch_connect_timeout,
        args.fetch_read_timeout,
        args.max_media_size,
    );
    let fetcher = Fetcher {
        net: net::fetch::Fetcher::new(&policy, config).context("cannot set up the HTTP client")?,
        args,
        token,
    };
    let prints = crate::values::PrintStoreArgs {
        print_store: args.print_store.clone(),
        print_store_size: args.print_store_size,
    };
    let store = connect::print_store(&prints, false).await?;
    // With prints, the episode is fetched only if its print cannot answer.
    let fetching = process_cpu();
    let episode = match store {
        None => Some(fetcher.fetch(&args.episode).await?),
        Some(_) => None,
    };
    let fetch_cpu = process_cpu().saturating_sub(fetching);
    let mut clips = Vec::new();
    for c in &args.clips {
        // A clip that cannot be fetched fails alone, as one that cannot be decoded does.
        clips.push(
            fetcher
                .fetch(c)
                .await
                .map_err(|e| crate::values::describe(&e)),
        );
    }
    let inputs: Vec<ClipInput> = clips
        .iter()
        .map(|c| match c {
            Ok(local) => ClipInput::new(&local.path),
            // Never read: its outcome is replaced by the fetch error below.
            Err(_) => ClipInput::new(PathBuf::new()),
        })
        .collect();
    let mut progress = |p: analysis::Progress| {
        tracing::debug!(decoded_s = p.decoded_ns / 1_000_000_000, "analysing");
    };
    // A download for the print's full analysis goes to a cache of this run's own.
    let cache = tempfile::tempdir().context("cannot make a temporary directory")?;
    let analysis = match (episode.as_ref(), store) {
        (Some(episode), _) => {
            let episode_path = episode.path.clone();
            tokio::task::spawn_blocking(move || {
                let analyser = Analyser::new(Params::default());
                let start = fingerprint(&analyser, &inputs);
                let report = analyser
                    .analyse_with_progress(&episode_path, &inputs, &mut progress)
                    .map_err(|e| e.to_string());
                episode_cost(fetch_cpu + process_cpu().saturating_sub(start));
                report
            })
        }
        (None, Some(store)) => {
            let media = Media::new(MediaConfig {
                cache_dir: cache.path().to_path_buf(),
                cache_size: u64::MAX,
                max_size: args.max_media_size,
                media_roots: Vec::new(),
                connect_timeout: args.fetch_connect_timeout,
                read_timeout: args.fetch_read_timeout,
                attempts: 3,
                addresses: policy.clone(),
                min_rate: 0,
            })
            .map_err(|e| usage(e.to_string()))?;
            let episode = EpisodeMedia::new(
                Arc::new(media),
                &args.episode,
                None,
                token.clone(),
                Arc::default(),
            );
            let shown = args.episode.clone();
            tokio::task::spawn_blocking(move || {
                let analyser = Analyser::new(Params::default());
                let runtime = tokio::runtime::Handle::current();
                let start = fingerprint(&analyser, &inputs);
                let outcome = analyse_episode(
                    &analyser,
                    Some(store.as_ref()),
                    &episode,
                    &inputs,
                    &runtime,
                    &mut progress,
                );
                episode_cost(process_cpu().saturating_sub(start));
                match outcome {
                    EpisodeOutcome::Analysed { report, .. } => report.map_err(|e| e.to_string()),
                    EpisodeOutcome::Unfetched(e) => Err(format!("{shown}: {e}")),
                    EpisodeOutcome::Failed(why) => Err(why),
                }
            })
        }
        (None, None) => anyhow::bail!("no episode"),
    };
    let report = tokio::select! {
        r = analysis => r.context("the analysis stopped unexpectedly")?,
        () = token.cancelled() => anyhow::bail!("interrupted"),
    };
    let report = report.map_err(usage)?;
    drop(cache);
    // How findable each clip is, predicted from the clip alone (after the analysis, so that
    // the episode's cost above is measured without it).
    let paths: Vec<Option<PathBuf>> = clips
        .iter()
        .map(|c| c.as_ref().ok().map(|l| l.path.clone()))
        .collect();
    let predicting = tokio::task::spawn_blocking(move || {
        let params = Params::default();
        paths
            .iter()
            .map(|p| {
                p.as_deref()
                    .and_then(|p| analysis::findability::of_file(p, &params).ok())
            })
            .collect::<Vec<_>>()
    });
    let findabilities = tokio::select! {
        r = predicting => r.context("the prediction stopped unexpectedly")?,
        () = token.cancelled() => anyhow::bail!("interrupted"),
    };
    print(args, &report, &clips, &findabilities)
}

/// This process's CPU time so far (user + system, every thread); zero where unknown.
fn process_cpu() -> Duration {
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let time = |v: nix::sys::time::TimeVal| {
        let micros = v
            .tv_sec()
            .saturating_mul(1_000_000)
            .saturating_add(v.tv_usec());
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    };
    time(usage.user_time()) + time(usage.system_time())
}

/// Fingerprints the clips before the episode (each is cached in `analyser`; one that fails
/// fails again in the analysis), so that the episode's cost is measured without them, as a
/// researcher pays them once for many episodes. The CPU time when done.
fn fingerprint(analyser: &Analyser, clips: &[ClipInput]) -> Duration {
    for clip in clips {
        let _ = analyser.clip(&clip.path);
    }
    process_cpu()
}

/// Says what fetching and analysing the episode cost this process (`scripts/bench-archive.sh`
/// reads it).
fn episode_cost(cpu: Duration) {
    tracing::debug!(
        episode_cpu_ms = cpu.as_secs_f64() * 1e3,
        "the episode's cost (its clips fingerprinted before)"
    );
}

/// Prints the report; an error (exit 2) if any clip failed, after every line is out.
fn print(
    args: &AnalyseArgs,
    report: &EpisodeReport,
    fetched: &[Result<Local, String>],
    findabilities: &[Option<Findability>],
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut failures = Vec::new();
    if !args.json {
        writeln!(
            out,
            "{}: {}, sha256 {}",
            args.episode,
            clock(report.duration_ns),
            report.hash
        )?;
    }
    for (((name, outcome), fetch), findability) in args
        .clips
        .iter()
        .zip(&report.clips)
        .zip(fetched)
        .zip(findabilities)
    {
        let failure = match (fetch, outcome) {
            (Err(e), _) => Some(e.clone()),
            (Ok(_), ClipOutcome::Failed(e)) => Some(e.to_string()),
            (Ok(_), ClipOutcome::Found(_)) => None,
        };
        if let Some(failure) = failure {
            if args.json {
                let line = json!({
                    "clip": name,
                    "failure": failure,
                    "episode": args.episode,
                    "episode_duration_ns": report.duration_ns,
                    "episode_hash": report.hash,
                });
                writeln!(out, "{line}")?;
            } else {
                writeln!(out, "{name}: failed: {failure}")?;
            }
            failures.push(failure);
            continue;
        }
        let ClipOutcome::Found(clip) = outcome else {
            continue;
        };
        if args.json {
            let matches: Vec<_> = clip
                .matches
                .iter()
                .map(|m| json!({ "offset_ns": m.offset_ns, "score": m.score, "votes": m.votes }))
                .collect();
            let mut line = json!({
                "clip": name,
                "clip_offsets_ns": clip.offsets_ns(),
                "matches": matches,
                "clip_duration_ns": clip.duration_ns,
                "clip_hash": clip.hash,
                "episode": args.episode,
                "episode_duration_ns": report.duration_ns,
                "episode_hash": report.hash,
            });
            if let Some(f) = findability {
                line["clip_findable_from_db"] = json!(f.from_db);
                line["clip_findability"] = json!(f.describe());
            }
            writeln!(out, "{line}")?;
        } else {
            let found = if clip.matches.is_empty() {
                "not found".to_owned()
            } else {
                clip.matches
                    .iter()
                    .map(|m| format!("{} (score {:.2})", clock(m.offset_ns), m.score))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let findable = findability
                .as_ref()
                .map(|f| format!(", {}", f.describe()))
                .unwrap_or_default();
            writeln!(
                out,
                "{name} ({}, sha256 {}{findable}): {found}",
                clock(clip.duration_ns),
                clip.hash
            )?;
        }
    }
    out.flush()?;
    match failures.as_slice() {
        [] => Ok(()),
        [one] => Err(usage(one.clone())),
        [first, rest @ ..] => Err(usage(format!(
            "{first} (and {} more clips failed)",
            rest.len()
        ))),
    }
}

/// `h:mm:ss.mmm`.
fn clock(ns: u64) -> String {
    let ms = ns / 1_000_000;
    format!(
        "{}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1_000 % 60,
        ms % 1_000
    )
}

/// Fetches inputs for one run: the HTTP client ([`net::fetch`]: every fetch's rules), the
/// limits, the cancellation token.
struct Fetcher<'a> {
    net: net::fetch::Fetcher,
    args: &'a AnalyseArgs,
    token: &'a CancellationToken,
}

impl Fetcher<'_> {
    /// The input as a local file: a path as is, a file:// URL's path, an http(s):// URL
    /// downloaded. Errors are usage errors (exit 2) naming the input.
    async fn fetch(&self, input: &str) -> anyhow::Result<Local> {
        let Some((scheme, _)) = input.split_once("://") else {
            return Ok(Local {
                path: PathBuf::from(input),
                _temp: None,
            });
        };
        let url =
            url::Url::parse(input).map_err(|e| usage(format!("{input}: not a valid URL: {e}")))?;
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let path = url
                    .to_file_path()
                    .map_err(|()| usage(format!("{input}: not a local file URL")))?;
                Ok(Local { path, _temp: None })
            }
            "http" | "https" => {
                let limit = self.args.fetch_timeout;
                tokio::select! {
                    r = tokio::time::timeout(limit, self.download(&url, input)) => r.unwrap_or_else(|_| {
                        Err(usage(format!(
                            "cannot download {input}: not done after {} (--fetch-timeout)",
                            humantime::format_duration(limit)
                        )))
                    }),
                    () = self.token.cancelled() => anyhow::bail!("interrupted"),
                }
            }
            other => Err(usage(format!(
                "{input}: unsupported URL scheme {other:?} (use a path, file://, http:// or https://)"
            ))),
        }
    }

    async fn download(&self, url: &url::Url, input: &str) -> anyhow::Result<Local> {
        let cannot = |e: &dyn std::fmt::Display| usage(format!("cannot download {input}: {e}"));
        // The net crate's words, with the option that changes the limit each names.
        let failed = |e: FetchError| match e {
            FetchError::ReadTimeout(_) => cannot(&format!("{e} (--fetch-read-timeout)")),
            FetchError::TooLarge(_) => cannot(&format!("{e} (--max-media-size)")),
            e => cannot(&e),
        };
        let mut response = self
            .net
            .get(url, reqwest::header::HeaderMap::new(), true)
            .await
            .map_err(failed)?;
        let status = response.status();
        if Status::of(status) != Status::Success {
            return Err(cannot(&format!("HTTP {status}")));
        }
        response.check_announced().map_err(failed)?;
        // Keep the URL's extension: it is the decoder's first hint at the format.
        let suffix = Path::new(url.path())
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix("archivist-analyse-")
            .suffix(&suffix)
            .tempfile()
            .context("cannot create a temporary file")?;
        // On any error below the temporary path is dropped, and the partial file with it.
        let (file, path) = temp.into_parts();
        let mut file = tokio::fs::File::from_std(file);
        // Counted as it comes (a server may send no length, or lie about it), and checked
        // against the length announced: a body cut short is not analysed as the whole.
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            tokio::io::AsyncWriteExt::write_all(&mut file, &chunk)
                .await
                .context("cannot write the download to a temporary file")?;
        }
        tokio::io::AsyncWriteExt::flush(&mut file).await?;
        tracing::debug!(url = input, path = %path.display(), bytes = response.received(), "downloaded");
        Ok(Local {
            path: path.to_path_buf(),
            _temp: Some(path),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::clock;

    #[test]
    fn clock_reads_hours_minutes_seconds_milliseconds() {
        assert_eq!(clock(0), "0:00:00.000");
        assert_eq!(clock(3_723_456_000_000), "1:02:03.456");
        assert_eq!(clock(999_999), "0:00:00.000");
    }
}
