//! Episode prints through the binary, on the database bus (SQLite): `archivist research` with
//! the reference analyser and a print store answers a later clip from the episode's print,
//! fetching a few byte ranges of the episode instead of all of it, with the answer a full
//! analysis gives; media changed since it was printed, a server that ignores `Range`, and a
//! print of another format version each fall back to the full analysis. Then two researchers
//! sharing an S3 print store (moto): one prints, the other answers from the print.
//!
//! The episode is served by a local HTTP server of the test's own that supports `Range`,
//! `ETag` and conditional requests, and counts what it sends. Needs `ffmpeg` (the episode is
//! an MP3) and, for the S3 case, moto (`scripts/test.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::common::pipeline::Scenario;
use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

const RATE: u32 = 22_050;
/// How far an answer from a print may be from the full analysis's.
const SAME_NS: i64 = 1_000_000;

/// What the media server serves and what it counted.
#[derive(Default)]
struct Served {
    body: Vec<u8>,
    etag: String,
    /// Answer `Range` requests (else: the whole body, 200).
    ranges: bool,
    /// Whole bodies sent (200).
    full: u32,
    /// Partial bodies sent (206).
    ranged: u32,
    /// Answers without a body (304).
    not_modified: u32,
    /// Body bytes sent.
    bytes: u64,
}

/// The test's media server: one episode at `/episode.mp3`.
struct MediaServer {
    url: String,
    served: Arc<Mutex<Served>>,
    _thread: std::thread::JoinHandle<()>,
}

impl MediaServer {
    fn start(body: Vec<u8>, etag: &str) -> MediaServer {
        let served = Arc::new(Mutex::new(Served {
            body,
            etag: etag.to_string(),
            ranges: true,
            ..Served::default()
        }));
        let shared = served.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new()
                    .route("/episode.mp3", axum::routing::get(serve))
                    .with_state(shared);
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        MediaServer {
            url: format!("http://{addr}/episode.mp3"),
            served,
            _thread: thread,
        }
    }

    /// (whole bodies, ranges, 304s, bytes) so far.
    fn counts(&self) -> (u32, u32, u32, u64) {
        let s = self.served.lock().unwrap();
        (s.full, s.ranged, s.not_modified, s.bytes)
    }

    fn replace(&self, body: Vec<u8>, etag: &str) {
        let mut s = self.served.lock().unwrap();
        s.body = body;
        s.etag = etag.to_string();
    }

    fn honour_ranges(&self, yes: bool) {
        self.served.lock().unwrap().ranges = yes;
    }
}

async fn serve(
    axum::extract::State(served): axum::extract::State<Arc<Mutex<Served>>>,
    headers: HeaderMap,
) -> Response {
    let mut s = served.lock().unwrap();
    let etag = s.etag.clone();
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if text(header::IF_NONE_MATCH).as_deref() == Some(etag.as_str()) {
        s.not_modified += 1;
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    let if_range_holds = text(header::IF_RANGE).is_none_or(|v| v == etag);
    let range = text(header::RANGE)
        .filter(|_| s.ranges && if_range_holds)
        .and_then(|r| {
            let (from, to) = r.strip_prefix("bytes=")?.split_once('-')?;
            Some((from.parse::<usize>().ok()?, to.parse::<usize>().ok()?))
        });
    let len = s.body.len();
    if let Some((from, to)) = range {
        if from >= len {
            return (
                StatusCode::RANGE_NOT_SATISFIABLE,
                [(header::CONTENT_RANGE, format!("bytes */{len}"))],
            )
                .into_response();
        }
        let to = to.min(len - 1);
        let part = s.body[from..=to].to_vec();
        s.ranged += 1;
        s.bytes += part.len() as u64;
        return (
            StatusCode::PARTIAL_CONTENT,
            [
                (header::ETAG, etag),
                (header::CONTENT_RANGE, format!("bytes {from}-{to}/{len}")),
            ],
            part,
        )
            .into_response();
    }
    s.full += 1;
    s.bytes += len as u64;
    (
        StatusCode::OK,
        [
            (header::ETAG, etag),
            (
                header::LAST_MODIFIED,
                "Wed, 21 Oct 2015 07:28:00 GMT".to_string(),
            ),
        ],
        s.body.clone(),
    )
        .into_response()
}

fn ffmpeg(input: &Path, output: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
        .arg(input)
        .args(["-ar", "44100", "-c:a", "libmp3lame", "-b:a", "128k"])
        .arg(output)
        .status()
        .expect("ffmpeg is needed: run scripts/test.sh, or apt-get install ffmpeg");
    assert!(status.success(), "ffmpeg failed on {}", input.display());
}

/// The clips (WAV files in `dir`) and an episode (MP3 bytes) with clip `k` at the offsets
/// `at[k]` (seconds; none: absent).
struct Audio {
    clips: Vec<PathBuf>,
}

fn clips(dir: &Path) -> (Audio, Vec<Arc<Vec<f32>>>) {
    let made: Vec<Vec<f32>> = vec![
        Speech::render(41, RATE, Voice::numbered(2), 5.0),
        synth::jingle(42, RATE, 3.0),
        Speech::render(43, RATE, Voice::numbered(3), 4.0),
        Speech::render(44, RATE, Voice::numbered(1), 4.0),
        Speech::render(45, RATE, Voice::numbered(4), 4.0),
    ];
    let mut paths = Vec::new();
    for (k, samples) in made.iter().enumerate() {
        let path = dir.join(format!("clip{k}.wav"));
        common::audio::write_samples(&path, RATE, samples);
        paths.push(path);
    }
    (
        Audio { clips: paths },
        made.into_iter().map(Arc::new).collect(),
    )
}

/// An episode of `seconds` with clip `k` at `at[k]` seconds, as MP3 bytes.
fn episode(
    dir: &Path,
    name: &str,
    seed: u64,
    seconds: f64,
    clips: &[Arc<Vec<f32>>],
    at: &[(usize, f64)],
) -> Vec<u8> {
    let insertions = at
        .iter()
        .map(|&(clip, s)| Insertion {
            clip,
            offset: (s * f64::from(RATE)) as u64,
            gain: 0.9,
            over: false,
        })
        .collect();
    let mut synth = EpisodeSynth::new(seed, RATE, seconds, 2, clips.to_vec(), insertions)
        .with_bed(seed + 1, 0.03);
    let wav = dir.join(format!("{name}.wav"));
    common::audio::write_wav(&wav, RATE, &mut |b| synth.fill(b));
    let mp3 = dir.join(format!("{name}.mp3"));
    ffmpeg(&wav, &mp3);
    std::fs::read(&mp3).unwrap()
}

fn curated(title: &str, uri: &str, aired: Option<&str>) -> String {
    let mut v = json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-10T08:00:00Z",
        "curator_information": "print_research.rs",
        "title": title,
        "description": "",
        "media_uri": uri,
        "media_type": "mp3",
        "priority": 0,
    });
    if let Some(aired) = aired {
        v["date_aired"] = json!(aired);
    }
    v.to_string() + "\n"
}

/// A scenario on the database bus with the episode curated at `url`.
fn scenario(url: &str) -> Scenario {
    let mut s = Scenario::database(None);
    s.bus.set("ARCHIVIST_MAX_CLIPS", "50");
    s.bus.set("ARCHIVIST_ALLOW_PRIVATE_ADDRESSES", "true");
    s.run(&["migrate"], &[]).expect_code(0);
    s.run_with_input(
        &["send", "curated_episodes"],
        &curated("Episode", url, Some("2026-01-01T00:00:00Z")),
    )
    .expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    s
}

/// Curates clip `k` and researches what it makes, with a media cache of its own (empty)
/// and the print store `store`; the researcher's log.
fn research_clip(
    s: &Scenario,
    audio: &Audio,
    k: usize,
    store: &str,
    extra: &[(&str, &str)],
) -> String {
    let uri = format!("file://{}", audio.clips[k].display());
    s.run_with_input(
        &["send", "curated_clips"],
        &curated(&format!("Clip {k}"), &uri, None),
    )
    .expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let env = [
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", "1"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let cache = s
        .path()
        .join(format!("cache-{}", uuid::Uuid::new_v4().simple()));
    let cache = cache.display().to_string();
    let research = s
        .run(
            &[
                "research",
                "--once",
                "--concurrency",
                "1",
                "--cache-dir",
                &cache,
                "--print-store",
                store,
            ],
            extra,
        )
        .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);
    research.stderr
}

/// The offsets recorded for clip `k`.
fn found(s: &Scenario, k: usize) -> Vec<i64> {
    let matches: Vec<Value> = s.run(&["matches"], &[]).expect_code(0).json_lines();
    matches
        .iter()
        .find(|m| m["clip_title"] == format!("Clip {k}"))
        .map(|m| {
            m["clip_offsets_ns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_i64().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// The offsets a full analysis (`archivist analyse`, no prints) finds of clip `k` in the
/// episode file `episode`.
fn full_analysis(dir: &Path, episode: &Path, clip: &Path) -> Vec<i64> {
    let run = common::archivist(
        dir,
        &[
            "analyse",
            &episode.display().to_string(),
            &clip.display().to_string(),
            "--json",
        ],
        &[],
    )
    .expect_code(0);
    run.json_lines()[0]["clip_offsets_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_i64().unwrap())
        .collect()
}

fn assert_same(got: &[i64], want: &[i64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} against {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= SAME_NS, "{what}: {got:?} against {want:?}");
    }
}

/// The one print file of the directory store `store`.
fn print_file(store: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(store)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "print"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
fn a_later_clip_is_answered_from_the_print_and_stale_prints_are_not_trusted() {
    let media = tempfile::tempdir().unwrap();
    let (audio, samples) = clips(media.path());
    let first = episode(
        media.path(),
        "first",
        50,
        240.0,
        &samples,
        &[(0, 20.0), (1, 95.5), (0, 170.25), (2, 200.0)],
    );
    let first_file = media.path().join("first.mp3");
    let server = MediaServer::start(first.clone(), "\"v1\"");
    let s = scenario(&server.url);
    let store = s.path().join("prints");
    let store_arg = store.display().to_string();

    // The first clip: a full analysis, which prints the episode.
    let log = research_clip(&s, &audio, 0, &store_arg, &[]);
    assert_same(
        &found(&s, 0),
        &full_analysis(s.path(), &first_file, &audio.clips[0]),
        "clip 0",
    );
    let (full, _, _, _) = server.counts();
    assert_eq!(full, 1, "one download\n{log}");
    assert!(log.contains("episode print written"), "{log}");
    let printed = print_file(&store);
    let print_size = std::fs::metadata(&printed).unwrap().len();

    // The second clip, by a researcher with an empty media cache: from the print, a 304 and
    // a few ranges, no download.
    let before = server.counts();
    let log = research_clip(&s, &audio, 1, &store_arg, &[]);
    let after = server.counts();
    assert_eq!(after.0, before.0, "no whole download\n{log}");
    assert_eq!(
        after.2 - before.2,
        1,
        "one conditional request answered 304\n{log}"
    );
    assert!(after.1 > before.1, "range requests\n{log}");
    let fetched = after.3 - before.3;
    assert!(
        fetched * 10 < first.len() as u64,
        "{fetched} bytes fetched of a {}-byte episode\n{log}",
        first.len()
    );
    assert!(log.contains("answered from the episode's print"), "{log}");
    assert_same(
        &found(&s, 1),
        &full_analysis(s.path(), &first_file, &audio.clips[1]),
        "clip 1",
    );
    assert!(print_size > 0);

    // The media changes (a new ETag, a new size): the print is not used, the episode is
    // downloaded and analysed in full, and the answer follows the new media.
    let second = episode(
        media.path(),
        "second",
        60,
        230.0,
        &samples,
        &[(2, 33.0), (1, 150.0), (4, 190.0)],
    );
    let second_file = media.path().join("second.mp3");
    assert_ne!(second.len(), first.len());
    server.replace(second.clone(), "\"v2\"");
    let before = server.counts();
    let log = research_clip(&s, &audio, 2, &store_arg, &[]);
    let after = server.counts();
    assert!(log.contains("changed_media"), "{log}");
    assert_eq!(
        after.0 - before.0,
        2,
        "the check's 200 (unread) and the download\n{log}"
    );
    let new_answer = found(&s, 2);
    assert_same(
        &new_answer,
        &full_analysis(s.path(), &second_file, &audio.clips[2]),
        "clip 2",
    );
    assert_eq!(
        new_answer.len(),
        1,
        "the new media's one occurrence: {new_answer:?}"
    );

    // A server that ignores Range: still the right answer, by a full analysis.
    server.honour_ranges(false);
    let log = research_clip(&s, &audio, 3, &store_arg, &[]);
    assert!(log.contains("range_ignored"), "{log}");
    assert_same(
        &found(&s, 3),
        &full_analysis(s.path(), &second_file, &audio.clips[3]),
        "clip 3",
    );
    server.honour_ranges(true);

    // A print of another format version (its checksum made good) is not used.
    let printed = print_file(&store);
    let stored = std::fs::read(&printed).unwrap();
    let mut print = prints::envelope::unwrap(&stored).unwrap().to_vec();
    print[4..6].copy_from_slice(&999u16.to_le_bytes());
    let body = print.len() - 32;
    let sum = {
        use sha2::Digest;
        sha2::Sha256::digest(&print[..body])
    };
    print[body..].copy_from_slice(&sum);
    std::fs::write(&printed, prints::envelope::wrap(&print)).unwrap();
    let before = server.counts();
    let log = research_clip(&s, &audio, 4, &store_arg, &[]);
    assert!(log.contains("other_version"), "{log}");
    assert_eq!(server.counts().0 - before.0, 1, "downloaded in full\n{log}");
    assert_same(
        &found(&s, 4),
        &full_analysis(s.path(), &second_file, &audio.clips[4]),
        "clip 4",
    );
}

/// Two researchers (two processes, each with a media cache of its own) share an S3 print
/// store on moto: the first prints the episode, the second answers from its print.
#[test]
fn researchers_share_prints_on_s3() {
    let endpoint = std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, which \
             starts moto_server (SQS and S3) and sets it (with AWS_REGION and test credentials)"
        )
    });
    let bucket = format!("prints-e2e-{:016x}", rand::random::<u64>());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
                .endpoint_url(&endpoint)
                .load()
                .await;
            let client = aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&sdk)
                    .force_path_style(true)
                    .build(),
            );
            client.create_bucket().bucket(&bucket).send().await.unwrap();
        });
    let media = tempfile::tempdir().unwrap();
    let (audio, samples) = clips(media.path());
    let body = episode(
        media.path(),
        "shared",
        70,
        240.0,
        &samples,
        &[(0, 50.0), (1, 120.0)],
    );
    let file = media.path().join("shared.mp3");
    let server = MediaServer::start(body, "\"s1\"");
    let s = scenario(&server.url);
    let store = format!("s3://{bucket}/fleet");
    let aws = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ];
    let log = research_clip(&s, &audio, 0, &store, &aws);
    assert!(log.contains("episode print written"), "{log}");
    let before = server.counts();
    let log = research_clip(&s, &audio, 1, &store, &aws);
    let after = server.counts();
    assert_eq!(after.0, before.0, "no whole download\n{log}");
    assert!(log.contains("answered from the episode's print"), "{log}");
    assert_same(
        &found(&s, 1),
        &full_analysis(s.path(), &file, &audio.clips[1]),
        "clip 1",
    );
    let listed = s
        .run(&["prints", "--print-store", &store, "list", "--json"], &aws)
        .expect_code(0)
        .json_lines();
    assert_eq!(listed.len(), 1, "{listed:?}");
}
