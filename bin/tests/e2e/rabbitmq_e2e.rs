//! End-to-end tests of the `archivist` binary across processes on RabbitMQ: the pipeline
//! (`common::pipeline`) on an SQLite file and on a fresh Postgres database, work assignment
//! that reads the researcher count from the broker, and URLs whose password is never shown.
//!
//! Every test uses queue names of its own, so tests share one broker. The broker comes from
//! `ARCHIVIST_TEST_AMQP_URL`, which `scripts/test.sh` sets; without it the tests fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use crate::common::pipeline::{pipeline, Scenario};
use crate::common::PgDatabase;

#[test]
fn pipeline_across_processes_on_rabbitmq_and_sqlite() {
    let s = Scenario::rabbitmq(None);
    pipeline(&s);
    assert!(s.path().join("archive.sqlite").exists());
}

#[test]
fn pipeline_across_processes_on_rabbitmq_and_postgres() {
    let db = PgDatabase::create();
    let s = Scenario::rabbitmq(Some(&db.url));
    pipeline(&s);
}

#[test]
fn rabbitmq_without_an_amqp_url_is_a_usage_error() {
    let s = Scenario::rabbitmq(None);
    let run = s
        .run(
            &["queues"],
            &[("ARCHIVIST_BUS_URL", "postgres://u:hunter2@h/db")],
        )
        .expect_code(2);
    assert!(run.stderr.contains("amqp://"), "{}", run.stderr);
    assert!(!run.stderr.contains("hunter2"), "{}", run.stderr);
}

#[test]
fn an_unreachable_broker_is_exit_1_and_its_password_is_never_shown() {
    let s = Scenario::rabbitmq(None);
    let run = s
        .run(
            &["queues"],
            &[
                ("ARCHIVIST_BUS_URL", "amqp://guest:hunter2@127.0.0.1:1/%2f"),
                ("ARCHIVIST_CONNECT_TIMEOUT", "1s"),
                ("RUST_LOG", "debug"),
            ],
        )
        .expect_code(1);
    assert!(run.stderr.contains("127.0.0.1:1"), "{}", run.stderr);
    assert!(!run.stderr.contains("hunter2"), "{}", run.stderr);
    assert!(!run.stdout.contains("hunter2"), "{}", run.stdout);
}

/// Researchers attached to the broker (here `archivist receive` processes waiting on
/// `pending_research`) are what `pending-research` counts: no ARCHIVIST_RESEARCHERS, and the
/// work it hands out follows them as they come.
#[test]
fn pending_research_capacity_follows_the_researchers_attached_to_the_broker() {
    use std::process::{Child, Stdio};
    use std::time::{Duration, Instant};

    let s = Scenario::rabbitmq(None);
    s.curate();
    let pending = s.bus.pending_queue.clone();
    let attach = |n: usize| -> Vec<Child> {
        (0..n)
            .map(|_| {
                common::command(
                    s.path(),
                    &["receive", &pending, "--max", "1", "--wait", "60s"],
                    &s.bus.with(&[]),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
            })
            .collect()
    };
    let wait_for_consumers = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let consumers = s.queue_depths()[pending.as_str()]["consumers"].as_u64();
            if consumers == Some(n) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the broker counts {consumers:?} consumers of {pending}, expected {n}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let items_taken = |researchers: Vec<Child>| -> usize {
        researchers
            .into_iter()
            .map(|r| {
                let run = common::Run::from_output(r.wait_with_output().unwrap()).expect_code(0);
                run.stdout.lines().count()
            })
            .sum()
    };
    let no_researcher_count = [("ARCHIVIST_START_JITTER", "0s")];

    let two = attach(2);
    wait_for_consumers(2);
    s.run(&["pending-research"], &no_researcher_count)
        .expect_code(0);
    assert_eq!(items_taken(two), 2);
    assert_eq!(s.status()["active_leases"], 2);

    let three = attach(3);
    wait_for_consumers(3);
    s.run(&["pending-research"], &no_researcher_count)
        .expect_code(0);
    assert_eq!(items_taken(three), 3);
    assert_eq!(s.status()["active_leases"], 5);
    wait_for_consumers(0);
}

/// The demo runs on RabbitMQ (`--bus rabbitmq`): every pair researched once, poison set aside.
#[test]
fn demo_on_rabbitmq_researches_every_pair_once() {
    let s = Scenario::rabbitmq(None);
    let url = s
        .bus
        .with(&[])
        .into_iter()
        .find(|(k, _)| *k == "ARCHIVIST_BUS_URL")
        .map(|(_, v)| v.to_string())
        .unwrap();
    let demo = s
        .run(
            &["demo", "--json", "--bus", "rabbitmq", "--bus-url", &url],
            &[("ARCHIVIST_MAX_CLIPS", ""), ("ARCHIVIST_BUS", "")],
        )
        .expect_code(0);
    let summary: serde_json::Value = serde_json::from_str(demo.stdout.trim()).unwrap();
    assert_eq!(summary["all_researched_once"], true, "{summary}");
    assert_eq!(summary["pairs_researched_more_than_once"], 0, "{summary}");
    assert_eq!(summary["messages_dead_lettered"], 2, "{summary}");
}

/// The broker's password never reaches any output of any subcommand, with debug logs, when
/// the broker refuses it and when the broker cannot be reached.
#[test]
fn the_broker_password_never_reaches_any_output() {
    let s = Scenario::rabbitmq(None);
    let good = s
        .bus
        .with(&[])
        .into_iter()
        .find(|(k, _)| *k == "ARCHIVIST_BUS_URL")
        .map(|(_, v)| v.to_string())
        .unwrap();
    let refused = good.replacen(":guest@", ":Secret-Amqp-Pw-4@", 1);
    assert_ne!(refused, good, "expected guest:guest in {good}");
    let unreachable = url::Url::parse(&refused)
        .map(|mut u| {
            u.set_port(Some(1)).unwrap();
            u.to_string()
        })
        .unwrap();
    let runs: &[&[&str]] = &[
        &["queues"],
        &["status"],
        &["episodes", "--once"],
        &["pending-research"],
        &["completed-research"],
        &["receive", "curated_clips", "--wait", "0s"],
        &["run", "--help"],
    ];
    for url in [&refused, &unreachable] {
        for args in runs {
            let run = s.run(
                args,
                &[
                    ("ARCHIVIST_BUS_URL", url),
                    ("RUST_LOG", "debug"),
                    ("ARCHIVIST_CONNECT_TIMEOUT", "1s"),
                ],
            );
            assert!(
                !run.stdout.contains("Secret-Amqp-Pw-4")
                    && !run.stderr.contains("Secret-Amqp-Pw-4"),
                "{args:?} printed the password:\n{}\n{}",
                run.stdout,
                run.stderr
            );
            if !args.contains(&"--help") && !args.contains(&"status") {
                assert_ne!(run.code, 0, "{args:?}: {}", run.stderr);
            }
        }
    }
}

/// The broker down: `serve` comes up at once with the datastore's sections and says that the
/// queues cannot be read (naming the broker, never its password), and `/readyz` says the bus
/// is unreachable.
#[test]
fn serve_starts_while_the_broker_is_down() {
    let s = Scenario::rabbitmq(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let down = [("ARCHIVIST_BUS_URL", "amqp://guest:hunter2@127.0.0.1:1/%2F")];
    let started = std::time::Instant::now();
    let (_serving, addr) = common::serving::start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &down,
        std::time::Duration::from_secs(60),
    );
    // Well before ARCHIVIST_CONNECT_TIMEOUT (30 s).
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let (code, page) = common::serving::get(&addr, "/");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("the bus cannot be read"), "{page}");
    assert!(page.contains("RabbitMQ at"), "{page}");
    assert!(!page.contains("hunter2"), "{page}");
    let (code, status) = common::serving::get(&addr, "/api/status");
    assert_eq!(code, 200, "{status}");
    let (code, queues) = common::serving::get(&addr, "/api/queues");
    assert_eq!(code, 503, "{queues}");
    assert!(queues.contains("the bus cannot be read"), "{queues}");
    let (code, ready) = common::serving::get(&addr, "/readyz");
    assert_eq!(code, 503, "{ready}");
    assert!(ready.contains("bus unreachable"), "{ready}");
}

/// A login the broker rejects: `status --json` still has `queues` (null) and says why in
/// `queues_unknown`; the counts are printed and the exit code is 0.
#[test]
fn status_json_says_why_the_queues_are_unknown_when_the_login_is_rejected() {
    let s = Scenario::rabbitmq(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let url = std::env::var("ARCHIVIST_TEST_AMQP_URL").unwrap();
    let wrong = url.replacen("guest:guest@", "guest:hunter2@", 1);
    assert_ne!(wrong, url, "the test broker's URL carries guest:guest");
    let run = s
        .run(&["status", "--json"], &[("ARCHIVIST_BUS_URL", &wrong)])
        .expect_code(0);
    let status: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        status.get("queues"),
        Some(&serde_json::Value::Null),
        "{status}"
    );
    assert!(
        status["queues_unknown"]
            .as_str()
            .is_some_and(|w| !w.is_empty()),
        "{status}"
    );
    assert_eq!(status["episodes"], 0, "{status}");
    assert!(!run.stdout.contains("hunter2") && !run.stderr.contains("hunter2"));
}

/// Queues not created yet are missing, not unreachable: `serve` is ready (it only reads), its
/// page names them as not created yet, and `status` says they do not exist.
#[test]
fn serve_is_ready_with_queues_not_created_yet() {
    let s = Scenario::rabbitmq(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let (_serving, addr) = common::serving::start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &[],
        std::time::Duration::from_secs(60),
    );
    let (code, ready) = common::serving::get(&addr, "/readyz");
    assert_eq!((code, ready.as_str()), (200, "ready\n"));
    let (code, page) = common::serving::get(&addr, "/");
    assert_eq!(code, 200);
    assert!(page.contains("Not created yet"), "{page}");
    assert!(!page.contains("unreachable"), "{page}");
    let status = s.run(&["status"], &[]).expect_code(0);
    assert!(!status.stderr.contains("unreachable"), "{}", status.stderr);
    assert!(
        status.stderr.contains("does not exist"),
        "{}",
        status.stderr
    );
}
