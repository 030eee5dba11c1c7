//! End-to-end tests of how `archivist research` copes with analysers and clients that
//! misbehave, through the binary: standard error that is not UTF-8 or has no line ends, an
//! analyser that leaves a child of its own running when the researcher gives up on it, an
//! item whose analyser fails on its last allowed try (SQLite, SQS, RabbitMQ), an analyser that keeps
//! asking to try later, and the researcher's `--metrics-addr` server against another host
//! name and slow clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common::research::{analysers, eventually, exits_within, python, signal, World};
use crate::common::BusEnv;

const PATIENCE: Duration = Duration::from_secs(120);

/// One episode with four clips in one work item on `bus`, the queues' receive limit at
/// `max_receives`.
fn one_item_world(bus: BusEnv, max_receives: &str) -> World {
    let mut w = World::new(bus, None, 1, 4);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "4");
    w.bus.set("ARCHIVIST_MAX_RECEIVES", max_receives);
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    w.pending_research_at_once(1, Some("1"));
    w
}

/// The reasons of the pending-research queue's dead letters, taken off the queue: waits
/// until one is there.
fn dead_letter_reasons(w: &World) -> Vec<String> {
    let mut reasons = Vec::new();
    eventually("a dead letter", PATIENCE, || {
        reasons = w
            .run(
                &[
                    "receive",
                    &w.bus.pending_queue,
                    "--dead-letters",
                    "--wait",
                    "2s",
                ],
                &[],
            )
            .expect_code(0)
            .json_lines()
            .iter()
            .map(|l| l["reason"].as_str().unwrap().to_string())
            .collect();
        !reasons.is_empty()
    });
    reasons
}

/// The pid the grandchild analyser wrote to `file`, once it is there.
fn pid_in(file: &std::path::Path) -> u32 {
    let mut pid = 0;
    eventually("the analyser's child", PATIENCE, || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}

fn grandchild_analyser() -> Vec<String> {
    vec![
        "sh".to_string(),
        analysers().join("grandchild.sh").display().to_string(),
    ]
}

/// A Latin-1 line and a `\r` progress bar on standard error, then, after a pause, more: the
/// researcher reads its standard error to the end, so the analyser's next write does not
/// break, and the item is researched.
#[test]
fn an_analyser_writing_latin_1_and_carriage_returns_on_standard_error_is_researched() {
    let w = one_item_world(BusEnv::database(), "1");
    let run = w
        .research_once(&[], &python(&["latin1-stderr"]), &[])
        .expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(4), Some(0)),
        "{s}\n{}",
        run.stderr
    );
    // Each line logged, what is not UTF-8 shown as U+FFFD, each `\r` a line end.
    for line in [
        "analyser: title: caf\u{FFFD} cr\u{FFFD}me",
        "analyser:  50%",
        "analyser: album: \u{FFFD} bient\u{FFFD}t",
    ] {
        assert!(run.stderr.contains(line), "{line:?} in {}", run.stderr);
    }
}

/// The analyser closes its output, leaves a child of its own running and does not exit: at
/// the stall timeout the researcher stops its whole process group, the child included.
#[test]
fn an_analyser_that_closed_its_output_and_hangs_is_stopped_with_its_children() {
    let w = one_item_world(BusEnv::database(), "1");
    let file = w.path().join("grandchild");
    let child = w.spawn_research(
        &["--stall-timeout", "1s", "--kill-grace", "1s"],
        &grandchild_analyser(),
        &[("GRANDCHILD", &file.display().to_string())],
    );
    let pid = pid_in(&file);
    eventually("the analyser's child gone", PATIENCE, || {
        common::research::process_gone(pid)
    });
    signal(child.id(), "TERM");
    let run = exits_within(child, "the researcher", PATIENCE).expect_code(0);
    assert!(
        run.stderr
            .contains("closed its output but did not exit within 1s"),
        "{}",
        run.stderr
    );
}

/// The same analyser at a shutdown: the drain timeout ends the wait for its exit, and its
/// whole process group is stopped before the researcher exits.
#[test]
fn a_shutdown_while_waiting_for_an_analysers_exit_stops_its_children() {
    let w = one_item_world(BusEnv::database(), "5");
    let file = w.path().join("grandchild");
    let child = w.spawn_research(
        &["--drain-timeout", "1s", "--kill-grace", "1s"],
        &grandchild_analyser(),
        &[("GRANDCHILD", &file.display().to_string())],
    );
    let pid = pid_in(&file);
    signal(child.id(), "TERM");
    exits_within(child, "the researcher", PATIENCE).expect_code(0);
    eventually("the analyser's child gone", Duration::from_secs(10), || {
        common::research::process_gone(pid)
    });
}

#[test]
fn an_analyser_failing_on_the_last_try_fails_the_pairs_with_its_reason() {
    last_try_fails_the_pairs(BusEnv::database());
}

#[test]
fn an_analyser_failing_on_the_last_try_on_sqs() {
    last_try_fails_the_pairs(BusEnv::sqs());
}

#[test]
fn an_analyser_failing_on_the_last_try_on_rabbitmq() {
    last_try_fails_the_pairs(BusEnv::rabbitmq());
}

/// An analyser that always fails: on the item's last allowed receive its unanswered pairs
/// become failed research with the analyser's reason, the lease ends, and the dead letter
/// carries the reason; `retry-failed` brings the pairs back.
fn last_try_fails_the_pairs(bus: BusEnv) {
    let w = one_item_world(bus, "2");
    let run = w
        .research_once(&["--concurrency", "1"], &python(&["fail"]), &[])
        .expect_code(0);
    assert!(run.stderr.contains("last allowed try"), "{}", run.stderr);
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(s["active_leases"], 0, "{s}");
    assert_eq!(s["failed_pairs"], 4, "{s}");
    assert_eq!(s["researched_pairs"], 0, "{s}");
    let shown = s.to_string();
    assert!(shown.contains("no GPU found (failing on purpose)"), "{s}");
    let reasons = dead_letter_reasons(&w);
    assert_eq!(reasons.len(), 1, "{reasons:?} {}", s["queues"]);
    assert!(
        reasons[0].contains("the analyser exited with code 1")
            && reasons[0].contains("no GPU found (failing on purpose)"),
        "{reasons:?}"
    );
    w.run(&["retry-failed"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(s["failed_pairs"], 0, "{s}");
    w.pending_research_at_once(1, Some("1"));
    assert_eq!(w.status()["active_leases"], 1, "leased again");
}

/// Exit 75 holds the item for `--later-backoff` (doubled at the next receive) before it goes
/// back; on its last allowed try, asking for later once more gives it up with that reason.
#[test]
fn an_analyser_asking_for_later_has_the_item_held_then_given_up() {
    let w = one_item_world(BusEnv::database(), "2");
    let started = Instant::now();
    let run = w
        .research_once(
            &["--concurrency", "1", "--later-backoff", "1500ms"],
            &python(&["exit-75"]),
            &[],
        )
        .expect_code(0);
    let took = started.elapsed();
    // One hold, at the first receive; the second is the last try.
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(run.stderr.contains("hold=1s 500ms"), "{}", run.stderr);
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(
        (s["active_leases"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(0), Some(4)),
        "{s}"
    );
    let reasons = dead_letter_reasons(&w);
    assert!(
        reasons.len() == 1
            && reasons[0].contains(
                "the analyser exited with 75: asked to try later on the item's last allowed try"
            ),
        "{reasons:?}"
    );
}

/// One raw HTTP/1.1 exchange with `host` as the Host header: the status code.
fn status_with_host(port: u16, path: &str, host: &str) -> u16 {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split(' ').nth(1).unwrap().parse().unwrap()
}

/// The researcher's server is served as the status page is: on loopback, another host name
/// is refused (DNS rebinding would show a web page the slots' episodes and leases), and a
/// client that never finishes its request head is cut off.
#[test]
fn the_researchers_server_refuses_other_host_names_and_slow_clients() {
    let w = one_item_world(BusEnv::database(), "5");
    let port = common::research::free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = w.spawn_research(
        &["--concurrency", "1", "--metrics-addr", &addr],
        &python(&[]),
        &[],
    );
    eventually("the researcher's server", PATIENCE, || {
        common::research::http_get(port, "/healthz").is_some()
    });
    assert_eq!(
        status_with_host(port, "/api/researcher", &format!("localhost:{port}")),
        200
    );
    assert_eq!(
        status_with_host(port, "/api/researcher", &format!("evil.example:{port}")),
        421
    );
    assert_eq!(
        status_with_host(port, "/metrics", &format!("evil.example:{port}")),
        421
    );
    // Half a request head, then nothing: closed within the head's deadline (5 s), with room.
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"GET /api/researcher HTTP/1.1\r\nHost: localhost\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let closed = slow.read_to_end(&mut rest);
    assert!(
        closed.is_ok() && started.elapsed() < Duration::from_secs(15),
        "{closed:?} after {:?}",
        started.elapsed()
    );
    signal(child.id(), "TERM");
    exits_within(child, "the researcher", PATIENCE).expect_code(0);
}
