//! Database faults: the datastore (and the database bus in it) goes away mid-run and comes
//! back. A TCP proxy in the test cuts every connection and refuses new ones for a while; a
//! throwaway Postgres cluster the test made with initdb is stopped and started again (never
//! the machine's shared server). Long-running archivists ride the outage out; a cron-style run
//! past ARCHIVIST_RETRY_BUDGET exits 1 naming what was unreachable; nothing is lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::pipeline::{episode_json, Scenario};
use crate::common::{command, PgDatabase, Run};

/// A TCP proxy to one upstream address that can cut every connection and refuse new ones.
struct Proxy {
    port: u16,
    state: Arc<Mutex<ProxyState>>,
}

#[derive(Default)]
struct ProxyState {
    refusing: bool,
    /// Both ends of every connection, to cut them.
    open: Vec<TcpStream>,
    accepted: usize,
}

impl Proxy {
    fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let mut st = shared.lock().unwrap();
                if st.refusing {
                    // Refused: closed at once, as a server that is down would.
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                st.accepted += 1;
                st.open.push(client.try_clone().unwrap());
                st.open.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, state }
    }

    /// Cuts every connection and refuses new ones until [`Proxy::restore`].
    fn cut(&self) {
        let mut st = self.state.lock().unwrap();
        st.refusing = true;
        for s in st.open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.state.lock().unwrap().refusing = false;
    }

    fn accepted(&self) -> usize {
        self.state.lock().unwrap().accepted
    }

    /// `url` (postgres://user@host:port/db) through the proxy.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (auth_host, path) = rest.split_once('/').unwrap();
        let auth = auth_host
            .rsplit_once('@')
            .map(|(a, _)| format!("{a}@"))
            .unwrap_or_default();
        format!("{scheme}://{auth}127.0.0.1:{}/{path}", self.port)
    }
}

/// host:port of a postgres URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let host = rest.split('/').next().unwrap();
    let host = host.rsplit_once('@').map(|(_, h)| h).unwrap_or(host);
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5432")
    }
}

fn episodes(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| {
            episode_json(
                &format!("Fault episode {i}"),
                "2026-01-01T00:00:00Z",
                i as i64,
                i,
            )
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Polls `done` until it holds, failing after `limit`.
fn eventually(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn spawn(s: &Scenario, args: &[&str], env: &[(&str, &str)], log: &Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    command(s.path(), args, &s.bus.with(env))
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap()
}

fn alive(child: &mut Child, log: &Path) {
    if let Some(status) = child.try_wait().unwrap() {
        panic!(
            "the archivist ended during the outage ({status}):\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

fn stored(s: &Scenario, env: &[(&str, &str)]) -> u64 {
    let run = s.run(&["status", "--json"], env);
    if run.code != 0 {
        return 0;
    }
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    v["episodes"].as_u64().unwrap_or(0)
}

/// The database bus on Postgres, datastore and queues reached through the proxy: a
/// long-running `episodes` rides out two outages (connections cut, new ones refused), with
/// curators sending while it is cut off; everything is stored once, nothing left in flight.
#[test]
fn long_running_archivist_rides_out_connections_cut_and_refused() {
    let db = PgDatabase::create();
    let proxy = Proxy::start(host_port(&db.url));
    let s = Scenario::database(Some(&proxy.url(&db.url)));
    // Curators and the test's checks reach the database directly.
    let direct = [("DATABASE_URL", db.url.as_str())];
    s.run(&["migrate"], &direct).expect_code(0);
    let log = s.path().join("episodes.log");
    let mut child = spawn(&s, &["episodes"], &[("RUST_LOG", "warn")], &log);

    let mut sent = 0;
    for outage in 0..2 {
        let run = common::archivist_with_input(
            s.path(),
            &["send", &s.bus.episodes_queue],
            &s.bus.with(&direct),
            &episodes(sent, 10),
        );
        run.expect_code(0);
        sent += 10;
        eventually(Duration::from_secs(60), "the batch stored", || {
            stored(&s, &direct) == sent as u64
        });
        proxy.cut();
        common::archivist_with_input(
            s.path(),
            &["send", &s.bus.episodes_queue],
            &s.bus.with(&direct),
            &episodes(sent, 10),
        )
        .expect_code(0);
        sent += 10;
        // The outage: long enough for several failed attempts of every kind.
        std::thread::sleep(Duration::from_secs(4 + outage * 4));
        alive(&mut child, &log);
        proxy.restore();
        eventually(Duration::from_secs(90), "the outage's batch stored", || {
            stored(&s, &direct) == sent as u64
        });
        alive(&mut child, &log);
    }
    let _ = child.kill();
    let _ = child.wait();
    let depths: Vec<serde_json::Value> = s
        .run(&["queues", "--json"], &direct)
        .expect_code(0)
        .json_lines();
    let q = depths
        .iter()
        .find(|q| q["queue"] == s.bus.episodes_queue.as_str())
        .unwrap();
    assert_eq!(q["waiting"], 0, "{q}");
    assert_eq!(q["dead_letters"], 0, "{q}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("will retry"), "retries logged: {log}");
    eprintln!(
        "database faults (proxy): 2 outages (4 s, 8 s), {sent} episodes stored once, {} \
         connections through the proxy",
        proxy.accepted()
    );
}

/// SQS with the Postgres datastore behind the proxy: a cron-style `episodes --once` whose
/// datastore is cut off mid-run gives up past ARCHIVIST_RETRY_BUDGET with exit 1 and a message
/// naming the datastore; it released what it held, so the next run stores everything.
#[test]
fn cron_run_gives_up_past_the_retry_budget_and_loses_nothing() {
    let db = PgDatabase::create();
    let proxy = Proxy::start(host_port(&db.url));
    let s = Scenario::sqs(Some(&proxy.url(&db.url)));
    s.run(&["queues"], &[]).expect_code(0);
    s.run(&["migrate"], &[]).expect_code(0);
    common::archivist_with_input(
        s.path(),
        &["send", &s.bus.episodes_queue],
        &s.bus.with(&[]),
        &episodes(0, 30),
    )
    .expect_code(0);
    let budget = [
        ("ARCHIVIST_RETRY_BUDGET", "3s"),
        ("ARCHIVIST_CONNECT_TIMEOUT", "3s"),
    ];
    proxy.cut();
    let started = Instant::now();
    let run: Run = s.run(&["episodes", "--once"], &budget);
    let took = started.elapsed();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("datastore") && run.stderr.contains("unreachable"),
        "names the datastore: {}",
        run.stderr
    );
    assert!(took < Duration::from_secs(30), "gave up in {took:?}");
    proxy.restore();

    // Mid-run: the datastore goes once the run is under way.
    let log = s.path().join("once.log");
    let mut child = spawn(&s, &["episodes", "--once"], &budget, &log);
    let accepted = proxy.accepted();
    eventually(Duration::from_secs(30), "the run connected", || {
        proxy.accepted() > accepted
    });
    proxy.cut();
    let status = child.wait().unwrap();
    let out = std::fs::read_to_string(&log).unwrap();
    // The run may have stored everything before the cut; if not, it gives up naming what
    // was unreachable.
    if !status.success() {
        assert_eq!(status.code(), Some(1), "{out}");
        assert!(out.contains("unreachable"), "{out}");
    }
    proxy.restore();
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    assert_eq!(stored(&s, &[]), 30);
    let depths = s.queue_depths();
    let q = &depths[&s.bus.episodes_queue];
    assert_eq!(q["waiting"], 0, "{q}");
    assert_eq!(q["in_flight"], 0, "{q}");
    assert_eq!(q["dead_letters"], 0, "{q}");
    eprintln!("database faults (retry budget): exit 1 in {took:?} with a 3 s budget; 30 of 30 stored by the next run");
}

/// The database bus on a cluster of the test's own, stopped hard (as a crash) and started
/// again under a long-running `run`: episodes sent after the restart are stored, the process
/// never exits, nothing is lost or stored twice.
#[test]
fn long_running_archivists_ride_out_a_postgres_restart() {
    let cluster = Cluster::start();
    let s = Scenario::database(Some(&cluster.url()));
    s.run(&["migrate"], &[]).expect_code(0);
    let log = s.path().join("run.log");
    let mut child = spawn(
        &s,
        &["run"],
        &[
            ("RUST_LOG", "warn"),
            ("ARCHIVIST_EVERY", "1s"),
            ("ARCHIVIST_RESEARCHERS", "0"),
        ],
        &log,
    );
    let mut sent = 0;
    for restart in 0..2 {
        s.run_with_input(&["send", &s.bus.episodes_queue], &episodes(sent, 10))
            .expect_code(0);
        sent += 10;
        eventually(Duration::from_secs(60), "the batch stored", || {
            stored(&s, &[]) == sent as u64
        });
        cluster.crash();
        std::thread::sleep(Duration::from_secs(2 + restart * 3));
        alive(&mut child, &log);
        cluster.start_again();
        s.run_with_input(&["send", &s.bus.episodes_queue], &episodes(sent, 10))
            .expect_code(0);
        sent += 10;
        eventually(
            Duration::from_secs(90),
            "the batch after the restart stored",
            || stored(&s, &[]) == sent as u64,
        );
        alive(&mut child, &log);
    }
    let _ = child.kill();
    let _ = child.wait();
    let depths = s.queue_depths();
    let q = &depths[&s.bus.episodes_queue];
    assert_eq!(q["waiting"], 0, "{q}");
    assert_eq!(q["dead_letters"], 0, "{q}");
    eprintln!("database faults (cluster restart): 2 crash-restarts (2 s, 5 s down), {sent} episodes stored once, `run` never exited");
}
