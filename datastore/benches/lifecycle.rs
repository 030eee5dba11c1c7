//! The datastore through an archive's life: SCALE.md's targets measured not only on a fresh
//! store but at 10%, 50% and 90% of the pairs researched, reached the way production reaches
//! them: through the public `DataStore` API.
//!
//! ```text
//! scripts/bench-lifecycle.sh [--autovacuum on|off] -- [small|reference|large]
//!     [--points 10,50,90] [--streams 4] [--settle SECONDS] [--no-postgres] [--no-sqlite]
//! ```
//!
//! The script starts a throwaway PostgreSQL cluster with the server's default settings
//! (autovacuum on, unless `--autovacuum off`), never the machine's shared server, and passes
//! its URL as `ARCHIVIST_BENCH_PG_URL`.
//!
//! For each size and store: load the data set (batches of 10, as the ingestion archivists
//! do), then measure the fresh store. Then drive research from `--streams` concurrent
//! researchers, each as the archivists would: lease the next work item, and for the oldest
//! open item renew its lease and record its results (half an item per batch, as one receive
//! of the completed-research archivist would hold them), revoking the lease with the last. The stated number of leases stays open; one item in fifty is abandoned, so
//! its lease expires and its pairs are taken over; every 200,000 results a new clip and a new
//! episode arrive. A simulated clock moves one second per lease. At each point the drivers
//! stop and the same operations as on the fresh store are measured one at a time: `lease_next`
//! (the open leases kept at the stated number), recording batches of 10 from one and from
//! four archivists, a new clip, a new episode, `status`. On Postgres the dead rows and the
//! size of each table with its indexes are printed too, to show what grows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use datastore::{DataStore, Lease, LeaseRequest, LeaseUpdate, PgDataStore, SqliteDataStore};
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use tokio::sync::Mutex;

mod common;
use common::*;

const LEASE_SAMPLES: usize = 200;
const SINGLE_SAMPLES: usize = 20;
const STATUS_SAMPLES: usize = 30;
const RECORD_RESULTS: usize = 5_000;
/// One work item in this many is abandoned by its researcher: its lease expires.
const ABANDON_ONE_IN: u32 = 50;
/// A new clip and a new episode arrive every this many results recorded. (Counted in results,
/// not leases: a new clip is a one-clip work item for every episode, so arrivals counted in
/// leases would come ever faster as those small items took over.)
const ARRIVALS_EVERY: u64 = 200_000;
const LEASE_LENGTH_S: i64 = 2 * 3600;
/// Results per recording while research is driven: the completed-research archivist records
/// what one receive batch holds (up to 100), here half a work item's results at a time. The
/// measured recording uses batches of 10, SCALE.md's figure.
const DRIVE_BATCH: usize = 25;

// ------------------------------------------------------------------------------ the clock

/// Simulated time: one second per lease taken, so that a lease's two hours pass in 7,200
/// leases and abandoned work really expires and is taken over.
struct Clock {
    start: DateTime<Utc>,
    seconds: AtomicI64,
}

impl Clock {
    fn now(&self) -> DateTime<Utc> {
        self.start + Duration::seconds(self.seconds.load(Ordering::Relaxed))
    }
    fn tick(&self) -> DateTime<Utc> {
        self.start + Duration::seconds(self.seconds.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn request(&self, now: DateTime<Utc>) -> LeaseRequest {
        LeaseRequest {
            max_clips: MAX_CLIPS,
            duration: Duration::seconds(LEASE_LENGTH_S),
            now,
            lease_id: uuid::Uuid::new_v4(),
        }
    }
}

// ------------------------------------------------------------------------------ driving research

/// What the drivers did, for the report.
#[derive(Default)]
struct Counts {
    leases: AtomicU64,
    results: AtomicU64,
    abandoned: AtomicU64,
    reclaimed_pairs: AtomicU64,
    clips_added: AtomicU64,
    episodes_added: AtomicU64,
    /// Arrivals so far, in units of ARRIVALS_EVERY results.
    arrivals_due: AtomicU64,
}

struct Life {
    store: Arc<dyn DataStore>,
    clock: Clock,
    counts: Counts,
    /// Every open lease, oldest first, shared by the drivers.
    open: Mutex<VecDeque<Lease>>,
    active_leases: usize,
}

impl Life {
    /// Renews and records `lease`'s results in batches of [`DRIVE_BATCH`], revoking it with
    /// the last, as the completed-research archivist does when a researcher's results arrive
    /// in order, in two receives.
    async fn complete(&self, lease: &Lease) {
        let results = results_for(lease, self.clock.now());
        let batches: Vec<_> = results.chunks(DRIVE_BATCH).collect();
        for (i, batch) in batches.iter().enumerate() {
            let update = if i + 1 == batches.len() {
                LeaseUpdate::Revoke
            } else {
                LeaseUpdate::Renew {
                    now: self.clock.now(),
                }
            };
            self.store.update_lease(lease.id, update).await.unwrap();
            self.store.record_results(batch).await.unwrap();
        }
        self.counts
            .results
            .fetch_add(results.len() as u64, Ordering::Relaxed);
    }

    /// Takes one lease (new work), then finishes or abandons the oldest open one. `false`
    /// when there was no free work.
    async fn step(&self, rng: &mut rand::rngs::StdRng) -> bool {
        let now = self.clock.tick();
        let Some(lease) = self
            .store
            .lease_next(self.clock.request(now))
            .await
            .unwrap()
        else {
            return false;
        };
        self.counts.leases.fetch_add(1, Ordering::Relaxed);
        self.counts
            .reclaimed_pairs
            .fetch_add(u64::from(lease.reclaimed_pairs), Ordering::Relaxed);
        let oldest = {
            let mut open = self.open.lock().await;
            open.push_back(lease);
            if open.len() > self.active_leases {
                open.pop_front()
            } else {
                None
            }
        };
        if let Some(oldest) = oldest {
            if rng.gen_ratio(1, ABANDON_ONE_IN) {
                self.counts.abandoned.fetch_add(1, Ordering::Relaxed);
            } else {
                self.complete(&oldest).await;
            }
        }
        let results = self.counts.results.load(Ordering::Relaxed);
        let due = results / ARRIVALS_EVERY;
        if self.counts.arrivals_due.fetch_max(due, Ordering::Relaxed) < due {
            let k = self.counts.clips_added.fetch_add(1, Ordering::Relaxed) as usize;
            self.store
                .upsert_clip(&new_clip(100_000 + k))
                .await
                .unwrap();
            self.counts.episodes_added.fetch_add(1, Ordering::Relaxed);
            self.store
                .upsert_episode(&new_episode(100_000 + k))
                .await
                .unwrap();
        }
        true
    }

    async fn researched_fraction(&self) -> f64 {
        let s = self.store.status(self.clock.now()).await.unwrap();
        s.researched_pairs as f64 / s.research_pairs.max(1) as f64
    }

    /// Drives research from `streams` concurrent researchers until `fraction` of the pairs
    /// are researched.
    async fn drive_to(self: &Arc<Self>, fraction: f64, streams: usize, seed: u64) {
        let started = Instant::now();
        let results_before = self.counts.results.load(Ordering::Relaxed);
        loop {
            let done = self.researched_fraction().await;
            if done >= fraction {
                break;
            }
            // Enough steps to get most of the way there before looking again.
            let s = self.store.status(self.clock.now()).await.unwrap();
            let missing = ((fraction - done) * s.research_pairs as f64) as u64;
            let steps = (missing / u64::from(MAX_CLIPS)).clamp(1, 2_000);
            let per_stream = steps.div_ceil(streams as u64);
            let tasks: Vec<_> = (0..streams)
                .map(|i| {
                    let life = self.clone();
                    let seed =
                        seed ^ ((i as u64) << 32) ^ self.counts.leases.load(Ordering::Relaxed);
                    tokio::spawn(async move {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                        for _ in 0..per_stream {
                            if !life.step(&mut rng).await {
                                break;
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        }
        let results = self.counts.results.load(Ordering::Relaxed) - results_before;
        eprintln!(
            "   drove {results} results in {:.0} s ({:.0}/s)",
            started.elapsed().as_secs_f64(),
            results as f64 / started.elapsed().as_secs_f64()
        );
    }

    /// Opens or finishes leases until exactly the stated number is open.
    async fn settle_open_leases(&self) {
        loop {
            let (len, oldest) = {
                let mut open = self.open.lock().await;
                let len = open.len();
                let oldest = if len > self.active_leases {
                    open.pop_front()
                } else {
                    None
                };
                (len, oldest)
            };
            if let Some(l) = oldest {
                self.complete(&l).await;
            } else if len < self.active_leases {
                let now = self.clock.tick();
                match self
                    .store
                    .lease_next(self.clock.request(now))
                    .await
                    .unwrap()
                {
                    Some(l) => self.open.lock().await.push_back(l),
                    None => return,
                }
            } else {
                return;
            }
        }
    }
}

// ------------------------------------------------------------------------------ measuring

#[derive(Default, Clone)]
struct Point {
    label: String,
    researched: f64,
    lease_ms: Option<(f64, f64)>,
    record_10_per_s: Option<f64>,
    record_10x4_per_s: Option<f64>,
    new_clip_ms: Option<(f64, f64)>,
    new_episode_ms: Option<(f64, f64)>,
    status_ms: Option<(f64, f64)>,
    /// Per table: dead rows, vacuums so far, bytes with indexes, % of updates that were HOT.
    tables: Vec<(String, i64, i64, i64, f64)>,
}

impl Point {
    /// One line as soon as the point is measured: a long run shows its progress.
    fn log(&self) {
        let pair = |v: Option<(f64, f64)>| {
            v.map(|(m, p)| format!("{m:.2}/{p:.2}"))
                .unwrap_or_else(|| "-".into())
        };
        eprintln!(
            "   {} ({:.1}% researched): lease {} ms, clip {} ms, episode {} ms, status {} ms, \
             record {:.0}/s and {:.0}/s (x4)",
            self.label,
            self.researched * 100.0,
            pair(self.lease_ms),
            pair(self.new_clip_ms),
            pair(self.new_episode_ms),
            pair(self.status_ms),
            self.record_10_per_s.unwrap_or(0.0),
            self.record_10x4_per_s.unwrap_or(0.0),
        );
        for (name, dead, vacuums, bytes, hot) in &self.tables {
            eprintln!(
                "      {name}: {dead} dead rows, {vacuums} vacuums, {:.1} MB, {hot:.0}% HOT updates",
                *bytes as f64 / 1e6
            );
        }
    }
}

async fn leased_results(life: &Life, pairs: usize) -> (Vec<Lease>, Vec<datastore::ResearchResult>) {
    let mut leases = Vec::new();
    let mut results = Vec::new();
    while results.len() < pairs {
        let now = life.clock.tick();
        let Some(lease) = life
            .store
            .lease_next(life.clock.request(now))
            .await
            .unwrap()
        else {
            break;
        };
        results.extend(results_for(&lease, now));
        leases.push(lease);
    }
    (leases, results)
}

async fn record_rate(life: &Arc<Life>, streams: usize) -> Option<f64> {
    let (leases, results) = leased_results(life, RECORD_RESULTS).await;
    if results.is_empty() {
        return None;
    }
    let n = results.len();
    let per_stream = n.div_ceil(streams);
    let start = Instant::now();
    let tasks: Vec<_> = results
        .chunks(per_stream)
        .map(|part| {
            let store = life.store.clone();
            let part = part.to_vec();
            tokio::spawn(async move {
                for chunk in part.chunks(BUS_BATCH) {
                    store.record_results(chunk).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    for l in leases {
        life.store
            .update_lease(l.id, LeaseUpdate::Revoke)
            .await
            .unwrap();
    }
    Some(rate)
}

async fn measure(life: &Arc<Life>, label: &str, pg: Option<&PgPool>) -> Point {
    let mut p = Point {
        label: label.into(),
        researched: life.researched_fraction().await,
        ..Point::default()
    };
    life.settle_open_leases().await;

    let mut s = Vec::new();
    for _ in 0..STATUS_SAMPLES {
        let now = life.clock.now();
        let start = Instant::now();
        life.store.status(now).await.unwrap();
        s.push(ms(start.elapsed()));
    }
    p.status_ms = Some(median_p95(s));

    statement_times(pg, "").await;
    let mut s = Vec::new();
    for _ in 0..LEASE_SAMPLES {
        let now = life.clock.tick();
        let start = Instant::now();
        let lease = life
            .store
            .lease_next(life.clock.request(now))
            .await
            .unwrap();
        s.push(ms(start.elapsed()));
        let Some(lease) = lease else { break };
        // Untimed: the oldest work item is done, so the open count stays.
        let oldest = {
            let mut open = life.open.lock().await;
            open.push_back(lease);
            open.pop_front()
        };
        if let Some(oldest) = oldest {
            life.complete(&oldest).await;
        }
    }
    p.lease_ms = Some(median_p95(s));
    statement_times(pg, "lease_next").await;

    p.record_10_per_s = record_rate(life, 1).await;
    statement_times(pg, "record_results, one archivist").await;
    p.record_10x4_per_s = record_rate(life, 4).await;

    let mut s = Vec::new();
    for _ in 0..SINGLE_SAMPLES {
        let k = life.counts.clips_added.fetch_add(1, Ordering::Relaxed) as usize;
        let c = new_clip(100_000 + k);
        let start = Instant::now();
        life.store.upsert_clip(&c).await.unwrap();
        s.push(ms(start.elapsed()));
    }
    p.new_clip_ms = Some(median_p95(s));
    let mut s = Vec::new();
    for _ in 0..SINGLE_SAMPLES {
        let k = life.counts.episodes_added.fetch_add(1, Ordering::Relaxed) as usize;
        let e = new_episode(100_000 + k);
        let start = Instant::now();
        life.store.upsert_episode(&e).await.unwrap();
        s.push(ms(start.elapsed()));
    }
    p.new_episode_ms = Some(median_p95(s));

    if let Some(pool) = pg {
        p.tables = sqlx::query_as(
            "SELECT relname::text, n_dead_tup, autovacuum_count + vacuum_count,
                    pg_total_relation_size(relid),
                    (100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1))::float8
             FROM pg_stat_user_tables
             WHERE relname IN ('episodes', 'clips', 'leases', 'leased_pairs', 'research_results')
             ORDER BY relname",
        )
        .fetch_all(pool)
        .await
        .unwrap();
    }
    p
}

/// With `ARCHIVIST_BENCH_PG_STATS=1` (the script then loads pg_stat_statements): the server's
/// own time per statement since the last call, to see where an operation's time goes. An
/// empty `what` only resets the counts.
async fn statement_times(pg: Option<&PgPool>, what: &str) {
    let Some(pool) = pg else { return };
    if std::env::var("ARCHIVIST_BENCH_PG_STATS").is_err() {
        return;
    }
    if !what.is_empty() {
        let rows: Vec<(i64, f64, String)> = sqlx::query_as(
            "SELECT calls, mean_exec_time, regexp_replace(left(query, 70), '\\s+', ' ', 'g')
             FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database
                                                   WHERE datname = current_database())
             ORDER BY total_exec_time DESC LIMIT 8",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        eprintln!("      server time per statement, {what}:");
        for (calls, mean, query) in rows {
            eprintln!("        {calls:>6} × {mean:.3} ms  {query}");
        }
    }
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(pool)
        .await
        .unwrap();
}

/// `--settle S`: a pause before each measurement, for a shared machine's other work (and its
/// disk writes, which every commit waits behind) to be paused or to settle.
async fn settle(seconds: u64) {
    if seconds > 0 {
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    }
}

// ------------------------------------------------------------------------------ one life

async fn live(
    store: Arc<dyn DataStore>,
    pg: Option<PgPool>,
    size: &Size,
    points: &[u32],
    streams: usize,
    settle_s: u64,
) -> (Vec<Point>, String) {
    store.migrate().await.unwrap();
    if let (Some(pool), Ok(_)) = (&pg, std::env::var("ARCHIVIST_BENCH_PG_STATS")) {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(pool)
            .await
            .unwrap();
    }
    let data = generate(size);
    eprintln!("   loading");
    load(&store, &data).await;
    if let Some(pool) = &pg {
        // What autovacuum does soon after a bulk load (and what the fresh-store figures of the
        // datastore benchmark assume); from here on, vacuum is the server's business.
        sqlx::query("VACUUM ANALYZE").execute(pool).await.unwrap();
    }
    let life = Arc::new(Life {
        store,
        clock: Clock {
            start: ts(2026, 6, 1),
            seconds: AtomicI64::new(0),
        },
        counts: Counts::default(),
        open: Mutex::new(VecDeque::new()),
        active_leases: size.active_leases as usize,
    });
    eprintln!("   measuring the fresh store");
    settle(settle_s).await;
    let first = measure(&life, "fresh", pg.as_ref()).await;
    first.log();
    let mut out = vec![first];
    for &pct in points {
        eprintln!("   driving research to {pct}%");
        life.drive_to(f64::from(pct) / 100.0, streams, 0x11fe).await;
        // A line of its own, so that whoever watches the log knows when figures are taken.
        eprintln!("   measuring at {pct}%");
        settle(settle_s).await;
        let point = measure(&life, &format!("{pct}%"), pg.as_ref()).await;
        point.log();
        out.push(point);
    }
    let c = &life.counts;
    let summary = format!(
        "Driven through the API: {} leases, {} results recorded, {} work items abandoned \
         ({} pairs taken over after expiry), {} clips and {} episodes added.",
        c.leases.load(Ordering::Relaxed),
        c.results.load(Ordering::Relaxed),
        c.abandoned.load(Ordering::Relaxed),
        c.reclaimed_pairs.load(Ordering::Relaxed),
        c.clips_added.load(Ordering::Relaxed),
        c.episodes_added.load(Ordering::Relaxed),
    );
    (out, summary)
}

async fn load(store: &Arc<dyn DataStore>, data: &DataSet) {
    let episodes = {
        let store = store.clone();
        let items = data.episodes.clone();
        tokio::spawn(async move {
            for chunk in items.chunks(BUS_BATCH) {
                store.upsert_episodes(chunk).await.unwrap();
            }
        })
    };
    for chunk in data.clips.chunks(BUS_BATCH) {
        store.upsert_clips(chunk).await.unwrap();
    }
    episodes.await.unwrap();
}

// ------------------------------------------------------------------------------ report

fn report(title: &str, size: &Size, points: &[Point], summary: &str) -> String {
    let t = targets(size);
    let mut out = format!("\n#### {title}\n\n| operation | target |");
    for p in points {
        out.push_str(&format!(" {} |", p.label));
    }
    out.push_str("\n| --- | --- |");
    for _ in points {
        out.push_str(" --- |");
    }
    out.push('\n');
    let verdict = |v: f64, target: Option<f64>, higher: bool| match target {
        Some(t) if (higher && v > t) || (!higher && v < t) => " ✅",
        Some(_) => " ❌",
        None => "",
    };
    let mut pair_row = |label: &str, target: Option<f64>, get: fn(&Point) -> Option<(f64, f64)>| {
        out.push_str(&format!(
            "| {label} | {} |",
            target
                .map(|t| format!("< {t} ms"))
                .unwrap_or_else(|| "—".into())
        ));
        for p in points {
            match get(p) {
                // Both the median and the p95 are held to the target.
                Some((m, p95)) => out.push_str(&format!(
                    " {m:.2} / {p95:.2}{} |",
                    verdict(m.max(p95), target, false)
                )),
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    };
    pair_row(
        &format!("lease next work item ({MAX_CLIPS} clips), median / p95 ms"),
        t.as_ref().map(|t| t.lease_ms),
        |p| p.lease_ms,
    );
    pair_row(
        "ingest one new clip, median / p95 ms",
        t.as_ref().map(|t| t.new_clip_ms),
        |p| p.new_clip_ms,
    );
    pair_row(
        "ingest one new episode, median / p95 ms",
        t.as_ref().map(|t| t.new_episode_ms),
        |p| p.new_episode_ms,
    );
    pair_row(
        "`status`, median / p95 ms",
        t.as_ref().map(|t| t.status_ms),
        |p| p.status_ms,
    );
    let mut rate_row = |label: &str, get: fn(&Point) -> Option<f64>| {
        let target = t.as_ref().map(|t| t.record_per_s);
        out.push_str(&format!(
            "| {label} | {} |",
            target
                .map(|t| format!("> {t} /s"))
                .unwrap_or_else(|| "—".into())
        ));
        for p in points {
            match get(p) {
                Some(v) => out.push_str(&format!(" {v:.0}{} |", verdict(v, target, true))),
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    };
    rate_row("record results, batches of 10, one archivist, /s", |p| {
        p.record_10_per_s
    });
    rate_row("record results, batches of 10, four archivists, /s", |p| {
        p.record_10x4_per_s
    });
    out.push_str("| pairs researched when measured | — |");
    for p in points {
        out.push_str(&format!(" {:.1}% |", p.researched * 100.0));
    }
    out.push('\n');
    out.push_str("| lease median, ratio to the fresh store | — |");
    let fresh = points.first().and_then(|p| p.lease_ms).map(|x| x.0);
    for p in points {
        match (p.lease_ms, fresh) {
            (Some((m, _)), Some(f)) if f > 0.0 => out.push_str(&format!(" {:.2} |", m / f)),
            _ => out.push_str(" — |"),
        }
    }
    out.push('\n');
    if points.iter().any(|p| !p.tables.is_empty()) {
        out.push_str(
            "\nPostgres tables (dead rows · vacuums so far · MB with indexes · HOT updates):\n\n| table |",
        );
        for p in points {
            out.push_str(&format!(" {} |", p.label));
        }
        out.push_str("\n| --- |");
        for _ in points {
            out.push_str(" --- |");
        }
        out.push('\n');
        let names: Vec<String> = points[0].tables.iter().map(|t| t.0.clone()).collect();
        for name in names {
            out.push_str(&format!("| {name} |"));
            for p in points {
                match p.tables.iter().find(|t| t.0 == name) {
                    Some((_, dead, vac, bytes, hot)) => out.push_str(&format!(
                        " {dead} · {vac} · {:.1} · {hot:.0}% |",
                        *bytes as f64 / 1e6
                    )),
                    None => out.push_str(" — |"),
                }
            }
            out.push('\n');
        }
    }
    out.push_str(&format!("\n{summary}\n"));
    out
}

// ------------------------------------------------------------------------------ main

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let value = |f: &str| {
        args.iter()
            .position(|a| a == f)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let mut sizes: Vec<Size> = SIZES
        .iter()
        .filter(|s| args.iter().any(|a| a == s.name))
        .copied()
        .collect();
    if sizes.is_empty() {
        sizes.push(SIZES[1]);
    }
    let points: Vec<u32> = value("--points")
        .unwrap_or_else(|| "10,50,90".into())
        .split(',')
        .map(|p| {
            p.trim()
                .parse()
                .expect("--points: percentages, as 10,50,90")
        })
        .collect();
    let settle_s: u64 = value("--settle")
        .map(|s| s.parse().expect("--settle: seconds"))
        .unwrap_or(0);
    let streams: usize = value("--streams")
        .map(|s| s.parse().expect("--streams: a number"))
        .unwrap_or(4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tables = String::new();
        for size in &sizes {
            let pairs = u64::from(size.episodes) * u64::from(size.clips);
            let head = format!(
                "{} — {} episodes × {} clips = {pairs} pairs, {} leases open, {streams} researchers",
                size.name, size.episodes, size.clips, size.active_leases
            );
            if !flag("--no-postgres") {
                let (db, options) = BenchDb::create(&format!("life_{}", size.name), flag("--keep")).await;
                let store = PgDataStore::connect_with(options, pool_options())
                    .await
                    .unwrap();
                let pool = store.pool().clone();
                let autovacuum: String = sqlx::query_scalar("SHOW autovacuum")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                eprintln!("== {}: Postgres, autovacuum {autovacuum}", size.name);
                let (pts, summary) =
                    live(Arc::new(store), Some(pool.clone()), size, &points, streams, settle_s).await;
                pool.close().await;
                db.drop_now().await;
                let table = report(
                    &format!("Postgres, autovacuum {autovacuum}: {head}"),
                    size,
                    &pts,
                    &summary,
                );
                println!("{table}");
                tables.push_str(&table);
            }
            if !flag("--no-sqlite") {
                eprintln!("== {}: SQLite", size.name);
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("life.db").display());
                let store = SqliteDataStore::connect(&url).await.unwrap();
                let (pts, summary) = live(Arc::new(store), None, size, &points, streams, settle_s).await;
                let table = report(&format!("SQLite: {head}"), size, &pts, &summary);
                println!("{table}");
                tables.push_str(&table);
            }
        }
        println!("\n---- all ----\n{tables}");
    });
}
