//! The README's "Your own show", as a user types it, end to end through the binary: a show's
//! RSS feed (served here over HTTP, its enclosures pointing at episode audio served by the same
//! server) and a folder of clip files go through `archivist curate feed` and `archivist curate
//! clips`, then `archivist run` and `archivist research` (the reference analyser) on the default
//! embedded database bus, until `status` shows every pair researched; `matches` must then be
//! exactly where the generator put the clips, and nothing else. The show is served on
//! loopback, so the researcher is given `--allow-private-addresses`, as the README says for a
//! show on your own network; the feed, typed, needs no flag.
//!
//! The audio is synthesised (`analysis::synth`), so the truth is known without any analyser;
//! one clip is a FLAC file whose title tag (not its file name) names it, as `curate clips`
//! reads it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{archivist, serving::Running};
use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

/// The analyser's own rate: nothing is lost to resampling, and the files stay small.
const RATE: u32 = 16_000;

/// How far a recorded offset may be from the truth.
const TOLERANCE_MS: f64 = 20.0;

/// Files served by path, on a runtime of the server's own (the test's thread blocks on the
/// binary).
struct MediaServer {
    addr: std::net::SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

type Files = Arc<HashMap<String, (&'static str, Vec<u8>)>>;

impl MediaServer {
    fn start(files: HashMap<String, (&'static str, Vec<u8>)>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(serve_file)
            .with_state(Arc::new(files) as Files);
        runtime.spawn(async move { axum::serve(listener, app).await });
        MediaServer {
            addr,
            _runtime: runtime,
        }
    }
}

async fn serve_file(State(files): State<Files>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    match files.get(&path) {
        Some((content_type, bytes)) => {
            let mut r = Response::new(Body::from(bytes.clone()));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            r
        }
        None => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

/// One episode of the show: its title, air date, length and which clips go where.
struct EpisodeSpec {
    number: u32,
    title: &'static str,
    pub_date: &'static str,
    seconds: f64,
    insertions: Vec<Insertion>,
}

fn wav_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn feed(base: &str, episodes: &[EpisodeSpec], sizes: &[usize]) -> String {
    let mut s = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:itunes="http://www.itunes.com/dtds/podcast-1.0.dtd">
<channel>
<title>Your Own Show</title>
<link>https://show.example/</link>
"#,
    );
    for (e, size) in episodes.iter().zip(sizes) {
        s.push_str(&format!(
            "<item><title>{}</title><guid isPermaLink=\"false\">urn:your-own-show:{}</guid>\
             <pubDate>{}</pubDate><description><![CDATA[<p>Episode <b>{}</b></p>]]></description>\
             <enclosure url=\"{base}/media/episode-{}.wav?utm_source=rss\" length=\"{size}\" type=\"audio/wav\"/>\
             </item>\n",
            e.title, e.number, e.pub_date, e.number, e.number
        ));
    }
    s.push_str("</channel>\n</rss>\n");
    s
}

/// `archivist status --json`.
fn status(dir: &Path) -> Value {
    let run = archivist(dir, &["status", "--json"], &[]).expect_code(0);
    serde_json::from_str(&run.stdout).unwrap()
}

/// A long-running subcommand, its output in files (read when the test fails).
fn spawn(dir: &Path, name: &str, args: &[&str]) -> Running {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child: Child = common::command(dir, args, &[])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Running(child)
}

fn logs(dir: &Path) -> String {
    ["run", "research"]
        .iter()
        .map(|n| {
            format!(
                "--- {n}\n{}",
                std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default()
            )
        })
        .collect()
}

/// SIGTERM, then the exit code (the archivists stop cleanly on it).
fn terminate(running: &mut Running) -> Option<i32> {
    let ok = Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    running.0.wait().unwrap().code()
}

#[test]
fn from_a_feed_url_and_a_clip_folder_to_exactly_the_true_matches() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let media = home.join("generated");
    let clips_dir = home.join("clips");
    std::fs::create_dir_all(&media).unwrap();
    std::fs::create_dir_all(&clips_dir).unwrap();

    // The clips: a theme (speech), a jingle (a FLAC file tagged with its title), and one that
    // occurs in no episode.
    let theme = Speech::render(31, RATE, Voice::numbered(3), 4.0);
    let jingle = synth::jingle(32, RATE, 3.0);
    let absent = Speech::render(33, RATE, Voice::numbered(5), 4.0);
    common::audio::write_samples(&clips_dir.join("theme.wav"), RATE, &theme);
    common::audio::write_samples(&clips_dir.join("absent.wav"), RATE, &absent);
    let jingle_wav = media.join("jingle.wav");
    common::audio::write_samples(&jingle_wav, RATE, &jingle);
    let ffmpeg = Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
        .arg(&jingle_wav)
        .args(["-metadata", "title=Station Jingle"])
        .arg(clips_dir.join("jingle-final-v2.flac"))
        .status()
        .expect("ffmpeg (scripts/test.sh installs it)");
    assert!(ffmpeg.success());
    // Titles as `curate clips` gives them: the file name, or the title tag when there is one.
    let clip_titles = ["theme", "Station Jingle", "absent"];

    let sec = u64::from(RATE);
    let at = |clip: usize, offset: u64, gain: f32, over: bool| Insertion {
        clip,
        offset,
        gain,
        over,
    };
    let episodes = [
        EpisodeSpec {
            number: 1,
            title: "Episode 1: Cold Open",
            pub_date: "Mon, 05 Jan 2026 10:00:00 +0000",
            seconds: 60.0,
            insertions: vec![
                at(0, 5 * sec + 123, 1.0, false),
                at(1, 31 * sec, 0.8, false),
            ],
        },
        EpisodeSpec {
            number: 2,
            title: "Episode 2: The Callback",
            pub_date: "Mon, 12 Jan 2026 10:00:00 +0000",
            seconds: 90.0,
            insertions: vec![
                at(1, 9 * sec + sec / 3, 0.9, false),
                at(0, 44 * sec + 777, 0.7, true),
                at(0, 71 * sec, 1.0, false),
            ],
        },
    ];
    let clip_sounds = vec![Arc::new(theme), Arc::new(jingle), Arc::new(absent)];
    let mut files = HashMap::new();
    let mut sizes = Vec::new();
    // Per episode title, per clip title: the true offsets (ns), only where the clip occurs.
    let mut truth: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for e in &episodes {
        let mut synth = EpisodeSynth::new(
            100 + u64::from(e.number),
            RATE,
            e.seconds,
            2,
            clip_sounds.clone(),
            e.insertions.clone(),
        )
        .with_bed(200 + u64::from(e.number), 0.03);
        for (clip, offsets) in synth.truth().into_iter().enumerate() {
            if !offsets.is_empty() {
                truth.insert(
                    (e.title.to_string(), clip_titles[clip].to_string()),
                    offsets,
                );
            }
        }
        let path = media.join(format!("episode-{}.wav", e.number));
        common::audio::write_wav(&path, RATE, &mut |b| synth.fill(b));
        let bytes = wav_bytes(&path);
        sizes.push(bytes.len());
        files.insert(
            format!("/media/episode-{}.wav", e.number),
            ("audio/wav", bytes),
        );
    }
    // The feed needs the server's address, the server the feed: a second server for the feed.
    let media_server = MediaServer::start(files);
    let base = format!("http://{}", media_server.addr);
    let feed_server = MediaServer::start(HashMap::from([(
        "/show.xml".to_string(),
        (
            "application/rss+xml",
            feed(&base, &episodes, &sizes).into_bytes(),
        ),
    )]));
    let feed_url = format!("http://{}/show.xml", feed_server.addr);

    // 1. and 2.: the curators.
    archivist(home, &["curate", "feed", &feed_url], &[]).expect_code(0);
    archivist(home, &["curate", "clips", clips_dir.to_str().unwrap()], &[]).expect_code(0);

    // 3. and 4.: the archivists and a researcher, until every pair is researched.
    let cache = home.join("media-cache");
    let mut run = spawn(
        home,
        "run",
        &["run", "--every", "1s", "--start-jitter", "0s"],
    );
    let mut research = spawn(
        home,
        "research",
        &[
            "research",
            "--concurrency",
            "1",
            "--cache-dir",
            cache.to_str().unwrap(),
            // The show is served on loopback, as a show on your own network (a NAS) is.
            "--allow-private-addresses",
        ],
    );
    let pairs = (episodes.len() * clip_titles.len()) as u64;
    let deadline = Instant::now() + Duration::from_secs(180);
    let last = loop {
        // Before `run` migrates, `status` has no datastore to read: that is no answer yet.
        let s = archivist(home, &["status", "--json"], &[]);
        if s.code == 0 {
            let s: Value = serde_json::from_str(&s.stdout).unwrap();
            let done = s["researched_pairs"].as_u64().unwrap_or(0)
                + s["failed_pairs"].as_u64().unwrap_or(0);
            if s["research_pairs"] == pairs && done == pairs {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "not researched in time: {s}\n{}",
                logs(home)
            );
        } else {
            assert!(Instant::now() < deadline, "{s:?}\n{}", logs(home));
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(terminate(&mut research), Some(0), "{}", logs(home));
    assert_eq!(terminate(&mut run), Some(0), "{}", logs(home));

    // 5.: status and matches say exactly the truth.
    let mut s = status(home);
    // The queues' consumers went with the processes; the counts must not have moved.
    let mut last = last;
    s.as_object_mut().unwrap().remove("queues");
    last.as_object_mut().unwrap().remove("queues");
    assert_eq!(s, last, "status changed after every pair was researched");
    assert_eq!(s["episodes"], episodes.len(), "{s}");
    assert_eq!(s["clips"], clip_titles.len(), "{s}");
    assert_eq!(s["researched_pairs"], pairs, "{s}\n{}", logs(home));
    assert_eq!(s["failed_pairs"], 0, "{s}");
    assert_eq!(s["matched_pairs"], truth.len(), "{s}");
    assert_eq!(s["active_leases"], 0, "{s}");

    // Nothing was set aside on the way.
    for q in [
        "curated_episodes",
        "curated_clips",
        "pending_research",
        "completed_research",
    ] {
        let dead =
            archivist(home, &["receive", q, "--dead-letters", "--wait", "0s"], &[]).expect_code(0);
        assert!(dead.stdout.is_empty(), "{q}: {}", dead.stdout);
    }

    let matches = archivist(home, &["matches"], &[])
        .expect_code(0)
        .json_lines();
    let mut found: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for m in &matches {
        let key = (
            m["episode_title"].as_str().unwrap().to_string(),
            m["clip_title"].as_str().unwrap().to_string(),
        );
        let offsets: Vec<i64> = m["clip_offsets_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_i64().unwrap())
            .collect();
        assert!(
            found.insert(key.clone(), offsets).is_none(),
            "{key:?} listed twice"
        );
    }
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        truth.keys().collect::<Vec<_>>(),
        "matched pairs against the truth: {matches:#?}"
    );
    for (key, want) in &truth {
        let got = &found[key];
        assert_eq!(
            got.len(),
            want.len(),
            "{key:?}: found {got:?}, truth {want:?}"
        );
        for (g, w) in got.iter().zip(want) {
            let error_ms = (*g - *w as i64).abs() as f64 / 1e6;
            assert!(
                error_ms <= TOLERANCE_MS,
                "{key:?}: {g} ns against {w} ns ({error_ms} ms)"
            );
        }
    }
    // The episodes carry what the feed said.
    let aired: Vec<&str> = matches
        .iter()
        .map(|m| m["episode_date_aired"].as_str().unwrap())
        .collect();
    assert!(
        aired
            .iter()
            .all(|a| a.starts_with("2026-01-05") || a.starts_with("2026-01-12")),
        "{aired:?}"
    );
}
