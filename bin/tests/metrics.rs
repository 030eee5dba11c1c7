//! `--metrics-addr`: a running `archivist run` serves Prometheus metrics that count what it
//! does (scraped here over HTTP as Prometheus would), `/healthz`, `/readyz`, and the status
//! page with its JSON (`bin/tests/status_page.rs` tests those in full).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::pipeline::{episode_json, results_for, Scenario, POISON};
use common::serving::{get, start_serving};

/// How long the process may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

/// The value of the sample `series` (name and labels, as rendered) in a scrape.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn run_serves_metrics_and_health_checks() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let episode = episode_json("Episode 1: Metrics", "2026-01-01T00:00:00Z", 5, 1).to_string();
    s.run_with_input(&["send", "curated_episodes"], &format!("{episode}\n"))
        .expect_code(0);
    s.run_with_input(
        &["send", "--raw", "curated_episodes"],
        &format!("{POISON}\n"),
    )
    .expect_code(0);

    let (_running, addr) =
        start_serving(&s, &["run", "--metrics-addr", "127.0.0.1:0"], &[], DEADLINE);

    assert_eq!(get(&addr, "/healthz"), (200, "ok\n".to_string()));
    let (code, body) = get(&addr, "/readyz");
    assert_eq!((code, body.as_str()), (200, "ready\n"));

    // Poll the scrape (as Prometheus would) until it shows both messages handled: the
    // gauges are read at the start of a scrape, so they may trail the counters by one.
    let wanted: Vec<(String, f64)> = vec![
        (r#"archivist_messages_received_total{archivist="episodes"}"#.into(), 2.0),
        (
            r#"archivist_messages_dead_lettered_total{archivist="episodes",reason="invalid_message"}"#
                .into(),
            1.0,
        ),
        (r#"archivist_messages_stored_total{archivist="episodes"}"#.into(), 1.0),
        ("archivist_episodes".into(), 1.0),
        (r#"archivist_queue_dead_letters{queue="curated_episodes"}"#.into(), 1.0),
        (
            r#"archivist_queue_messages{queue="curated_episodes",state="waiting"}"#.into(),
            0.0,
        ),
        (
            format!(r#"archivist_build_info{{version="{}"}}"#, env!("CARGO_PKG_VERSION")),
            1.0,
        ),
    ];
    let started = Instant::now();
    let scrape = loop {
        let (code, scrape) = get(&addr, "/metrics");
        assert_eq!(code, 200);
        let missing: Vec<_> = wanted
            .iter()
            .filter(|(series, value)| sample(&scrape, series) != Some(*value))
            .collect();
        if missing.is_empty() {
            break scrape;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the scrape never showed {missing:?}:\n{scrape}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        scrape.contains("# TYPE archivist_datastore_call_duration_seconds histogram"),
        "{scrape}"
    );
    assert!(
        scrape.contains("# TYPE archivist_messages_received_total counter"),
        "{scrape}"
    );
    // The archivist's own calls are timed, not only the scrape's.
    for series in [
        r#"archivist_datastore_call_duration_seconds_count{call="store"}"#,
        r#"archivist_bus_call_duration_seconds_count{call="receive"}"#,
    ] {
        assert!(
            sample(&scrape, series).is_some_and(|n| n >= 1.0),
            "{series}:\n{scrape}"
        );
    }
    assert!(!scrape.contains("sqlite://"), "no datastore URL in metrics");

    // `run` serves the status page and its JSON on the same address.
    let (code, page) = get(&addr, "/");
    assert_eq!(code, 200);
    assert!(page.contains(r#"<meta http-equiv="refresh""#), "{page}");
    let (code, status) = get(&addr, "/api/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["episodes"], 1, "{status}");
}

/// Every counter series in a scrape (`name{labels}` → value), histograms left out.
fn counters(scrape: &str) -> std::collections::BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            series
                .split('{')
                .next()
                .is_some_and(|n| n.ends_with("_total"))
        })
        .map(|(series, value)| (series.to_string(), value.parse().unwrap()))
        .collect()
}

/// Serves `args` with metrics until its counters are exactly `expected` and each of `gauges`
/// has its value (the gauges are read at the start of a scrape, and a broker's counts may
/// trail its confirms); the scrape then.
fn scrape_until(
    s: &Scenario,
    args: &[&str],
    extra: &[(&str, &str)],
    expected: &std::collections::BTreeMap<String, f64>,
    gauges: &[(String, f64)],
) -> (common::serving::Running, String) {
    let mut all = args.to_vec();
    all.extend(["--every", "1h", "--metrics-addr", "127.0.0.1:0"]);
    let (running, addr) = start_serving(s, &all, extra, DEADLINE);
    let started = Instant::now();
    loop {
        let (code, scrape) = get(&addr, "/metrics");
        assert_eq!(code, 200);
        let got = counters(&scrape);
        let wrong: Vec<_> = gauges
            .iter()
            .filter(|(series, value)| sample(&scrape, series) != Some(*value))
            .collect();
        if &got == expected && wrong.is_empty() {
            return (running, scrape);
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the scrape never showed the expected counters {expected:#?} and gauges {wrong:?}:\n{scrape}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A scripted run: two work items published, then their results recorded (one duplicate, one
/// poison line); every counter of each process has exactly the value of what it did, every
/// counter it can count is there from the start (at 0 if nothing happened), every metric has a
/// `# HELP` line, and the gauges are the datastore's and the queues' figures.
fn every_counter_counts_exactly(s: &Scenario) {
    s.run(&["queues"], &[]).expect_code(0);
    s.curate();
    let one_clip = [
        ("ARCHIVIST_RESEARCHERS", "2"),
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_MAX_CLIPS", "1"),
    ];
    let published = r#"archivist_work_items_published_total{archivist="pending-research"}"#;
    let expected: std::collections::BTreeMap<String, f64> = [
        (published, 2.0),
        (
            r#"archivist_retries_total{archivist="pending-research"}"#,
            0.0,
        ),
        (r#"archivist_leases_total{event="created"}"#, 2.0),
        (r#"archivist_leases_total{event="renewed"}"#, 0.0),
        (r#"archivist_leases_total{event="revoked"}"#, 0.0),
        (r#"archivist_leases_total{event="reclaimed_pairs"}"#, 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let pending_q = &s.bus.pending_queue;
    let waiting = format!(r#"archivist_queue_messages{{queue="{pending_q}",state="waiting"}}"#);
    let (pending, scrape) = scrape_until(
        s,
        &["pending-research"],
        &one_clip,
        &expected,
        &[
            (waiting, 2.0),
            ("archivist_pairs_leased".to_string(), 2.0),
            (r#"archivist_leases{state="active"}"#.to_string(), 2.0),
        ],
    );
    drop(pending);
    for line in scrape.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap();
        assert!(
            scrape.contains(&format!("# HELP {name} ")),
            "{name}:\n{scrape}"
        );
    }
    let status = s.status();
    for (gauge, field) in [
        ("archivist_episodes", "episodes"),
        ("archivist_clips", "clips"),
        ("archivist_research_pairs", "research_pairs"),
        ("archivist_pairs_researched", "researched_pairs"),
        ("archivist_pairs_leased", "leased_pairs"),
        ("archivist_matches", "matched_pairs"),
    ] {
        assert_eq!(
            sample(&scrape, gauge),
            status[field].as_f64(),
            "{gauge}: {status}"
        );
    }

    // The results: one per item (each the last, so it revokes), the first twice, and poison.
    let work = s.receive_work("2", "5s");
    assert_eq!(work.len(), 2);
    let mut lines: Vec<String> = work
        .iter()
        .flat_map(results_for)
        .map(|r| r.to_string())
        .collect();
    assert_eq!(lines.len(), 2);
    lines.push(lines[0].clone());
    lines.push(POISON.to_string());
    s.run_with_input(
        &["send", "--raw", &s.bus.completed_queue],
        &(lines.join("\n") + "\n"),
    )
    .expect_code(0);
    let c = |name: &str| format!(r#"archivist_{name}_total{{archivist="completed-research"}}"#);
    let dead = |reason: &str| {
        format!(
            r#"archivist_messages_dead_lettered_total{{archivist="completed-research",reason="{reason}"}}"#
        )
    };
    let expected: std::collections::BTreeMap<String, f64> = [
        (c("messages_received"), 4.0),
        (c("messages_stored"), 3.0),
        (c("duplicates"), 1.0),
        (c("messages_released"), 0.0),
        (c("retries"), 0.0),
        (dead("invalid_message"), 1.0),
        (dead("rejected_by_datastore"), 0.0),
        (dead("unknown_episode_or_clip"), 0.0),
        (
            r#"archivist_leases_total{event="created"}"#.to_string(),
            0.0,
        ),
        (
            r#"archivist_leases_total{event="renewed"}"#.to_string(),
            0.0,
        ),
        (
            r#"archivist_leases_total{event="revoked"}"#.to_string(),
            2.0,
        ),
        (
            r#"archivist_leases_total{event="reclaimed_pairs"}"#.to_string(),
            0.0,
        ),
    ]
    .into_iter()
    .collect();
    let completed_q = &s.bus.completed_queue;
    scrape_until(
        s,
        &["completed-research"],
        &[],
        &expected,
        &[
            ("archivist_pairs_researched".to_string(), 2.0),
            (r#"archivist_leases{state="active"}"#.to_string(), 0.0),
            (
                format!(r#"archivist_queue_dead_letters{{queue="{completed_q}"}}"#),
                1.0,
            ),
        ],
    );
}

#[test]
fn every_counter_counts_exactly_on_the_sqlite_bus() {
    every_counter_counts_exactly(&Scenario::database(None));
}

#[test]
fn every_counter_counts_exactly_on_the_postgres_bus() {
    let db = common::PgDatabase::create();
    every_counter_counts_exactly(&Scenario::database(Some(&db.url)));
}

#[test]
fn every_counter_counts_exactly_on_rabbitmq() {
    every_counter_counts_exactly(&Scenario::rabbitmq(None));
}

#[test]
fn every_counter_counts_exactly_on_sqs() {
    every_counter_counts_exactly(&Scenario::sqs(None));
}
