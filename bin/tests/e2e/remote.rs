//! Remote participants through the binary (`--server URL`, `ARCHIVIST_TOKEN`), against the
//! fake gateway of `messagebus::api::fake`, which answers as the contract's API table says:
//! a researcher answering work items with an `--exec` analyser, a feed curator, a clips
//! curator (which needs `--base-url`), `send`; a refused token exits 2 naming the scope
//! needed, and no token reaches any output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use crate::common::research::{
    clip_audio, clip_title, episode_audio, episode_title, offsets, shell,
};
use crate::common::{archivist, archivist_with_input, Run};
use messagebus::api::fake::FakeGateway;
use serde_json::{json, Value};

const RESEARCHER: &str = "rsrch-2b7e151628aed2a6abf7158809cf4f3c";
const CURATOR: &str = "cur-3243f6a8885a308d313198a2e0370734";

/// The fake gateway, on a runtime of its own that serves it while the test runs the binary.
fn gateway() -> (tokio::runtime::Runtime, FakeGateway) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let g = rt
        .block_on(FakeGateway::start(Duration::from_secs(30)))
        .unwrap();
    g.add_token(RESEARCHER, "researcher");
    g.add_token(CURATOR, "curator");
    (rt, g)
}

fn episode(i: usize, media_uri: &str) -> Value {
    json!({
        "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
        "curator_information": "test", "date_aired": format!("2025-12-{:02}T00:00:00Z", i + 1),
        "title": episode_title(i), "description": "", "media_uri": media_uri,
        "media_type": "mp3", "priority": 0,
    })
}

fn clip(k: usize, media_uri: &str) -> Value {
    json!({
        "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
        "curator_information": "test", "title": clip_title(k), "description": "",
        "media_uri": media_uri, "media_type": "mp3", "priority": 0,
    })
}

fn lease(i: usize) -> String {
    format!("7d0c5b7e-2f1a-4c3e-9b8a-00000000000{i}")
}

/// Writes `bytes` to `name` under `dir` and returns its file:// URL.
fn place(dir: &Path, name: &str, bytes: Vec<u8>) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    format!("file://{}", path.display())
}

fn no_token_in(run: &Run) {
    for token in [RESEARCHER, CURATOR] {
        assert!(
            !run.stdout.contains(token) && !run.stderr.contains(token),
            "the token shows:\n{}\n{}",
            run.stdout,
            run.stderr
        );
    }
}

#[test]
fn a_remote_researcher_answers_work_items_through_the_api() {
    let (_rt, g) = gateway();
    let dir = tempfile::tempdir().unwrap();
    let (episodes, clips) = (2, 3);
    let clip_uris: Vec<String> = (0..clips)
        .map(|k| place(dir.path(), &format!("clip{k}.txt"), clip_audio(k)))
        .collect();
    for i in 0..episodes {
        let uri = place(
            dir.path(),
            &format!("episode{i}.txt"),
            episode_audio(i, clips),
        );
        g.push_work(json!({
            "lease_id": lease(i),
            "lease_expires_at": "2099-01-01T00:00:00Z",
            "episode": episode(i, &uri),
            "clips": (0..clips).map(|k| clip(k, &clip_uris[k])).collect::<Vec<_>>(),
        }));
    }
    let server = g.url();
    let mut args = vec![
        "research",
        "--once",
        "--concurrency",
        "2",
        "--server",
        server.as_str(),
        "--exec",
    ];
    let exec = shell();
    args.extend(exec.iter().map(String::as_str));
    let run = archivist(
        dir.path(),
        &args,
        &[("ARCHIVIST_TOKEN", RESEARCHER), ("RUST_LOG", "debug")],
    )
    .expect_code(0);
    no_token_in(&run);

    let results = g.results();
    assert_eq!(results.len(), episodes * clips, "one result per pair");
    for i in 0..episodes {
        let mine: Vec<&Value> = results
            .iter()
            .filter(|(_, r)| r["lease_id"] == lease(i))
            .map(|(_, r)| r)
            .collect();
        assert_eq!(mine.len(), clips);
        for k in 0..clips {
            let r = mine
                .iter()
                .find(|r| r["clip"]["title"] == clip_title(k))
                .unwrap();
            let found: Vec<i64> = serde_json::from_value(r["clip_offsets_ns"].clone()).unwrap();
            assert_eq!(found, offsets(i, k), "episode {i}, clip {k}");
        }
        // The lease's last result ends it.
        assert_eq!(mine.last().unwrap()["revoke_lease"], true);
        assert!(mine[..clips - 1].iter().all(|r| r["revoke_lease"] == false));
    }
    // Each item's results went to the receipt it was handed out with.
    let handed: Vec<String> = g
        .calls()
        .into_iter()
        .filter(|c| c.endpoint == "work" && c.status == 200)
        .filter_map(|c| c.receipt)
        .collect();
    assert_eq!(handed.len(), episodes, "each item taken once");
    for (receipt, r) in &results {
        let same_item: Vec<&String> = results
            .iter()
            .filter(|(_, o)| o["lease_id"] == r["lease_id"])
            .map(|(rc, _)| rc)
            .collect();
        assert!(same_item.iter().all(|rc| *rc == receipt));
        assert!(handed.contains(receipt));
    }
    assert_eq!(g.finished().len(), episodes);
    assert_eq!(g.depths(), (0, 0));
}

#[test]
fn a_refused_token_exits_2_naming_the_scope_needed() {
    let (_rt, g) = gateway();
    let dir = tempfile::tempdir().unwrap();
    let server = g.url();
    let research = [
        "research",
        "--once",
        "--concurrency",
        "1",
        "--server",
        server.as_str(),
    ];
    // A curator's token for a researcher: 403.
    let run = archivist(dir.path(), &research, &[("ARCHIVIST_TOKEN", CURATOR)]).expect_code(2);
    assert!(run.stderr.contains("scope researcher"), "{}", run.stderr);
    assert!(run.stderr.contains("403"), "{}", run.stderr);
    no_token_in(&run);
    // An unknown token: 401.
    let run = archivist(
        dir.path(),
        &research,
        &[("ARCHIVIST_TOKEN", "no-such-token-b1a5e")],
    )
    .expect_code(2);
    assert!(run.stderr.contains("401"), "{}", run.stderr);
    assert!(
        !run.stderr.contains("no-such-token-b1a5e"),
        "{}",
        run.stderr
    );
    // No token at all.
    let run = archivist(dir.path(), &research, &[]).expect_code(2);
    assert!(run.stderr.contains("ARCHIVIST_TOKEN"), "{}", run.stderr);
    // A token without a server.
    let run = archivist(
        dir.path(),
        &["research", "--once"],
        &[("ARCHIVIST_TOKEN", RESEARCHER)],
    )
    .expect_code(2);
    assert!(run.stderr.contains("ARCHIVIST_SERVER"), "{}", run.stderr);
    no_token_in(&run);

    // A researcher's token for a curator: 403, naming the curator scope.
    let line = episode(0, "https://media.example/0.mp3").to_string();
    let run = archivist_with_input(
        dir.path(),
        &["send", "--server", server.as_str(), "curated_episodes"],
        &[("ARCHIVIST_TOKEN", RESEARCHER)],
        &format!("{line}\n"),
    )
    .expect_code(2);
    assert!(run.stderr.contains("scope curator"), "{}", run.stderr);
    no_token_in(&run);
    assert!(g.episodes().is_empty());
}

#[test]
fn send_through_the_api_takes_curated_queues_and_http_media_only() {
    let (_rt, g) = gateway();
    let dir = tempfile::tempdir().unwrap();
    let server = g.url();
    let env = [("ARCHIVIST_TOKEN", CURATOR)];
    let lines: String = (0..3)
        .map(|i| {
            format!(
                "{}\n",
                episode(i, &format!("https://media.example/{i}.mp3"))
            )
        })
        .collect();
    let run = archivist_with_input(
        dir.path(),
        &["send", "--server", server.as_str(), "curated_episodes"],
        &env,
        &lines,
    )
    .expect_code(0);
    assert!(run.stderr.contains("sent 3 messages"), "{}", run.stderr);
    assert_eq!(g.episodes().len(), 3);
    let requests = g.calls().len();

    // A file:// media address anywhere: nothing is sent.
    let bad = format!(
        "{}\n{}\n",
        clip(0, "https://media.example/c0.mp3"),
        clip(1, "file:///etc/passwd")
    );
    let run = archivist_with_input(
        dir.path(),
        &["send", "--server", server.as_str(), "curated_clips"],
        &env,
        &bad,
    )
    .expect_code(2);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    assert!(run.stderr.contains("http(s)"), "{}", run.stderr);
    assert!(g.clips().is_empty());
    assert_eq!(g.calls().len(), requests, "no request");

    // Only the curated queues.
    let run = archivist_with_input(
        dir.path(),
        &["send", "--server", server.as_str(), "pending_research"],
        &env,
        "{}\n",
    )
    .expect_code(2);
    assert!(run.stderr.contains("curated queues only"), "{}", run.stderr);
    no_token_in(&run);
}

/// A feed on a small HTTP server of the test's own.
fn serve_feed(rt: &tokio::runtime::Runtime, items: usize) -> String {
    let mut rss = String::from(
        "<?xml version=\"1.0\"?><rss version=\"2.0\"><channel><title>Show</title>\
         <link>https://show.example/</link>",
    );
    for n in 0..items {
        rss.push_str(&format!(
            "<item><title>Episode {n}</title><guid>urn:show:{n}</guid>\
             <pubDate>Mon, 0{} Jan 2024 10:00:00 +0000</pubDate>\
             <enclosure url=\"https://cdn.example/show/{n}.mp3\" length=\"1\" type=\"audio/mpeg\"/>\
             </item>",
            n + 1
        ));
    }
    rss.push_str("</channel></rss>");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/feed.xml",
        axum::routing::get(move || {
            let rss = rss.clone();
            async move { ([("content-type", "application/rss+xml")], rss) }
        }),
    );
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/feed.xml")
}

#[test]
fn remote_curators_send_through_the_api() {
    let (rt, g) = gateway();
    let dir = tempfile::tempdir().unwrap();
    let server = g.url();
    let feed = serve_feed(&rt, 3);
    let env = [("ARCHIVIST_TOKEN", CURATOR)];
    let run = archivist(
        dir.path(),
        &["curate", "feed", "--server", server.as_str(), feed.as_str()],
        &env,
    )
    .expect_code(0);
    no_token_in(&run);
    let sent = g.episodes();
    assert_eq!(sent.len(), 3, "{}", run.stderr);
    assert!(sent
        .iter()
        .all(|e| e["media_uri"].as_str().unwrap().starts_with("https://")));

    // Clips need an http(s) address through the API.
    let clips = dir.path().join("clips");
    std::fs::create_dir_all(&clips).unwrap();
    std::fs::write(clips.join("theme.wav"), common_wav()).unwrap();
    let clips_arg = clips.display().to_string();
    let run = archivist(
        dir.path(),
        &[
            "curate",
            "clips",
            "--server",
            server.as_str(),
            clips_arg.as_str(),
        ],
        &env,
    )
    .expect_code(2);
    assert!(run.stderr.contains("--base-url"), "{}", run.stderr);
    assert!(g.clips().is_empty());
    let run = archivist(
        dir.path(),
        &[
            "curate",
            "clips",
            "--server",
            server.as_str(),
            "--base-url",
            "https://media.example/clips/",
            clips_arg.as_str(),
        ],
        &env,
    )
    .expect_code(0);
    no_token_in(&run);
    let sent = g.clips();
    assert_eq!(sent.len(), 1, "{}", run.stderr);
    assert_eq!(
        sent[0]["media_uri"],
        "https://media.example/clips/theme.wav"
    );

    // A researcher's token for a curator: exit 2, naming the scope.
    let run = archivist(
        dir.path(),
        &[
            "curate",
            "feed",
            "--server",
            server.as_str(),
            "--state",
            "other-state.json",
            feed.as_str(),
        ],
        &[("ARCHIVIST_TOKEN", RESEARCHER)],
    )
    .expect_code(2);
    assert!(run.stderr.contains("scope curator"), "{}", run.stderr);
    no_token_in(&run);
}

/// A short WAV file (a clip curator reads its tags and hashes it).
fn common_wav() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.wav");
    common::audio::write_samples(&path, 8000, &vec![0.1f32; 8000]);
    std::fs::read(path).unwrap()
}

/// The lines of a researcher's log that say how the item of `lease` ended.
fn outcomes<'a>(log: &'a str, lease: &str) -> Vec<&'a str> {
    const OUTCOMES: [&str; 6] = [
        "work item finished",
        "work item failed",
        "work item released for later",
        "work item not finished",
        "work item not released",
        "dead-lettered",
    ];
    log.lines()
        .filter(|l| l.contains(lease) && OUTCOMES.iter().any(|o| l.contains(o)))
        .collect()
}

/// A remote researcher working on `items` work items (each waiting at the gate after its
/// first answer) with `--concurrency concurrency`, started: the child, and the gate's path.
fn researcher_at_the_gate(
    g: &FakeGateway,
    dir: &Path,
    items: usize,
    concurrency: &str,
) -> (std::process::Child, std::path::PathBuf) {
    let clips = 3;
    let clip_uris: Vec<String> = (0..clips)
        .map(|k| place(dir, &format!("clip{k}.txt"), clip_audio(k)))
        .collect();
    for i in 0..items {
        let uri = place(dir, &format!("episode{i}.txt"), episode_audio(i, clips));
        g.push_work(json!({
            "lease_id": lease(i),
            "lease_expires_at": "2099-01-01T00:00:00Z",
            "episode": episode(i, &uri),
            "clips": (0..clips).map(|k| clip(k, &clip_uris[k])).collect::<Vec<_>>(),
        }));
    }
    let gate = dir.join("gate");
    let server = g.url();
    let exec = crate::common::research::python(&["wait-after", "1"]);
    let mut args = vec![
        "research",
        "--concurrency",
        concurrency,
        "--drain-timeout",
        "30s",
        "--server",
        server.as_str(),
        "--exec",
    ];
    args.extend(exec.iter().map(String::as_str));
    let gate_text = gate.display().to_string();
    let child = common::command(
        dir,
        &args,
        &[
            ("ARCHIVIST_TOKEN", RESEARCHER),
            ("GATE", gate_text.as_str()),
            ("RUST_LOG", "info"),
        ],
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    (child, gate)
}

#[test]
fn a_token_revoked_while_another_slot_waits_stops_the_items_saying_why() {
    let (_rt, g) = gateway();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let (child, _gate) = researcher_at_the_gate(&g, dir.path(), 2, "3");
    // Both items in hand (each has sent its first answer), the third slot waiting for work.
    crate::common::research::eventually(
        "a first answer of each item",
        Duration::from_secs(60),
        || g.results().len() >= 2,
    );
    g.revoke_token(RESEARCHER);
    let run =
        crate::common::research::exits_within(child, "the researcher", Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("scope researcher"), "{}", run.stderr);
    no_token_in(&run);
    // The drain timeout (30s) did not pass, and the run was not stopped by a signal: no
    // item is said to have outlived it.
    if started.elapsed() < Duration::from_secs(30) {
        assert!(!run.stderr.contains("drain timeout"), "{}", run.stderr);
    }
    for i in 0..2 {
        let said = outcomes(&run.stderr, &lease(i));
        assert_eq!(said.len(), 1, "item {i}: {said:#?}\n{}", run.stderr);
        assert!(
            said[0].contains("another slot stopped the researcher"),
            "item {i}: {said:?}"
        );
    }
}

#[test]
fn a_token_revoked_before_the_last_results_logs_the_item_failed_only() {
    let (_rt, g) = gateway();
    let dir = tempfile::tempdir().unwrap();
    let (child, gate) = researcher_at_the_gate(&g, dir.path(), 1, "1");
    crate::common::research::eventually("the item's first answer", Duration::from_secs(60), || {
        !g.results().is_empty()
    });
    g.revoke_token(RESEARCHER);
    std::fs::write(&gate, "open").unwrap();
    let run =
        crate::common::research::exits_within(child, "the researcher", Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.stderr);
    no_token_in(&run);
    let said = outcomes(&run.stderr, &lease(0));
    assert_eq!(said.len(), 1, "{said:#?}\n{}", run.stderr);
    assert!(said[0].contains("work item failed"), "{said:?}");
    assert!(!run.stderr.contains("drain timeout"), "{}", run.stderr);
}
