//! End-to-end tests of the `archivist` binary across processes on the SQS bus (moto_server):
//! the pipeline (`common::pipeline`) once on an SQLite file and once on a fresh Postgres
//! database, then what `send` does with lines SQS cannot carry.
//!
//! Every test uses queue names of its own, so tests can share one moto_server. The SQS
//! endpoint comes from `ARCHIVIST_TEST_SQS_ENDPOINT`, which `scripts/test.sh` sets; without
//! it the tests fail (see `common::BusEnv`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;

use common::pipeline::{pipeline, Scenario};
use common::{archivist_with_input, PgDatabase, Run};

#[test]
fn pipeline_across_processes_on_sqs_and_sqlite() {
    let s = Scenario::sqs(None);
    pipeline(&s);
    assert!(s.path().join("archive.sqlite").exists());
}

#[test]
fn pipeline_across_processes_on_sqs_and_postgres() {
    let db = PgDatabase::create();
    let s = Scenario::sqs(Some(&db.url));
    pipeline(&s);
}

#[test]
fn send_with_a_line_that_is_not_utf8_sends_nothing_and_exits_2() {
    use std::io::Write;
    let s = Scenario::sqs(None);
    s.run(&["queues"], &[]).expect_code(0);
    let mut child = common::command(s.path(), &["send", &s.bus.clips_queue], &s.bus.with(&[]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"n\":1}\n\xff\xfe\n{\"n\":3}\n")
        .unwrap();
    let run = Run::from_output(child.wait_with_output().unwrap()).expect_code(2);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    assert!(run.stderr.contains("UTF-8"), "{}", run.stderr);
    // Nothing was sent: the fixed input can be sent again as a whole.
    let got = s
        .run(
            &["receive", &s.bus.clips_queue, "--max", "10", "--wait", "1s"],
            &[],
        )
        .expect_code(0);
    assert_eq!(got.stdout, "");
}

#[test]
fn send_raw_sends_each_line_as_it_is() {
    let s = Scenario::sqs(None);
    s.run(&["queues"], &[]).expect_code(0);
    let input = "  not json, blanks kept  \r\n\n\t{\"n\": 2}\n";
    archivist_with_input(
        s.path(),
        &["send", "--raw", &s.bus.clips_queue],
        &s.bus.with(&[]),
        input,
    )
    .expect_code(0);
    let got = s
        .run(
            &["receive", &s.bus.clips_queue, "--max", "10", "--wait", "1s"],
            &[],
        )
        .expect_code(0);
    // A standard queue keeps no order.
    let mut lines: Vec<&str> = got.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["\t{\"n\": 2}", "  not json, blanks kept  "]);
}

#[test]
fn send_with_a_line_too_large_for_the_bus_sends_nothing_and_exits_2() {
    let s = Scenario::sqs(None);
    s.run(&["queues"], &[]).expect_code(0);
    // Larger than SQS's largest body (1 MiB), in the same batch as a good line before it.
    let huge = format!("{{\"x\":\"{}\"}}", "x".repeat(1_100_000));
    let input = format!("{{\"n\":1}}\n{huge}\n{{\"n\":3}}\n");
    let run = archivist_with_input(
        s.path(),
        &["send", &s.bus.clips_queue],
        &s.bus.with(&[]),
        &input,
    )
    .expect_code(2);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    let got = s
        .run(
            &["receive", &s.bus.clips_queue, "--max", "10", "--wait", "1s"],
            &[],
        )
        .expect_code(0);
    assert_eq!(got.stdout, "");
}

/// On SQS, `queues` says what it created, names an existing queue whose maxReceiveCount
/// differs from ARCHIVIST_MAX_RECEIVES instead of keeping it silently, and `--update` sets it.
#[test]
fn queues_on_sqs_report_and_update_the_receive_limit() {
    let s = Scenario::sqs(None);
    let run = s.run(&["queues"], &[]).expect_code(0);
    assert!(run.stderr.contains("created queue"), "{}", run.stderr);
    let three = [("ARCHIVIST_MAX_RECEIVES", "3")];
    let run = s.run(&["queues"], &three).expect_code(0);
    assert!(
        run.stderr.contains("maxReceiveCount is 5") && run.stderr.contains("--update"),
        "{}",
        run.stderr
    );
    s.run(&["queues", "--update"], &three).expect_code(0);
    let run = s.run(&["queues"], &three).expect_code(0);
    assert!(!run.stderr.contains("left as it is"), "{}", run.stderr);
}
