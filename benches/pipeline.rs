//! The whole pipeline's throughput: the four archivists in one process on the database bus,
//! with researchers that answer at once, from the first lease to the last result recorded.
//!
//! ```text
//! cargo bench -p archivist --bench pipeline -- [--pairs 10000,100000] [--researchers 4]
//!     [--in-flight 32] [--clips 100] [--max-clips 50] [--recorders 1]
//!     [--max-results-waiting 10000] [--separate-bus]
//!     [--no-sqlite] [--no-postgres] [--rabbitmq]
//!     [--exec-researchers [--exec-concurrency 8] [--shell-analyser] [--archivist PATH]]
//! cargo bench -p archivist --bench pipeline -- --fixed-time 50ms,2s [--researchers 2,8]
//!     [--window 30s] [--look 20ms] [--no-sqlite] [--no-postgres]
//! cargo bench -p archivist --bench pipeline -- --api [--rounds 2] [--pairs …] [--no-postgres]
//!     [--researchers 4] [--exec-concurrency 8] [--archivist PATH]
//! cargo bench -p archivist --bench pipeline -- --idle-polls 1000 [--archivist PATH]
//! ```
//!
//! `--api` compares the researcher processes of `--exec-researchers` (implied) on the bus
//! itself with the same processes through the API: an `archivist serve --api` gateway on the
//! run's datastore and bus (plain HTTP on loopback, started before the clock), each researcher
//! `archivist research --server … --exec …` with a researcher token of its own. Each round
//! runs both, alternating which goes first, each on fresh databases; each row gives both rates
//! and their ratio from the same round, the gateway's CPU per 1,000 pairs and peak memory.
//!
//! `--idle-polls N` holds N researchers' long polls open at once on a gateway whose work
//! queue is empty, and reads the gateway's resident memory and open files from `/proc`
//! before and while they wait (see `idle_polls_main`).
//!
//! `--fixed-time` measures how busy researchers are while work waits, not throughput: an
//! analyser that takes a fixed time per item (each given), one-clip items on the database bus
//! in the datastore's database (SQLite, then Postgres as above), and work
//! assignment paced as `archivist run` paces it, two ways in the same run: on the timer alone
//! with `run`'s former defaults (every 10 s, up to 5 s of start jitter before each run), and
//! woken when capacity frees (items taken, seen on the queue every 20 ms; leases ended; at
//! most one woken run per 20 ms; start jitter on the first run only; every 1 s as the
//! fallback). Each researcher slot takes one
//! item at a time; woken, two ways in the same run: the slot answers its item in line
//! (sends the result, acknowledges the item, then asks for the next: `archivist research`
//! before issue 33) or beside (asks for the next item at once, while the result and the
//! acknowledgement go out in one step, `Sender::send_and_ack`: `archivist research` now).
//! The share of the window (from the
//! first item taken, at least the given `--window` or 20 items' time) that the slots spent
//! analysing is reported, and where the rest went: each item's round trip (sending its
//! result, acknowledging it, waiting for the next item from when the slot was free) and work
//! assignment's runs.
//!
//! For each size and backend (SQLite: a file in a temporary directory; Postgres: a fresh
//! database on `ARCHIVIST_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`,
//! dropped afterwards), with the bus in the datastore's database (or, `--separate-bus`, in a
//! database of its own, so that every settlement is a bus call of its own):
//!
//! - load (untimed in the rate): `--clips` clips and `pairs / clips` episodes sent to the bus
//!   and drained by both ingestion archivists;
//! - the pipeline, timed: pending-research runs back to back (the researcher count given as
//!   `--in-flight`, so each run leases up to that many items less those waiting), each item of
//!   up to `--max-clips` clips; `--researchers` researcher tasks that take work items ten at a
//!   time, send one `CompletedResearchItem` per clip (the last with `revoke_lease`) in one
//!   batch, and acknowledge their items in one call (`messagebus::ack_all`); work assignment
//!   holds back while `--max-results-waiting` results wait, as `archivist run` does; `--recorders`
//!   completed-research archivists running back to back. The clock stops when `status` counts
//!   every pair researched.
//!
//! `--exec-researchers` makes the researchers `--researchers` processes of `archivist research
//! --concurrency <--exec-concurrency> --exec …` (the binary beside this benchmark's:
//! `cargo build --release -p archivist-cli` first), whose analyser answers every clip at once:
//! this benchmark's own binary run as the analyser (it reads the work item and writes one
//! answer a clip), or with `--shell-analyser` a `grep` and a `sed` under `sh -c` (three
//! processes an item, as a script analyser would start). Media are one small local file for
//! each episode and clip. The researcher processes' CPU (with their analysers') and the
//! largest peak memory among them are reported apart. `--archivist PATH` runs another build
//! of `archivist` as the researchers (to compare two builds in one run of this benchmark).
//!
//! `--rabbitmq` adds runs with the bus on RabbitMQ (`ARCHIVIST_TEST_AMQP_URL`, default the
//! local broker as guest; queues named afresh for each run) and the datastore on Postgres.
//!
//! Each part of the pipeline runs on a thread of its own, with a runtime of its own, as it
//! would in a process of its own: work assignment, the researchers, the recorders. What
//! each spawns (the archivists' runs, the bus's consumers) runs on its thread, so the
//! thread's CPU time is that part's share.
//!
//! Reported: researched pairs per second end to end; this process's CPU time per 1,000 pairs
//! and how it divides between its threads (read from `/proc/self/task`: the three parts, the
//! SQLite connections' own threads, and the rest: the status poll, the load's leftovers,
//! lapin's connection); the database server's or broker's CPU per 1,000 pairs (every
//! `postgres` or `beam.smp` process on the machine, from `/proc`: on a quiet machine, this
//! run's); this process's peak resident memory so far (`VmHWM`: it only grows, so read it
//! against the runs before).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use archivist::completed_research::{self, CompletedResearchConfig};
use archivist::ingest::{start_clips, start_episodes, IngestConfig};
use archivist::messages::{decode, encode, CompletedResearchItem, PendingResearchItem};
use archivist::pending_research::{self, HoldBack, PendingResearchConfig};
use archivist::{Ended, Report};
use chrono::Utc;
use datastore::testing::{clip, episode};
use datastore::{DataStore, SqliteDataStore};
use messagebus::rabbitmq::{RabbitBus, RabbitBusConfig};
use messagebus::sql::{PgBus, SqlBusConfig, SqliteBus};
use messagebus::{Bus, Receiver, Sender};
use nix::sys::resource::{getrusage, UsageWho};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Time on a CPU by process and by thread, from `/proc`: the reader the datastore's
/// benchmarks use.
#[path = "../datastore/benches/common/cpu.rs"]
mod cpu;

/// `archivist serve --api` as a process of its own, for `--api` and `--idle-polls`.
#[path = "common/gateway.rs"]
mod api_gateway;

/// The queues of one run: the archivists' names, prefixed on a broker whose queues outlive
/// the run.
#[derive(Clone)]
struct Queues {
    episodes: String,
    clips: String,
    pending: String,
    completed: String,
}

impl Queues {
    fn new(prefix: &str) -> Queues {
        Queues {
            episodes: format!("{prefix}curated_episodes"),
            clips: format!("{prefix}curated_clips"),
            pending: format!("{prefix}pending_research"),
            completed: format!("{prefix}completed_research"),
        }
    }

    fn all(&self) -> [&str; 4] {
        [&self.episodes, &self.clips, &self.pending, &self.completed]
    }
}

#[derive(Debug, Clone)]
struct Options {
    pairs: Vec<u64>,
    researchers: usize,
    in_flight: u64,
    clips: u32,
    max_clips: u32,
    recorders: usize,
    /// Work assignment holds back while this many results wait (0: never), as `archivist run`
    /// does with `--max-results-waiting` (default 10,000).
    max_results_waiting: u64,
    separate_bus: bool,
    backends: Vec<&'static str>,
    /// Researchers are `archivist research --exec` processes, each with this concurrency.
    exec_researchers: Option<usize>,
    /// Their analyser is `sh -c` over `grep` and `sed`, not this binary.
    shell_analyser: bool,
    /// The `archivist` binary they run, if not the release build beside this one.
    archivist: Option<std::path::PathBuf>,
    /// `--api`: each run twice, the researchers on the bus and through the gateway.
    api: bool,
    /// `--rounds`: how many times each pair of runs (`--api`), alternating which goes first.
    rounds: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |flag: &str, default: u64| {
        value(flag).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{flag} takes a number, not {v:?}"))
        })
    };
    let pairs = value("--pairs")
        .unwrap_or_else(|| "10000,100000".into())
        .split(',')
        .map(|p| {
            p.trim()
                .parse()
                .unwrap_or_else(|_| panic!("--pairs takes numbers, not {p:?}"))
        })
        .collect();
    let mut backends = Vec::new();
    if !args.iter().any(|a| a == "--no-sqlite") {
        backends.push("sqlite");
    }
    if !args.iter().any(|a| a == "--no-postgres") {
        backends.push("postgres");
    }
    if args.iter().any(|a| a == "--rabbitmq") {
        backends.push("rabbitmq");
    }
    Options {
        pairs,
        researchers: number("--researchers", 4) as usize,
        in_flight: number("--in-flight", 32),
        clips: number("--clips", 100) as u32,
        max_clips: number("--max-clips", 50) as u32,
        recorders: number("--recorders", 1) as usize,
        max_results_waiting: number("--max-results-waiting", 10_000),
        separate_bus: args.iter().any(|a| a == "--separate-bus"),
        backends,
        exec_researchers: args
            .iter()
            .any(|a| a == "--exec-researchers")
            .then(|| number("--exec-concurrency", 8) as usize),
        shell_analyser: args.iter().any(|a| a == "--shell-analyser"),
        archivist: value("--archivist").map(std::path::PathBuf::from),
        api: args.iter().any(|a| a == "--api"),
        rounds: number("--rounds", 2) as usize,
    }
}

/// This process's CPU time (user + system) and peak resident memory in bytes.
fn usage() -> (Duration, u64) {
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let cpu = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    (cpu(u.user_time()) + cpu(u.system_time()), peak_rss("self"))
}

/// The high-water mark of a process's resident memory (`VmHWM`, in bytes; `of`: a pid, or
/// `self`). Not getrusage's maximum RSS: Linux carries that across `execve`, so under
/// `cargo bench` it reports cargo's.
fn peak_rss(of: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{of}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Runs `work` on a thread of its own with a runtime of its own, as a process of its own would.
fn on_thread<F>(name: &str, work: F) -> std::thread::JoinHandle<()>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(work)
        })
        .unwrap()
}

/// The datastore and the bus of one run, the bus's and the datastore's URLs, and what keeps
/// their databases alive.
async fn backend(
    kind: &str,
    separate_bus: bool,
) -> (Arc<dyn DataStore>, Arc<dyn Bus>, Urls, Box<dyn Any>) {
    let config = SqlBusConfig::default();
    match kind {
        "rabbitmq" => {
            let (store, db) = datastore::testing_pg::fresh_pg_store().await;
            let url = std::env::var("ARCHIVIST_TEST_AMQP_URL")
                .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
            let bus = RabbitBus::connect(&url, RabbitBusConfig::default())
                .await
                .unwrap();
            let urls = Urls {
                store: db.url().to_string(),
                bus: url,
            };
            (Arc::new(store), Arc::new(bus), urls, Box::new(db))
        }
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("pipeline.sqlite").display());
            let store = SqliteDataStore::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let bus_url = if separate_bus {
                format!("sqlite://{}", dir.path().join("bus.sqlite").display())
            } else {
                url.clone()
            };
            let bus = SqliteBus::connect(&bus_url, config).await.unwrap();
            let urls = Urls {
                store: url,
                bus: bus_url,
            };
            (Arc::new(store), Arc::new(bus), urls, Box::new(dir))
        }
        _ => {
            let (store, db) = datastore::testing_pg::fresh_pg_store().await;
            let (bus, bus_url, bus_db) = if separate_bus {
                let bus_db = datastore::testing_pg::PgTestDb::create().await;
                (
                    PgBus::connect(bus_db.url(), config).await.unwrap(),
                    bus_db.url().to_string(),
                    Some(bus_db),
                )
            } else {
                (
                    PgBus::connect(db.url(), config).await.unwrap(),
                    db.url().to_string(),
                    None,
                )
            };
            let urls = Urls {
                store: db.url().to_string(),
                bus: bus_url,
            };
            (Arc::new(store), Arc::new(bus), urls, Box::new((db, bus_db)))
        }
    }
}

/// Where a run's datastore and bus are (the same database unless `--separate-bus`; on
/// RabbitMQ the bus is the broker's URL).
struct Urls {
    store: String,
    bus: String,
}

fn ok(report: &Report) {
    assert!(
        matches!(report.ended, Ended::Finished | Ended::Cancelled),
        "{report:?}"
    );
    assert_eq!(report.dead_lettered, 0, "{report:?}");
}

/// A researcher that answers at once: one result per clip, the last revoking the lease,
/// sent in one batch per item; its items acknowledged in one call.
async fn researcher(rx: Arc<dyn Receiver>, tx: Arc<dyn Sender>, token: CancellationToken) {
    while !token.is_cancelled() {
        let batch = tokio::select! {
            _ = token.cancelled() => return,
            b = rx.receive(10, Duration::from_millis(200)) => b.unwrap(),
        };
        if batch.is_empty() {
            continue;
        }
        let mut answers = Vec::new();
        for d in &batch {
            let item: PendingResearchItem = decode(d.body()).unwrap();
            let n = item.clips.len();
            for (i, clip) in item.clips.iter().enumerate() {
                answers.push(encode(&CompletedResearchItem {
                    lease_id: item.lease_id,
                    revoke_lease: i + 1 == n,
                    research_date: Utc::now(),
                    episode: item.episode.clone(),
                    clip: clip.clone(),
                    episode_duration_ns: 3_600_000_000_000,
                    episode_hash: "sha256:e".into(),
                    clip_duration_ns: 4_000_000_000,
                    clip_hash: "sha256:c".into(),
                    clip_offsets_ns: if i % 7 == 0 { vec![1_000] } else { vec![] },
                    clip_match_scores: (i % 7 == 0).then(|| vec![0.9]),
                    failure: None,
                    clip_findability: None,
                }));
            }
        }
        tx.send_batch(answers).await.unwrap();
        for out in messagebus::ack_all(batch).await {
            out.unwrap();
        }
    }
}

struct Figures {
    load: Duration,
    elapsed: Duration,
    cpu: Duration,
    /// This process's CPU by part: work assignment, researchers, recorders, SQLite's
    /// connection threads, the rest.
    parts: [Duration; 5],
    /// The database server's or the broker's CPU (none for SQLite).
    server: Option<Duration>,
    peak_rss: u64,
    /// `--exec-researchers`: the researcher processes' CPU and the largest peak memory.
    researcher_processes: Option<(Duration, u64)>,
    /// `--api`: the gateway process's CPU (over the whole run: it is started before the
    /// clock and idle until the researchers come) and peak memory.
    gateway: Option<(Duration, u64)>,
}

const PARTS: [&str; 5] = [
    "assignment",
    "researchers",
    "recorders",
    "sqlite threads",
    "rest",
];

/// One run of the pipeline; `via_api`: the researcher processes (`--exec-researchers`) take
/// their work through an `archivist serve --api` gateway, started before the clock starts.
async fn run(kind: &str, pairs: u64, o: &Options, via_api: bool) -> Figures {
    let (store, bus, urls, _guard) = backend(kind, o.separate_bus).await;
    // For `--exec-researchers`: a small local file for each episode and clip (each is known
    // by its media, so they cannot share one).
    let media_dir = tempfile::tempdir().unwrap();
    let media_file = |name: String| {
        let path = media_dir.path().join(name);
        std::fs::write(&path, [0u8; 1024]).unwrap();
        path.display().to_string()
    };
    let with_media = |mut e: datastore::EpisodeInfo, i: u32| {
        if o.exec_researchers.is_some() {
            e.media_uri = media_file(format!("episode-{i}.bin"));
        }
        e
    };
    let queues = Queues::new(&if kind == "rabbitmq" {
        format!("pipeline_{}_", Utc::now().timestamp_millis())
    } else {
        String::new()
    });
    for q in queues.all() {
        bus.create_queue(q).await.unwrap();
    }
    let clips = o.clips.min(u32::try_from(pairs).unwrap_or(u32::MAX)).max(1);
    let episodes = u32::try_from(pairs.div_ceil(u64::from(clips))).unwrap();
    let total = u64::from(episodes) * u64::from(clips);

    // Load.
    let started = Instant::now();
    let sender = |q: &str| {
        let bus = Arc::clone(&bus);
        let q = q.to_string();
        async move { bus.sender(&q).await.unwrap() }
    };
    for chunk in (0..episodes).collect::<Vec<_>>().chunks(10_000) {
        let bodies = chunk
            .iter()
            .map(|&i| encode(&with_media(episode(i), i)))
            .collect();
        sender(&queues.episodes)
            .await
            .send_batch(bodies)
            .await
            .unwrap();
    }
    let bodies = (0..clips)
        .map(|i| {
            let mut c = clip(i);
            if o.exec_researchers.is_some() {
                c.media_uri = media_file(format!("clip-{i}.bin"));
            }
            encode(&c)
        })
        .collect();
    sender(&queues.clips)
        .await
        .send_batch(bodies)
        .await
        .unwrap();
    let ingest = IngestConfig {
        // A broker pushes deliveries a moment after they are sent: a receive that waits for
        // none would end the run before the first arrived (the load is untimed).
        receive_wait: if kind == "rabbitmq" {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        },
        once: true,
        ..IngestConfig::default()
    };
    let e = start_episodes(
        CancellationToken::new(),
        bus.receiver(&queues.episodes).await.unwrap(),
        store.clone(),
        ingest.clone(),
    );
    let c = start_clips(
        CancellationToken::new(),
        bus.receiver(&queues.clips).await.unwrap(),
        store.clone(),
        ingest,
    );
    let (e, c) = (e.done.await.unwrap(), c.done.await.unwrap());
    ok(&e);
    ok(&c);
    let load = started.elapsed();
    let loaded = store.status(Utc::now()).await.unwrap();
    assert_eq!(
        loaded.research_pairs, total,
        "the load left pairs out: {loaded:?}"
    );

    // The gateway and one researcher token per researcher process (untimed).
    let gateway = via_api.then(|| {
        assert!(
            o.exec_researchers.is_some() && kind != "rabbitmq",
            "--api runs with --exec-researchers on the database buses"
        );
        api_gateway::Process::start(&archivist_bin(o), &urls.store, &urls.bus, "warn")
    });
    let tokens: Vec<String> = gateway.as_ref().map_or_else(Vec::new, |g| {
        (0..o.researchers)
            .map(|i| g.token(&format!("bench-{i}")))
            .collect()
    });

    // The pipeline: each part on a thread of its own.
    let token = CancellationToken::new();
    let server_name = match kind {
        "postgres" => Some("postgres"),
        "rabbitmq" => Some("beam.smp"),
        _ => None,
    };
    let server_before = server_name.map(|_| cpu::processes());
    let threads_before = cpu::threads();
    let (cpu_before, _) = usage();
    let started = Instant::now();
    let mut threads = Vec::new();
    let mut children = Vec::new();
    if let Some(concurrency) = o.exec_researchers {
        assert!(
            kind != "rabbitmq",
            "--exec-researchers runs on the database buses"
        );
        for i in 0..o.researchers {
            let cache = media_dir.path().join(format!("cache-{i}"));
            let via = match (&gateway, tokens.get(i)) {
                (Some(g), Some(token)) => Via::Api {
                    server: g.url(),
                    token,
                },
                _ => Via::Bus(&urls.bus),
            };
            children.push(spawn_researcher(via, concurrency, &cache, o));
        }
    } else {
        let (bus, queues, token, researchers) = (
            Arc::clone(&bus),
            queues.clone(),
            token.clone(),
            o.researchers,
        );
        threads.push(on_thread("researchers", async move {
            let mut tasks = JoinSet::new();
            for _ in 0..researchers {
                let rx = bus.receiver(&queues.pending).await.unwrap();
                let tx = bus.sender(&queues.completed).await.unwrap();
                tasks.spawn(researcher(rx, tx, token.clone()));
            }
            while let Some(t) = tasks.join_next().await {
                t.unwrap();
            }
        }));
    }
    {
        let (bus, queues, store, token) = (
            Arc::clone(&bus),
            queues.clone(),
            store.clone(),
            token.clone(),
        );
        let mut config = PendingResearchConfig {
            max_clips: o.max_clips,
            researchers: Some(o.in_flight),
            start_jitter: Duration::ZERO,
            ..PendingResearchConfig::default()
        };
        let max_waiting = o.max_results_waiting;
        threads.push(on_thread("assignment", async move {
            let tx = bus.sender(&queues.pending).await.unwrap();
            if max_waiting > 0 {
                config.hold_back = Some(HoldBack {
                    results: bus.sender(&queues.completed).await.unwrap(),
                    max_waiting,
                });
            }
            while !token.is_cancelled() {
                let report = pending_research::start(
                    token.child_token(),
                    Arc::clone(&tx),
                    store.clone(),
                    config.clone(),
                )
                .done
                .await
                .unwrap();
                ok(&report);
                if report.published == 0 {
                    // Every item leased is waiting or all is leased: look again shortly
                    // (cron would look a minute later; this measures the pipeline, not cron).
                    tokio::select! {
                        _ = token.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                    }
                }
            }
        }));
    }
    {
        let (bus, queues, store, token, recorders) = (
            Arc::clone(&bus),
            queues.clone(),
            store.clone(),
            token.clone(),
            o.recorders.max(1),
        );
        threads.push(on_thread("recorders", async move {
            let mut tasks = JoinSet::new();
            for _ in 0..recorders {
                let rx = bus.receiver(&queues.completed).await.unwrap();
                let store = store.clone();
                let token = token.clone();
                tasks.spawn(async move {
                    while !token.is_cancelled() {
                        let report = completed_research::start(
                            token.child_token(),
                            Arc::clone(&rx),
                            store.clone(),
                            CompletedResearchConfig {
                                receive_wait: Duration::from_millis(100),
                                ..CompletedResearchConfig::default()
                            },
                        )
                        .done
                        .await
                        .unwrap();
                        ok(&report);
                    }
                });
            }
            while let Some(t) = tasks.join_next().await {
                t.unwrap();
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(3_600);
    loop {
        let status = store.status(Utc::now()).await.unwrap();
        if status.researched_pairs >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done within an hour: {status:?}"
        );
        // `status` counts every pair: polled less often as the run goes on (a hundredth of
        // the time so far), so that watching costs the pipeline little.
        let poll =
            (started.elapsed() / 100).clamp(Duration::from_millis(20), Duration::from_secs(1));
        tokio::time::sleep(poll).await;
    }
    let elapsed = started.elapsed();
    let (cpu_after, peak_memory) = usage();
    let threads_after = cpu::threads();
    let server = server_name
        .zip(server_before)
        .map(|(name, before)| cpu::run_time(&before, &cpu::processes(), |n| n == name));
    // The researcher processes' CPU (every thread, and their analysers, reaped) and memory,
    // read before they are stopped; every pair is recorded, so nothing of theirs is lost.
    let researcher_processes = (!children.is_empty()).then(|| {
        let cpu: Duration = children.iter().map(|c| cpu::with_children(c.id())).sum();
        let peak = children.iter().map(|c| peak_rss(&c.id().to_string())).max();
        (cpu, peak.unwrap_or(0))
    });
    let gateway_figures = gateway
        .as_ref()
        .map(|g| (cpu::with_children(g.pid()), peak_rss(&g.pid().to_string())));
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(gateway);
    token.cancel();
    for t in threads {
        t.join().unwrap();
    }
    // Connections the parts' runtimes opened went with them: what closing them says is moot.
    let _ = bus.close().await;

    let cpu = cpu_after.saturating_sub(cpu_before);
    let mut parts = [Duration::ZERO; 5];
    for (i, part) in PARTS.iter().enumerate().take(3) {
        parts[i] = cpu::run_time(&threads_before, &threads_after, |n| n == *part);
    }
    parts[3] = cpu::run_time(&threads_before, &threads_after, |n| {
        n.starts_with("sqlx-sqlite")
    });
    parts[4] = cpu.saturating_sub(parts[..4].iter().sum());
    Figures {
        load,
        elapsed,
        cpu,
        parts,
        server,
        peak_rss: peak_memory,
        researcher_processes,
        gateway: gateway_figures,
    }
}

/// The no-op analyser as a shell pipeline: one answer per clip of the work item on its
/// standard input (clip titles are `Clip N`, episode titles `Episode N`), none of them a match.
const SHELL_ANALYSER: &str = r#"grep -o '"title":"Clip [0-9]*"' | sed 's/^"title":\(.*\)$/{"clip_title":\1,"clip_offsets_ns":[],"clip_duration_ns":4000000000,"episode_duration_ns":3600000000000}/'"#;

/// Given as this binary's first argument, it runs as the no-op analyser.
const BE_ANALYSER: &str = "--be-no-op-analyser";

/// The no-op analyser, compiled: reads the work item on standard input and answers each of its
/// clips at once, none of them a match, in one write.
fn no_op_analyser() {
    use std::io::{Read, Write};
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).unwrap();
    let item: PendingResearchItem = decode(&input).unwrap();
    let mut out = Vec::new();
    for clip in &item.clips {
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({
                "clip_title": clip.title,
                "clip_offsets_ns": [],
                "clip_duration_ns": 4_000_000_000i64,
                "episode_duration_ns": 3_600_000_000_000i64,
            }),
        )
        .unwrap();
        out.push(b'\n');
    }
    std::io::stdout().write_all(&out).unwrap();
}

/// How researcher processes reach their work.
#[derive(Clone, Copy)]
enum Via<'a> {
    /// The bus itself, at this URL.
    Bus(&'a str),
    /// The API gateway at `server`, with a researcher's token.
    Api { server: &'a str, token: &'a str },
}

/// The `archivist` binary: `--archivist`, or the release build beside this benchmark's.
fn archivist_bin(o: &Options) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    o.archivist
        .clone()
        .or_else(|| {
            exe.parent()
                .and_then(|deps| deps.parent())
                .map(|release| release.join("archivist"))
        })
        .filter(|b| b.exists())
        .unwrap_or_else(|| {
            panic!("no archivist binary beside {exe:?}: cargo build --release -p archivist-cli")
        })
}

/// `archivist research --exec` on the bus or through the gateway (`via`), from
/// [`archivist_bin`], with a cache directory of its own.
fn spawn_researcher(
    via: Via<'_>,
    concurrency: usize,
    cache: &std::path::Path,
    o: &Options,
) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let analyser: Vec<String> = if o.shell_analyser {
        vec!["sh".into(), "-c".into(), SHELL_ANALYSER.into()]
    } else {
        vec![exe.display().to_string(), BE_ANALYSER.into()]
    };
    let mut command = std::process::Command::new(archivist_bin(o));
    command
        .args(["research", "--concurrency", &concurrency.to_string()])
        .args(["--cache-dir", &cache.display().to_string()]);
    match via {
        Via::Bus(url) => {
            command.env("DATABASE_URL", url);
        }
        Via::Api { server, token } => {
            command
                .args(["--server", server])
                .env("ARCHIVIST_TOKEN", token);
        }
    }
    command
        .arg("--exec")
        .args(analyser)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(BE_ANALYSER) {
        return no_op_analyser();
    }
    if std::env::args().any(|a| a == "--fixed-time") {
        return fixed_time_main();
    }
    if std::env::args().any(|a| a == "--idle-polls") {
        return idle_polls_main();
    }
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if o.api {
        return api_main(&o, &rt);
    }
    println!(
        "researchers {}, items in flight {}, {} clips per item, {} recorder(s), \
         hold-back at {} results waiting, bus {}",
        o.researchers,
        o.in_flight,
        o.max_clips,
        o.recorders,
        o.max_results_waiting,
        if o.separate_bus {
            "in a database of its own"
        } else {
            "in the datastore's database"
        }
    );
    println!(
        "| backend | pairs | load (untimed) | pipeline | pairs/s | CPU ms / 1,000 pairs (this process) \
         | of which {} | server CPU ms / 1,000 pairs | peak RSS so far \
         | researcher processes: CPU ms / 1,000 pairs, largest peak RSS |",
        PARTS.join(" · ")
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &pairs in &o.pairs {
        for backend in &o.backends {
            let f = rt.block_on(run(backend, pairs, &o, false));
            let per_1000 = |d: Duration| d.as_secs_f64() * 1e3 / (pairs as f64 / 1e3);
            println!(
                "| {backend} | {pairs} | {:.2} s | {:.2} s | {:.0} | {:.1} | {} | {} | {:.0} MiB | {} |",
                f.load.as_secs_f64(),
                f.elapsed.as_secs_f64(),
                pairs as f64 / f.elapsed.as_secs_f64(),
                per_1000(f.cpu),
                f.parts
                    .iter()
                    .map(|d| format!("{:.1}", per_1000(*d)))
                    .collect::<Vec<_>>()
                    .join(" · "),
                f.server
                    .map(|d| format!("{:.1}", per_1000(d)))
                    .unwrap_or_else(|| "—".into()),
                f.peak_rss as f64 / (1024.0 * 1024.0),
                f.researcher_processes
                    .map(|(cpu, rss)| format!(
                        "{:.1} · {:.0} MiB",
                        per_1000(cpu),
                        rss as f64 / (1024.0 * 1024.0)
                    ))
                    .unwrap_or_else(|| "—".into())
            );
        }
    }
}

/// `--api`: for each size and backend, `--rounds` pairs of runs, the researcher processes on
/// the bus and through the gateway, alternating which goes first.
fn api_main(o: &Options, rt: &tokio::runtime::Runtime) {
    let mut o = o.clone();
    o.exec_researchers.get_or_insert(8);
    o.backends.retain(|b| *b != "rabbitmq");
    println!(
        "{} `archivist research --concurrency {} --exec` processes, items of {} clips, \
         {} analyser; each round both ways, alternating which goes first",
        o.researchers,
        o.exec_researchers.unwrap_or(8),
        o.max_clips,
        if o.shell_analyser { "shell" } else { "no-op" },
    );
    println!(
        "| backend | pairs | round | on the bus: pairs/s | through the API: pairs/s | API / bus \
         | gateway CPU ms / 1,000 pairs | gateway peak RSS \
         | researcher processes, CPU ms / 1,000 pairs: bus · API |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &pairs in &o.pairs {
        for backend in &o.backends {
            let mut ratios = Vec::new();
            for round in 0..o.rounds.max(1) {
                let (direct, via_api) = if round % 2 == 0 {
                    let d = rt.block_on(run(backend, pairs, &o, false));
                    (d, rt.block_on(run(backend, pairs, &o, true)))
                } else {
                    let a = rt.block_on(run(backend, pairs, &o, true));
                    (rt.block_on(run(backend, pairs, &o, false)), a)
                };
                let rate = |f: &Figures| pairs as f64 / f.elapsed.as_secs_f64();
                let per_1000 = |d: Duration| d.as_secs_f64() * 1e3 / (pairs as f64 / 1e3);
                let ratio = rate(&via_api) / rate(&direct);
                ratios.push(ratio);
                let researchers = |f: &Figures| {
                    f.researcher_processes
                        .map_or_else(|| "—".into(), |(cpu, _)| format!("{:.0}", per_1000(cpu)))
                };
                let (gateway_cpu, gateway_rss) = via_api.gateway.unwrap_or_default();
                println!(
                    "| {backend} | {pairs} | {} | {:.0} | {:.0} | {ratio:.2} | {:.0} | {:.0} MiB \
                     | {} · {} |",
                    round + 1,
                    rate(&direct),
                    rate(&via_api),
                    per_1000(gateway_cpu),
                    gateway_rss as f64 / (1024.0 * 1024.0),
                    researchers(&direct),
                    researchers(&via_api),
                );
            }
            let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
            println!("| {backend} | {pairs} | mean | | | **{mean:.2}** | | | |");
        }
    }
}

/// `--idle-polls N` (default 1,000): an `archivist serve --api` gateway on SQLite with an
/// empty work queue, N researchers' long polls (`POST /api/v1/work?wait=20`, each on a
/// connection of its own, a token per hundred as the per-token request limit allows) held
/// open at once; the gateway's resident memory and open files before and while they wait,
/// read from `/proc`. The open-file limit of this process (and so of the gateway it starts) is
/// raised to its hard limit first: 1,000 connections pass the common soft limit of 1,024.
fn idle_polls_main() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--idle-polls")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let archivist = args
        .iter()
        .position(|a| a == "--archivist")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    println!("open-file limit raised from {soft} to {hard} for this benchmark and its gateway");
    let o = Options {
        archivist,
        ..options()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_store, bus, urls, _guard) = backend("sqlite", false).await;
        for q in Queues::new("").all() {
            bus.create_queue(q).await.unwrap();
        }
        let gateway =
            api_gateway::Process::start(&archivist_bin(&o), &urls.store, &urls.bus, "warn");
        let tokens: Vec<String> = (0..n.div_ceil(100))
            .map(|i| gateway.token(&format!("idle-{i}")))
            .collect();
        let (addr, pid) = (gateway.addr(), gateway.pid());
        // One poll first: the gateway's receiver and the token's first use are not the polls'.
        let first = api_gateway::request(addr, "POST", "/api/v1/work?wait=0", Some(&tokens[0]));
        assert_eq!(first.map(|(status, _)| status), Some(204));
        let (rss_before, _) = api_gateway::memory(pid);
        let (files_before, sockets_before) = api_gateway::open_files(pid);
        let started = Instant::now();
        let mut polls = JoinSet::new();
        for i in 0..n {
            let head =
                api_gateway::head(addr, "POST", "/api/v1/work?wait=20", Some(&tokens[i / 100]));
            polls.spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.write_all(head.as_bytes()).await.unwrap();
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer).await.unwrap();
                (api_gateway::parse(&answer).map(|(s, _)| s), Instant::now())
            });
        }
        // Every connection accepted (a socket each in the gateway), then a moment for the
        // requests to reach their handlers.
        let deadline = Instant::now() + Duration::from_secs(15);
        while api_gateway::open_files(pid).1 < sockets_before + n {
            assert!(
                Instant::now() < deadline,
                "the gateway holds {} sockets, not {} more than {sockets_before}, after 15 s",
                api_gateway::open_files(pid).1,
                n
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let opened = started.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (rss_during, _) = api_gateway::memory(pid);
        let (files_during, sockets_during) = api_gateway::open_files(pid);
        let mut statuses = std::collections::BTreeMap::new();
        let mut last = started;
        while let Some(done) = polls.join_next().await {
            let (status, at) = done.unwrap();
            *statuses.entry(status).or_insert(0) += 1;
            last = last.max(at);
        }
        let (rss_after, peak) = api_gateway::memory(pid);
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        println!(
            "| idle long polls | opened in | gateway RSS before · while waiting · after | per poll \
             | gateway peak RSS | open files before · while waiting (sockets) | answers |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- |");
        println!(
            "| {n} | {:.2} s | {:.1} · {:.1} · {:.1} MiB | {:.1} KiB | {:.1} MiB \
             | {files_before} · {files_during} ({sockets_during}) | {} (last at {:.1} s) |",
            opened.as_secs_f64(),
            mib(rss_before),
            mib(rss_during),
            mib(rss_after),
            rss_during.saturating_sub(rss_before) as f64 / 1024.0 / n as f64,
            mib(peak),
            statuses
                .iter()
                .map(|(s, k)| format!(
                    "{k} × {}",
                    s.map_or_else(|| "none".into(), |s| s.to_string())
                ))
                .collect::<Vec<_>>()
                .join(", "),
            last.duration_since(started).as_secs_f64(),
        );
        drop(gateway);
        let _ = bus.close().await;
    });
}

/// `--fixed-time`: for each analysis time and researcher count, the researchers' busy share
/// with work assignment on the timer alone and woken.
fn fixed_time_main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let times: Vec<Duration> = value("--fixed-time")
        .unwrap_or_else(|| "50ms,2s".into())
        .split(',')
        .map(|t| duration(t.trim()))
        .collect();
    let researchers: Vec<usize> = value("--researchers")
        .unwrap_or_else(|| "2,8".into())
        .split(',')
        .map(|n| n.trim().parse().expect("--researchers takes numbers"))
        .collect();
    let window = value("--window")
        .map(|w| duration(&w))
        .unwrap_or(Duration::from_secs(30));
    // `run`'s look at the work queue and shortest gap between woken runs (20 ms in `run`):
    // another value measures what they cost.
    let look = value("--look")
        .map(|w| duration(&w))
        .unwrap_or(Duration::from_millis(20));
    let mut backends = Vec::new();
    if !args.iter().any(|a| a == "--no-sqlite") {
        backends.push("sqlite");
    }
    if !args.iter().any(|a| a == "--no-postgres") {
        backends.push("postgres");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "| bus | analysis per item | researchers | window | timer alone (every 10 s, jitter 5 s): busy \
         | woken (every 1 s), result and acknowledgement in line: busy | woken, answer beside the next receive: busy |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut breakdown = Vec::new();
    for kind in &backends {
        for &per_item in &times {
            for &n in &researchers {
                let window = window.max(per_item * 20);
                let (old, old_gaps) =
                    rt.block_on(fixed_time(kind, per_item, n, false, false, window, look));
                // The two researchers alternate which goes first from one cell to the next.
                let order = if breakdown.len() % 6 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                let mut woken = Vec::new();
                for beside in order {
                    let (busy, gaps) =
                        rt.block_on(fixed_time(kind, per_item, n, true, beside, window, look));
                    woken.push((beside, busy, gaps));
                }
                woken.sort_by_key(|(beside, _, _)| *beside);
                println!(
                    "| {kind} | {per_item:?} | {n} | {window:?} | {:.1}% | **{:.1}%** | **{:.1}%** |",
                    old * 100.0,
                    woken[0].1 * 100.0,
                    woken[1].1 * 100.0
                );
                breakdown.push(format!(
                    "| {kind} | {per_item:?} | {n} | timer alone | {} |",
                    old_gaps.row()
                ));
                for (beside, _, gaps) in &woken {
                    let how = if *beside {
                        "woken, answer beside"
                    } else {
                        "woken, in line"
                    };
                    breakdown.push(format!(
                        "| {kind} | {per_item:?} | {n} | {how} | {} |",
                        gaps.row()
                    ));
                }
            }
        }
    }
    println!();
    println!(
        "| bus | analysis per item | researchers | assignment, researcher | items | send results (beside: and acknowledge, in one), ms: mean / median / p90 \
         | acknowledge, ms | next item's wait, ms | assignment runs | items per run |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in breakdown {
        println!("{row}");
    }
}

/// One measurement: the share of `window` that `researchers` slots spent analysing.
async fn fixed_time(
    kind: &str,
    per_item: Duration,
    researchers: usize,
    woken: bool,
    beside: bool,
    window: Duration,
    look: Duration,
) -> (f64, Gaps) {
    use archivist::{watch_capacity, Pace, Wake};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    let (store, bus, _urls, _guard) = backend(kind, false).await;
    let queues = Queues::new("");
    for q in queues.all() {
        bus.create_queue(q).await.unwrap();
    }
    // Enough one-clip items that work waits for the whole window.
    let items =
        (window.as_secs_f64() / per_item.as_secs_f64() * researchers as f64 * 1.5) as u32 + 20;
    let bodies = (0..items).map(|i| encode(&episode(i))).collect();
    bus.sender(&queues.episodes)
        .await
        .unwrap()
        .send_batch(bodies)
        .await
        .unwrap();
    bus.sender(&queues.clips)
        .await
        .unwrap()
        .send(encode(&clip(0)))
        .await
        .unwrap();
    let once = IngestConfig {
        receive_wait: Duration::ZERO,
        once: true,
        ..IngestConfig::default()
    };
    let e = start_episodes(
        CancellationToken::new(),
        bus.receiver(&queues.episodes).await.unwrap(),
        store.clone(),
        once.clone(),
    );
    let c = start_clips(
        CancellationToken::new(),
        bus.receiver(&queues.clips).await.unwrap(),
        store.clone(),
        once,
    );
    ok(&e.done.await.unwrap());
    ok(&c.done.await.unwrap());

    let token = CancellationToken::new();
    let wake = woken.then(Wake::new);
    let first_taken: Arc<OnceLock<tokio::time::Instant>> = Arc::new(OnceLock::new());
    let busy_ns = Arc::new(AtomicU64::new(0));
    let gaps = Arc::new(Gaps::default());
    let mut tasks = JoinSet::new();
    // The researchers: each slot one item at a time, the analysis a fixed wait. `beside`:
    // as `archivist research` now, the finished item's result and its acknowledgement go
    // out in one step (`Sender::send_and_ack`: one transaction on the database bus) while the
    // slot asks for its next item (at most one under way); otherwise in line, as before: the
    // result sent, then the item acknowledged, then the next item asked for.
    for _ in 0..researchers {
        let rx = bus.receiver(&queues.pending).await.unwrap();
        let tx = bus.sender(&queues.completed).await.unwrap();
        let (token, first, busy, gaps) = (
            token.clone(),
            first_taken.clone(),
            busy_ns.clone(),
            gaps.clone(),
        );
        tasks.spawn(async move {
            // When the slot was last free (beside: its analysis done; in line: its item's result
            // sent and acknowledged): from then, how long the next item took to come.
            let mut asked = tokio::time::Instant::now();
            let mut answering: Option<(messagebus::Delivery, Vec<Vec<u8>>)> = None;
            while !token.is_cancelled() {
                let answer = answering.take();
                let settle = async {
                    let Some((d, answers)) = answer else {
                        return true;
                    };
                    let analysed = tokio::time::Instant::now();
                    let Ok(acked) = tx.send_and_ack(answers, d).await else {
                        return false;
                    };
                    gaps.send.lock().unwrap().push(analysed.elapsed());
                    acked.is_ok()
                };
                let step = async {
                    let batch = tokio::select! {
                        _ = token.cancelled() => return Err(()),
                        b = rx.receive(1, Duration::from_millis(200)) => b.unwrap(),
                    };
                    let Some(d) = batch.into_iter().next() else {
                        return Ok(None);
                    };
                    let start = tokio::time::Instant::now();
                    let t0 = *first.get_or_init(|| start);
                    // From the slot's second item: the first one's wait is the start (the
                    // first run's jitter), not a round trip.
                    if asked >= t0 {
                        gaps.receive.lock().unwrap().push(start - asked);
                    }
                    tokio::time::sleep(per_item).await;
                    // The analysis's nominal time (a timer that wakes late counts against
                    // the researcher), up to the window's end.
                    let end = (start + per_item).min(t0 + window);
                    busy.fetch_add(
                        end.saturating_duration_since(start).as_nanos() as u64,
                        Ordering::Relaxed,
                    );
                    let item: PendingResearchItem = decode(d.body()).unwrap();
                    let n = item.clips.len();
                    let answers = item
                        .clips
                        .iter()
                        .enumerate()
                        .map(|(i, clip)| {
                            encode(&CompletedResearchItem {
                                lease_id: item.lease_id,
                                revoke_lease: i + 1 == n,
                                research_date: Utc::now(),
                                episode: item.episode.clone(),
                                clip: clip.clone(),
                                episode_duration_ns: 3_600_000_000_000,
                                episode_hash: "sha256:e".into(),
                                clip_duration_ns: 4_000_000_000,
                                clip_hash: "sha256:c".into(),
                                clip_offsets_ns: vec![],
                                clip_match_scores: None,
                                failure: None,
                                clip_findability: None,
                            })
                        })
                        .collect::<Vec<_>>();
                    Ok(Some((d, answers)))
                };
                let (acked, step) = tokio::join!(settle, step);
                let Ok(done) = step else {
                    return;
                };
                if !acked {
                    return;
                }
                let Some((d, answers)) = done else {
                    continue;
                };
                if beside {
                    answering = Some((d, answers));
                    asked = tokio::time::Instant::now();
                } else {
                    let analysed = tokio::time::Instant::now();
                    if tx.send_batch(answers).await.is_err() {
                        return;
                    }
                    let sent = tokio::time::Instant::now();
                    gaps.send.lock().unwrap().push(sent - analysed);
                    if d.ack().await.is_err() {
                        return;
                    }
                    asked = tokio::time::Instant::now();
                    gaps.ack.lock().unwrap().push(asked - sent);
                }
            }
        });
    }
    // Work assignment, paced as `run` paces it.
    let every = if woken {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    {
        let tx = bus.sender(&queues.pending).await.unwrap();
        if let Some(wake) = &wake {
            tasks.spawn(watch_capacity(
                token.clone(),
                tx.clone(),
                Some(researchers as u64),
                look,
                wake.clone(),
            ));
        }
        let config = PendingResearchConfig {
            max_clips: 1,
            researchers: Some(researchers as u64),
            start_jitter: Duration::from_secs(5),
            ..PendingResearchConfig::default()
        };
        let pace = Pace {
            every,
            wake: wake.clone(),
            min_gap: look,
        };
        let (store, token) = (store.clone(), token.clone());
        let (runs, published) = (gaps.runs.clone(), gaps.published.clone());
        tasks.spawn(async move {
            let mut cause: Option<archivist::Cause> = None;
            loop {
                let mut config = config.clone();
                // As `run`: woken, only the first run waits its start jitter; on the timer
                // alone, every run does (today's `run`).
                if woken && cause.is_some() {
                    config.start_jitter = Duration::ZERO;
                }
                let started = tokio::time::Instant::now();
                let report = pending_research::start(
                    token.child_token(),
                    Arc::clone(&tx),
                    store.clone(),
                    config,
                )
                .done
                .await
                .unwrap();
                ok(&report);
                runs.fetch_add(1, Ordering::Relaxed);
                published.fetch_add(report.published, Ordering::Relaxed);
                match pace
                    .wait(started, tokio::time::Instant::now(), &token)
                    .await
                {
                    Some(c) => cause = Some(c),
                    None => return,
                }
            }
        });
    }
    // The recorder, paced as `run` paces it (draining, then `every`).
    {
        let rx = bus.receiver(&queues.completed).await.unwrap();
        let (store, token, wake) = (store.clone(), token.clone(), wake.clone());
        tasks.spawn(async move {
            let pace = Pace {
                every,
                wake: None,
                min_gap: Duration::ZERO,
            };
            loop {
                let started = tokio::time::Instant::now();
                let report = completed_research::start(
                    token.child_token(),
                    Arc::clone(&rx),
                    store.clone(),
                    CompletedResearchConfig {
                        receive_wait: Duration::from_secs(1),
                        wake: wake.clone(),
                        ..CompletedResearchConfig::default()
                    },
                )
                .done
                .await
                .unwrap();
                ok(&report);
                if pace
                    .wait(started, tokio::time::Instant::now(), &token)
                    .await
                    .is_none()
                {
                    return;
                }
            }
        });
    }
    // The window, from the first item taken.
    let t0 = loop {
        if let Some(t0) = first_taken.get() {
            break *t0;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    tokio::time::sleep_until(t0 + window).await;
    // The last items in hand finish (their busy time is clipped to the window).
    tokio::time::sleep(per_item).await;
    let status = store.status(Utc::now()).await.unwrap();
    assert!(
        status.researched_pairs < u64::from(items),
        "work ran out before the window ended: {status:?}"
    );
    token.cancel();
    while tasks.join_next().await.is_some() {}
    let _ = bus.close().await;
    let busy =
        busy_ns.load(Ordering::Relaxed) as f64 / (researchers as f64 * window.as_nanos() as f64);
    (busy, Arc::try_unwrap(gaps).unwrap_or_default())
}

/// Where a researcher's time between two items goes (`--fixed-time`): each part of every
/// round trip, and work assignment's runs.
#[derive(Default)]
struct Gaps {
    /// Sending an item's results.
    send: std::sync::Mutex<Vec<Duration>>,
    /// Acknowledging the item.
    ack: std::sync::Mutex<Vec<Duration>>,
    /// From asking for the next item to having it.
    receive: std::sync::Mutex<Vec<Duration>>,
    runs: Arc<std::sync::atomic::AtomicU64>,
    published: Arc<std::sync::atomic::AtomicU64>,
}

impl Gaps {
    /// `mean / median / p90` in milliseconds of one part.
    fn summary(part: &std::sync::Mutex<Vec<Duration>>) -> String {
        let mut v = part.lock().unwrap().clone();
        if v.is_empty() {
            return "—".into();
        }
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
        format!(
            "{mean:.1} / {:.1} / {:.1}",
            ms(v[v.len() / 2]),
            ms(v[v.len() * 9 / 10])
        )
    }

    fn row(&self) -> String {
        use std::sync::atomic::Ordering;
        let runs = self.runs.load(Ordering::Relaxed);
        let items = self.receive.lock().unwrap().len();
        format!(
            "{items} | {} | {} | {} | {runs} | {:.2}",
            Gaps::summary(&self.send),
            Gaps::summary(&self.ack),
            Gaps::summary(&self.receive),
            self.published.load(Ordering::Relaxed) as f64 / runs.max(1) as f64
        )
    }
}

/// A duration as `50ms` or `2s`.
fn duration(text: &str) -> Duration {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("not a duration: {text:?}"));
    match unit {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => panic!("not a duration: {text:?} (50ms, 2s, 1m)"),
    }
}
