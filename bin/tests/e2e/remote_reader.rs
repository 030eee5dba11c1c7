//! A remote reader's command line: `status --server` and `matches --server` with a reader
//! token print what the local commands print (every format and filter), a refused or missing
//! token exits 2 naming the scope `reader`; `status` says when nothing is left to do, failed
//! pairs included (`"done": true`); and the messages a user reads on the failure cases read
//! as one sentence (no run of spaces, no repeated phrase, no HTML page).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::pipeline::{results_for, Scenario, CLIPS, EPISODES};
use crate::common::serving::start_serving;
use crate::common::Run;

const DEADLINE: Duration = Duration::from_secs(120);

/// Every pair of the scenario researched, through the binary: one item at a time leased,
/// received and answered; the first clip of the first item answered with a failure.
fn research_all_with_one_failure(s: &Scenario) {
    s.curate();
    let pairs = EPISODES.len() * CLIPS.len();
    let mut answered = 0;
    let mut first = true;
    while answered < pairs {
        s.pending_research_at_once(1, "50");
        let work = s.receive_work("50", "2s");
        assert!(
            !work.is_empty(),
            "no work while {answered} of {pairs} answered"
        );
        let mut lines = Vec::new();
        for item in &work {
            for mut r in results_for(item) {
                if first {
                    first = false;
                    let o = r.as_object_mut().unwrap();
                    o.remove("clip_offsets_ns");
                    o.insert("failure".into(), json!("not audio: no MP3 frame found"));
                }
                lines.push(r.to_string());
                answered += 1;
            }
        }
        s.run_with_input(
            &["send", &s.bus.completed_queue],
            &(lines.join("\n") + "\n"),
        )
        .expect_code(0);
        s.run(&["completed-research"], &[]).expect_code(0);
    }
}

/// `token create --scope SCOPE --name NAME`: the token printed.
fn token(s: &Scenario, scope: &str, name: &str) -> String {
    s.run(&["token", "create", "--scope", scope, "--name", name], &[])
        .expect_code(0)
        .stdout
        .trim()
        .to_string()
}

/// The status object without what only a local read has (the queues).
fn counts(mut status: Value) -> Value {
    let o = status.as_object_mut().unwrap();
    o.remove("queues");
    o.remove("queues_unknown");
    status
}

/// The table's lines up to the queues (which only a local read on a shared bus shows).
fn table_counts(table: &str) -> String {
    table
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a user reads of `run` reads as one sentence each.
fn reads_well(run: &Run) {
    for text in [&run.stderr, &run.stdout] {
        for line in text.lines() {
            let words = line.trim_start();
            assert!(!words.contains("  "), "a run of spaces: {line:?}");
            assert!(
                !line.to_lowercase().contains("<html"),
                "a page pasted: {line:?}"
            );
            assert!(!line.contains("<!DOCTYPE"), "a page pasted: {line:?}");
            // No phrase of five words or more said twice in a line.
            let w: Vec<&str> = words.split_whitespace().collect();
            let n = 5;
            for (i, a) in w.windows(n).enumerate() {
                for b in w.windows(n).skip(i + n) {
                    assert!(a != b, "repeated phrase {:?}: {line:?}", a.join(" "));
                }
            }
        }
    }
}

#[test]
fn a_remote_reader_sees_what_a_local_one_sees_and_when_all_is_done() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);

    // Before anything is curated, nothing is done.
    let empty = s.status();
    assert_eq!(empty["done"], false, "{empty}");

    research_all_with_one_failure(&s);
    let local = s.status();
    let pairs = (EPISODES.len() * CLIPS.len()) as u64;
    assert_eq!(local["research_pairs"], pairs, "{local}");
    assert_eq!(local["failed_pairs"], 1, "{local}");
    // `researched pairs` never reaches the total with a failed pair: `done` says it is over.
    assert_eq!(local["researched_pairs"], pairs - 1, "{local}");
    assert_eq!(local["done"], true, "{local}");
    let table = s.run(&["status"], &[]).expect_code(0).stdout;
    assert!(
        table.contains("done                         yes  (nothing left to do: every pair researched or failed (1 failed))"),
        "{table}"
    );

    let reader = token(&s, "reader", "remote-reader");
    let curator = token(&s, "curator", "a-curator");
    let (_gateway, addr) = start_serving(
        &s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        DEADLINE,
    );
    let server = format!("http://{addr}");
    // The reader has no datastore of its own: a local read would fail.
    let remote_env = [
        ("ARCHIVIST_SERVER", server.as_str()),
        ("ARCHIVIST_TOKEN", reader.as_str()),
        ("DATABASE_URL", crate::common::api::NO_DATABASE),
    ];
    let remote = |args: &[&str]| s.run(args, &remote_env).expect_code(0);

    let status: Value = serde_json::from_str(remote(&["status", "--json"]).stdout.trim()).unwrap();
    assert_eq!(counts(status), counts(local));
    let remote_table = remote(&["status"]).stdout;
    assert_eq!(table_counts(&remote_table), table_counts(&table));

    for args in [
        vec!["matches"],
        vec!["matches", "--format", "table"],
        vec!["matches", "--format", "csv"],
        vec!["matches", "--clip", "Clip B"],
        vec![
            "matches",
            "--episode",
            "Episode 3: Middle",
            "--format",
            "csv",
        ],
        vec!["matches", "--limit", "2"],
        vec!["matches", "--since", "2026-02-01"],
        vec!["matches", "--since", "2026-02-02T00:00:00Z"],
    ] {
        let here = s.run(&args, &[]).expect_code(0).stdout;
        let there = remote(&args).stdout;
        assert_eq!(there, here, "{args:?}");
    }
    assert!(s.run(&["matches"], &[]).json_lines().len() >= 3);
    // The flag works as the variable does.
    let flagged = s
        .run(
            &["matches", "--server", &server, "--token", &reader],
            &[("DATABASE_URL", crate::common::api::NO_DATABASE)],
        )
        .expect_code(0);
    assert_eq!(flagged.stdout, s.run(&["matches"], &[]).stdout);

    // A token of another scope, or none: exit 2, naming the scope needed.
    for (token, code) in [(curator.as_str(), 2), ("archivist_not-a-token", 2), ("", 2)] {
        let run = s
            .run(
                &["status"],
                &[
                    ("ARCHIVIST_SERVER", server.as_str()),
                    ("ARCHIVIST_TOKEN", token),
                    ("DATABASE_URL", crate::common::api::NO_DATABASE),
                ],
            )
            .expect_code(code);
        assert!(run.stderr.contains("scope reader"), "{}", run.stderr);
        assert!(!run.stderr.contains("archivist migrate"), "{}", run.stderr);
        reads_well(&run);
        if !token.is_empty() {
            assert!(!run.stderr.contains(token), "the token reached the output");
        }
    }
}

/// A server that answers every request with an HTML 404 page (a web server where the API
/// was expected).
fn html_404_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n\
                        <body>\n<h1>Not Found</h1>\n<p>The requested URL was not found on this \
                        server.</p>\n<hr><address>Apache/2.4.62 Server</address>\n</body></html>\n";
            let _ = write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.flush();
            let mut rest = Vec::new();
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = stream.read_to_end(&mut rest);
        }
    });
    format!("http://{addr}")
}

#[test]
fn messages_of_remote_failures_read_as_one_sentence() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let researcher = token(&s, "researcher", "a-researcher");
    let (_gateway, addr) = start_serving(
        &s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        DEADLINE,
    );
    let server = format!("http://{addr}");
    let page = html_404_server();
    let no_db = ("DATABASE_URL", crate::common::api::NO_DATABASE);
    let fast = ("ARCHIVIST_CONNECT_TIMEOUT", "5s");

    // No token for a remote researcher.
    let run = s
        .run(
            &["research", "--once"],
            &[("ARCHIVIST_SERVER", &server), no_db, fast],
        )
        .expect_code(2);
    assert!(run.stderr.contains("needs a token"), "{}", run.stderr);
    reads_well(&run);

    // A researcher's token where a curator's is needed (the server's reason says the scope
    // too: said once).
    let episode = crate::common::pipeline::episode_json("E", "2026-01-01T00:00:00Z", 0, 0);
    let mut episode = episode;
    episode["media_uri"] = json!("https://example.com/e.mp3");
    let run = crate::common::archivist_with_input(
        s.path(),
        &["send", "curated_episodes"],
        &[
            ("ARCHIVIST_SERVER", &server),
            ("ARCHIVIST_TOKEN", &researcher),
            no_db,
            fast,
        ],
        &format!("{episode}\n"),
    )
    .expect_code(2);
    assert!(run.stderr.contains("scope curator"), "{}", run.stderr);
    reads_well(&run);

    // A curator with a token of another scope.
    let clips = tempfile::tempdir().unwrap();
    crate::common::audio::write_samples(&clips.path().join("a.wav"), 8000, &vec![0.1f32; 8000]);
    let run = s.run(
        &[
            "curate",
            "clips",
            clips.path().to_str().unwrap(),
            "--base-url",
            "https://example.com/clips/",
        ],
        &[
            ("ARCHIVIST_SERVER", &server),
            ("ARCHIVIST_TOKEN", &researcher),
            no_db,
            fast,
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("scope curator"), "{}", run.stderr);
    reads_well(&run);

    // A web server where the API was expected: its page is summarised, never pasted.
    for args in [vec!["status"], vec!["matches"]] {
        let run = s
            .run(
                &args,
                &[
                    ("ARCHIVIST_SERVER", &page),
                    ("ARCHIVIST_TOKEN", "archivist_whatever"),
                    no_db,
                    fast,
                ],
            )
            .expect_code(2);
        assert!(
            run.stderr.contains("HTTP 404 (Not Found)"),
            "{}",
            run.stderr
        );
        reads_well(&run);
    }
    let run = s
        .run(
            &["research", "--once"],
            &[
                ("ARCHIVIST_SERVER", &page),
                ("ARCHIVIST_TOKEN", "archivist_whatever"),
                no_db,
                fast,
            ],
        )
        .expect_code(2);
    assert!(run.stderr.contains("Not Found"), "{}", run.stderr);
    reads_well(&run);
}
