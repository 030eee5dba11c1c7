//! `archivist run` with nothing to do says nothing at INFO: INFO says what changed, and an
//! idle work-assignment loop (every `--every`) changes nothing. Its runs are still logged at
//! DEBUG, which is how this test counts the timer periods it waited through.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::pipeline::Scenario;
use crate::common::serving::Running;
use serde_json::Value;

/// How long the process may take to go round the periods the test waits for.
const DEADLINE: Duration = Duration::from_secs(60);

/// Idle work-assignment runs the test waits through before it counts.
const SETTLING_RUNS: usize = 3;
/// Idle runs over which no INFO line may appear.
const COUNTED_RUNS: usize = 10;

#[test]
fn an_idle_run_logs_nothing_at_info() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let mut child = common::command(
        s.path(),
        &["run", "--every", "100ms"],
        &s.bus.with(&[
            ("ARCHIVIST_START_JITTER", "0s"),
            ("ARCHIVIST_LOG_FORMAT", "json"),
            ("RUST_LOG", "info,archivist::runner=debug"),
        ]),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _running = Running(child);
    let (tx, rx) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
            if tx.send(value).is_err() {
                return;
            }
        }
    });

    let started = Instant::now();
    let mut idle_runs = 0;
    let mut info_while_idle = Vec::new();
    while idle_runs < SETTLING_RUNS + COUNTED_RUNS {
        let left = DEADLINE.saturating_sub(started.elapsed());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!("only {idle_runs} idle work-assignment runs within {DEADLINE:?}")
        });
        let level = line["level"].as_str().unwrap_or_default();
        let idle_assignment = level == "DEBUG"
            && line["message"] == "run ended"
            && line["span"]["archivist"] == "pending-research"
            && line["leases_created"] == 0;
        if idle_assignment {
            idle_runs += 1;
        } else if level == "INFO" && idle_runs >= SETTLING_RUNS {
            info_while_idle.push(line);
        }
    }
    assert!(
        info_while_idle.is_empty(),
        "INFO lines over {COUNTED_RUNS} idle periods: {info_while_idle:#?}"
    );
}
