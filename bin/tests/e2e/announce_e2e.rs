//! The fan-in event through the binary, on every bus: with `ARCHIVIST_ANNOUNCE_QUEUE` set, the
//! completed-research archivist announces each episode fully researched (`EpisodeResearched`)
//! exactly once per completion, even when results arrive twice and out of order and the
//! archivist is SIGKILLed between recording and announcing; a clip curated later reopens every
//! episode, and each completion is announced again.
//!
//! The kill lands where each bus can be exact: on the database bus inside the transaction that
//! publishes the announcement and lets go of the completion (it rolls back), elsewhere after
//! the batch is recorded and acknowledged and before anything is sent.
//!
//! Two recorders started together on the same backlog of completions announce each episode
//! once between them, on SQS and on a database bus in another database than the datastore
//! (where sending and letting go cannot be one transaction).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeMap;

use crate::common::pipeline::{
    clip_json, results_for, Scenario, CLIPS, EPISODES, FOUND, MAX_CLIPS,
};
use crate::common::PgDatabase;
use serde_json::Value;

/// The announcement queue's name beside the scenario's other queues (tagged on SQS and
/// RabbitMQ, so that tests can share a server).
fn announce_queue(s: &Scenario) -> String {
    s.bus
        .completed_queue
        .replace("completed_research", "researched_episodes")
}

/// The announcements waiting, by episode title (each must come once).
fn announcements(s: &Scenario, queue: &str) -> BTreeMap<String, Value> {
    let got = s
        .run(&["receive", queue, "--max", "50", "--wait", "2s"], &[])
        .expect_code(0)
        .json_lines();
    let mut by_episode = BTreeMap::new();
    for a in got {
        let title = a["episode"]["title"].as_str().unwrap().to_string();
        assert!(
            by_episode.insert(title.clone(), a).is_none(),
            "{title} announced twice"
        );
    }
    by_episode
}

/// Leases every pair (`items` work items), answers each item twice, the whole lot in reverse
/// order (each lease's revoking result before its others), and sends it all; returns what it
/// sent.
fn research_everything(s: &Scenario, items: usize) -> String {
    let env = [
        ("ARCHIVIST_RESEARCHERS", "50"),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let work = s.receive_work("50", "2s");
    assert_eq!(work.len(), items, "{work:#?}");
    let mut results: Vec<String> = work
        .iter()
        .flat_map(results_for)
        .map(|r| r.to_string())
        .collect();
    results.extend(results.clone());
    results.reverse();
    let sent = results.join("\n") + "\n";
    s.run_with_input(&["send", &s.bus.completed_queue], &sent)
        .expect_code(0);
    sent
}

fn announcing(mut s: Scenario) {
    let queue = announce_queue(&s);
    if s.bus.is_sqs() {
        // A configured announcement queue that does not exist is said at start.
        s.run(&["queues"], &[]).expect_code(0);
        let missing = s
            .run(
                &["completed-research"],
                &[("ARCHIVIST_ANNOUNCE_QUEUE", &queue)],
            )
            .expect_code(2);
        assert!(missing.stderr.contains(&queue), "{}", missing.stderr);
    }
    s.bus.set("ARCHIVIST_ANNOUNCE_QUEUE", &queue);
    s.run(&["queues"], &[]).expect_code(0);
    s.curate();
    let items = EPISODES.len() * CLIPS.len().div_ceil(MAX_CLIPS);
    let sent = research_everything(&s, items);

    // Killed with the results recorded and nothing announced: nothing is lost, nothing doubled.
    let point = if s.bus.is_sqs() || s.bus.with(&[]).contains(&("ARCHIVIST_BUS", "rabbitmq")) {
        "completed-research-announce"
    } else {
        "bus-send-in-transaction"
    };
    common::kill_at_point(s.path(), &["completed-research"], &s.bus.with(&[]), point);
    // Killed after its first batch (all of it where the bus hands out a hundred at once).
    let status = s.status();
    assert!(status["researched_pairs"].as_u64().unwrap() > 0, "{status}");
    assert!(announcements(&s, &queue).is_empty());
    s.run(&["completed-research"], &[]).expect_code(0);
    let status = s.status();
    assert_eq!(
        status["researched_pairs"],
        (EPISODES.len() * CLIPS.len()) as u64,
        "{status}"
    );

    let announced = announcements(&s, &queue);
    assert_eq!(announced.len(), EPISODES.len(), "{announced:#?}");
    for (title, a) in &announced {
        let found: Vec<_> = FOUND.iter().filter(|(e, _, _)| e == title).collect();
        assert_eq!(a["clips_researched"], CLIPS.len() as u64, "{a}");
        assert_eq!(a["clips_failed"], 0, "{a}");
        assert_eq!(a["clips_matched"], found.len() as u64, "{a}");
        assert!(a["completed_at"].is_string(), "{a}");
        let mut matches: Vec<(String, Vec<i64>)> = a["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let offsets = m["clip_offsets_ns"].as_array().unwrap();
                (
                    m["clip"]["title"].as_str().unwrap().to_string(),
                    offsets.iter().map(|o| o.as_i64().unwrap()).collect(),
                )
            })
            .collect();
        // In the order they occur in the episode.
        let firsts: Vec<i64> = matches.iter().map(|(_, o)| o[0]).collect();
        assert!(firsts.windows(2).all(|w| w[0] <= w[1]), "{a}");
        matches.sort();
        let mut want: Vec<(String, Vec<i64>)> = found
            .iter()
            .map(|(_, c, o)| (c.to_string(), o.to_vec()))
            .collect();
        want.sort();
        assert_eq!(matches, want, "{title}");
    }

    // The same results once more change nothing and announce nothing.
    s.run_with_input(&["send", &s.bus.completed_queue], &sent)
        .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert!(announcements(&s, &queue).is_empty());

    // A clip curated later reopens every episode; each is announced again once its pair is in.
    let late = clip_json("Clip E", 2, CLIPS.len()).to_string();
    s.run_with_input(&["send", &s.bus.clips_queue], &(late + "\n"))
        .expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    research_everything(&s, EPISODES.len());
    s.run(&["completed-research"], &[]).expect_code(0);
    let again = announcements(&s, &queue);
    assert_eq!(again.len(), EPISODES.len(), "{again:#?}");
    for a in again.values() {
        assert_eq!(a["clips_researched"], CLIPS.len() as u64 + 1, "{a}");
    }
}

#[test]
fn announced_once_on_the_sqlite_database_bus() {
    announcing(Scenario::database(None));
}

#[test]
fn announced_once_on_the_postgres_database_bus() {
    let db = PgDatabase::create();
    announcing(Scenario::database(Some(&db.url)));
}

#[test]
fn announced_once_on_rabbitmq() {
    announcing(Scenario::rabbitmq(None));
}

#[test]
fn announced_once_on_sqs() {
    announcing(Scenario::sqs(None));
}

/// Episodes in the backlog the two recorders race for: several of the recorders' reads of a
/// hundred each, so that both are sending at once.
const BACKLOG: u32 = 300;

/// Keeps `BACKLOG` completed, unannounced episodes in the datastore at `url` (migrated with
/// the binary, loaded through the datastore's API): one clip, each episode's pair researched.
fn completed_backlog(s: &Scenario, url: &str) {
    s.run(&["migrate"], &[]).expect_code(0);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = datastore::connect(url).await.unwrap();
            let episodes: Vec<_> = (0..BACKLOG).map(datastore::testing::episode).collect();
            store.upsert_episodes(&episodes).await.unwrap();
            let clip = datastore::testing::clip(0);
            store.upsert_clip(&clip).await.unwrap();
            let lease = uuid::Uuid::new_v4();
            let results: Vec<_> = episodes
                .iter()
                .map(|e| datastore::testing::result(lease, e, &clip, &[7]))
                .collect();
            store.record_results(&results).await.unwrap();
            assert_eq!(
                store.completions(BACKLOG + 1).await.unwrap().len(),
                BACKLOG as usize
            );
        });
}

/// Every announcement waiting on `queue`, counted by episode title.
fn announcement_counts(s: &Scenario, queue: &str) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    loop {
        let got = s
            .run(&["receive", queue, "--max", "100", "--wait", "1s"], &[])
            .expect_code(0)
            .json_lines();
        if got.is_empty() {
            return counts;
        }
        for a in got {
            let title = a["episode"]["title"].as_str().unwrap().to_string();
            *counts.entry(title).or_default() += 1;
        }
    }
}

/// Two `completed-research` processes started together on the same backlog: between them each
/// episode is announced exactly once, and nothing is left to announce.
fn two_recorders_at_once(mut s: Scenario, datastore_url: &str) {
    let queue = announce_queue(&s);
    completed_backlog(&s, datastore_url);
    s.bus.set("ARCHIVIST_ANNOUNCE_QUEUE", &queue);
    s.run(&["queues"], &[]).expect_code(0);
    let env = s.bus.with(&[]);
    common::run_at_once(s.path(), &["completed-research"], &env, 2);
    let counts = announcement_counts(&s, &queue);
    let twice: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "{} episodes announced more than once: {twice:?}",
        twice.len()
    );
    assert_eq!(counts.len(), BACKLOG as usize);
    // Nothing left: a third run announces nothing.
    s.run(&["completed-research"], &[]).expect_code(0);
    assert!(announcement_counts(&s, &queue).is_empty());
}

#[test]
fn announced_once_by_two_recorders_on_sqs() {
    let db = PgDatabase::create();
    two_recorders_at_once(Scenario::sqs(Some(&db.url)), &db.url);
}

#[test]
fn announced_once_by_two_recorders_on_a_bus_in_another_database() {
    // The datastore in SQLite, the bus in a Postgres database of its own.
    let bus = PgDatabase::create();
    let mut s = Scenario::database(None);
    let datastore_url = s.database_url();
    s.bus.set("ARCHIVIST_BUS", "postgres");
    s.bus.set("ARCHIVIST_BUS_URL", &bus.url);
    two_recorders_at_once(s, &datastore_url);
}
