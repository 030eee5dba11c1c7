//! `--metrics-addr`: a running `archivist run` serves Prometheus metrics that count what it
//! does (scraped here over HTTP as Prometheus would), `/healthz`, `/readyz`, and the status
//! page with its JSON (`bin/tests/e2e/status_page.rs` tests those in full).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use crate::common::pipeline::{
    clip_json, episode_json, results_for, Scenario, CLIPS, EPISODES, POISON,
};
use crate::common::serving::{get, start_serving};

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

type Counters = std::collections::BTreeMap<String, f64>;

/// Starts `args` serving its metrics on a free port: the process and the address.
fn serve(
    s: &Scenario,
    args: &[&str],
    extra: &[(&str, &str)],
) -> (common::serving::Running, String) {
    let mut all = args.to_vec();
    all.extend(["--metrics-addr", "127.0.0.1:0"]);
    start_serving(s, &all, extra, DEADLINE)
}

/// Every metric of `scrape` that has a `# TYPE` line has a `# HELP` line.
fn assert_every_metric_described(scrape: &str) {
    for line in scrape.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap();
        assert!(
            scrape.contains(&format!("# HELP {name} ")),
            "{name} has no # HELP line:\n{scrape}"
        );
    }
}

/// The first scrape of a process that has had nothing to do: every counter it can count is
/// there, at 0, and nothing else.
fn assert_counters_start_at_zero(addr: &str, expected: &Counters) {
    let (code, scrape) = get(addr, "/metrics");
    assert_eq!(code, 200);
    let zeros: Counters = expected.keys().map(|k| (k.clone(), 0.0)).collect();
    assert_eq!(counters(&scrape), zeros, "{scrape}");
    assert_every_metric_described(&scrape);
}

/// Scrapes `addr` until its counters are exactly `expected` and every one of `gauges` has its
/// value (the gauges are read at the start of a scrape, and a broker's counts may trail its
/// confirms); the scrape then, every metric in it described.
fn scrape_until(addr: &str, expected: &Counters, gauges: &[(String, f64)]) -> String {
    let started = Instant::now();
    loop {
        let (code, scrape) = get(addr, "/metrics");
        assert_eq!(code, 200);
        let got = counters(&scrape);
        let wrong: Vec<_> = gauges
            .iter()
            .filter(|(series, value)| sample(&scrape, series) != Some(*value))
            .collect();
        if &got == expected && wrong.is_empty() {
            assert_every_metric_described(&scrape);
            return scrape;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the scrape never showed the expected counters {expected:#?} and gauges {wrong:?}:\n{scrape}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the datastore and the queues hold at one moment of the scripted run.
struct Figures {
    episodes: f64,
    clips: f64,
    researched: f64,
    leased: f64,
    matches: f64,
    active_leases: f64,
    /// (waiting, in flight, dead letters) of each queue, in pipeline order.
    queues: [(f64, f64, f64); 4],
}

/// Every gauge the process serves, with its value: the datastore's counts, the leases by
/// state, each queue's depths (the binary's version aside).
fn every_gauge(s: &Scenario, f: &Figures) -> Vec<(String, f64)> {
    let pairs = f.episodes * f.clips;
    let mut gauges: Vec<(String, f64)> = [
        ("archivist_episodes", f.episodes),
        ("archivist_clips", f.clips),
        ("archivist_research_pairs", pairs),
        ("archivist_pairs_researched", f.researched),
        ("archivist_pairs_failed", 0.0),
        ("archivist_pairs_to_do", pairs - f.researched),
        ("archivist_pairs_leased", f.leased),
        ("archivist_matches", f.matches),
        (r#"archivist_leases{state="active"}"#, f.active_leases),
        (r#"archivist_leases{state="awaiting_late_results"}"#, 0.0),
        (r#"archivist_leases{state="expired"}"#, 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let names = [
        &s.bus.episodes_queue,
        &s.bus.clips_queue,
        &s.bus.pending_queue,
        &s.bus.completed_queue,
    ];
    for (q, (waiting, in_flight, dead)) in names.into_iter().zip(f.queues) {
        gauges.push((
            format!(r#"archivist_queue_messages{{queue="{q}",state="waiting"}}"#),
            waiting,
        ));
        gauges.push((
            format!(r#"archivist_queue_messages{{queue="{q}",state="in_flight"}}"#),
            in_flight,
        ));
        gauges.push((
            format!(r#"archivist_queue_dead_letters{{queue="{q}"}}"#),
            dead,
        ));
    }
    gauges
}

/// The counters of an ingestion archivist (`episodes`, `clips`) after it received `valid`
/// messages and one poison.
fn ingestion_counters(archivist: &str, valid: f64) -> Counters {
    let c = |name: &str| format!(r#"archivist_{name}_total{{archivist="{archivist}"}}"#);
    let dead = |reason: &str| {
        format!(
            r#"archivist_messages_dead_lettered_total{{archivist="{archivist}",reason="{reason}"}}"#
        )
    };
    [
        (c("messages_received"), valid + 1.0),
        (c("messages_stored"), valid),
        (c("messages_released"), 0.0),
        (c("retries"), 0.0),
        (dead("invalid_message"), 1.0),
        (dead("rejected_by_datastore"), 0.0),
    ]
    .into_iter()
    .collect()
}

/// A scripted run, one process per archivist, each serving its metrics: the episodes and the
/// clips ingested (one poison each), two work items published, then their results recorded
/// (one duplicate, one poison line). Every counter of each process is there from its start
/// (at 0 where it had nothing to do yet), has exactly the value of what it did, and no other
/// counter is there; every metric has a `# HELP` line; and every gauge has the value of the
/// datastore's and the queues' figures at that moment.
fn every_counter_counts_exactly(s: &Scenario) {
    s.run(&["queues"], &[]).expect_code(0);
    s.run(&["migrate"], &[]).expect_code(0);
    let (ne, nc) = (EPISODES.len() as f64, CLIPS.len() as f64);
    let mut figures = Figures {
        episodes: 0.0,
        clips: 0.0,
        researched: 0.0,
        leased: 0.0,
        matches: 0.0,
        active_leases: 0.0,
        queues: [(0.0, 0.0, 0.0); 4],
    };

    // Ingestion: each archivist starts with nothing to do, then gets its messages.
    let episodes: Vec<String> = EPISODES
        .iter()
        .enumerate()
        .map(|(n, (t, a, p))| episode_json(t, a, *p, n).to_string())
        .chain([POISON.to_string()])
        .collect();
    let clips: Vec<String> = CLIPS
        .iter()
        .enumerate()
        .map(|(n, (t, p))| clip_json(t, *p, n).to_string())
        .chain([POISON.to_string()])
        .collect();
    for (archivist, queue, lines, valid) in [
        ("episodes", &s.bus.episodes_queue, &episodes, ne),
        ("clips", &s.bus.clips_queue, &clips, nc),
    ] {
        let expected = ingestion_counters(archivist, valid);
        let (running, addr) = serve(s, &[archivist], &[]);
        assert_counters_start_at_zero(&addr, &expected);
        s.run_with_input(&["send", "--raw", queue], &(lines.join("\n") + "\n"))
            .expect_code(0);
        if archivist == "episodes" {
            figures.episodes = ne;
            figures.queues[0] = (0.0, 0.0, 1.0);
        } else {
            figures.clips = nc;
            figures.queues[1] = (0.0, 0.0, 1.0);
        }
        scrape_until(&addr, &expected, &every_gauge(s, &figures));
        drop(running);
    }

    let one_clip = [
        ("ARCHIVIST_RESEARCHERS", "2"),
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_MAX_CLIPS", "1"),
    ];
    let published = r#"archivist_work_items_published_total{archivist="pending-research"}"#;
    let expected: Counters = [
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
    figures.leased = 2.0;
    figures.active_leases = 2.0;
    figures.queues[2] = (2.0, 0.0, 0.0);
    let (pending, addr) = serve(s, &["pending-research", "--every", "1h"], &one_clip);
    let scrape = scrape_until(&addr, &expected, &every_gauge(s, &figures));
    drop(pending);
    // The gauges are the figures `status` shows.
    let status = s.status();
    for (gauge, field) in [
        ("archivist_episodes", "episodes"),
        ("archivist_clips", "clips"),
        ("archivist_research_pairs", "research_pairs"),
        ("archivist_pairs_researched", "researched_pairs"),
        ("archivist_pairs_failed", "failed_pairs"),
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
    let c = |name: &str| format!(r#"archivist_{name}_total{{archivist="completed-research"}}"#);
    let dead = |reason: &str| {
        format!(
            r#"archivist_messages_dead_lettered_total{{archivist="completed-research",reason="{reason}"}}"#
        )
    };
    let expected: Counters = [
        (c("messages_received"), 4.0),
        (c("messages_stored"), 3.0),
        (c("duplicates"), 1.0),
        (c("messages_released"), 0.0),
        (c("retries"), 0.0),
        // Announcing is off here (bin/tests/e2e/announce_e2e.rs counts announcements).
        (c("episodes_announced"), 0.0),
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
    // A run drains the queue and ends at its first empty receive (1 s): it runs every second
    // here, so that the results are recorded whenever they arrive (one run, started before
    // them, may well find the queue empty), and the counters are checked at 0 before that.
    let (completed, addr) = serve(s, &["completed-research", "--every", "1s"], &[]);
    assert_counters_start_at_zero(&addr, &expected);
    let work = s.receive_work("2", "5s");
    assert_eq!(work.len(), 2);
    let results: Vec<serde_json::Value> = work.iter().flat_map(results_for).collect();
    assert_eq!(results.len(), 2);
    let found = results
        .iter()
        .filter(|r| !r["clip_offsets_ns"].as_array().unwrap().is_empty())
        .count();
    let mut lines: Vec<String> = results.iter().map(|r| r.to_string()).collect();
    lines.push(lines[0].clone());
    lines.push(POISON.to_string());
    s.run_with_input(
        &["send", "--raw", &s.bus.completed_queue],
        &(lines.join("\n") + "\n"),
    )
    .expect_code(0);
    figures.researched = 2.0;
    figures.leased = 0.0;
    figures.matches = found as f64;
    figures.active_leases = 0.0;
    figures.queues[2] = (0.0, 0.0, 0.0);
    figures.queues[3] = (0.0, 0.0, 1.0);
    scrape_until(&addr, &expected, &every_gauge(s, &figures));
    drop(completed);
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
