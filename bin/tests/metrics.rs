//! `--metrics-addr`: a running `archivist run` serves Prometheus metrics that count what it
//! does (scraped here over HTTP as Prometheus would), `/healthz`, `/readyz`, and the status
//! page with its JSON (`bin/tests/status_page.rs` tests those in full).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::pipeline::{episode_json, Scenario, POISON};
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
