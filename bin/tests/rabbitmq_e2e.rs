//! End-to-end tests of the `archivist` binary across processes on RabbitMQ: the pipeline
//! (`common::pipeline`) on an SQLite file and on a fresh Postgres database, work assignment
//! that reads the researcher count from the broker, and URLs whose password is never shown.
//!
//! Every test uses queue names of its own, so tests share one broker. The broker comes from
//! `ARCHIVIST_TEST_AMQP_URL`, which `scripts/test.sh` sets; without it the tests fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::pipeline::{pipeline, Scenario};
use common::PgDatabase;

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
