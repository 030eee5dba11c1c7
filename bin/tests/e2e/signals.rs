//! End-to-end test of SIGTERM and SIGINT: `archivist run` on SQS (the emulator that
//! `scripts/test.sh` starts; the tests fail without it) stops cleanly and exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::{archivist, command, BusEnv};

fn stops_on(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut sqs = BusEnv::sqs();
    sqs.set("DATABASE_URL", "sqlite://signals.sqlite");
    sqs.set("ARCHIVIST_RESEARCHERS", "1");
    archivist(dir.path(), &["queues"], &sqs.with(&[])).expect_code(0);
    let mut child = command(dir.path(), &["run"], &sqs.with(&[]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    // Wait for the process to say it is running (no sleeping on a guess).
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let ready = line.contains("archivists running");
        seen.push(line);
        if ready {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("archivists running")),
        "{seen:#?}"
    );
    let kill = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{seen:#?}\n{rest:#?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("stopping") && l.contains(signal)),
        "{rest:#?}"
    );
}

#[test]
fn run_stops_cleanly_on_sigterm() {
    stops_on("TERM");
}

#[test]
fn run_stops_cleanly_on_sigint() {
    stops_on("INT");
}
