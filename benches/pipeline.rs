//! The whole pipeline's throughput: the four archivists in one process on the database bus,
//! with researchers that answer at once, from the first lease to the last result recorded.
//!
//! ```text
//! cargo bench -p archivist --bench pipeline -- [--pairs 10000,100000] [--researchers 4]
//!     [--in-flight 32] [--clips 100] [--max-clips 50] [--recorders 1] [--separate-bus]
//!     [--no-sqlite] [--no-postgres]
//! ```
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
//!   batch, and acknowledge their items in one call (`messagebus::ack_all`); `--recorders`
//!   completed-research archivists running back to back. The clock stops when `status` counts
//!   every pair researched.
//!
//! Reported: researched pairs per second end to end; this process's CPU time (getrusage:
//! user + system) per 1,000 pairs, which leaves out the Postgres server's own CPU; this
//! process's peak resident memory so far (getrusage's maximum RSS: it only grows, so read it
//! against the runs before).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use archivist::completed_research::{self, CompletedResearchConfig};
use archivist::ingest::{start_clips, start_episodes, IngestConfig};
use archivist::messages::{decode, encode, CompletedResearchItem, PendingResearchItem};
use archivist::pending_research::{self, PendingResearchConfig};
use archivist::{Ended, Report};
use chrono::Utc;
use datastore::testing::{clip, episode};
use datastore::{DataStore, SqliteDataStore};
use messagebus::sql::{PgBus, SqlBusConfig, SqliteBus};
use messagebus::{Bus, Receiver, Sender};
use nix::sys::resource::{getrusage, UsageWho};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const QUEUES: [&str; 4] = [
    "curated_episodes",
    "curated_clips",
    "pending_research",
    "completed_research",
];

#[derive(Debug, Clone)]
struct Options {
    pairs: Vec<u64>,
    researchers: usize,
    in_flight: u64,
    clips: u32,
    max_clips: u32,
    recorders: usize,
    separate_bus: bool,
    backends: Vec<&'static str>,
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
    Options {
        pairs,
        researchers: number("--researchers", 4) as usize,
        in_flight: number("--in-flight", 32),
        clips: number("--clips", 100) as u32,
        max_clips: number("--max-clips", 50) as u32,
        recorders: number("--recorders", 1) as usize,
        separate_bus: args.iter().any(|a| a == "--separate-bus"),
        backends,
    }
}

/// This process's CPU time (user + system) and peak resident memory in bytes.
fn usage() -> (Duration, u64) {
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let cpu = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    // Linux counts the maximum RSS in KiB.
    (
        cpu(u.user_time()) + cpu(u.system_time()),
        u.max_rss() as u64 * 1024,
    )
}

/// The datastore and the bus of one run, and what keeps their databases alive.
async fn backend(
    kind: &str,
    separate_bus: bool,
) -> (Arc<dyn DataStore>, Arc<dyn Bus>, Box<dyn Any>) {
    let config = SqlBusConfig::default();
    match kind {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("pipeline.sqlite").display());
            let store = SqliteDataStore::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let bus_url = if separate_bus {
                format!("sqlite://{}", dir.path().join("bus.sqlite").display())
            } else {
                url
            };
            let bus = SqliteBus::connect(&bus_url, config).await.unwrap();
            (Arc::new(store), Arc::new(bus), Box::new(dir))
        }
        _ => {
            let (store, db) = datastore::testing_pg::fresh_pg_store().await;
            let (bus, bus_db) = if separate_bus {
                let bus_db = datastore::testing_pg::PgTestDb::create().await;
                (
                    PgBus::connect(bus_db.url(), config).await.unwrap(),
                    Some(bus_db),
                )
            } else {
                (PgBus::connect(db.url(), config).await.unwrap(), None)
            };
            (Arc::new(store), Arc::new(bus), Box::new((db, bus_db)))
        }
    }
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
                    failure: None,
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
    peak_rss: u64,
}

async fn run(kind: &str, pairs: u64, o: &Options) -> Figures {
    let (store, bus, _guard) = backend(kind, o.separate_bus).await;
    for q in QUEUES {
        bus.create_queue(q).await.unwrap();
    }
    let clips = o.clips.min(u32::try_from(pairs).unwrap_or(u32::MAX)).max(1);
    let episodes = u32::try_from(pairs.div_ceil(u64::from(clips))).unwrap();
    let total = u64::from(episodes) * u64::from(clips);

    // Load.
    let started = Instant::now();
    let sender = |q: &'static str| {
        let bus = Arc::clone(&bus);
        async move { bus.sender(q).await.unwrap() }
    };
    for chunk in (0..episodes).collect::<Vec<_>>().chunks(10_000) {
        let bodies = chunk.iter().map(|&i| encode(&episode(i))).collect();
        sender("curated_episodes")
            .await
            .send_batch(bodies)
            .await
            .unwrap();
    }
    let bodies = (0..clips).map(|i| encode(&clip(i))).collect();
    sender("curated_clips")
        .await
        .send_batch(bodies)
        .await
        .unwrap();
    let ingest = IngestConfig {
        receive_wait: Duration::ZERO,
        once: true,
        ..IngestConfig::default()
    };
    let e = start_episodes(
        CancellationToken::new(),
        bus.receiver("curated_episodes").await.unwrap(),
        store.clone(),
        ingest.clone(),
    );
    let c = start_clips(
        CancellationToken::new(),
        bus.receiver("curated_clips").await.unwrap(),
        store.clone(),
        ingest,
    );
    let (e, c) = (e.done.await.unwrap(), c.done.await.unwrap());
    ok(&e);
    ok(&c);
    let load = started.elapsed();

    // The pipeline.
    let token = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let (cpu_before, _) = usage();
    let started = Instant::now();
    for _ in 0..o.researchers {
        let rx = bus.receiver("pending_research").await.unwrap();
        let tx = bus.sender("completed_research").await.unwrap();
        tasks.spawn(researcher(rx, tx, token.clone()));
    }
    {
        let tx = bus.sender("pending_research").await.unwrap();
        let store = store.clone();
        let token = token.clone();
        let config = PendingResearchConfig {
            max_clips: o.max_clips,
            researchers: Some(o.in_flight),
            start_jitter: Duration::ZERO,
            ..PendingResearchConfig::default()
        };
        tasks.spawn(async move {
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
        });
    }
    for _ in 0..o.recorders.max(1) {
        let rx = bus.receiver("completed_research").await.unwrap();
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
    let (cpu_after, peak_rss) = usage();
    token.cancel();
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
    bus.close().await.unwrap();
    Figures {
        load,
        elapsed,
        cpu: cpu_after.saturating_sub(cpu_before),
        peak_rss,
    }
}

fn main() {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "researchers {}, items in flight {}, {} clips per item, {} recorder(s), bus {}",
        o.researchers,
        o.in_flight,
        o.max_clips,
        o.recorders,
        if o.separate_bus {
            "in a database of its own"
        } else {
            "in the datastore's database"
        }
    );
    println!("| backend | pairs | load (untimed) | pipeline | pairs/s | CPU ms / 1,000 pairs (this process) | peak RSS so far |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for &pairs in &o.pairs {
        for backend in &o.backends {
            let f = rt.block_on(run(backend, pairs, &o));
            println!(
                "| {backend} | {pairs} | {:.2} s | {:.2} s | {:.0} | {:.1} | {:.0} MiB |",
                f.load.as_secs_f64(),
                f.elapsed.as_secs_f64(),
                pairs as f64 / f.elapsed.as_secs_f64(),
                f.cpu.as_secs_f64() * 1e3 / (pairs as f64 / 1e3),
                f.peak_rss as f64 / (1024.0 * 1024.0)
            );
        }
    }
}
