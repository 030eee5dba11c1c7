//! The hostile-input corpus (`tests/corpus/hostile/`) through the `archivist` binary, on every
//! bus a process can share: `send --raw` puts each case on its queue as it is (a body it
//! refuses, not UTF-8 or over 1 MiB, must be refused with exit 2, naming the line, and nothing
//! sent); `episodes --once`, `clips --once` and `completed-research` must exit 0; then every
//! poison case is in the queue's dead-letter queue with its reason (`receive --dead-letters`),
//! every valid one is stored (its queue is empty and `status` counts it), and nothing else
//! is in either. Counts are printed.
//!
//! A bus is one line at the bottom: a test calling [`corpus_through_the_binary`] with its
//! [`Scenario`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
#[path = "../../../tests/corpus/hostile.rs"]
mod corpus;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::Stdio;

use crate::common::pipeline::Scenario;
use crate::common::{PgDatabase, Run};
use corpus::{Case, Leases, Outcome};

/// `archivist send --raw QUEUE` with `bodies` on standard input, one a line.
fn send(s: &Scenario, queue: &str, bodies: &[Vec<u8>]) -> Run {
    let mut input = Vec::new();
    for b in bodies {
        input.extend_from_slice(b);
        input.push(b'\n');
    }
    let mut child = common::command(s.path(), &["send", "--raw", queue], &s.bus.with(&[]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Written from a thread: the child may answer (and exit) before reading it all.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    Run::from_output(out)
}

/// The queue name a corpus file's queue has in this scenario.
fn queue_name<'a>(s: &'a Scenario, corpus_queue: &str) -> &'a str {
    match corpus_queue {
        "curated_episodes" => &s.bus.episodes_queue,
        "curated_clips" => &s.bus.clips_queue,
        _ => &s.bus.completed_queue,
    }
}

/// The archivist subcommand that drains a corpus queue.
fn archivist_for(corpus_queue: &str) -> &'static [&'static str] {
    match corpus_queue {
        "curated_episodes" => &["episodes", "--once"],
        "curated_clips" => &["clips", "--once"],
        _ => &["completed-research"],
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends the corpus through the binary on `s`'s bus and checks what happened to every case.
pub(crate) fn corpus_through_the_binary(label: &str, s: Scenario) {
    let cases = corpus::load();
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);

    let mut leases = Leases::default();
    let mut refused = BTreeSet::new();
    for phase in [0u8, 1] {
        for cq in corpus::QUEUES {
            if cq == "completed_research" {
                if phase == 0 {
                    continue;
                }
                // Leases for the results to name: made in the datastore directly, so that one
                // can be expired already (leased ten hours ago) without waiting.
                leases = runtime().block_on(async {
                    let store = datastore::connect(&s.database_url()).await.unwrap();
                    corpus::make_leases(&*store).await
                });
            }
            let queue = queue_name(&s, cq);
            let mut bodies = Vec::new();
            for case in cases.iter().filter(|c| c.queue == cq && c.phase == phase) {
                if case.send_refused {
                    let run = send(&s, queue, &[case.body(&leases)]).expect_code(2);
                    assert!(
                        run.stderr.contains("nothing was sent") && run.stderr.contains("line 1"),
                        "{label}: {}: {}",
                        case.name,
                        run.stderr
                    );
                    refused.insert(case.name.clone());
                } else {
                    bodies.push(case.body(&leases));
                }
            }
            let run = send(&s, queue, &bodies).expect_code(0);
            assert!(
                run.stderr
                    .contains(&format!("sent {} message", bodies.len())),
                "{label}: {}",
                run.stderr
            );
            s.run(archivist_for(cq), &[]).expect_code(0);
        }
    }

    let depths = s.queue_depths();
    let mut all_cases: Vec<&Case> = Vec::new();
    let mut all_outcomes: Vec<Outcome> = Vec::new();
    let mut total = corpus::Counts::default();
    for cq in corpus::QUEUES {
        let queue = queue_name(&s, cq);
        let depth = &depths[queue];
        assert_eq!(
            (depth["waiting"].as_u64(), depth["in_flight"].as_u64()),
            (Some(0), Some(0)),
            "{label}: {queue} is drained: {depth}"
        );
        // As many as the queue counts, so that the receive ends as soon as it has them all
        // (a loaded emulator may take seconds; one more receive would long-poll).
        let count = depth["dead_letters"].as_u64().unwrap().max(1).to_string();
        let dead: Vec<(Vec<u8>, String)> = s
            .run(
                &[
                    "receive",
                    queue,
                    "--dead-letters",
                    "--max",
                    &count,
                    "--wait",
                    "60s",
                ],
                &[],
            )
            .expect_code(0)
            .json_lines()
            .into_iter()
            .map(|l| {
                (
                    l["body"].as_str().unwrap().as_bytes().to_vec(),
                    l["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        assert_eq!(
            depth["dead_letters"].as_u64(),
            Some(dead.len() as u64),
            "{label}: {queue}'s dead letters, counted and received"
        );
        let cases: Vec<&Case> = cases.iter().filter(|c| c.queue == cq).collect();
        let outcomes = corpus::outcomes(&cases, &leases, dead, &refused);
        let counts = corpus::check(&format!("{label} {queue}"), &cases, &outcomes, true);
        println!(
            "{label} {cq}: {} cases, {} stored, {} dead-lettered with the expected reason, {} \
             refused by `send`",
            counts.cases, counts.stored, counts.dead_lettered, counts.refused_at_send
        );
        total.cases += counts.cases;
        total.stored += counts.stored;
        total.dead_lettered += counts.dead_lettered;
        total.refused_at_send += counts.refused_at_send;
        all_cases.extend(cases);
        all_outcomes.extend(outcomes);
    }
    let want = corpus::expected_state(&all_cases, &all_outcomes, &leases);
    let status = s.status();
    assert_eq!(
        corpus::Stored {
            episodes: status["episodes"].as_u64().unwrap(),
            clips: status["clips"].as_u64().unwrap(),
            researched_pairs: status["researched_pairs"].as_u64().unwrap(),
        },
        want,
        "{label}: what `status` counts: {status}"
    );
    println!(
        "{label}: {} cases, {} stored, {} dead-lettered, {} refused by `send`; status: {} \
         episodes, {} clips, {} researched pairs",
        total.cases,
        total.stored,
        total.dead_lettered,
        total.refused_at_send,
        want.episodes,
        want.clips,
        want.researched_pairs
    );
}

/// What another program may put on the SQLite database bus with plain SQL, past the checks
/// of `send`: text that is not UTF-8, a body over 1 MiB, a blob, a number. The archivist must
/// dead-letter what it cannot read (not fail every receive of the queue) and store a valid
/// message whatever its SQLite type.
#[test]
fn bodies_put_on_the_sqlite_bus_by_other_programs() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let episode = r#"{"initial_date_curated":"2026-01-10T08:00:00Z","last_date_curated":"2026-01-10T08:00:00Z","curator_information":"sql","date_aired":"2026-01-01T00:00:00Z","title":"Sent as a blob","description":"","media_uri":"https://corpus.test/blob.mp3","media_type":"mp3","priority":0}"#;
    let over = format!(
        "{{\"title\":\"{}\"}}",
        "o".repeat(messagebus::MAX_BODY_BYTES)
    );
    let path = s.path().join("archive.sqlite");
    runtime().block_on(async {
        use sqlx::Connection;
        let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let now = chrono::Utc::now().timestamp_micros();
        const AS_TEXT: &str = "INSERT INTO bus_messages (queue, body, sent_at, visible_at) \
                               VALUES ('curated_episodes', CAST(?2 AS TEXT), ?1, ?1)";
        const AS_IS: &str = "INSERT INTO bus_messages (queue, body, sent_at, visible_at) \
                             VALUES ('curated_episodes', ?2, ?1, ?1)";
        const AS_INTEGER: &str = "INSERT INTO bus_messages (queue, body, sent_at, visible_at) \
                                  VALUES ('curated_episodes', CAST(CAST(?2 AS TEXT) AS INTEGER), ?1, ?1)";
        for (sql, body) in [
            (AS_TEXT, b"{\"title\":\"\x80\xff\"}".to_vec()),
            (AS_TEXT, over.into_bytes()),
            (AS_IS, episode.as_bytes().to_vec()),
            (AS_INTEGER, b"42".to_vec()),
        ] {
            sqlx::query(sql)
                .bind(now)
                .bind(body)
                .execute(&mut db)
                .await
                .unwrap();
        }
    });
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    let reasons: BTreeSet<String> = s
        .run(
            &[
                "receive",
                "curated_episodes",
                "--dead-letters",
                "--max",
                "3",
                "--wait",
                "60s",
            ],
            &[],
        )
        .expect_code(0)
        .json_lines()
        .into_iter()
        .map(|l| l["reason"].as_str().unwrap().to_string())
        .collect();
    let expected = ["not valid UTF-8", "exceeds the limit", "found a number"];
    assert_eq!(reasons.len(), expected.len(), "{reasons:#?}");
    for want in expected {
        assert!(
            reasons.iter().any(|r| r.contains(want)),
            "{want}: {reasons:#?}"
        );
    }
    assert_eq!(
        s.status()["episodes"],
        1,
        "the blob holding a valid episode is stored"
    );
    println!("SQLite bus, bodies inserted with SQL: 3 dead-lettered with their reasons, 1 stored");
}

/// Every string in `v`, one a line: the reasons of an error answer, unescaped.
fn texts(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => format!("{s}\n"),
        serde_json::Value::Array(a) => a.iter().map(texts).collect(),
        serde_json::Value::Object(o) => o.values().map(texts).collect(),
        _ => String::new(),
    }
}

/// One request to the gateway at `base`: status and body.
async fn post(base: &str, path: &str, token: &str, body: Vec<u8>) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The curated cases of the corpus POSTed to the gateway (`serve --api`) by a curator, each
/// in a request of its own: a case the archivists would set aside is refused (422, or 400
/// when it is not JSON, 413 when it is too large) with its reason, and nothing of it is
/// sent; a valid case arrives and is stored (one of a group of repeats), and nothing a
/// curator sent validly is dead-lettered. The whole corpus in one request is refused whole.
#[test]
fn hostile_corpus_through_the_api() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let token = s
        .run(
            &["token", "create", "--scope", "curator", "--name", "corpus"],
            &[],
        )
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let (_gateway, addr) = common::serving::start_serving(
        &s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        std::time::Duration::from_secs(60),
    );
    let base = format!("http://{addr}");
    let leases = Leases::default();
    let cases = corpus::load();
    let rt = runtime();
    let mut problems = Vec::new();
    let (mut accepted_cases, mut accepted_outcomes) = (Vec::new(), Vec::new());
    for cq in ["curated_episodes", "curated_clips"] {
        let path = match cq {
            "curated_episodes" => "/api/v1/episodes",
            _ => "/api/v1/clips",
        };
        let cases: Vec<&Case> = cases.iter().filter(|c| c.queue == cq).collect();
        // All at once: a poison line among them refuses the request whole.
        let all: Vec<u8> = cases
            .iter()
            .flat_map(|c| {
                let mut b = c.body(&leases);
                b.push(b'\n');
                b
            })
            .collect();
        let (code, answer) = rt.block_on(post(&base, path, &token, all));
        assert!(
            [400, 413, 422].contains(&code),
            "{cq}: the whole corpus in one request: {code} {answer}"
        );
        assert_eq!(s.queue_depths()[cq]["waiting"], 0, "{cq}: nothing sent");
        let mut accepted = Vec::new();
        let mut refused = 0;
        let mut poison_accepted = 0;
        let mut phase0_stored = false;
        // Phase by phase, as the corpus is sent on the buses: a case of phase 1 may be poison
        // only against what phase 0 stored.
        for case in cases
            .iter()
            .filter(|c| c.phase == 0)
            .chain(cases.iter().filter(|c| c.phase == 1))
        {
            if case.phase == 1 && !phase0_stored {
                s.run(archivist_for(cq), &[]).expect_code(0);
                phase0_stored = true;
            }
            let (code, answer) = rt.block_on(post(&base, path, &token, case.body(&leases)));
            let http_media = serde_json::from_slice::<serde_json::Value>(&case.body(&leases))
                .ok()
                .and_then(|v| v["media_uri"].as_str().map(str::to_string))
                .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"));
            match (code, &case.expect) {
                (202, corpus::Expect::Stored | corpus::Expect::OneStored { .. }) => {
                    accepted.push(*case)
                }
                // A valid message whose media is not http(s): the API takes none of those.
                (422, corpus::Expect::Stored | corpus::Expect::OneStored { .. })
                    if !http_media && answer.contains("http") =>
                {
                    refused += 1
                }
                // Poison only against what is stored (a conflict with a stored episode):
                // the API cannot know; the archivist sets it aside with its reason.
                (202, corpus::Expect::Poison(_)) => {
                    poison_accepted += 1;
                    accepted.push(*case)
                }
                (400 | 413 | 422, corpus::Expect::Poison(want)) => {
                    refused += 1;
                    let reasons = texts(&serde_json::from_str(&answer).unwrap_or_default());
                    let with_reason = if code == 422 {
                        reasons.contains(want.as_str()) || (!http_media && reasons.contains("http"))
                    } else {
                        answer.contains("line 1") || code == 413
                    };
                    if !with_reason {
                        problems.push(format!(
                            "{}: {code} without its reason ({want}): {answer}",
                            case.name
                        ));
                    }
                }
                _ => problems.push(format!(
                    "{}: {code} {answer}, expected {:?}",
                    case.name, case.expect
                )),
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
        println!(
            "API {cq}: {} cases, {} accepted ({poison_accepted} poison only against what is \
             stored), {refused} refused with their reasons",
            cases.len(),
            accepted.len()
        );
        s.run(archivist_for(cq), &[]).expect_code(0);
        let depth = &s.queue_depths()[cq];
        let count = depth["dead_letters"].as_u64().unwrap();
        let dead: Vec<(Vec<u8>, String)> = if count == 0 {
            Vec::new()
        } else {
            s.run(
                &[
                    "receive",
                    cq,
                    "--dead-letters",
                    "--max",
                    &count.to_string(),
                    "--wait",
                    "60s",
                ],
                &[],
            )
            .expect_code(0)
            .json_lines()
            .into_iter()
            .map(|l| {
                (
                    l["body"].as_str().unwrap().as_bytes().to_vec(),
                    l["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
        };
        // Only repeats of a group are set aside (the API cannot know what is stored).
        let outcomes = corpus::outcomes(&accepted, &leases, dead, &BTreeSet::new());
        corpus::check(&format!("API {cq}"), &accepted, &outcomes, false);
        accepted_cases.extend(accepted);
        accepted_outcomes.extend(outcomes);
    }
    let want = corpus::expected_state(&accepted_cases, &accepted_outcomes, &leases);
    let status = s.status();
    assert_eq!(status["episodes"].as_u64(), Some(want.episodes), "{status}");
    assert_eq!(status["clips"].as_u64(), Some(want.clips), "{status}");
}

// One line per bus (and datastore).

#[test]
fn hostile_corpus_on_the_sqlite_bus() {
    corpus_through_the_binary("database bus on SQLite", Scenario::database(None));
}

#[test]
fn hostile_corpus_on_the_postgres_bus() {
    let db = PgDatabase::create();
    corpus_through_the_binary(
        "database bus on Postgres",
        Scenario::database(Some(&db.url)),
    );
}

#[test]
fn hostile_corpus_on_sqs_with_sqlite() {
    corpus_through_the_binary("SQS, SQLite datastore", Scenario::sqs(None));
}

#[test]
fn hostile_corpus_on_sqs_with_postgres() {
    let db = PgDatabase::create();
    corpus_through_the_binary("SQS, Postgres datastore", Scenario::sqs(Some(&db.url)));
}

#[test]
fn hostile_corpus_on_rabbitmq_with_sqlite() {
    corpus_through_the_binary("RabbitMQ, SQLite datastore", Scenario::rabbitmq(None));
}
