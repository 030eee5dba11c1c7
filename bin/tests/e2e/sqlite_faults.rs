//! SQLite faults, through the binary: a database locked by another process's write
//! transaction, and a full disk (a small tmpfs the test mounts and fills). Each on the SQLite
//! datastore (with SQS as the bus, the emulator `scripts/test.sh` starts) and on the SQLite
//! database bus (queues and datastore in one file). The archivist says what is wrong
//! (`database is locked`, `database or disk is full`) as it retries, loses nothing, and goes
//! on once the cause is gone; a full disk that lasts past the retries ends the run with exit
//! 1 naming it, and the messages come back. Each test prints what it counted
//! (`sqlite faults: ...` lines, `--no-capture` to see them).
//!
//! Mounting a tmpfs needs root (or CAP_SYS_ADMIN), as `scripts/test.sh` runs in CI; without
//! it the full-disk tests fail and say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::pipeline::{assert_depth, Scenario};
use crate::common::{expire_visibility, BusEnv};
use sqlx::Connection;

/// Episodes sent in each test: their long descriptions make storing them write well over a
/// megabyte, more than a full disk has room for.
const EPISODES: usize = 20;
/// The most a test waits for a line of the archivist's log.
const LOG_DEADLINE: Duration = Duration::from_secs(180);

fn episodes_jsonl() -> String {
    let description = "long description ".repeat(3_500);
    let mut out = String::new();
    for n in 0..EPISODES {
        let episode = serde_json::json!({
            "initial_date_curated": "2026-01-10T08:00:00Z",
            "last_date_curated": "2026-01-11T08:00:00Z",
            "curator_information": "sqlite faults",
            "date_aired": format!("2026-02-{:02}T00:00:00Z", n + 1),
            "title": format!("Episode {n}"),
            "description": description,
            "media_uri": format!("https://example.test/faults/{n}.mp3"),
            "media_type": "mp3",
            "priority": n,
        });
        out.push_str(&episode.to_string());
        out.push('\n');
    }
    out
}

/// An archivist process whose log is read line by line on a thread of its own.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Running {
    fn start(s: &Scenario, args: &[&str]) -> Self {
        let mut child = common::command(s.path(), args, &s.bus.with(&[]))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Reads the log until a line says all of `words`; returns that line.
    fn wait_for(&mut self, words: &[&str]) -> String {
        let deadline = Instant::now() + LOG_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if words.iter().all(|w| line.contains(w)) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "never logged {words:?} ({e}); exit: {:?}\n{}",
                    self.child.try_wait(),
                    self.log.join("\n")
                ),
            }
        }
    }

    fn signal_term(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn exit(mut self) -> (i32, String) {
        let status = self.child.wait().unwrap();
        self.log.extend(self.lines.iter());
        (status.code().unwrap_or(-1), self.log.join("\n"))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Another process's connection to the SQLite file at `url` (this test is that process).
fn open(rt: &tokio::runtime::Runtime, url: &str) -> sqlx::SqliteConnection {
    rt.block_on(sqlx::SqliteConnection::connect(url)).unwrap()
}

// ---------------------------------------------------------------------------- locked

/// Polls `status` until the datastore holds every episode (a deadline, no sleep on a guess).
fn wait_until_stored(s: &Scenario) {
    let deadline = Instant::now() + LOG_DEADLINE;
    while s.status()["episodes"] != EPISODES as u64 {
        assert!(
            Instant::now() < deadline,
            "the episodes were not stored: {}",
            s.status()
        );
    }
}

/// A running `episodes` archivist meets a write transaction (`BEGIN IMMEDIATE`) another
/// process holds on the database it writes to: it retries, saying the database is locked;
/// the lock goes and it stores every episode. On SQS the episodes arrive while the lock is
/// held; on the database bus the locking process is a curator sending them in its
/// transaction (the documented SQL), so they arrive when it commits.
fn locked(s: &Scenario) {
    let url = s.database_url();
    s.run(&["queues"], &[]).expect_code(0);
    s.run(&["migrate"], &[]).expect_code(0);
    let mut run = Running::start(s, &["episodes"]);
    run.wait_for(&["ingesting"]);
    let rt = runtime();
    let mut holder = open(&rt, &url);
    rt.block_on(sqlx::query("BEGIN IMMEDIATE").execute(&mut holder))
        .unwrap();
    if s.bus.is_sqs() {
        s.run_with_input(&["send", &s.bus.episodes_queue], &episodes_jsonl())
            .expect_code(0);
    } else {
        let now = chrono::Utc::now().timestamp_micros();
        for body in episodes_jsonl().lines() {
            rt.block_on(
                sqlx::query(
                    "INSERT INTO bus_messages (queue, body, sent_at, visible_at) \
                     VALUES (?, ?, ?, ?)",
                )
                .bind(&s.bus.episodes_queue)
                .bind(body)
                .bind(now)
                .bind(now)
                .execute(&mut holder),
            )
            .unwrap();
        }
    }
    let line = run.wait_for(&["will retry", "database is locked"]);
    let since = Instant::now();
    rt.block_on(sqlx::query("COMMIT").execute(&mut holder))
        .unwrap();
    wait_until_stored(s);
    let took = since.elapsed();
    run.signal_term();
    let (code, log) = run.exit();
    assert_eq!(code, 0, "{log}");
    let retries = log.matches("will retry").count();
    assert_depth(&s.queue_depths(), &s.bus.episodes_queue, 0, 0);
    println!(
        "sqlite faults: locked {url}: {retries} retries, said {:?}; all {EPISODES} stored \
         {:.2} s after the lock went",
        line.split("error=").nth(1).unwrap_or(&line),
        took.as_secs_f64()
    );
}

#[test]
fn sqlite_datastore_locked_by_another_process() {
    locked(&Scenario::sqs(None));
}

#[test]
fn sqlite_bus_locked_by_another_process() {
    locked(&Scenario::database(None));
}

// ------------------------------------------------------------------------- full disk

/// A small tmpfs, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cannot mount a tmpfs for the full-disk test ({}): it needs root or \
             CAP_SYS_ADMIN, as scripts/test.sh has in CI",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Fills the room that is left but `room` bytes: enough for the small writes of
    /// starting and receiving, too little for storing the episodes.
    fn fill(&self, room: u64) -> u64 {
        let mut file = std::fs::File::create(self.filler()).unwrap();
        let chunk = vec![0u8; 4096];
        let mut written = 0u64;
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        let kept = written.saturating_sub(room);
        file.set_len(kept).unwrap();
        kept
    }

    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Room left on the full disk.
const ROOM: u64 = 256 * 1024;

/// An open connection that has read the database, keeping its write-ahead log and the log's
/// index file in place, as a running archivist does: the disk fills under a database in use.
fn keep_open(rt: &tokio::runtime::Runtime, url: &str) -> sqlx::SqliteConnection {
    let mut conn = open(rt, url);
    rt.block_on(sqlx::query("SELECT count(*) FROM sqlite_master").execute(&mut conn))
        .unwrap();
    conn
}

/// `bus` with its datastore (and, on the database bus, its queues) on a fresh tmpfs.
fn on_tmpfs(bus: BusEnv) -> (Tmpfs, Scenario) {
    let fs = Tmpfs::mount("16m");
    let url = format!("sqlite://{}", fs.path().join("archive.sqlite").display());
    let s = Scenario::new(bus, Some(&url));
    (fs, s)
}

/// Fills the disk under the database once the episodes are on the bus: the archivist
/// retries, saying the disk is full; room is made and it stores all of them.
fn full_disk_then_room(bus: BusEnv, room: u64) {
    let (fs, s) = on_tmpfs(bus);
    let url = s.database_url();
    s.run(&["queues"], &[]).expect_code(0);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run_with_input(&["send", &s.bus.episodes_queue], &episodes_jsonl())
        .expect_code(0);
    let rt = runtime();
    let _reader = keep_open(&rt, &url);
    let filled = fs.fill(room);
    let mut run = Running::start(&s, &["episodes", "--once"]);
    let line = run.wait_for(&["will retry", "database or disk is full"]);
    fs.free();
    let (code, log) = run.exit();
    assert_eq!(code, 0, "{log}");
    let retries = log.matches("will retry").count();
    assert_eq!(s.status()["episodes"], EPISODES as u64);
    assert_depth(&s.queue_depths(), &s.bus.episodes_queue, 0, 0);
    println!(
        "sqlite faults: full disk under {url} ({filled} bytes of filler): {retries} retries, \
         said {:?}; all {EPISODES} stored once room was made",
        line.split("error=").nth(1).unwrap_or(&line),
    );
}

#[test]
fn sqlite_datastore_full_disk() {
    full_disk_then_room(BusEnv::sqs(), ROOM);
}

#[test]
fn sqlite_bus_full_disk() {
    full_disk_then_room(BusEnv::database(), ROOM);
}

/// Full to the last byte before the archivist starts: it starts all the same (registering as
/// a consumer waits for room) and goes on once room is made.
#[test]
fn sqlite_bus_full_disk_from_the_start() {
    full_disk_then_room(BusEnv::database(), 0);
}

#[test]
fn sqlite_datastore_full_disk_from_the_start() {
    full_disk_then_room(BusEnv::sqs(), 0);
}

/// The disk stays full past the retries: the run exits 1 and names the cause; once there is
/// room, every message is still there and is stored.
fn full_disk_past_the_retries(bus: BusEnv) {
    let (fs, s) = on_tmpfs(bus);
    let url = s.database_url();
    s.run(&["queues"], &[]).expect_code(0);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run_with_input(&["send", &s.bus.episodes_queue], &episodes_jsonl())
        .expect_code(0);
    let rt = runtime();
    let reader = keep_open(&rt, &url);
    fs.fill(ROOM);
    // A budget shorter than the default keeps the test short.
    let run = s
        .run(
            &["episodes", "--once"],
            &[("ARCHIVIST_RETRY_BUDGET", "10s")],
        )
        .expect_code(1);
    let error = run
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line:\n{}", run.stderr))
        .to_string();
    assert!(error.contains("database or disk is full"), "{error}");
    fs.free();
    drop(reader);
    if !s.bus.is_sqs() {
        // Releasing needs room too: those messages come back when their visibility runs out.
        expire_visibility(&url);
    }
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    assert_eq!(s.status()["episodes"], EPISODES as u64);
    assert_depth(&s.queue_depths(), &s.bus.episodes_queue, 0, 0);
    println!("sqlite faults: lasting full disk under {url}: exit 1, {error:?}; all {EPISODES} stored once room was made");
}

#[test]
fn sqlite_datastore_full_disk_past_the_retries() {
    full_disk_past_the_retries(BusEnv::sqs());
}

#[test]
fn sqlite_bus_full_disk_past_the_retries() {
    full_disk_past_the_retries(BusEnv::database());
}
