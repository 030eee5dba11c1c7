//! The datastore through an archive's life: SCALE.md's targets measured not only on a fresh
//! store but at 10%, 50% and 90% of the pairs researched, reached the way production reaches
//! them: through the public `DataStore` API.
//!
//! ```text
//! scripts/bench-lifecycle.sh [--autovacuum on|off] [--diagnose] -- [small|reference|large]
//!     [--points 10,50,90] [--repeats 5] [--streams 4] [--settle SECONDS]
//!     [--outside-check] [--diagnose [CSV]] [--compare-before] [--recording-waits]
//!     [--no-postgres] [--no-sqlite]
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
//! of the completed-research archivist would hold them), revoking the lease with the last.
//! The stated number of leases stays open; one item in fifty is abandoned, so its lease
//! expires and its pairs are taken over; every 200,000 results a new clip and a new episode
//! arrive. A simulated clock moves one second per lease.
//!
//! At each point the drivers stop and the operations are measured one at a time, in
//! `--repeats` rounds (default 5) separated by a little more research (a seeded random
//! number of leases taken and finished by the drivers, 0.05% to 0.25% of the pairs: 40 to 200
//! leases at the reference size), so that each round sees
//! another moment of the store, as a check arriving at any time would. Each round measures
//! `status`, `lease_next` (the open leases kept at the stated number: the oldest item is
//! finished, untimed, after each lease), and recording batches of 10 from one and from four
//! archivists. New clips and new episodes are ingested after the last round, in `--repeats`
//! rounds of 20/`--repeats` (at least 4) each: every new clip adds a pair to every episode,
//! so ingesting more, or before a round's `lease_next`, would change the life and what the
//! later rounds measure. The tables give, per operation and point, the median of the rounds'
//! medians and the worst round (the highest p95; for rates, the lowest), and judge the target
//! on the worst round, both its median and its p95: one lucky round cannot hide a miss. A
//! table of every round's `lease_next` follows. On Postgres the dead rows and the size of
//! each table with its indexes are printed too, to show what grows.
//!
//! `--outside-check` drives research as the issue's outside check does instead: one
//! researcher unless `--streams` says otherwise, each item leased, its 50 results recorded in
//! one batch, then the lease revoked, 50 leases kept open, nothing abandoned, no arrivals, no
//! `VACUUM ANALYZE` after the load (the store is reached through the API only).
//!
//! `--diagnose [CSV]` (Postgres; the script then loads pg_stat_statements): for every
//! `lease_next` sample, the server's time per statement of that call (planning included; the
//! rest of the call is its commit's sync, the round trips and the client), a bare commit's time
//! just after it (what a sync cost then), the pairs it leased, whether the lease frontier was
//! valid and how many episodes the walk crossed from it, which tables an (auto)vacuum was
//! working on, the dead rows of `leased_pairs`, `leases` and `episodes`, the WAL the server
//! wrote meanwhile, the machine's load and the seconds since the last checkpoint started.
//! Printed as a table comparing the slowest samples with the others and the rounds with each
//! other, and every sample to CSV if a path is given.
//!
//! `--recording-waits` (Postgres): while one archivist records, what its server process waited
//! on, whether a checkpoint was writing or an autovacuum running, and the WAL a result wrote,
//! sampled from `pg_stat_activity` (see [`Waits`]); a table of every round.
//!
//! `--points none` measures the fresh store only.
//!
//! `--compare-before` (Postgres): each `lease_next` sample is paired with one through the same
//! database whose lease selections begin as they did before their transaction's settings
//! (`PgDataStore::with_lease_transaction_as_before`, on a pool of its own: the commit waits for
//! the WAL's sync, the planner may scan `leased_pairs` and `leases` sequentially), the two
//! interleaved so that both see the same moments; the table gets a row for them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use datastore::{DataStore, Lease, LeaseRequest, LeaseUpdate, PgDataStore, SqliteDataStore};
use rand::{Rng, SeedableRng};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use tokio::sync::Mutex;

mod common;
use common::*;

const LEASE_SAMPLES: usize = 200;
/// New clips, and new episodes, ingested per point in all (split over the rounds).
const SINGLE_SAMPLES: usize = 20;
/// At least this many per round.
const SINGLE_SAMPLES_PER_ROUND: usize = 4;
const STATUS_SAMPLES: usize = 30;
const RECORD_RESULTS: usize = 5_000;
/// Research between two rounds, as a share of the pairs: at least, at most (at the reference
/// size, 2,000 to 10,000 results: 40 to 200 leases).
const CHURN: (f64, f64) = (1.0 / 2000.0, 1.0 / 400.0);
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

/// How research is driven.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// As the archivists do it: results in two batches, the lease renewed before the first
    /// and revoked with the last; one item in fifty abandoned; new clips and episodes arrive.
    Archivists,
    /// As the issue's outside check does it: the item's results in one batch, then the lease
    /// revoked; nothing abandoned, nothing arrives.
    OutsideCheck,
}

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
    streams: usize,
    style: Style,
    /// `--compare-before`: the same database, lease selections as before their settings.
    before: Option<Arc<dyn DataStore>>,
    /// `--recording-waits` (Postgres): a connection of its own to sample the server with
    /// while one archivist records.
    waits: Option<PgPool>,
}

impl Life {
    /// Records `lease`'s results and ends it. As the archivists: renews and records in
    /// batches of [`DRIVE_BATCH`], revoking it with the last, as the completed-research
    /// archivist does when a researcher's results arrive in order, in two receives. As the
    /// outside check: records them in one batch, then revokes.
    async fn complete(&self, lease: &Lease) {
        let results = results_for(lease, self.clock.now());
        match self.style {
            Style::OutsideCheck => {
                self.store.record_results(&results).await.unwrap();
                self.store
                    .update_lease(lease.id, LeaseUpdate::Revoke)
                    .await
                    .unwrap();
            }
            Style::Archivists => {
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
            }
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
            if self.style == Style::Archivists && rng.gen_ratio(1, ABANDON_ONE_IN) {
                self.counts.abandoned.fetch_add(1, Ordering::Relaxed);
            } else {
                self.complete(&oldest).await;
            }
        }
        if self.style == Style::OutsideCheck {
            return true;
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

    /// `steps` steps in all, shared by the concurrent researchers. `false` if they ran out of
    /// free work.
    async fn run_steps(self: &Arc<Self>, steps: u64, seed: u64) -> bool {
        let per_stream = steps.div_ceil(self.streams as u64);
        let tasks: Vec<_> = (0..self.streams)
            .map(|i| {
                let life = self.clone();
                let seed = seed ^ ((i as u64) << 32) ^ self.counts.leases.load(Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                    for _ in 0..per_stream {
                        quiet::wait_turn().await;
                        if !life.step(&mut rng).await {
                            return false;
                        }
                    }
                    true
                })
            })
            .collect();
        let mut more = true;
        for t in tasks {
            more &= t.await.unwrap();
        }
        more
    }

    /// Drives research until `fraction` of the pairs are researched.
    async fn drive_to(self: &Arc<Self>, fraction: f64, seed: u64) {
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
            if !self.run_steps(steps, seed).await {
                break;
            }
        }
        let results = self.counts.results.load(Ordering::Relaxed) - results_before;
        eprintln!(
            "   drove {results} results in {:.0} s ({:.0}/s)",
            started.elapsed().as_secs_f64(),
            results as f64 / started.elapsed().as_secs_f64()
        );
    }

    /// A little more research between two rounds of measurement: a seeded random number of
    /// leases taken and finished, then the open leases back at the stated number.
    async fn churn(self: &Arc<Self>, rng: &mut rand::rngs::StdRng) {
        let pairs = self
            .store
            .status(self.clock.now())
            .await
            .unwrap()
            .research_pairs as f64;
        let steps =
            ((rng.gen_range(CHURN.0..=CHURN.1) * pairs) as u64 / u64::from(MAX_CLIPS)).max(1);
        self.run_steps(steps, rng.gen()).await;
        self.settle_open_leases().await;
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

/// One round's figures: (median, p95) ms, or a rate.
#[derive(Default, Clone)]
struct Round {
    lease_ms: Option<(f64, f64)>,
    /// `--compare-before`: `lease_next` as before its transaction's settings.
    lease_before_ms: Option<(f64, f64)>,
    record_10_per_s: Option<f64>,
    /// `--recording-waits`: what the server did while one archivist recorded.
    record_10_waits: Option<Waits>,
    record_10x4_per_s: Option<f64>,
    new_clip_ms: Option<(f64, f64)>,
    new_episode_ms: Option<(f64, f64)>,
    status_ms: Option<(f64, f64)>,
}

#[derive(Default, Clone)]
struct Point {
    label: String,
    researched: f64,
    /// The rounds of `status`, `lease_next` and recording.
    rounds: Vec<Round>,
    /// The rounds of ingestion (new clips, new episodes).
    ingest_rounds: Vec<Round>,
    /// Per table: dead rows, vacuums so far, bytes with indexes, % of updates that were HOT.
    tables: Vec<(String, i64, i64, i64, f64)>,
    /// `--diagnose`: every `lease_next` sample.
    samples: Vec<Sample>,
}

/// Over the rounds: the median of the rounds' medians, and the worst round's (median, p95),
/// the worst being the one with the highest p95 (then median).
type OverRounds = (f64, (f64, f64));

fn times_over(rounds: &[Round], get: fn(&Round) -> Option<(f64, f64)>) -> Option<OverRounds> {
    let v: Vec<(f64, f64)> = rounds.iter().filter_map(get).collect();
    let worst = v
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)))?;
    Some((median_p95(v.iter().map(|x| x.0).collect()).0, worst))
}

/// Over the rounds: the median rate and the lowest.
fn rates_over(rounds: &[Round], get: fn(&Round) -> Option<f64>) -> Option<(f64, f64)> {
    let v: Vec<f64> = rounds.iter().filter_map(get).collect();
    let worst = v.iter().copied().min_by(|a, b| a.total_cmp(b))?;
    Some((median_p95(v).0, worst))
}

fn pair(v: Option<(f64, f64)>) -> String {
    v.map(|(m, p)| format!("{m:.2}/{p:.2}"))
        .unwrap_or_else(|| "-".into())
}

impl Point {
    fn lease(&self) -> Option<OverRounds> {
        times_over(&self.rounds, |r| r.lease_ms)
    }

    /// One line as soon as the point is measured: a long run shows its progress.
    fn log(&self) {
        let over = |v: Option<OverRounds>| {
            v.map(|(m, (wm, wp))| format!("{m:.2} (worst {wm:.2}/{wp:.2})"))
                .unwrap_or_else(|| "-".into())
        };
        let rate = |v: Option<(f64, f64)>| {
            v.map(|(m, w)| format!("{m:.0} (worst {w:.0})"))
                .unwrap_or_else(|| "-".into())
        };
        eprintln!(
            "   {} ({:.1}% researched, {} rounds): lease {} ms, clip {} ms, episode {} ms, \
             status {} ms, record {}/s and {}/s (x4)",
            self.label,
            self.researched * 100.0,
            self.rounds.len(),
            over(self.lease()),
            over(times_over(&self.ingest_rounds, |r| r.new_clip_ms)),
            over(times_over(&self.ingest_rounds, |r| r.new_episode_ms)),
            over(times_over(&self.rounds, |r| r.status_ms)),
            rate(rates_over(&self.rounds, |r| r.record_10_per_s)),
            rate(rates_over(&self.rounds, |r| r.record_10x4_per_s)),
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

async fn record_rate(life: &Arc<Life>, streams: usize) -> (Option<f64>, Option<Waits>) {
    let (leases, results) = leased_results(life, RECORD_RESULTS).await;
    if results.is_empty() {
        return (None, None);
    }
    let n = results.len();
    let per_stream = n.div_ceil(streams);
    let sampler = match (&life.waits, streams) {
        (Some(pool), 1) => Some(WaitSampler::start(pool.clone()).await),
        _ => None,
    };
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
    let waits = match sampler {
        Some(s) => Some(s.stop(n).await),
        None => None,
    };
    for l in leases {
        life.store
            .update_lease(l.id, LeaseUpdate::Revoke)
            .await
            .unwrap();
    }
    (Some(rate), waits)
}

// ------------------------------------------------------------------------------ recording's waits

/// `--recording-waits` (Postgres): what the server was doing while one archivist recorded,
/// sampled from `pg_stat_activity` every [`WAIT_SAMPLE_EVERY`] on a connection of its own:
/// what the recording's server process waited on (nothing: on the CPU), whether a checkpoint
/// was writing and an autovacuum worker running, and the WAL written per result. A round that
/// records slower than the others shows here which of them it spent its time on; [`Cores`]
/// shows whether its processes worked more or waited for a core, and who held the cores.
#[derive(Default, Clone)]
struct Waits {
    samples: u32,
    /// Samples with no client statement running: the time between statements (the client,
    /// the round trips).
    between: u32,
    /// A statement running and waiting on nothing.
    cpu: u32,
    /// Waiting for the WAL to reach the disk: its own sync (IO WALSync/WALWrite) or another
    /// process's (LWLock WALWrite).
    wal_flush: u32,
    /// Reading a table or index page the buffer cache did not hold.
    data_read: u32,
    /// Any other wait (locks, buffer mappings, ...).
    other: u32,
    /// The checkpointer writing (not idle in its main loop).
    checkpoint: u32,
    /// At least one autovacuum worker running.
    autovacuum: u32,
    wal_bytes_per_result: f64,
    cores: Cores,
}

/// Who had the machine's two cores while one archivist recorded (`/proc/<pid>/schedstat`;
/// empty unless the server runs on this machine), in ms: on a CPU, and runnable but waiting
/// for one.
#[derive(Default, Clone)]
struct Cores {
    window_ms: f64,
    /// The client backends of the store's database: the recording's server side.
    backends: (f64, f64),
    /// Of the backends' time on a core, the part in the kernel (a commit's WAL sync among it).
    backends_kernel_ms: f64,
    /// This process's threads: the recording's client side (and the sampler).
    bench: (f64, f64),
    /// The cluster's other processes: checkpointer, WAL writer, autovacuum, ...
    cluster_run_ms: f64,
    /// Every other process on the machine, and the busiest of them (name, pid, ms).
    outside_run_ms: f64,
    busiest: Option<(String, u32, f64)>,
    /// [`reference_work`] just before the recording and just after, in ms: what one fixed
    /// piece of CPU work took then. If it too is slower in a slow round, the machine was
    /// (another guest on the host, the clock speed), not the store.
    reference_ms: (f64, f64),
}

/// A fixed piece of CPU work (a xorshift chain, tens of ms), timed: the same work each round,
/// so that its time tells how fast the machine was just then.
fn reference_work() -> f64 {
    let start = Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x);
    ms(start.elapsed())
}

const WAIT_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

struct WaitSampler {
    pool: PgPool,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Waits>,
    wal_at_start: f64,
    started: Instant,
    reference_ms: f64,
    processes: std::collections::HashMap<u32, cpu::Sched>,
    threads: std::collections::HashMap<u32, cpu::Sched>,
}

/// The cluster's processes by pid, and whether each is a client backend of the store's
/// database.
async fn cluster_pids(pool: &PgPool) -> Vec<(u32, bool)> {
    let rows: Vec<(i32, bool)> = sqlx::query_as(
        "SELECT pid, coalesce(backend_type = 'client backend'
                               AND datname = current_database(), false)
         FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .filter_map(|(pid, client)| Some((u32::try_from(pid).ok()?, client)))
        .collect()
}

async fn wal_position(pool: &PgPool) -> f64 {
    sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8")
        .fetch_one(pool)
        .await
        .unwrap()
}

impl WaitSampler {
    async fn start(pool: PgPool) -> Self {
        let reference_ms = reference_work();
        let wal_at_start = wal_position(&pool).await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let (pool, stop) = (pool.clone(), Arc::clone(&stop));
            async move {
                let mut w = Waits::default();
                while !stop.load(Ordering::Relaxed) {
                    let rows: Vec<(String, String, String)> = sqlx::query_as(
                        "SELECT backend_type, coalesce(wait_event_type, ''),
                                coalesce(wait_event, '')
                         FROM pg_stat_activity
                         WHERE pid <> pg_backend_pid()
                           AND (backend_type IN ('checkpointer', 'autovacuum worker')
                                OR (backend_type = 'client backend' AND state = 'active'
                                    AND datname = current_database()))",
                    )
                    .fetch_all(&pool)
                    .await
                    .unwrap();
                    w.samples += 1;
                    let mut running = false;
                    let mut vacuuming = false;
                    for (kind, wait_type, wait) in &rows {
                        match kind.as_str() {
                            "checkpointer" if wait != "CheckpointerMain" => w.checkpoint += 1,
                            "autovacuum worker" => vacuuming = true,
                            "client backend" if !running => {
                                running = true;
                                match (wait_type.as_str(), wait.as_str()) {
                                    ("", _) => w.cpu += 1,
                                    ("IO", "WALSync" | "WALWrite") | ("LWLock", "WALWrite") => {
                                        w.wal_flush += 1
                                    }
                                    ("IO", "DataFileRead") => w.data_read += 1,
                                    _ => w.other += 1,
                                }
                            }
                            _ => {}
                        }
                    }
                    w.between += u32::from(!running);
                    w.autovacuum += u32::from(vacuuming);
                    tokio::time::sleep(WAIT_SAMPLE_EVERY).await;
                }
                w
            }
        });
        Self {
            pool,
            stop,
            task,
            wal_at_start,
            started: Instant::now(),
            reference_ms,
            processes: cpu::processes(),
            threads: cpu::threads(),
        }
    }

    async fn stop(self, results: usize) -> Waits {
        let (processes, threads) = (cpu::processes(), cpu::threads());
        let window_ms = ms(self.started.elapsed());
        self.stop.store(true, Ordering::Relaxed);
        let mut w = self.task.await.unwrap();
        w.wal_bytes_per_result =
            (wal_position(&self.pool).await - self.wal_at_start) / results as f64;
        let to_ms = |ns: u64| ns as f64 / 1e6;
        let cluster = cluster_pids(&self.pool).await;
        let mut c = Cores {
            window_ms,
            reference_ms: (self.reference_ms, reference_work()),
            bench: cpu::spent(&self.threads, &threads)
                .values()
                .fold((0.0, 0.0), |(r, w), s| {
                    (r + to_ms(s.run_ns), w + to_ms(s.wait_ns))
                }),
            ..Cores::default()
        };
        for (pid, spent) in cpu::spent(&self.processes, &processes) {
            let (run, wait) = (spent.run_ns, spent.wait_ns);
            match cluster.iter().find(|(p, _)| *p == pid) {
                Some((_, true)) => {
                    c.backends.0 += to_ms(run);
                    c.backends.1 += to_ms(wait);
                    c.backends_kernel_ms += to_ms(spent.kernel_ns);
                }
                Some((_, false)) => c.cluster_run_ms += to_ms(run),
                None if pid == std::process::id() => {}
                None => {
                    c.outside_run_ms += to_ms(run);
                    if c.busiest.as_ref().is_none_or(|b| to_ms(run) > b.2) {
                        c.busiest = Some((spent.name, pid, to_ms(run)));
                    }
                }
            }
        }
        w.cores = c;
        w
    }
}

impl Waits {
    /// Shares of the samples, in percent: between statements, CPU, WAL flush, page reads,
    /// other waits; checkpoint writing; autovacuum running.
    fn shares(&self) -> [f64; 7] {
        let pct = |n: u32| 100.0 * f64::from(n) / f64::from(self.samples.max(1));
        [
            pct(self.between),
            pct(self.cpu),
            pct(self.wal_flush),
            pct(self.data_read),
            pct(self.other),
            pct(self.checkpoint),
            pct(self.autovacuum),
        ]
    }

    fn line(&self) -> String {
        let [between, cpu, flush, read, other, checkpoint, vacuum] = self.shares();
        format!(
            "{} samples: between statements {between:.0}%, CPU {cpu:.0}%, WAL flush {flush:.0}%, \
             page reads {read:.0}%, other waits {other:.0}%; checkpoint writing {checkpoint:.0}%, \
             autovacuum {vacuum:.0}%; {:.0} WAL bytes a result",
            self.samples, self.wal_bytes_per_result
        ) + &self.cores.line()
    }
}

impl Cores {
    fn line(&self) -> String {
        if self.window_ms == 0.0 {
            return String::new();
        }
        format!(
            "; cores over {:.0} ms: backends {:.0} on ({:.0} in the kernel) / {:.0} waiting, \
             this process {:.0} / {:.0}, the cluster's others {:.0}, outside {:.0}{}; \
             reference work {:.1} ms before, {:.1} ms after",
            self.window_ms,
            self.backends.0,
            self.backends_kernel_ms,
            self.backends.1,
            self.bench.0,
            self.bench.1,
            self.cluster_run_ms,
            self.outside_run_ms,
            self.busiest
                .as_ref()
                .map(|(name, pid, ms)| format!(" (busiest {name} {pid}: {ms:.0})"))
                .unwrap_or_default(),
            self.reference_ms.0,
            self.reference_ms.1,
        )
    }
}

/// `lease_next`, `LEASE_SAMPLES` times, each followed (untimed) by finishing the oldest open
/// item, so that the open count stays. With `--compare-before`, each sample is paired with one
/// through the store whose lease selections begin as before (which goes first alternates):
/// (as shipped, as before).
async fn lease_round(
    life: &Arc<Life>,
    mut diag: Option<&mut Diagnosis>,
    label: &str,
    round: usize,
) -> (Option<(f64, f64)>, Option<(f64, f64)>) {
    let mut shipped = Vec::new();
    let mut before_fix = Vec::new();
    'samples: for i in 0..LEASE_SAMPLES {
        let variants: &[bool] = match (&life.before, i % 2) {
            (None, _) => &[false],
            (Some(_), 0) => &[false, true],
            (Some(_), _) => &[true, false],
        };
        for &is_before in variants {
            let store = match (&life.before, is_before) {
                (Some(d), true) => d,
                _ => &life.store,
            };
            let now = life.clock.tick();
            let before = match diag.as_deref_mut() {
                Some(d) => Some(d.before().await),
                None => None,
            };
            let start = Instant::now();
            let lease = store.lease_next(life.clock.request(now)).await.unwrap();
            let elapsed = ms(start.elapsed());
            if is_before {
                before_fix.push(elapsed);
            } else {
                shipped.push(elapsed);
            }
            let Some(lease) = lease else {
                break 'samples;
            };
            if let (Some(d), Some(before)) = (diag.as_deref_mut(), before) {
                let variant = if is_before { "before" } else { "shipped" };
                d.after(before, label, round, i, variant, elapsed, &lease, now)
                    .await;
            }
            let oldest = {
                let mut open = life.open.lock().await;
                open.push_back(lease);
                open.pop_front()
            };
            if let Some(oldest) = oldest {
                life.complete(&oldest).await;
            }
        }
    }
    let stats = |s: Vec<f64>| (!s.is_empty()).then(|| median_p95(s));
    (stats(shipped), stats(before_fix))
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    life: &Arc<Life>,
    label: &str,
    pg: Option<&PgPool>,
    repeats: usize,
    rng: &mut rand::rngs::StdRng,
    mut diag: Option<&mut Diagnosis>,
) -> Point {
    let mut p = Point {
        label: label.into(),
        researched: life.researched_fraction().await,
        ..Point::default()
    };
    life.settle_open_leases().await;
    if let Some(d) = diag.as_deref_mut() {
        d.samples.clear();
    }

    for round in 0..repeats {
        if round > 0 {
            life.churn(rng).await;
        }
        let mut r = Round::default();
        let mut s = Vec::new();
        for _ in 0..STATUS_SAMPLES {
            let now = life.clock.now();
            let start = Instant::now();
            life.store.status(now).await.unwrap();
            s.push(ms(start.elapsed()));
        }
        r.status_ms = Some(median_p95(s));

        statement_times(pg, "").await;
        (r.lease_ms, r.lease_before_ms) =
            lease_round(life, diag.as_deref_mut(), label, round + 1).await;
        statement_times(pg, "lease_next").await;

        (r.record_10_per_s, r.record_10_waits) = record_rate(life, 1).await;
        statement_times(pg, "record_results, one archivist").await;
        r.record_10x4_per_s = record_rate(life, 4).await.0;
        eprintln!(
            "      round {}: lease {} ms{}, status {} ms, record {:.0}/s and {:.0}/s (x4)",
            round + 1,
            pair(r.lease_ms),
            r.lease_before_ms
                .map(|d| format!(" (as before {})", pair(Some(d))))
                .unwrap_or_default(),
            pair(r.status_ms),
            r.record_10_per_s.unwrap_or(0.0),
            r.record_10x4_per_s.unwrap_or(0.0),
        );
        if let Some(w) = &r.record_10_waits {
            eprintln!("        recording's waits (one archivist): {}", w.line());
        }
        p.rounds.push(r);
    }

    // After every round of the rest: a new clip puts a pair on every episode.
    let per_round = (SINGLE_SAMPLES / repeats).max(SINGLE_SAMPLES_PER_ROUND);
    for _ in 0..repeats {
        let mut r = Round::default();
        let mut s = Vec::new();
        for _ in 0..per_round {
            let k = life.counts.clips_added.fetch_add(1, Ordering::Relaxed) as usize;
            let c = new_clip(100_000 + k);
            let start = Instant::now();
            life.store.upsert_clip(&c).await.unwrap();
            s.push(ms(start.elapsed()));
        }
        r.new_clip_ms = Some(median_p95(s));
        let mut s = Vec::new();
        for _ in 0..per_round {
            let k = life.counts.episodes_added.fetch_add(1, Ordering::Relaxed) as usize;
            let e = new_episode(100_000 + k);
            let start = Instant::now();
            life.store.upsert_episode(&e).await.unwrap();
            s.push(ms(start.elapsed()));
        }
        r.new_episode_ms = Some(median_p95(s));
        p.ingest_rounds.push(r);
    }

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
    if let Some(d) = diag {
        p.samples = std::mem::take(&mut d.samples);
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

// ------------------------------------------------------------------------------ diagnosis

/// One `lease_next` sample and the state of the server around it (`--diagnose`).
#[derive(Clone, Default)]
struct Sample {
    point: String,
    round: usize,
    i: usize,
    /// "shipped", or "before" (`--compare-before`: the selection began as before its
    /// transaction's settings).
    variant: &'static str,
    /// Wall-clock time, to line up with the server's log.
    at: String,
    ms: f64,
    /// The server's time (planning and execution) for this call's statements, by statement:
    /// CHOOSE_EPISODE, FREE_CLIPS, INSERT_LEASE and the rest (BEGIN and the advisory lock,
    /// READ_FRONTIER, MOVE_FRONTIER, a takeover's statements; COMMIT's sync is not in them).
    choose_ms: f64,
    free_ms: f64,
    insert_ms: f64,
    other_ms: f64,
    pairs: usize,
    reclaimed: u32,
    frontier_valid: bool,
    /// Episodes before the frontier in urgency order (0 when it was void: the walk started at
    /// the top).
    frontier_rank: i64,
    /// Episodes the walk crossed: from where it started to the chosen one, both included.
    walk: i64,
    /// Tables an (auto)vacuum was working on just before or just after the sample.
    vacuum: String,
    dead_leased_pairs: i64,
    dead_leases: i64,
    dead_episodes: i64,
    /// Expired leases still holding pairs (abandoned work not yet taken over).
    expired_holding: i64,
    /// WAL written by the whole server during the sample (pg_current_wal_lsn).
    wal_bytes: f64,
    /// A bare commit's time just after the sample: what the disk's sync cost then (the lease's
    /// own commit waits for one; COMMIT's flush is not in pg_stat_statements' times).
    probe_commit_ms: f64,
    /// The machine's load average (1 minute) at the sample.
    load: f64,
    /// Seconds since the last completed checkpoint started.
    since_checkpoint_s: f64,
}

impl Sample {
    fn server_ms(&self) -> f64 {
        self.choose_ms + self.free_ms + self.insert_ms + self.other_ms
    }

    const CSV_HEADER: &'static str = "point,round,i,variant,at,ms,choose_ms,free_ms,insert_ms,\
        other_ms,rest_ms,pairs,reclaimed,frontier_valid,frontier_rank,walk,vacuum,\
        dead_leased_pairs,dead_leases,dead_episodes,expired_holding,wal_bytes,probe_commit_ms,\
        load,since_checkpoint_s";

    fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{},{},{},{:.0},{:.3},{:.2},{:.1}",
            self.point,
            self.round,
            self.i,
            self.variant,
            self.at,
            self.ms,
            self.choose_ms,
            self.free_ms,
            self.insert_ms,
            self.other_ms,
            self.ms - self.server_ms(),
            self.pairs,
            self.reclaimed,
            self.frontier_valid,
            self.frontier_rank,
            self.walk,
            self.vacuum,
            self.dead_leased_pairs,
            self.dead_leases,
            self.dead_episodes,
            self.expired_holding,
            self.wal_bytes,
            self.probe_commit_ms,
            self.load,
            self.since_checkpoint_s,
        )
    }
}

/// What `before` saw: the frontier (void: `None`), the vacuums running, the WAL position.
type Before = (
    Option<(i32, DateTime<Utc>, DateTime<Utc>, i64)>,
    String,
    f64,
);

struct Diagnosis {
    /// A connection of its own, so the store's pool and its prepared statements are as they
    /// would be.
    pool: PgPool,
    statements: bool,
    csv: Option<std::fs::File>,
    samples: Vec<Sample>,
}

const DIAG_BEFORE: &str = "
SELECT f.clips IS NOT DISTINCT FROM (SELECT count(*) FROM clips) AS valid,
       f.priority, f.date_aired, f.initial_date_curated, f.id,
       COALESCE((SELECT string_agg(p.relid::regclass::text, ' ') FROM pg_stat_progress_vacuum p),
                ''),
       (pg_current_wal_lsn() - '0/0')::float8
FROM lease_frontier f";

const DIAG_AFTER: &str = "
WITH chosen AS (SELECT priority, date_aired, initial_date_curated, id FROM episodes
                WHERE title = $1 AND date_aired = $2)
SELECT COALESCE((SELECT string_agg(p.relid::regclass::text, ' ') FROM pg_stat_progress_vacuum p),
                ''),
       (pg_current_wal_lsn() - '0/0')::float8,
       extract(epoch FROM now() - (pg_control_checkpoint()).checkpoint_time)::float8,
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'leased_pairs'),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'leases'),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'episodes'),
       (SELECT count(*) FROM leases WHERE expires_at <= $3 AND held_pairs > 0),
       (SELECT count(*) FROM episodes e
        WHERE $4::int4 IS NOT NULL
          AND (e.priority, e.date_aired, e.initial_date_curated, e.id) > ($4, $5, $6, $7)),
       (SELECT count(*) FROM episodes e, chosen c
        WHERE (e.priority, e.date_aired, e.initial_date_curated, e.id)
              <= (COALESCE($4, 2147483647), COALESCE($5, 'infinity'), COALESCE($6, 'infinity'),
                  COALESCE($7, 9223372036854775807))
          AND (e.priority, e.date_aired, e.initial_date_curated, e.id)
              >= (c.priority, c.date_aired, c.initial_date_curated, c.id))";

type AfterRow = (String, f64, f64, i64, i64, i64, i64, i64, i64);

impl Diagnosis {
    async fn connect(options: PgConnectOptions, csv: Option<&str>) -> Self {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        let statements = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&pool)
            .await
            .is_ok()
            && sqlx::query("SELECT pg_stat_statements_reset()")
                .execute(&pool)
                .await
                .is_ok();
        if !statements {
            eprintln!(
                "   --diagnose: no pg_stat_statements (the script loads it with --diagnose): \
                 no time per statement"
            );
        }
        let csv = csv.map(|path| {
            let mut f = std::fs::File::create(path).unwrap();
            writeln!(f, "{}", Sample::CSV_HEADER).unwrap();
            f
        });
        Self {
            pool,
            statements,
            csv,
            samples: Vec::new(),
        }
    }

    async fn before(&mut self) -> Before {
        type Row = (
            bool,
            Option<i32>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
            Option<i64>,
            String,
            f64,
        );
        let (valid, p, d, i, id, vacuum, lsn): Row = sqlx::query_as(DIAG_BEFORE)
            .fetch_one(&self.pool)
            .await
            .unwrap();
        if self.statements {
            sqlx::query("SELECT pg_stat_statements_reset()")
                .execute(&self.pool)
                .await
                .unwrap();
        }
        let frontier = match (valid, p, d, i, id) {
            (true, Some(p), Some(d), Some(i), Some(id)) => Some((p, d, i, id)),
            _ => None,
        };
        (frontier, vacuum, lsn)
    }

    #[allow(clippy::too_many_arguments)]
    async fn after(
        &mut self,
        before: Before,
        point: &str,
        round: usize,
        i: usize,
        variant: &'static str,
        ms: f64,
        lease: &Lease,
        now: DateTime<Utc>,
    ) {
        let (frontier, vacuum_before, lsn0) = before;
        let mut s = Sample {
            point: point.into(),
            round,
            i,
            variant,
            at: Utc::now().format("%H:%M:%S%.3f").to_string(),
            ms,
            pairs: lease.clips.len(),
            reclaimed: lease.reclaimed_pairs,
            frontier_valid: frontier.is_some(),
            ..Sample::default()
        };
        if self.statements {
            let rows: Vec<(String, f64)> = sqlx::query_as(
                "SELECT ltrim(query), total_exec_time + total_plan_time FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND query NOT LIKE '%pg_stat%'",
            )
            .fetch_all(&self.pool)
            .await
            .unwrap();
            for (query, t) in rows {
                let slot = if query.starts_with("WITH candidate") {
                    &mut s.choose_ms
                } else if query.starts_with("SELECT c.id") {
                    &mut s.free_ms
                } else if query.starts_with("WITH p AS") {
                    &mut s.insert_ms
                } else {
                    &mut s.other_ms
                };
                *slot += t;
            }
        }
        let (vacuum, lsn1, since, dlp, dl, de, expired, rank, walk): AfterRow =
            sqlx::query_as(DIAG_AFTER)
                .bind(&lease.episode.title)
                .bind(lease.episode.date_aired)
                .bind(now)
                .bind(frontier.map(|f| f.0))
                .bind(frontier.map(|f| f.1))
                .bind(frontier.map(|f| f.2))
                .bind(frontier.map(|f| f.3))
                .fetch_one(&self.pool)
                .await
                .unwrap();
        let mut tables: Vec<&str> = vacuum_before
            .split_whitespace()
            .chain(vacuum.split_whitespace())
            .collect();
        tables.sort_unstable();
        tables.dedup();
        s.vacuum = tables.join(" ");
        s.wal_bytes = lsn1 - lsn0;
        // A transaction that writes WAL (a transactional message, read by nobody): its commit
        // waits for the sync. (One that only takes a transaction id does not.)
        let start = Instant::now();
        sqlx::query("SELECT pg_logical_emit_message(true, 'archivist-bench', '')")
            .execute(&self.pool)
            .await
            .unwrap();
        s.probe_commit_ms = common::ms(start.elapsed());
        s.load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(f64::NAN);
        s.since_checkpoint_s = since;
        s.dead_leased_pairs = dlp;
        s.dead_leases = dl;
        s.dead_episodes = de;
        s.expired_holding = expired;
        s.frontier_rank = rank;
        s.walk = walk;
        if let Some(f) = self.csv.as_mut() {
            writeln!(f, "{}", s.csv()).unwrap();
        }
        self.samples.push(s);
    }
}

/// The diagnosis of one point's `lease_next` samples: the slowest tenth against the middle
/// and the fastest, every round against the others, and the samples over the target.
fn diagnosis_report(title: &str, points: &[Point], target: Option<f64>) -> String {
    let mut out = format!(
        "\n#### lease_next, sample by sample: {title}\n\n\
         Means per group. Server time by statement (ms, planning included): choose = \
         CHOOSE_EPISODE, free = FREE_CLIPS, insert = INSERT_LEASE, other = BEGIN, the frontier's \
         statements, a takeover; rest = the rest of the call: its commit's sync (not in \
         pg_stat_statements' times), round trips, the client; probe = a bare commit's time \
         just after (what a sync cost then); load = the machine's load average. walk: episodes crossed from \
         where the walk started (rank: the frontier's place in urgency order); vacuum: share of \
         samples with an (auto)vacuum running, and on which tables; dead: n_dead_tup of \
         leased_pairs / leases / episodes; WAL: kB the server wrote meanwhile.\n\n\
         | point | samples | n | ms | choose | free | insert | other | rest | probe | load | pairs | \
         walk | rank | frontier valid | vacuum | dead lp / l / e | WAL kB | s since checkpoint |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for p in points.iter().filter(|p| !p.samples.is_empty()) {
        // The groups are of the samples as shipped; those as before (if compared) get a row.
        let shipped: Vec<Sample> = p
            .samples
            .iter()
            .filter(|s| s.variant == "shipped")
            .cloned()
            .collect();
        let before: Vec<Sample> = p
            .samples
            .iter()
            .filter(|s| s.variant == "before")
            .cloned()
            .collect();
        let mut sorted = shipped.clone();
        if sorted.is_empty() {
            continue;
        }
        sorted.sort_by(|a, b| a.ms.total_cmp(&b.ms));
        let n = sorted.len();
        let tenth = (n / 10).max(1);
        let mut groups: Vec<(String, Vec<Sample>)> = vec![
            ("slowest 10%".into(), sorted[n - tenth..].to_vec()),
            (
                "40–60%".into(),
                sorted[n * 2 / 5..(n * 3 / 5).max(n * 2 / 5 + 1)].to_vec(),
            ),
            ("fastest 10%".into(), sorted[..tenth].to_vec()),
        ];
        if let Some(t) = target {
            let over: Vec<Sample> = sorted.iter().filter(|s| s.ms >= t).cloned().collect();
            groups.insert(0, (format!("≥ {t} ms"), over));
        }
        let rounds = shipped.iter().map(|s| s.round).max().unwrap_or(0);
        for r in 1..=rounds {
            groups.push((
                format!("round {r}"),
                shipped.iter().filter(|s| s.round == r).cloned().collect(),
            ));
        }
        if !before.is_empty() {
            groups.push(("all, as shipped".into(), shipped.clone()));
            groups.push(("all, as before".into(), before));
        }
        for (name, g) in groups {
            if g.is_empty() {
                out.push_str(&format!(
                    "| {} | {name} | 0 |{}\n",
                    p.label,
                    " — |".repeat(16)
                ));
                continue;
            }
            let k = g.len() as f64;
            let mean = |f: fn(&Sample) -> f64| g.iter().map(f).sum::<f64>() / k;
            let vacuumed = g.iter().filter(|s| !s.vacuum.is_empty()).count();
            let mut tables: Vec<&str> =
                g.iter().flat_map(|s| s.vacuum.split_whitespace()).collect();
            tables.sort_unstable();
            tables.dedup();
            out.push_str(&format!(
                "| {} | {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | \
                 {:.1} | {:.0} | {:.0}% | {:.0}%{} | {:.0} / {:.0} / {:.0} | {:.0} | {:.0} |\n",
                p.label,
                g.len(),
                mean(|s| s.ms),
                mean(|s| s.choose_ms),
                mean(|s| s.free_ms),
                mean(|s| s.insert_ms),
                mean(|s| s.other_ms),
                mean(|s| s.ms - s.server_ms()),
                mean(|s| s.probe_commit_ms),
                mean(|s| s.load),
                mean(|s| s.pairs as f64),
                mean(|s| s.walk as f64),
                mean(|s| s.frontier_rank as f64),
                100.0 * mean(|s| f64::from(u8::from(s.frontier_valid))),
                100.0 * vacuumed as f64 / k,
                if tables.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", tables.join(", "))
                },
                mean(|s| s.dead_leased_pairs as f64),
                mean(|s| s.dead_leases as f64),
                mean(|s| s.dead_episodes as f64),
                mean(|s| s.wal_bytes) / 1e3,
                mean(|s| s.since_checkpoint_s),
            ));
        }
    }
    out
}

// ------------------------------------------------------------------------------ one life

/// What one life is asked to do.
struct Plan<'a> {
    size: &'a Size,
    points: &'a [u32],
    streams: usize,
    settle_s: u64,
    repeats: usize,
    style: Style,
    /// `--recording-waits`.
    recording_waits: bool,
}

async fn live(
    store: Arc<dyn DataStore>,
    before: Option<Arc<dyn DataStore>>,
    pg: Option<PgPool>,
    plan: &Plan<'_>,
    mut diag: Option<Diagnosis>,
) -> (Vec<Point>, String) {
    store.migrate().await.unwrap();
    if let (Some(pool), Ok(_)) = (&pg, std::env::var("ARCHIVIST_BENCH_PG_STATS")) {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(pool)
            .await
            .unwrap();
    }
    // Loading is work too: not while another benchmark measures.
    quiet::wait_turn().await;
    let data = generate(plan.size);
    eprintln!("   loading");
    load(&store, &data).await;
    if let (Some(pool), Style::Archivists) = (&pg, plan.style) {
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
        active_leases: plan.size.active_leases as usize,
        streams: plan.streams,
        style: plan.style,
        before,
        waits: match (&pg, plan.recording_waits) {
            (Some(pool), true) => Some(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with((*pool.connect_options()).clone())
                    .await
                    .unwrap(),
            ),
            _ => None,
        },
    });
    // The rounds' churn, seeded: the same run makes the same moments.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0c4e_c4ed);
    eprintln!("   measuring the fresh store");
    let turn = quiet::hold("lifecycle").await;
    settle(plan.settle_s).await;
    let first = measure(
        &life,
        "fresh",
        pg.as_ref(),
        plan.repeats,
        &mut rng,
        diag.as_mut(),
    )
    .await;
    drop(turn);
    first.log();
    let mut out = vec![first];
    for &pct in plan.points {
        eprintln!("   driving research to {pct}%");
        life.drive_to(f64::from(pct) / 100.0, 0x11fe).await;
        // A line of its own, so that whoever watches the log knows when figures are taken.
        eprintln!("   measuring at {pct}%");
        let turn = quiet::hold("lifecycle").await;
        settle(plan.settle_s).await;
        let point = measure(
            &life,
            &format!("{pct}%"),
            pg.as_ref(),
            plan.repeats,
            &mut rng,
            diag.as_mut(),
        )
        .await;
        drop(turn);
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

/// A table's head: the first columns, then a column per point.
fn table_head(first: &[&str], points: &[Point]) -> String {
    let labels = first
        .iter()
        .copied()
        .chain(points.iter().map(|p| p.label.as_str()));
    let mut head = String::from("|");
    let mut rule = String::from("|");
    for label in labels {
        head.push_str(&format!(" {label} |"));
        rule.push_str(" --- |");
    }
    format!("{head}\n{rule}\n")
}

/// A table of one figure per round (rows) and point (columns), after a heading.
fn per_round_table(
    heading: &str,
    points: &[Point],
    repeats: usize,
    cell: impl Fn(Option<&Round>) -> String,
) -> String {
    let mut out = format!("\n{heading}\n\n{}", table_head(&["round"], points));
    for r in 0..repeats {
        out.push_str(&format!("| {} |", r + 1));
        for p in points {
            out.push_str(&format!(" {} |", cell(p.rounds.get(r))));
        }
        out.push('\n');
    }
    out
}

fn report(title: &str, size: &Size, points: &[Point], summary: &str) -> String {
    let t = targets(size);
    let repeats = points.iter().map(|p| p.rounds.len()).max().unwrap_or(0);
    let mut out = format!(
        "\n#### {title}\n\nEach cell: the median of the {repeats} rounds' medians · the worst \
         round's median / p95 (for rates: the median round · the worst); the target is judged \
         on the worst round.\n\n{}",
        table_head(&["operation", "target"], points)
    );
    let verdict = |v: f64, target: Option<f64>, higher: bool| match target {
        Some(t) if (higher && v > t) || (!higher && v < t) => " ✅",
        Some(_) => " ❌",
        None => "",
    };
    type Get = fn(&Point) -> Option<OverRounds>;
    let mut time_row = |label: &str, target: Option<f64>, get: Get| {
        out.push_str(&format!(
            "| {label} | {} |",
            target
                .map(|t| format!("< {t} ms"))
                .unwrap_or_else(|| "—".into())
        ));
        for p in points {
            match get(p) {
                // The worst round's median and p95 are both held to the target.
                Some((m, (wm, wp))) => out.push_str(&format!(
                    " {m:.2} · {wm:.2} / {wp:.2}{} |",
                    verdict(wm.max(wp), target, false)
                )),
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    };
    time_row(
        &format!("lease next work item ({MAX_CLIPS} clips), median · worst round median / p95 ms"),
        t.as_ref().map(|t| t.lease_ms),
        |p| p.lease(),
    );
    if points
        .iter()
        .any(|p| p.rounds.iter().any(|r| r.lease_before_ms.is_some()))
    {
        time_row(
            "— the same, as before (commit synced, sequential scans allowed), median · worst round median / p95 ms",
            t.as_ref().map(|t| t.lease_ms),
            |p| times_over(&p.rounds, |r| r.lease_before_ms),
        );
    }
    time_row(
        "ingest one new clip, median · worst round median / p95 ms",
        t.as_ref().map(|t| t.new_clip_ms),
        |p| times_over(&p.ingest_rounds, |r| r.new_clip_ms),
    );
    time_row(
        "ingest one new episode, median · worst round median / p95 ms",
        t.as_ref().map(|t| t.new_episode_ms),
        |p| times_over(&p.ingest_rounds, |r| r.new_episode_ms),
    );
    time_row(
        "`status`, median · worst round median / p95 ms",
        t.as_ref().map(|t| t.status_ms),
        |p| times_over(&p.rounds, |r| r.status_ms),
    );
    let mut rate_row = |label: &str, get: fn(&Round) -> Option<f64>| {
        let target = t.as_ref().map(|t| t.record_per_s);
        out.push_str(&format!(
            "| {label} | {} |",
            target
                .map(|t| format!("> {t} /s"))
                .unwrap_or_else(|| "—".into())
        ));
        for p in points {
            match rates_over(&p.rounds, get) {
                Some((m, w)) => {
                    out.push_str(&format!(" {m:.0} · {w:.0}{} |", verdict(w, target, true)))
                }
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    };
    rate_row(
        "record results, batches of 10, one archivist, median · worst round /s",
        |r| r.record_10_per_s,
    );
    rate_row(
        "record results, batches of 10, four archivists, median · worst round /s",
        |r| r.record_10x4_per_s,
    );
    out.push_str("| pairs researched when measured | — |");
    for p in points {
        out.push_str(&format!(" {:.1}% |", p.researched * 100.0));
    }
    out.push('\n');
    out.push_str("| lease median, ratio to the fresh store | — |");
    let fresh = points.first().and_then(|p| p.lease()).map(|x| x.0);
    for p in points {
        match (p.lease(), fresh) {
            (Some((m, _)), Some(f)) if f > 0.0 => out.push_str(&format!(" {:.2} |", m / f)),
            _ => out.push_str(" — |"),
        }
    }
    out.push('\n');

    // Every round's lease_next, for the spread.
    let compared = points
        .iter()
        .any(|p| p.rounds.iter().any(|r| r.lease_before_ms.is_some()));
    let heading = if compared {
        "`lease_next` in each round, median / p95 ms (and as before, interleaved):".to_string()
    } else {
        "`lease_next` in each round, median / p95 ms:".to_string()
    };
    out.push_str(&per_round_table(&heading, points, repeats, |round| match (
        round.and_then(|r| r.lease_ms),
        round.and_then(|r| r.lease_before_ms),
    ) {
        (Some((m, p95)), None) => format!("{m:.2} / {p95:.2}"),
        (Some((m, p95)), Some((dm, dp))) => {
            format!("{m:.2} / {p95:.2} ({dm:.2} / {dp:.2})")
        }
        _ => "—".into(),
    }));

    if points
        .iter()
        .any(|p| p.rounds.iter().any(|r| r.record_10_waits.is_some()))
    {
        let heading = format!(
            "Recording, batches of 10, one archivist, in each round (`--recording-waits`: \
             `pg_stat_activity` sampled every {} ms): results/s · % of samples between \
             statements / on the CPU / waiting for the WAL's flush / reading pages / other \
             waits · % with a checkpoint writing / an autovacuum running · WAL bytes a result · \
             ms the store's backends spent on a core (of it in the kernel) / waiting for one · \
             the same for this process · ms on a core of every process outside the cluster and \
             this one (`/proc/<pid>/schedstat`) · ms a fixed piece of CPU work took just before \
             / just after",
            WAIT_SAMPLE_EVERY.as_millis()
        );
        out.push_str(&per_round_table(&heading, points, repeats, |round| {
            let Some((rate, w)) =
                round.and_then(|r| Some((r.record_10_per_s?, r.record_10_waits.as_ref()?)))
            else {
                return "—".into();
            };
            let [between, cpu, flush, read, other, checkpoint, vacuum] = w.shares();
            let c = &w.cores;
            format!(
                "{rate:.0} · {between:.0} / {cpu:.0} / {flush:.0} / {read:.0} / {other:.0} · \
                 {checkpoint:.0} / {vacuum:.0} · {:.0} · {:.0} ({:.0}) / {:.0} · {:.0} / {:.0} · \
                 {:.0} · {:.0} / {:.0}",
                w.wal_bytes_per_result,
                c.backends.0,
                c.backends_kernel_ms,
                c.backends.1,
                c.bench.0,
                c.bench.1,
                c.outside_run_ms,
                c.reference_ms.0,
                c.reference_ms.1,
            )
        }));
    }

    if points.iter().any(|p| !p.tables.is_empty()) {
        out.push_str(
            "\nPostgres tables (dead rows · vacuums so far · MB with indexes · HOT updates):\n\n",
        );
        out.push_str(&table_head(&["table"], points));
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
    if points.iter().any(|p| !p.samples.is_empty()) {
        out.push_str(&diagnosis_report(
            title,
            points,
            t.as_ref().map(|t| t.lease_ms),
        ));
    }
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
        // `--points none`: the fresh store only.
        .filter(|p| p.trim() != "none")
        .map(|p| {
            p.trim()
                .parse()
                .expect("--points: percentages, as 10,50,90")
        })
        .collect();
    let settle_s: u64 = value("--settle")
        .map(|s| s.parse().expect("--settle: seconds"))
        .unwrap_or(0);
    let style = if flag("--outside-check") {
        Style::OutsideCheck
    } else {
        Style::Archivists
    };
    let streams: usize = value("--streams")
        .map(|s| s.parse().expect("--streams: a number"))
        .unwrap_or(if style == Style::OutsideCheck { 1 } else { 4 });
    let repeats: usize = value("--repeats")
        .map(|s| s.parse().expect("--repeats: a number"))
        .unwrap_or(5);
    assert!(repeats >= 1, "--repeats: at least 1");
    // `--diagnose` alone, or followed by the path of a CSV file for every sample.
    let diagnose = flag("--diagnose");
    let diagnose_csv =
        value("--diagnose").filter(|v| !v.starts_with("--") && !SIZES.iter().any(|s| s.name == v));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tables = String::new();
        for size in &sizes {
            let plan = Plan {
                size,
                points: &points,
                streams,
                settle_s,
                repeats,
                style,
                recording_waits: flag("--recording-waits"),
            };
            let pairs = u64::from(size.episodes) * u64::from(size.clips);
            let head = format!(
                "{} — {} episodes × {} clips = {pairs} pairs, {} leases open, {streams} researchers{}, \
                 {repeats} rounds per point",
                size.name,
                size.episodes,
                size.clips,
                size.active_leases,
                if style == Style::OutsideCheck {
                    " (the outside check's driving)"
                } else {
                    ""
                }
            );
            if !flag("--no-postgres") {
                let (db, options) = BenchDb::create(&format!("life_{}", size.name), flag("--keep")).await;
                let store = PgDataStore::connect_with(options.clone(), pool_options())
                    .await
                    .unwrap();
                let pool = store.pool().clone();
                let autovacuum: String = sqlx::query_scalar("SHOW autovacuum")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                eprintln!("== {}: Postgres, autovacuum {autovacuum}", size.name);
                let diag = if diagnose {
                    Some(Diagnosis::connect(options.clone(), diagnose_csv.as_deref()).await)
                } else {
                    None
                };
                let before = if flag("--compare-before") {
                    // A pool of its own: generic plans keep the settings they were made under.
                    let other = PgDataStore::connect_with(options.clone(), pool_options())
                        .await
                        .unwrap();
                    Some(Arc::new(other.with_lease_transaction_as_before()) as Arc<dyn DataStore>)
                } else {
                    None
                };
                let (pts, summary) =
                    live(Arc::new(store), before, Some(pool.clone()), &plan, diag).await;
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
                let (pts, summary) = live(Arc::new(store), None, None, &plan, None).await;
                let table = report(&format!("SQLite: {head}"), size, &pts, &summary);
                println!("{table}");
                tables.push_str(&table);
            }
        }
        println!("\n---- all ----\n{tables}");
    });
}
