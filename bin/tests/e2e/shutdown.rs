//! Shutdown at the worst moment, through the binary: each archivist is paused at its busiest
//! moment (`ARCHIVIST_PAUSE_POINT`: the batch in hand and not stored, the lease made and not
//! published, acknowledgements held by the SQS batcher or the database bus's ack batch) and
//! sent SIGTERM there. It must finish or release every message in hand and exit 0 within
//! `ARCHIVIST_SHUTDOWN_TIMEOUT`: nothing lost, nothing left in flight. Stuck for good
//! (`ARCHIVIST_FAIL_POINT`), it must give up at the timeout with exit 1 and release what it
//! held; a second signal stops it at once, and everything acknowledged is stored.
//!
//! On SQS (the emulator `scripts/test.sh` starts), the database bus on SQLite (in the
//! datastore's file and in a file of its own) and on Postgres. Each test prints what it
//! counted (`shutdown: ...` lines, `--no-capture` to see them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::pipeline::{assert_depth, episode_json, results_for, Scenario, EPISODES};
use crate::common::{expire_visibility, BusEnv, PgDatabase};

/// The shutdown timeout every test runs with: long enough for a loaded machine to finish a
/// batch, short enough that a run that ignores it fails the test.
const SHUTDOWN_TIMEOUT: &str = "20s";
/// The most a test waits for a process to reach a point or to log a line.
const LOG_DEADLINE: Duration = Duration::from_secs(120);

/// An archivist process whose log is read line by line on a thread of its own.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Running {
    fn start(s: &Scenario, args: &[&str], extra: &[(&str, &str)]) -> Self {
        // Defaults first: what `extra` sets wins.
        let mut env = s.bus.with(&[
            ("ARCHIVIST_SHUTDOWN_TIMEOUT", SHUTDOWN_TIMEOUT),
            ("ARCHIVIST_START_JITTER", "0s"),
        ]);
        env.extend_from_slice(extra);
        let mut child = common::command(s.path(), args, &env)
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

    /// Reads the log until a line contains `needle` (the process has reached that moment).
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + LOG_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(e) => panic!(
                    "never logged {needle:?} ({e}); exit: {:?}\n{}",
                    self.child.try_wait(),
                    self.log.join("\n")
                ),
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the exit; returns the exit code, how long it took, and the whole log.
    fn exit(mut self) -> (i32, Duration, String) {
        let since = Instant::now();
        let status = self.child.wait().unwrap();
        let took = since.elapsed();
        // The reader thread ends at the pipe's end: the rest of the log.
        self.log.extend(self.lines.iter());
        (status.code().unwrap_or(-1), took, self.log.join("\n"))
    }
}

/// Sends SIGTERM once `args` reached pause point `point`; checks that it finished what it
/// held and exited 0 within the shutdown timeout. Returns its log.
fn sigterm_at(s: &Scenario, args: &[&str], extra: &[(&str, &str)], point: &str) -> String {
    let mut env = extra.to_vec();
    env.push(("ARCHIVIST_PAUSE_POINT", point));
    let mut run = Running::start(s, args, &env);
    run.wait_for(&format!("pause point {point} reached"));
    run.signal("TERM");
    let (code, took, log) = run.exit();
    assert_eq!(code, 0, "{args:?} at {point}: exit {code}\n{log}");
    assert!(
        log.contains(&format!("pause point {point} resumed")),
        "{args:?} never went on from {point}\n{log}"
    );
    assert!(
        took < humantime::parse_duration(SHUTDOWN_TIMEOUT).unwrap(),
        "{args:?} at {point} took {took:?} to stop\n{log}"
    );
    let bus = if s.bus.is_sqs() {
        "SQS"
    } else {
        "database bus"
    };
    println!(
        "shutdown: {bus}: {} at {point}: SIGTERM, exit 0 after {:.2} s, nothing in flight",
        args.join(" "),
        took.as_secs_f64()
    );
    log
}

fn setup(s: &Scenario) {
    s.run(&["queues"], &[]).expect_code(0);
}

fn episodes_jsonl() -> String {
    let lines: Vec<String> = EPISODES
        .iter()
        .enumerate()
        .map(|(n, (t, a, p))| episode_json(t, a, *p, n).to_string())
        .collect();
    lines.join("\n") + "\n"
}

fn send_episodes(s: &Scenario) {
    s.run_with_input(&["send", &s.bus.episodes_queue], &episodes_jsonl())
        .expect_code(0);
}

/// SIGTERM with a batch of curated episodes in hand, not stored yet (and, on the database
/// bus in the datastore's database, inside the transaction that stores and acknowledges):
/// the batch is stored and acknowledged, the queue is empty.
fn ingest_mid_batch(s: &Scenario, point: &str) {
    setup(s);
    send_episodes(s);
    sigterm_at(s, &["episodes"], &[], point);
    assert_eq!(s.status()["episodes"], EPISODES.len() as u64);
    assert_depth(&s.queue_depths(), &s.bus.episodes_queue, 0, 0);
}

/// SIGTERM between leasing and publishing: the lease's work item is published (no lease
/// without its item, no item left unpublished).
fn pending_mid_publish(s: &Scenario, point: &str) {
    setup(s);
    s.curate();
    sigterm_at(
        s,
        &["pending-research"],
        &[("ARCHIVIST_RESEARCHERS", "1")],
        point,
    );
    let status = s.status();
    assert_eq!(status["active_leases"], 1, "{status}");
    assert_depth(&s.queue_depths(), &s.bus.pending_queue, 1, 0);
    assert_eq!(s.receive_work("10", "1s").len(), 1);
}

/// SIGTERM after the batch's leases were renewed and revoked, its results not recorded yet:
/// they are recorded and acknowledged.
fn completed_mid_lease(s: &Scenario, point: &str) {
    setup(s);
    s.curate();
    s.run(
        &["pending-research"],
        &[
            ("ARCHIVIST_RESEARCHERS", "1"),
            ("ARCHIVIST_START_JITTER", "0s"),
        ],
    )
    .expect_code(0);
    let work = s.receive_work("1", "1s");
    let results: Vec<String> = results_for(&work[0])
        .iter()
        .map(|r| r.to_string())
        .collect();
    s.run_with_input(
        &["send", &s.bus.completed_queue],
        &(results.join("\n") + "\n"),
    )
    .expect_code(0);
    sigterm_at(s, &["completed-research", "--every", "1m"], &[], point);
    let status = s.status();
    assert_eq!(status["researched_pairs"], results.len() as u64, "{status}");
    assert_eq!(status["active_leases"], 0, "{status}");
    assert_depth(&s.queue_depths(), &s.bus.completed_queue, 0, 0);
}

// ------------------------------------------------------------------------------- SQS

#[test]
fn sqs_episodes_sigterm_mid_batch() {
    ingest_mid_batch(&Scenario::sqs(None), "episodes-store");
}

#[test]
fn sqs_clips_sigterm_mid_batch() {
    let s = Scenario::sqs(None);
    setup(&s);
    let clips = r#"{"initial_date_curated":"2026-01-10T08:00:00Z","last_date_curated":"2026-01-11T08:00:00Z","curator_information":"e2e","title":"Clip A","description":"a","media_uri":"https://example.test/clips/a.mp3","media_type":"mp3","priority":1}"#;
    s.run_with_input(&["send", &s.bus.clips_queue], &format!("{clips}\n"))
        .expect_code(0);
    sigterm_at(&s, &["clips"], &[], "clips-store");
    assert_eq!(s.status()["clips"], 1);
    assert_depth(&s.queue_depths(), &s.bus.clips_queue, 0, 0);
}

/// The acknowledgements of a stored batch wait in the SQS delete batcher, not yet sent.
#[test]
fn sqs_sigterm_while_the_ack_batcher_holds_acknowledgements() {
    ingest_mid_batch(&Scenario::sqs(None), "sqs-delete-batch");
}

#[test]
fn sqs_pending_research_sigterm_between_lease_and_publish() {
    pending_mid_publish(&Scenario::sqs(None), "pending-research-publish");
}

#[test]
fn sqs_completed_research_sigterm_mid_lease() {
    completed_mid_lease(&Scenario::sqs(None), "completed-research-store");
}

/// `run`: all four archivists in one process, SIGTERM while the episodes batch is in hand.
#[test]
fn sqs_run_sigterm_mid_batch() {
    let s = Scenario::sqs(None);
    setup(&s);
    send_episodes(&s);
    sigterm_at(
        &s,
        &["run"],
        &[("ARCHIVIST_RESEARCHERS", "1")],
        "episodes-store",
    );
    assert_eq!(s.status()["episodes"], EPISODES.len() as u64);
    assert_depth(&s.queue_depths(), &s.bus.episodes_queue, 0, 0);
}

// ------------------------------------------------------------------ the database bus

#[test]
fn sqlite_bus_episodes_sigterm_mid_batch() {
    ingest_mid_batch(&Scenario::database(None), "episodes-store");
}

/// Inside the transaction that stores the batch and acknowledges it.
#[test]
fn sqlite_bus_episodes_sigterm_inside_the_store_transaction() {
    ingest_mid_batch(&Scenario::database(None), "bus-ack-in-transaction");
}

#[test]
fn postgres_bus_episodes_sigterm_inside_the_store_transaction() {
    let db = PgDatabase::create();
    ingest_mid_batch(&Scenario::database(Some(&db.url)), "bus-ack-in-transaction");
}

/// Inside the transaction that leases and publishes.
#[test]
fn sqlite_bus_pending_research_sigterm_inside_the_lease_transaction() {
    pending_mid_publish(&Scenario::database(None), "bus-send-in-transaction");
}

#[test]
fn postgres_bus_pending_research_sigterm_inside_the_lease_transaction() {
    let db = PgDatabase::create();
    pending_mid_publish(
        &Scenario::database(Some(&db.url)),
        "bus-send-in-transaction",
    );
}

#[test]
fn sqlite_bus_completed_research_sigterm_mid_lease() {
    completed_mid_lease(&Scenario::database(None), "completed-research-store");
}

/// The queues in an SQLite file of their own (in the working directory, beside the
/// datastore's): acknowledgements are gathered and deleted after the datastore commits, as
/// on SQS.
fn separate_bus() -> Scenario {
    let mut bus = BusEnv::database();
    bus.set("ARCHIVIST_BUS_URL", "sqlite://bus.sqlite");
    Scenario::new(bus, None)
}

#[test]
fn separate_sqlite_bus_sigterm_while_acknowledgements_are_gathered() {
    ingest_mid_batch(&separate_bus(), "bus-ack-batch");
}

#[test]
fn separate_sqlite_bus_pending_research_sigterm_between_lease_and_publish() {
    pending_mid_publish(&separate_bus(), "pending-research-publish");
}

// ------------------------------------------------------- stuck: the timeout, a second signal

/// Stuck for good with the batch in hand: SIGTERM, and at the shutdown timeout the process
/// exits 1 naming the timeout, and the messages it held are visible again at once.
fn stuck_gives_up_at_the_timeout_and_releases(s: &Scenario) {
    setup(s);
    send_episodes(s);
    let mut run = Running::start(
        s,
        &["episodes"],
        &[
            ("ARCHIVIST_FAIL_POINT", "episodes-store"),
            ("ARCHIVIST_SHUTDOWN_TIMEOUT", "2s"),
        ],
    );
    run.wait_for("fail point episodes-store reached");
    run.signal("TERM");
    let (code, took, log) = run.exit();
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("did not stop within 2s"), "{log}");
    assert!(took >= Duration::from_secs(2), "{took:?}\n{log}");
    assert!(took < Duration::from_secs(15), "{took:?}\n{log}");
    assert_eq!(s.status()["episodes"], 0);
    // Released, not left invisible until the visibility timeout.
    assert_depth(&s.queue_depths(), &s.bus.episodes_queue, 3, 0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    assert_eq!(s.status()["episodes"], EPISODES.len() as u64);
    println!(
        "shutdown: stuck episodes archivist: exit 1 after {:.2} s (timeout 2 s), {} messages released",
        took.as_secs_f64(),
        EPISODES.len()
    );
}

#[test]
fn sqs_stuck_gives_up_at_the_timeout_and_releases() {
    stuck_gives_up_at_the_timeout_and_releases(&Scenario::sqs(None));
}

#[test]
fn sqlite_bus_stuck_gives_up_at_the_timeout_and_releases() {
    stuck_gives_up_at_the_timeout_and_releases(&Scenario::database(None));
}

/// Stuck at `point` for good: SIGTERM, then SIGINT stops the process at once (exit 130).
fn second_signal(s: &Scenario, point: &str) -> Duration {
    setup(s);
    send_episodes(s);
    let mut run = Running::start(
        s,
        &["episodes"],
        &[
            ("ARCHIVIST_FAIL_POINT", point),
            ("ARCHIVIST_SHUTDOWN_TIMEOUT", "10m"),
        ],
    );
    run.wait_for(&format!("fail point {point} reached"));
    run.signal("TERM");
    run.wait_for("stopping");
    run.signal("INT");
    let (code, took, log) = run.exit();
    assert_eq!(code, 130, "{log}");
    assert!(took < Duration::from_secs(10), "{took:?}\n{log}");
    assert!(log.contains("second signal"), "{log}");
    took
}

/// The SQS batcher holds the acknowledgements of a stored batch: a second signal ends the
/// process before they are sent. Every message is stored (nothing acknowledged is lost) and
/// still on the queue, to be delivered again (storing it again changes nothing).
#[test]
fn sqs_second_signal_stops_at_once_and_loses_nothing_acknowledged() {
    let s = Scenario::sqs(None);
    let took = second_signal(&s, "sqs-delete-batch");
    assert_eq!(s.status()["episodes"], EPISODES.len() as u64);
    let depths = s.queue_depths();
    let q = &depths[&s.bus.episodes_queue];
    assert_eq!(
        q["waiting"].as_u64().unwrap() + q["in_flight"].as_u64().unwrap(),
        EPISODES.len() as u64,
        "{q}"
    );
    println!(
        "shutdown: SQS, second signal with {} acknowledgements held: exit 130 after {:.2} s, \
         all stored",
        EPISODES.len(),
        took.as_secs_f64()
    );
}

/// Inside the transaction that stores and acknowledges: a second signal ends the process;
/// nothing was stored or acknowledged, and the messages come back and are stored.
#[test]
fn sqlite_bus_second_signal_stops_at_once_and_loses_nothing() {
    let s = Scenario::database(None);
    let took = second_signal(&s, "bus-ack-in-transaction");
    assert_eq!(s.status()["episodes"], 0);
    expire_visibility(&s.database_url());
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    assert_eq!(s.status()["episodes"], EPISODES.len() as u64);
    assert_depth(&s.queue_depths(), "curated_episodes", 0, 0);
    println!(
        "shutdown: SQLite bus, second signal inside the store transaction: exit 130 after \
         {:.2} s, all stored after redelivery",
        took.as_secs_f64()
    );
}
