//! Which addresses `archivist research` downloads media from, through the binary: a media
//! address that resolves to loopback, or a redirect to one from a public address, is failed
//! research naming the address and `--allow-private-addresses`, and nothing connects to it;
//! with the flag it is researched. A test has no public address: a second media server on
//! 127.0.0.2 stands for one, taken for public by a hidden test-only setting
//! (`ARCHIVIST_TEST_PUBLIC_ADDRESSES`); the check still runs on the address connected to, so
//! the redirects' targets on 127.0.0.1 are refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::research::{
    clip_audio, episode_audio, python, Answer, Kind, MediaServer, World,
};
use crate::common::BusEnv;

const NO_FLAG: (&str, &str) = ("ARCHIVIST_ALLOW_PRIVATE_ADDRESSES", "false");
const TEST_PUBLIC: (&str, &str) = ("ARCHIVIST_TEST_PUBLIC_ADDRESSES", "127.0.0.2");

/// `episodes` episodes at the URIs given (one clip each, a local file), curated, ingested and
/// leased.
fn world(uris: &[String]) -> World {
    let mut w = World::new(BusEnv::database(), None, uris.len(), 1);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "1");
    let episodes: Vec<String> = uris
        .iter()
        .enumerate()
        .map(|(i, uri)| w.episode_json(i, uri).to_string())
        .collect();
    let clip = w.place("c0.mp3", clip_audio(0), Kind::FileUrl);
    let clips = vec![w.clip_json(0, &clip).to_string()];
    w.run(&["migrate"], &[]).expect_code(0);
    w.send(&w.bus.episodes_queue.clone(), &episodes);
    w.send(&w.bus.clips_queue.clone(), &clips);
    w.run(&["episodes", "--once"], &[]).expect_code(0);
    w.run(&["clips", "--once"], &[]).expect_code(0);
    w.pending_research_at_once(1, Some(&uris.len().to_string()));
    w
}

/// One `research --once` with `extra`, then the results recorded; the status.
fn research(w: &World, extra: &[(&str, &str)]) -> serde_json::Value {
    let run = w
        .research_once(&["--concurrency", "4"], &python(&[]), extra)
        .expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    let mut s = w.status();
    s["stderr"] = run.stderr.into();
    s
}

#[test]
fn a_media_address_resolving_to_loopback_is_refused_without_the_flag() {
    let server = MediaServer::start();
    server.set("/media/e0.mp3", Answer::Body(episode_audio(0, 1)));
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let w = world(&[format!("http://localhost:{port}/media/e0.mp3")]);
    let s = research(&w, &[NO_FLAG]);
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(0), Some(1)),
        "{s}"
    );
    let reasons = s["failure_reasons"].to_string();
    assert!(
        reasons.contains("refused to connect to localhost")
            && reasons.contains("loopback")
            && reasons.contains("--allow-private-addresses"),
        "{reasons}"
    );
    assert_eq!(server.hits("/media/e0.mp3"), 0, "connected to it anyway");
    // With the flag (the world's default), retried: researched.
    w.run(&["retry-failed"], &[]).expect_code(0);
    w.pending_research_at_once(1, Some("1"));
    let s = research(&w, &[]);
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(w.matches(), w.expected_matches());
}

#[test]
fn a_redirect_from_a_public_address_to_loopback_is_refused_at_the_hop() {
    let private = MediaServer::start();
    let public = MediaServer::start_on("127.0.0.2");
    let port = private.base.rsplit(':').next().unwrap().to_string();
    for i in 0..3 {
        private.set(
            &format!("/media/e{i}.mp3"),
            Answer::Body(episode_audio(i, 1)),
        );
    }
    // Episode 0 redirects to the address, episode 1 to a name resolving to it; episode 2 is
    // served by the "public" server itself.
    public.set(
        "/hop/e0.mp3",
        Answer::Redirect(format!("http://127.0.0.1:{port}/media/e0.mp3")),
    );
    public.set(
        "/hop/e1.mp3",
        Answer::Redirect(format!("http://localhost:{port}/media/e1.mp3")),
    );
    public.set("/media/e2.mp3", Answer::Body(episode_audio(2, 1)));
    let w = world(&[
        public.url("/hop/e0.mp3"),
        public.url("/hop/e1.mp3"),
        public.url("/media/e2.mp3"),
    ]);
    let s = research(&w, &[NO_FLAG, TEST_PUBLIC]);
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(1), Some(2)),
        "{s}"
    );
    let reasons = s["failure_reasons"].to_string();
    for host in ["127.0.0.1", "localhost"] {
        assert!(
            reasons.contains(&format!("refused to connect to {host}"))
                && reasons.contains("--allow-private-addresses"),
            "{reasons}"
        );
    }
    assert_eq!(public.hits("/hop/e0.mp3"), 1, "refused, not retried");
    assert_eq!(public.hits("/hop/e1.mp3"), 1, "refused, not retried");
    assert_eq!(private.hits("/media/e0.mp3"), 0);
    assert_eq!(private.hits("/media/e1.mp3"), 0);
}
