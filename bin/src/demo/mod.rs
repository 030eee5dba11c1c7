//! `archivist demo`: the whole pipeline in one process, its queues in the datastore's own
//! database (the database bus, as every subcommand's default; `ARCHIVIST_BUS=memory` keeps them
//! in the process), with built-in curators and researchers, ending with a summary and an
//! exactly-once check.
//!
//! - `curators.rs`: the data set (a month of a daily show, a dozen clips, poison, and a new
//!   clip curated once the others are researched).
//! - `clips.rs`: the data set's clips (their kinds, lengths, how often they occur).
//! - `audio.rs`: the data set's audio, synthesised, with the truth of where each clip is.
//! - `researchers.rs`: `research`'s runtime with the reference analyser, wrapped to keep the
//!   [`Ledger`] of answers per pair and to stage one analyser that stops answering mid-item.
//!   Its episode prints go to a store of the demo's own, `prints/` beside the audio (emptied
//!   at the start, never the user's store): the first pass prints every episode, and the new
//!   clip's pass is answered from the prints.
//! - `truth.rs`: the recorded matches against the truth (recall, false matches, offset error).
//! - `progress.rs`: the progress bar or log lines, and the [`Summary`].
//!
//! The datastore is DATABASE_URL, by default `archivist.sqlite` in the working directory, as
//! for every other subcommand: the demo's results stay there for `status`, `matches` and the
//! status page. It must be new or empty, so that a demo never mixes with real data. The lease
//! is [`DEMO_LEASE`] unless `--lease-duration` is given, short so that the stalled
//! analyser's work comes back quickly. The audio is written beside an SQLite datastore
//! (`archivist-demo-media/` for `archivist.sqlite`), or in the working directory, and stays:
//! the matches point into it.
//!
//! The researchers keep each episode in a media archive (`--media-archive`, by default
//! [`DEMO_ARCHIVE`] in the working directory) the first time they research it, and research
//! the kept copy from then on; the summary says what the archive holds, and how to serve the
//! pages with its copies.
//!
//! Two passes: the first researches every pair of the first clips; once all are researched
//! and the work queue is empty, the curator sends the new clip, and the second researches its
//! pairs. The summary says what each pass decoded and read ([`PrintCounters`]).

mod audio;
mod clips;
mod curators;
mod progress;
mod researchers;
mod truth;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use archivist::completed_research::CompletedResearchConfig;
use archivist::pending_research::PendingResearchConfig;
use archivist::RetryPolicy;
use datastore::{redact_url, DataStore, Status};
use messagebus::{Bus, MemoryBusConfig, Sender};
use research::printing::{PrintCounters, PrintCounts};
use research::reference::ReferenceAnalyser;
use research::{Later, Media, MediaConfig};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::archivists::{spawn_all, AllTotals, Pipeline};
use crate::config::{to_chrono, BusKind, Config};
use crate::connect;
use crate::tasks::{self, Totals};
use crate::values::{usage, MediaArchiveArgs};

use self::curators::DataSet;
use self::progress::{ArchiveHeld, Pass, Progress, Summary};
use self::researchers::{Ledger, StagedAnalyser};

/// The demo's lease when ARCHIVIST_LEASE_DURATION is not set.
const DEMO_LEASE: Duration = Duration::from_secs(5);
/// How often the pending-research and completed-research archivists run.
const DEMO_EVERY: Duration = Duration::from_millis(50);
/// Completed-research archivists recording side by side.
const DEMO_RECORDERS: usize = 2;
/// How often progress is read from the datastore.
const POLL: Duration = Duration::from_millis(200);
/// The work item (1-based, of those with two clips or more) on which the analyser stalls.
const STALL_ON_ITEM: u64 = 2;
/// The researchers' stall timeout is the lease and this much more: the stalled item is
/// released after its lease expired, so that it is skipped when it comes back. The last
/// answer before the stall goes out a second later and renews the lease when it is recorded:
/// the margin covers that and a slow recording on a loaded machine.
const STALL_MARGIN: Duration = Duration::from_secs(6);
/// How long the researchers' items in hand may take to finish once the demo is done.
const DEMO_DRAIN: Duration = Duration::from_secs(2);
/// The demo's media archive when none is given: a directory in the working directory.
const DEMO_ARCHIVE: &str = "archivist-media";

/// What `archivist demo` asks for.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The summary as one JSON object instead of text.
    pub(crate) json: bool,
    /// Research slots of the built-in researcher.
    pub(crate) researcher_tasks: u32,
    /// How long the pipeline may take before the demo gives up.
    pub(crate) timeout: Duration,
    /// The media archive given (`--media-archive`), else [`DEMO_ARCHIVE`].
    pub(crate) media_archive: Option<String>,
}

/// How the monitor saw the run end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Running,
    Done,
}

/// What the researchers had done when a pass ended.
#[derive(Debug, Clone, Default)]
struct Mark {
    prints: PrintCounts,
    items: u64,
    /// Since the pipeline started.
    at: Duration,
}

/// The ends of the two passes, as the monitor saw them.
#[derive(Debug, Default)]
struct Marks {
    first: Option<Mark>,
    second: Option<Mark>,
}

/// Runs the demo. Exit 0 only when every pair was researched exactly once.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &Settings,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let url = config.database_url();
    let shown = redact_url(&url);
    let store = connect::datastore(config, &url, &token, connect::Open::Migrate).await?;
    let before = store.status(chrono::Utc::now()).await?;
    if before.episodes > 0 || before.clips > 0 {
        let remedy = if config.database_url.is_none() {
            "remove it (it holds an earlier demo's results, or real data), or point \
             DATABASE_URL at a new SQLite file or a new Postgres database"
        } else {
            "point DATABASE_URL at a new SQLite file or a new Postgres database"
        };
        return Err(usage(format!(
            "the demo needs an empty datastore, and DATABASE_URL {shown} already holds {} \
             episodes and {} clips: {remedy}",
            before.episodes, before.clips
        )));
    }
    // ARCHIVIST_LEASE_DURATION is for production runs: the demo keeps its short lease unless
    // `--lease-duration` is on its command line.
    let lease = match config.lease_duration {
        Some(d) if config.lease_on_command_line => d,
        _ => DEMO_LEASE,
    };
    tracing::info!(datastore = %shown, lease = %humantime::format_duration(lease), researchers = args.researcher_tasks, "demo starting");

    // The database bus, as every other subcommand uses by default: its queues live in
    // ARCHIVIST_BUS_URL, by default the demo's own datastore, so that its queues and dead
    // letters can be looked at afterwards (`status`, `receive --dead-letters`, `serve`).
    // ARCHIVIST_BUS=memory keeps everything inside this process; RabbitMQ is used when asked.
    let bus = if config.bus.is_database() {
        let mut bus_config = config.clone();
        bus_config.bus_url.get_or_insert_with(|| url.clone());
        connect::database_bus(&bus_config, &token, true).await?
    } else if config.bus == BusKind::Rabbitmq {
        // (SQS falls through to the in-memory bus: the demo creates no SQS queues.)
        connect::rabbitmq_bus(config, &token, true).await?
    } else {
        connect::memory_bus_with(
            config,
            MemoryBusConfig {
                max_receives: config.max_receives,
                ..MemoryBusConfig::default()
            },
        )
        .await?
    };
    let media_dir = media_dir(&url)?;
    let data = Arc::new(curators::data_set(&media_dir));
    let audio_seconds = {
        let (dir, plans) = (media_dir.clone(), data.plans.clone());
        let generating = Instant::now();
        let seconds = tokio::task::spawn_blocking(move || audio::render(&dir, &plans))
            .await
            .context("generating the demo's audio")??;
        tracing::info!(
            media = %media_dir.display(),
            minutes = format!("{:.1}", seconds / 60.0),
            took = ?generating.elapsed(),
            "generated the demo's audio"
        );
        seconds
    };
    let print_store = demo_prints(&media_dir).await?;
    // The researchers keep each episode in the archive and research the kept copy.
    let archive_named = args
        .media_archive
        .clone()
        .unwrap_or_else(|| DEMO_ARCHIVE.to_string());
    let archive = connect::media_archive(&MediaArchiveArgs {
        media_archive: Some(archive_named.clone()),
    })
    .await?
    .ok_or_else(|| anyhow!("no media archive"))?;
    tracing::info!(archive = %archive.describe(), "the researchers keep the episodes in the media archive");
    let counters = Arc::new(PrintCounters::default());
    let marks = Arc::new(Mutex::new(Marks::default()));
    let ledger = Arc::new(Ledger::default());
    let totals = AllTotals::default();
    let outcome = Arc::new(Mutex::new(Outcome::Running));
    let pipeline_token = token.child_token();
    let mut set = JoinSet::new();

    // Researchers first, so that the bus counts them before the first work assignment.
    spawn_researchers(
        &mut set,
        &pipeline_token,
        &bus,
        config,
        args,
        lease,
        Research {
            ledger: ledger.clone(),
            prints: print_store,
            counters: counters.clone(),
            archive: archive.clone(),
        },
    )?;
    let pipeline_started = Instant::now();
    let pipeline = Pipeline {
        every: DEMO_EVERY,
        pending: PendingResearchConfig {
            lease_duration: to_chrono(lease),
            max_clips: config.max_clips,
            researchers: None,
            start_jitter: Duration::ZERO,
            retry: RetryPolicy::default(),
            hold_back: None,
            presence_window: datastore::PRESENCE_WINDOW,
        },
        completed: CompletedResearchConfig {
            batch_size: 100,
            receive_wait: Duration::from_millis(50),
            retry: RetryPolicy::default(),
            announce: None,
            wake: None,
        },
        // Two, so that results are recorded out of order (a lease's revoking result before
        // its others) as they are in production, and the exactly-once check covers that.
        recorders: DEMO_RECORDERS,
        ingest_wait: Duration::from_millis(250),
        // The demo keeps its own short interval, on the timer alone.
        wake: false,
    };
    spawn_all(
        &mut set,
        &pipeline_token,
        &*bus,
        store.clone(),
        config,
        pipeline,
        &totals,
    )
    .await?;
    let episodes = connect::sender(&*bus, &config.queues.episodes).await?;
    let clips = connect::sender(&*bus, &config.queues.clips).await?;
    let curator_data = data.clone();
    let curator_clips = clips.clone();
    set.spawn(async move {
        curators::curate(curator_data, episodes, curator_clips)
            .await
            .map(|_| ())
    });
    let work_queue = connect::sender(&*bus, &config.queues.pending_research).await?;
    set.spawn(monitor(Watch {
        token: pipeline_token.clone(),
        store: store.clone(),
        work_queue,
        clips,
        data: data.clone(),
        outcome: outcome.clone(),
        timeout: args.timeout,
        counters: counters.clone(),
        ledger: ledger.clone(),
        marks: marks.clone(),
        started: pipeline_started,
    }));

    tasks::supervise(&pipeline_token, set, config.shutdown_timeout).await?;
    if *outcome.lock().unwrap_or_else(|p| p.into_inner()) != Outcome::Done {
        return Err(anyhow!("demo interrupted before every pair was researched"));
    }

    let status = store
        .status(chrono::Utc::now())
        .await
        .context("cannot read the final status")?;
    let matches = store
        .matches(&datastore::MatchFilter::default())
        .await
        .context("cannot read the matches")?;
    let marks = std::mem::take(&mut *marks.lock().unwrap_or_else(|p| p.into_inner()));
    let first = marks.first.unwrap_or_default();
    let second = marks.second.unwrap_or_else(|| first.clone());
    let summary = summarize(SummaryInput {
        analysis: truth::check(&data, &matches),
        first_pass: pass(
            &data,
            &matches,
            &Mark::default(),
            &first,
            data.first_clips(),
            false,
        ),
        new_clip_pass: pass(&data, &matches, &first, &second, data.new_clips(), true),
        archive: held(archive.as_ref()).await,
        archive_named: &archive_named,
        audio_seconds,
        media_dir: &media_dir,
        config,
        args,
        bus: &*bus,
        data: &data,
        ledger: &ledger,
        totals: &totals,
        status,
        shown,
        lease,
        elapsed: started.elapsed(),
    })
    .await;
    summary.print(args.json)?;
    drop(store);
    if summary.all_researched_once {
        Ok(())
    } else {
        Err(anyhow!(
            "the exactly-once check failed: {}",
            summary.problems.join("; ")
        ))
    }
}

/// What the demo's researchers keep and count.
struct Research {
    ledger: Arc<Ledger>,
    /// The demo's own print store.
    prints: Arc<dyn prints::PrintStore>,
    counters: Arc<PrintCounters>,
    /// The media archive the researchers keep the episodes in.
    archive: Arc<dyn archive::MediaArchive>,
}

/// What the media archive holds at the end.
async fn held(archive: &dyn archive::MediaArchive) -> ArchiveHeld {
    let mut held = ArchiveHeld {
        archive: archive.describe(),
        ..ArchiveHeld::default()
    };
    match (archive.episodes().await, archive.copies().await) {
        (Ok(episodes), Ok(copies)) => {
            held.episodes = episodes.len() as u64;
            held.copies = copies.len() as u64;
            held.bytes = copies.iter().map(|c| c.size).sum();
        }
        (Err(e), _) | (_, Err(e)) => held.unreadable = Some(e.to_string()),
    }
    held
}

/// The demo's print store, `prints/` beside its audio (never the user's store), emptied of
/// an earlier demo's prints: the first pass prints every episode.
async fn demo_prints(media_dir: &Path) -> anyhow::Result<Arc<dyn prints::PrintStore>> {
    let dir = media_dir.join("prints");
    let store: Arc<dyn prints::PrintStore> = Arc::new(
        prints::DirStore::new(&dir, prints::DEFAULT_MAX_BYTES)
            .with_context(|| format!("the demo's print store in {}", dir.display()))?,
    );
    let earlier = store
        .list()
        .await
        .with_context(|| format!("listing the demo's prints in {}", dir.display()))?;
    for print in earlier {
        store
            .remove(&print.key)
            .await
            .with_context(|| format!("removing an earlier demo's print in {}", dir.display()))?;
    }
    Ok(store)
}

/// The researchers: `research`'s runtime on the demo's bus, one slot per `--researcher-tasks`,
/// with the reference analyser (one stall staged) and the demo's print store.
fn spawn_researchers(
    set: &mut JoinSet<anyhow::Result<()>>,
    token: &CancellationToken,
    bus: &Arc<dyn Bus>,
    config: &Config,
    args: &Settings,
    lease: Duration,
    research: Research,
) -> anyhow::Result<()> {
    // The demo's media are local files, never downloaded: its cache stays empty, and goes
    // with the researchers (a folder of the temporary directory, removed when they end).
    let cache = tempfile::Builder::new()
        .prefix("archivist-demo-cache-")
        .tempdir()
        .context("a cache folder for the demo's researchers")?;
    let media = Media::new(MediaConfig {
        cache_dir: cache.path().to_path_buf(),
        cache_size: 1 << 30,
        max_size: 1 << 30,
        media_roots: Vec::new(),
        connect_timeout: Duration::from_secs(10),
        read_timeout: Duration::from_secs(10),
        attempts: 3,
        // The demo's media are local files: no address to check, no pace to keep.
        addresses: Default::default(),
        min_rate: 0,
    })?
    .with_archive(research.archive);
    let analyser = StagedAnalyser::new(
        Arc::new(ReferenceAnalyser::with_prints(research.prints)),
        research.ledger,
        STALL_ON_ITEM,
    );
    let setup = crate::researcher::Setup {
        analyser: Arc::new(analyser),
        media,
        concurrency: args.researcher_tasks as usize,
        once: false,
        stall_timeout: lease + STALL_MARGIN,
        drain_timeout: DEMO_DRAIN,
        later: Later::default(),
        print_counters: research.counters,
    };
    // The demo serves nothing: the researchers' own server stays off.
    let mut config = config.clone();
    config.metrics_addr = None;
    let (bus, token) = (bus.clone(), token.clone());
    set.spawn(async move {
        let ran = crate::researcher::run_on(&config, bus.as_ref(), setup, &token).await;
        drop(cache);
        ran
    });
    Ok(())
}

/// Where the demo's audio goes: beside an SQLite datastore (`archivist-demo-media/` for
/// `archivist.sqlite`), otherwise in the working directory. Absolute, since media URIs are.
fn media_dir(url: &str) -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("the working directory")?;
    let beside = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(rest))
        .filter(|path| !path.is_empty() && !path.contains(":memory:"))
        .map(Path::new)
        .and_then(|file| {
            let stem = file.file_stem()?.to_string_lossy().into_owned();
            Some(file.with_file_name(format!("{stem}-demo-media")))
        });
    let dir = beside.unwrap_or_else(|| PathBuf::from("archivist-demo-media"));
    Ok(if dir.is_absolute() {
        dir
    } else {
        cwd.join(dir)
    })
}

/// What the monitor watches and where it says what it saw.
struct Watch {
    token: CancellationToken,
    store: Arc<dyn DataStore>,
    work_queue: Arc<dyn Sender>,
    /// Where the curator sends the new clip.
    clips: Arc<dyn Sender>,
    data: Arc<DataSet>,
    outcome: Arc<Mutex<Outcome>>,
    timeout: Duration,
    counters: Arc<PrintCounters>,
    ledger: Arc<Ledger>,
    marks: Arc<Mutex<Marks>>,
    /// When the pipeline started.
    started: Instant,
}

impl Watch {
    fn mark(&self) -> Mark {
        Mark {
            prints: self.counters.snapshot(),
            items: self.ledger.items.load(Ordering::Relaxed),
            at: self.started.elapsed(),
        }
    }
}

/// Watches the datastore until every pair of the first clips is researched and the work
/// queue is empty, then has the curator send the new clip, and watches again until its pairs
/// are researched too (then cancels the pipeline), showing progress. Fails when the timeout
/// passes first.
async fn monitor(w: Watch) -> anyhow::Result<()> {
    let first_pairs = w.data.episodes.len() as u64 * w.data.first_clips().len() as u64;
    let mut progress = Progress::new(first_pairs);
    let deadline = tokio::time::Instant::now() + w.timeout;
    let mut ticker = tokio::time::interval(POLL);
    let mut new_clip_sent = false;
    loop {
        tokio::select! {
            _ = w.token.cancelled() => {
                progress.finish();
                return Ok(());
            }
            _ = tokio::time::sleep_until(deadline) => {
                progress.finish();
                return Err(anyhow!(
                    "the demo did not finish within {} (demo --timeout)",
                    humantime::format_duration(w.timeout)
                ));
            }
            _ = ticker.tick() => {}
        }
        let status = match w.store.status(chrono::Utc::now()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot read progress: {e}");
                continue;
            }
        };
        progress.update(&status);
        // A pass is done when its pairs are researched and no work item is left on the bus:
        // the stalled one is released at its stall timeout and then skipped as expired.
        let work_left = match w.work_queue.inspect().await {
            Ok(q) => q.waiting + q.in_flight,
            Err(e) => {
                tracing::warn!("cannot read the work queue: {e}");
                continue;
            }
        };
        if work_left > 0 {
            continue;
        }
        if !new_clip_sent {
            if is_done(&status, &w.data, w.data.first_clips().len()) {
                let mark = w.mark();
                tracing::info!(
                    "all {first_pairs} pairs of the first pass researched ({} items from \
                     prints, {} prints written); a curator adds a new clip",
                    mark.prints.used,
                    mark.prints.written
                );
                w.marks.lock().unwrap_or_else(|p| p.into_inner()).first = Some(mark);
                curators::curate_new(&w.data, w.clips.as_ref()).await?;
                new_clip_sent = true;
                progress.set_total(w.data.pairs());
            }
        } else if is_done(&status, &w.data, w.data.clips.len()) {
            let mark = w.mark();
            progress.finish();
            w.marks.lock().unwrap_or_else(|p| p.into_inner()).second = Some(mark);
            *w.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Outcome::Done;
            tracing::info!(
                "all {} pairs researched; stopping the archivists and researchers",
                w.data.pairs()
            );
            w.token.cancel();
            return Ok(());
        }
    }
}

/// Whether every pair of the data set's first `clips` clips is researched.
fn is_done(s: &Status, data: &DataSet, clips: usize) -> bool {
    s.episodes == data.episodes.len() as u64
        && s.clips == clips as u64
        && s.researched_pairs >= data.episodes.len() as u64 * clips as u64
}

/// A pass, from what the researchers had done at its start (`from`) and at its end (`to`),
/// and the matches of its `clips` against the truth.
fn pass(
    data: &DataSet,
    matches: &[datastore::Match],
    from: &Mark,
    to: &Mark,
    clips: &[archivist::messages::ClipInfo],
    new: bool,
) -> Pass {
    let (a, b) = (&from.prints, &to.prints);
    let fallbacks = |c: &PrintCounts| c.fallbacks.values().sum::<u64>();
    Pass {
        clips: clips.iter().map(|c| c.title.clone()).collect(),
        research_pairs: data.episodes.len() as u64 * clips.len() as u64,
        work_items: to.items.saturating_sub(from.items),
        items_from_prints: b.used.saturating_sub(a.used),
        prints_written: b.written.saturating_sub(a.written),
        print_fallbacks: fallbacks(b).saturating_sub(fallbacks(a)),
        audio_decoded_seconds: (b.audio_decoded_ns.saturating_sub(a.audio_decoded_ns) as f64 / 1e7)
            .round()
            / 100.0,
        media_bytes_read: b.media_bytes_read.saturating_sub(a.media_bytes_read),
        elapsed_ms: to.at.saturating_sub(from.at).as_millis() as u64,
        analysis: truth::check_clips(data, matches, |i| clips::is_new(i) == new),
    }
}

/// The commands that show what the demo left in the datastore. They read DATABASE_URL as the
/// demo did, so with a DATABASE_URL of one's own they need it set again.
fn explore_commands(config: &Config, archive: &str) -> Vec<String> {
    let prefix = if config.database_url.is_some() {
        "DATABASE_URL=… "
    } else {
        ""
    };
    let archive = if archive
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:".contains(c))
    {
        archive.to_string()
    } else {
        format!("'{}'", archive.replace('\'', "'\\''"))
    };
    [
        "archivist status".to_string(),
        "archivist matches --format table".to_string(),
        format!(
            "archivist serve --media-archive {archive}   # the status page, on \
             http://127.0.0.1:9898, its players playing the kept copies"
        ),
        format!("archivist archive --media-archive {archive} versions   # what the archive keeps"),
    ]
    .iter()
    .map(|c| format!("{prefix}{c}"))
    .collect()
}

struct SummaryInput<'a> {
    analysis: truth::Check,
    first_pass: Pass,
    new_clip_pass: Pass,
    archive: ArchiveHeld,
    archive_named: &'a str,
    audio_seconds: f64,
    media_dir: &'a Path,
    config: &'a Config,
    args: &'a Settings,
    bus: &'a dyn Bus,
    data: &'a DataSet,
    ledger: &'a Ledger,
    totals: &'a AllTotals,
    status: Status,
    shown: String,
    lease: Duration,
    elapsed: Duration,
}

async fn summarize(i: SummaryInput<'_>) -> Summary {
    let pending: Totals = tasks::read(&i.totals.pending);
    let executions = i.ledger.executions();
    let mut problems = Vec::new();

    let expected: std::collections::HashSet<researchers::Pair> = i
        .data
        .episodes
        .iter()
        .flat_map(|e| {
            i.data
                .clips
                .iter()
                .map(move |c| (e.title.clone(), e.date_aired, c.title.clone()))
        })
        .collect();
    let once = executions.values().filter(|l| l.len() == 1).count() as u64;
    // A pair answered twice under one lease (an item tried again before its lease ran out)
    // is recorded once all the same; under two leases, the work was handed out twice.
    let more = executions
        .values()
        .filter(|l| l.iter().collect::<std::collections::HashSet<_>>().len() > 1)
        .count() as u64;
    let not_researched = expected
        .iter()
        .filter(|p| !executions.contains_key(*p))
        .count() as u64;
    let unexpected = executions.keys().filter(|p| !expected.contains(*p)).count();
    if more > 0 {
        let mut twice: Vec<_> = executions
            .iter()
            .filter(|(_, l)| l.iter().collect::<std::collections::HashSet<_>>().len() > 1)
            .collect();
        twice.sort();
        let examples: Vec<String> = twice
            .iter()
            .take(3)
            .map(|((episode, _, clip), leases)| {
                let leases: Vec<String> = leases.iter().map(Uuid::to_string).collect();
                format!("{episode:?} x {clip:?} under leases {}", leases.join(", "))
            })
            .collect();
        problems.push(format!(
            "{more} pairs were researched under more than one lease, as {}",
            examples.join("; ")
        ));
    }
    if not_researched > 0 {
        problems.push(format!("{not_researched} pairs were never researched"));
    }
    if unexpected > 0 {
        problems.push(format!(
            "{unexpected} pairs outside the data set were researched"
        ));
    }
    if i.status.researched_pairs != i.data.pairs() {
        problems.push(format!(
            "the datastore has {} researched pairs, expected {}",
            i.status.researched_pairs,
            i.data.pairs()
        ));
    }
    let found = i.ledger.matches.load(Ordering::Relaxed);
    if more == 0 && i.status.matched_pairs != found {
        problems.push(format!(
            "the datastore has {} matched pairs, the researchers found {found}",
            i.status.matched_pairs
        ));
    }

    let mut dead_letters_by_queue = std::collections::BTreeMap::new();
    for q in i.config.queues.all() {
        let n = match i.bus.sender(q).await {
            Ok(s) => s.inspect().await.map(|s| s.dead_letters).unwrap_or(0),
            Err(_) => 0,
        };
        dead_letters_by_queue.insert(q.to_string(), n);
    }
    let dead: u64 = dead_letters_by_queue.values().sum();
    if dead != i.data.poison() {
        problems.push(format!(
            "{dead} messages were dead-lettered, {} poison messages were sent",
            i.data.poison()
        ));
    }

    let stall = i.ledger.stall();
    Summary {
        datastore: i.shown,
        media: i.media_dir.display().to_string(),
        audio_minutes: (i.audio_seconds / 6.0).round() / 10.0,
        analysis: i.analysis,
        first_pass: i.first_pass,
        new_clip_pass: i.new_clip_pass,
        explore: explore_commands(i.config, i.archive_named),
        archive: i.archive,
        episodes: i.status.episodes,
        clips: i.status.clips,
        research_pairs: i.status.research_pairs,
        researched_pairs: i.status.researched_pairs,
        research_executions: executions.values().map(|l| l.len() as u64).sum(),
        pairs_researched_once: once,
        pairs_researched_more_than_once: more,
        pairs_not_researched: not_researched,
        matched_pairs: i.status.matched_pairs,
        matches_found_by_researchers: found,
        researchers: i.args.researcher_tasks,
        work_items: i.ledger.items.load(Ordering::Relaxed),
        leases_created: pending.leases_created,
        leases_expired: u64::from(stall.is_some()) + i.status.expired_leases,
        pairs_reclaimed: pending.pairs_reclaimed,
        stall: stall.map(|c| {
            format!(
                "the analyser stopped answering (staged) on {:?} after {} of {} results \
                 (lease {}); the stall timeout released its item, the lease expired, and the \
                 other {} pairs were leased again",
                c.episode,
                c.answered,
                c.clips,
                c.lease_id,
                c.clips - c.answered
            )
        }),
        messages_dead_lettered: dead,
        poison_messages_sent: i.data.poison(),
        dead_letters_by_queue,
        lease_duration_ms: i.lease.as_millis() as u64,
        elapsed_ms: i.elapsed.as_millis() as u64,
        all_researched_once: problems.is_empty(),
        problems,
    }
}
