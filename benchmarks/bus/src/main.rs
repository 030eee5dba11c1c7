//! The database-bus benchmark: our Postgres and SQLite bus side by side with the Postgres queues a
//! Rust user would otherwise pick (pgmq, sqlxmq, underway, apalis-postgres) and a plain-SQL
//! `FOR UPDATE SKIP LOCKED` baseline, on the same server in the same run.
//!
//! Every measurement runs on a fresh database (`bus_bench_<queue>`, created and dropped through
//! the admin URL) so no queue sees another's dead rows. See `benchmarks/bus/README.md`.
//!
//! ```text
//! bus [--admin-url URL] [--only a,b,..] [--million] [--throwaway] [--receivers N]
//!     [--senders N] [--send-batch N] [--sends N] [--backlog-receive N] [--backlog-batch N]
//! ```

mod peers;
mod pg;
mod report;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;

/// One queue implementation under test.
#[async_trait]
pub trait BenchQueue: Send + Sync {
    /// Sends one batch of bodies (one call of the implementation's batch API, or the closest it
    /// has).
    async fn send_batch(&self, bodies: &[String]) -> Result<()>;

    /// Receives and acknowledges at least `n` messages with `receivers` receivers working at
    /// once, `batch` messages per receive where the implementation has batches. Returns how many
    /// were acknowledged (a receiver may overshoot by up to one batch) and the time it took
    /// (receivers' setup excluded).
    async fn receive_ack(
        &self,
        n: usize,
        batch: usize,
        receivers: usize,
    ) -> Result<(usize, Duration)>;

    /// Run after a backlog was loaded and before it is measured (ANALYZE, as autovacuum would).
    async fn after_load(&self) -> Result<()> {
        Ok(())
    }

    /// Releases what the queue holds (pools, runners) before its database is dropped.
    async fn close(&self) {}
}

/// Which implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ours,
    OursAckIn,
    Baseline,
    Pgmq,
    Sqlxmq,
    Underway,
    Apalis,
    OursSqlite,
    OursRabbit,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Ours,
        Kind::OursAckIn,
        Kind::Baseline,
        Kind::Pgmq,
        Kind::Sqlxmq,
        Kind::Underway,
        Kind::Apalis,
        Kind::OursSqlite,
        Kind::OursRabbit,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::OursAckIn => "ours_ack_in",
            Kind::Baseline => "baseline",
            Kind::Pgmq => "pgmq",
            Kind::Sqlxmq => "sqlxmq",
            Kind::Underway => "underway",
            Kind::Apalis => "apalis",
            Kind::OursSqlite => "ours_sqlite",
            Kind::OursRabbit => "ours_rabbitmq",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Ours => "archivist PgBus (ours)",
            Kind::OursAckIn => "PgBus, each batch acked by one ack_in (diagnostic)",
            Kind::Baseline => "plain SQL skip-locked (baseline)",
            Kind::Pgmq => "pgmq 0.33 (plain-SQL install)",
            Kind::Sqlxmq => "sqlxmq 0.6",
            Kind::Underway => "underway 0.2",
            Kind::Apalis => "apalis-postgres 1.0",
            Kind::OursSqlite => "archivist SqliteBus (ours)",
            Kind::OursRabbit => "archivist RabbitBus (ours)",
        }
    }

    /// Whether receives take more than one message at a time.
    pub fn batches(self) -> bool {
        !matches!(self, Kind::Underway)
    }

    pub fn is_sqlite(self) -> bool {
        matches!(self, Kind::OursSqlite)
    }

    /// Not on Postgres: on the RabbitMQ broker at `--amqp-url`.
    pub fn is_rabbitmq(self) -> bool {
        matches!(self, Kind::OursRabbit)
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    pub admin_url: String,
    pub amqp_url: String,
    pub only: Vec<Kind>,
    pub million: bool,
    pub throwaway: bool,
    pub receivers: usize,
    pub senders: usize,
    pub send_batch: usize,
    pub sends: usize,
    pub waiting: usize,
    pub backlog_receive: usize,
    pub backlog_batch: usize,
    pub sqlite_processes: usize,
    pub max_seconds: u64,
    pub repeat: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            admin_url: "postgres://postgres@127.0.0.1:5432/test".into(),
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            only: Kind::ALL.to_vec(),
            million: false,
            throwaway: false,
            receivers: 4,
            senders: 4,
            send_batch: 1000,
            sends: 100_000,
            waiting: 20_000,
            backlog_receive: 10_000,
            backlog_batch: 10,
            sqlite_processes: 4,
            max_seconds: 30,
            repeat: 3,
        }
    }
}

fn parse_args() -> Result<Settings> {
    let mut s = Settings::default();
    if let Ok(url) = std::env::var("BUS_BENCH_ADMIN_URL") {
        s.admin_url = url;
    }
    if let Ok(url) = std::env::var("BUS_BENCH_AMQP_URL") {
        s.amqp_url = url;
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--admin-url" => s.admin_url = val("--admin-url")?,
            "--amqp-url" => s.amqp_url = val("--amqp-url")?,
            "--only" => {
                let v = val("--only")?;
                s.only = v
                    .split(',')
                    .map(|x| {
                        Kind::ALL
                            .into_iter()
                            .find(|k| k.id() == x.trim())
                            .with_context(|| format!("unknown queue {x:?}"))
                    })
                    .collect::<Result<_>>()?;
            }
            "--million" => s.million = true,
            "--throwaway" => s.throwaway = true,
            "--receivers" => s.receivers = val("--receivers")?.parse()?,
            "--senders" => s.senders = val("--senders")?.parse()?,
            "--send-batch" => s.send_batch = val("--send-batch")?.parse()?,
            "--sends" => s.sends = val("--sends")?.parse()?,
            "--waiting" => s.waiting = val("--waiting")?.parse()?,
            "--backlog-receive" => s.backlog_receive = val("--backlog-receive")?.parse()?,
            "--backlog-batch" => s.backlog_batch = val("--backlog-batch")?.parse()?,
            "--repeat" => s.repeat = val("--repeat")?.parse()?,
            "--max-seconds" => s.max_seconds = val("--max-seconds")?.parse()?,
            "--sqlite-processes" => s.sqlite_processes = val("--sqlite-processes")?.parse()?,
            "-h" | "--help" => {
                println!("{}", include_str!("../README.md"));
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(s)
}

/// A small JSON body of about 200 bytes, like a curated episode.
pub fn body(i: usize) -> String {
    let mut s = format!(
        r#"{{"kind":"episode","seq":{i},"episode_id":"ep-{i:08}","media_uri":"https://example.invalid/feeds/bench/{i:08}.mp3","title":"Benchmark episode {i}","priority":{p},"pad":""#,
        p = i % 7
    );
    while s.len() < 198 {
        s.push('x');
    }
    s.push_str("\"}");
    s
}

pub fn bodies(from: usize, n: usize) -> Vec<String> {
    (from..from + n).map(body).collect()
}

/// Sends `bodies` in batches of `batch` with `senders` senders at once; returns the time taken.
pub async fn send_all(
    q: &Arc<dyn BenchQueue>,
    bodies: Arc<Vec<String>>,
    batch: usize,
    senders: usize,
) -> Result<Duration> {
    let chunks = bodies.len().div_ceil(batch);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..senders.max(1) {
        let (q, bodies, next) = (q.clone(), bodies.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= chunks {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = ((c + 1) * batch).min(bodies.len());
                q.send_batch(&bodies[c * batch..end]).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed())
}

/// Loads `n` messages (untimed), numbered from `from`.
pub async fn load(q: &Arc<dyn BenchQueue>, s: &Settings, from: usize, n: usize) -> Result<()> {
    // In slices, so a million bodies are never all in memory at once.
    let slice = 200_000;
    let mut done = 0;
    while done < n {
        let k = slice.min(n - done);
        send_all(q, Arc::new(bodies(from + done, k)), s.send_batch, s.senders).await?;
        done += k;
    }
    q.after_load().await
}

/// One measured figure.
#[derive(Debug, Clone)]
pub enum Figure {
    Rate(f64),
    /// Stopped at `--max-seconds` before all were acknowledged: the rate so far.
    Capped(f64),
    NotSupported(&'static str),
    Skipped(&'static str),
    Failed(String),
}

/// Columns of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    Sends,
    Recv10,
    Recv100,
    Backlog1k,
    Backlog100k,
    Backlog1m,
}

impl Col {
    pub const ALL: [Col; 6] = [
        Col::Sends,
        Col::Recv10,
        Col::Recv100,
        Col::Backlog1k,
        Col::Backlog100k,
        Col::Backlog1m,
    ];
}

#[derive(Debug, Clone)]
pub struct Row {
    pub kind: Kind,
    pub figures: Vec<(Col, Figure)>,
    pub notes: Vec<String>,
    /// The load average after each figure.
    pub loads: Vec<f64>,
}

async fn measure(kind: Kind, s: &Settings, pg: &pg::Server, row: &mut Row) {
    // (a) batched sends into an empty queue, `--repeat` times on a fresh database each; the
    // median run counts (one run of a fraction of a second moved by tens of percent).
    let r = async {
        let b = Arc::new(bodies(0, s.sends));
        let mut runs = Vec::new();
        for _ in 0..s.repeat.max(1) {
            let q = peers::open(kind, pg, s).await?;
            let t = send_all(&q.queue, Arc::clone(&b), s.send_batch, s.senders).await?;
            q.finish().await;
            let rate = s.sends as f64 / t.as_secs_f64();
            eprintln!("    Sends run: {rate:.0}/s");
            runs.push(rate);
        }
        runs.sort_by(f64::total_cmp);
        Ok::<_, anyhow::Error>(runs[runs.len() / 2])
    }
    .await;
    push(row, Col::Sends, r);

    // (b) receive + ack with `waiting` waiting, several receivers, batches of 10 and 100.
    for (col, batch) in [(Col::Recv10, 10), (Col::Recv100, 100)] {
        if !kind.batches() && batch != 10 {
            row.figures
                .push((col, Figure::NotSupported("one task per dequeue")));
            continue;
        }
        // `--repeat` times, each on a fresh database; the median run counts.
        let r = async {
            let mut runs = Vec::new();
            for _ in 0..s.repeat.max(1) {
                let q = peers::open(kind, pg, s).await?;
                load(&q.queue, s, 0, s.waiting).await?;
                let (acked, t) = q.queue.receive_ack(s.waiting, batch, s.receivers).await?;
                q.finish().await;
                eprintln!("    {col:?} run: {:.0}/s", acked as f64 / t.as_secs_f64());
                runs.push((acked, s.waiting, t));
            }
            runs.sort_by(|a, b| {
                let ra = a.0 as f64 / a.2.as_secs_f64();
                let rb = b.0 as f64 / b.2.as_secs_f64();
                ra.total_cmp(&rb)
            });
            Ok::<_, anyhow::Error>(runs[runs.len() / 2])
        }
        .await;
        push_recv(row, col, r);
    }

    // (c) receive + ack `backlog_receive` messages on top of a backlog.
    for (col, backlog) in [
        (Col::Backlog1k, 1_000),
        (Col::Backlog100k, 100_000),
        (Col::Backlog1m, 1_000_000),
    ] {
        if backlog == 1_000_000 && !s.million {
            row.figures
                .push((col, Figure::Skipped("run with --million")));
            continue;
        }
        let batch = if kind.batches() { s.backlog_batch } else { 1 };
        let r = async {
            let q = peers::open(kind, pg, s).await?;
            let t0 = Instant::now();
            load(&q.queue, s, 0, backlog + s.backlog_receive).await?;
            eprintln!(
                "    loaded {} in {:.1}s",
                backlog + s.backlog_receive,
                t0.elapsed().as_secs_f64()
            );
            let (acked, t) = q
                .queue
                .receive_ack(s.backlog_receive, batch, s.receivers)
                .await?;
            q.finish().await;
            Ok::<_, anyhow::Error>((acked, s.backlog_receive, t))
        }
        .await;
        push_recv(row, col, r);
    }
}

fn push_recv(row: &mut Row, col: Col, r: Result<(usize, usize, Duration)>) {
    row.loads.push(loadavg());
    let f = match r {
        Ok((acked, n, t)) if acked < n => Figure::Capped(acked as f64 / t.as_secs_f64()),
        Ok((acked, _, t)) => Figure::Rate(acked as f64 / t.as_secs_f64()),
        Err(e) => Figure::Failed(format!("{e:#}")),
    };
    eprintln!("  {:<34} {:?}: {:?}", row.kind.label(), col, f);
    row.figures.push((col, f));
}

/// The 1-minute load average: the machine is shared, and other work slows every figure.
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn push(row: &mut Row, col: Col, r: Result<f64>) {
    row.loads.push(loadavg());
    let f = match r {
        Ok(v) => Figure::Rate(v),
        Err(e) => Figure::Failed(format!("{e:#}")),
    };
    eprintln!("  {:<34} {:?}: {:?}", row.kind.label(), col, f);
    row.figures.push((col, f));
}

fn main() -> Result<()> {
    // Child process of the SQLite several-processes measurement.
    if std::env::args().nth(1).as_deref() == Some("sqlite-worker") {
        return peers::sqlite_worker_main();
    }
    let s = parse_args()?;
    peers::CAP_SECS.store(s.max_seconds, std::sync::atomic::Ordering::Relaxed);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(s))
}

async fn run(mut s: Settings) -> Result<()> {
    let _cluster = if s.throwaway {
        let c = pg::Throwaway::start()?;
        s.admin_url = c.admin_url();
        Some(c)
    } else {
        None
    };
    let pg = pg::Server::connect(&s.admin_url).await?;
    let settings_line = pg.describe().await?;
    eprintln!("server: {settings_line}");
    let mut rows = Vec::new();
    for kind in s.only.clone() {
        eprintln!("== {}", kind.label());
        let mut row = Row {
            kind,
            figures: Vec::new(),
            notes: Vec::new(),
            loads: Vec::new(),
        };
        measure(kind, &s, &pg, &mut row).await;
        rows.push(row);
    }
    report::print(&s, &settings_line, &rows);
    Ok(())
}
