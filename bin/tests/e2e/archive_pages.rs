//! What the archive serves and shows with a media archive (`--media-archive`): `serve`'s
//! `/media/{sha256}` (whole, one byte range, 416, HEAD, 404 and 400, streamed in pieces: the
//! copy is larger than one piece), the clip and episode pages' players playing the kept copy
//! their offsets were measured on and saying which, the status page's figures, `matches`
//! (JSON and CSV) naming the copy, and with `serve --api` the copies under the pages' reader
//! token. The archive is a directory, filled here through `archive::DirArchive`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use archive::{episode_key, DirArchive, MediaArchive, Version};
use chrono::{TimeZone, Utc};
use datastore::{ClipInfo, DataStore, EpisodeInfo, ResearchResult};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::audio::write_samples;
use crate::common::pipeline::Scenario;
use crate::common::serving::{start_serving, Running};

/// How long a process may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

const EPISODE: &str = "Episode 4012: The Archive";
const CLIP: &str = "Intro Jingle";
/// Where the clip was found, in the copy kept: 20.5 s (the player starts 3 s before).
const OFFSET_NS: i64 = 20_500_000_000;

/// The world: a scenario on the database bus, a directory archive with two versions of the
/// episode kept (the first chosen), and a result measured on the first.
struct World {
    s: Scenario,
    archive_dir: String,
    /// The copy the result was measured on, and its bytes.
    sha: String,
    bytes: Vec<u8>,
    /// The other version kept.
    other: String,
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A WAV of `seconds` of a tone at `hz`, written to `path`: its bytes.
fn wav(path: &Path, seconds: u32, hz: f32) -> Vec<u8> {
    let rate = 44_100;
    let samples: Vec<f32> = (0..rate * seconds)
        .map(|i| 0.3 * (i as f32 * hz * std::f32::consts::TAU / rate as f32).sin())
        .collect();
    write_samples(path, rate, &samples);
    std::fs::read(path).unwrap()
}

fn episode() -> EpisodeInfo {
    let t = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    EpisodeInfo {
        initial_date_curated: t,
        last_date_curated: t,
        curator_information: "e2e".into(),
        date_aired: Utc.with_ymd_and_hms(2025, 12, 31, 0, 0, 0).unwrap(),
        title: EPISODE.into(),
        description: "The episode.".into(),
        media_uri: "https://show.example.invalid/4012.wav".into(),
        media_type: "wav".into(),
        priority: 0,
    }
}

fn clip() -> ClipInfo {
    let t = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    ClipInfo {
        initial_date_curated: t,
        last_date_curated: t,
        curator_information: "e2e".into(),
        title: CLIP.into(),
        description: "The jingle.".into(),
        media_uri: "https://show.example.invalid/jingle.wav".into(),
        media_type: "wav".into(),
        priority: 0,
    }
}

/// [`make_world`] on a thread of its own (it runs a runtime of its own: not inside a test's).
fn world() -> World {
    std::thread::spawn(make_world).join().unwrap()
}

fn make_world() -> World {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let archive_dir = s.path().join("archive");
    let media = s.path().join("media");
    std::fs::create_dir_all(&media).unwrap();
    // Longer than one piece of a streamed body (4 MiB): about 4.9 MB.
    let bytes = wav(&media.join("first.wav"), 55, 440.0);
    let other_bytes = wav(&media.join("second.wav"), 3, 880.0);
    let (sha, other) = (sha256(&bytes), sha256(&other_bytes));
    let e = episode();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let archive = DirArchive::new(&archive_dir).unwrap();
        let key = episode_key(&e.title, &e.date_aired);
        for (name, sha, size) in [
            ("first.wav", &sha, bytes.len()),
            ("second.wav", &other, other_bytes.len()),
        ] {
            archive.keep(sha, &media.join(name)).await.unwrap();
            let version = Version {
                sha256: sha.clone(),
                size: size as u64,
                media_uri: e.media_uri.clone(),
                etag: None,
                last_modified: None,
                media_type: Some("wav".into()),
                kept_at: Utc::now(),
                also_from: Vec::new(),
            };
            archive
                .record(&key, &e.title, e.date_aired, version)
                .await
                .unwrap();
        }
        let store: Arc<dyn DataStore> = datastore::connect(&s.database_url()).await.unwrap();
        store
            .upsert_episodes(std::slice::from_ref(&e))
            .await
            .unwrap();
        store.upsert_clips(&[clip()]).await.unwrap();
        store
            .record_results(&[ResearchResult {
                lease_id: uuid::Uuid::new_v4(),
                episode: e.key(),
                clip_title: CLIP.into(),
                research_date: Utc.with_ymd_and_hms(2026, 1, 3, 0, 0, 0).unwrap(),
                episode_duration_ns: 55_000_000_000,
                episode_hash: sha.clone(),
                clip_duration_ns: 2_000_000_000,
                clip_hash: "c".repeat(64),
                clip_offsets_ns: vec![OFFSET_NS],
                clip_match_scores: Some(vec![0.97]),
                failure: None,
                clip_findability: None,
            }])
            .await
            .unwrap();
    });
    World {
        archive_dir: archive_dir.display().to_string(),
        s,
        sha,
        bytes,
        other,
    }
}

/// `serve` (with `extra` arguments) on a free loopback port: the process and its base URL.
fn serve(w: &World, extra: &[&str]) -> (Running, String) {
    let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (running, addr) = start_serving(&w.s, &args, &[], DEADLINE);
    (running, format!("http://{addr}"))
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap().to_vec(),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(base: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = client().get(format!("{base}{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    send(request).await
}

/// The id in the first link to `/{what}/ID` of a page.
fn first_id(html: &str, what: &str) -> String {
    let at = html.find(&format!("href=\"/{what}/")).unwrap() + what.len() + 8;
    html[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_plays_and_serves_the_kept_copy() {
    let w = world();
    let (_serve, base) = serve(&w, &["--media-archive", &w.archive_dir]);
    let size = w.bytes.len();

    // The clip's page plays the copy its offset was measured on, from 3 s before it.
    let clips = get(&base, "/clips", &[]).await;
    assert_eq!(clips.status, 200, "{}", clips.text());
    let clip_id = first_id(&clips.text(), "clips");
    let page = get(&base, &format!("/clips/{clip_id}"), &[]).await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(
        html.contains(&format!("src=\"/media/{}#t=17\"", w.sha)),
        "{html}"
    );
    assert!(!html.contains("show.example.invalid/4012.wav#t="), "{html}");
    assert!(html.contains("Plays the kept copy"), "{html}");
    assert!(html.contains(&w.sha[..12]), "{html}");
    assert!(
        html.contains("one of 2 versions of this episode kept"),
        "{html}"
    );

    // The episode's page too, and it lists the versions kept.
    let episode_id = first_id(&html, "episodes");
    let page = get(&base, &format!("/episodes/{episode_id}"), &[]).await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(
        html.contains(&format!("src=\"/media/{}#t=17\"", w.sha)),
        "{html}"
    );
    assert!(html.contains("2 versions of its media are kept"), "{html}");
    assert!(html.contains(&w.other[..12]), "{html}");
    // Their JSON names the copy.
    let json: Value =
        serde_json::from_slice(&get(&base, &format!("/api/clips/{clip_id}"), &[]).await.body)
            .unwrap();
    assert_eq!(
        json["occurrences"]["items"][0]["episode_media_sha256"],
        w.sha.as_str()
    );

    // The whole copy, streamed in pieces, exactly.
    let whole = get(&base, &format!("/media/{}", w.sha), &[]).await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body.len(), size);
    assert!(
        whole.body == w.bytes,
        "the copy served is not the copy kept"
    );
    assert_eq!(
        whole.header("content-length"),
        Some(size.to_string().as_str())
    );
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    assert_eq!(
        whole.header("etag"),
        Some(format!("\"{}\"", w.sha).as_str())
    );
    assert_eq!(whole.header("content-type"), Some("audio/wav"));

    // One byte range: 206, exactly those bytes.
    let part = get(
        &base,
        &format!("/media/{}", w.sha),
        &[("range", "bytes=1000-1999")],
    )
    .await;
    assert_eq!(part.status, 206);
    assert!(part.body == w.bytes[1000..2000]);
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 1000-1999/{size}").as_str())
    );
    assert_eq!(part.header("content-length"), Some("1000"));
    // Across a piece's end, and the last bytes.
    let across = format!("bytes={}-{}", (4 << 20) - 10, (4 << 20) + 9);
    let part = get(&base, &format!("/media/{}", w.sha), &[("range", &across)]).await;
    assert_eq!(part.status, 206);
    assert!(part.body == w.bytes[(4 << 20) - 10..(4 << 20) + 10]);
    let tail = get(
        &base,
        &format!("/media/{}", w.sha),
        &[("range", "bytes=-100")],
    )
    .await;
    assert_eq!(tail.status, 206);
    assert!(tail.body == w.bytes[size - 100..]);
    // A range past the end: 416, naming the length.
    let past = format!("bytes={size}-");
    let refused = get(&base, &format!("/media/{}", w.sha), &[("range", &past)]).await;
    assert_eq!(refused.status, 416);
    assert_eq!(
        refused.header("content-range"),
        Some(format!("bytes */{size}").as_str())
    );

    // HEAD: the headers, no body.
    let head = send(client().head(format!("{base}/media/{}", w.sha))).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(size.to_string().as_str())
    );
    assert_eq!(head.header("accept-ranges"), Some("bytes"));
    assert!(head.body.is_empty());

    // A copy not kept: 404; a name that is not a SHA-256: 400, never a crash.
    let unknown = get(&base, &format!("/media/{}", "0".repeat(64)), &[]).await;
    assert_eq!(unknown.status, 404);
    for bad in [
        "not-a-sha",
        &w.sha.to_uppercase(),
        &w.sha[..63],
        "..%2F..%2Fetc%2Fpasswd",
    ] {
        let answer = get(&base, &format!("/media/{bad}"), &[]).await;
        assert_eq!(answer.status, 400, "{bad}: {}", answer.text());
    }
    // Still serving.
    assert_eq!(
        get(&base, &format!("/media/{}", w.other), &[]).await.status,
        200
    );

    // The status page and its JSON: the archive's copies, bytes, versions, last check.
    let status: Value = serde_json::from_slice(&get(&base, "/api/status", &[]).await.body).unwrap();
    let figures = &status["media_archive"];
    assert_eq!(figures["copies"], 2, "{status}");
    assert_eq!(figures["episodes"], 1, "{status}");
    assert_eq!(figures["versions"], 2, "{status}");
    assert_eq!(figures["episodes_with_versions"], 1, "{status}");
    assert_eq!(figures["changed"][0]["chosen"], w.sha.as_str(), "{status}");
    assert!(figures["last_verify"].is_null(), "{status}");
    let page = get(&base, "/", &[]).await.text();
    assert!(page.contains("id=\"media-archive\""), "{page}");
    assert!(page.contains("Never checked"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_archive_the_pages_play_the_shows_media() {
    let w = world();
    let (_serve, base) = serve(&w, &[]);
    assert_eq!(
        get(&base, &format!("/media/{}", w.sha), &[]).await.status,
        404
    );
    let clips = get(&base, "/clips", &[]).await.text();
    let clip_id = first_id(&clips, "clips");
    let html = get(&base, &format!("/clips/{clip_id}"), &[]).await.text();
    assert!(
        html.contains("src=\"https://show.example.invalid/4012.wav#t=17\""),
        "{html}"
    );
    assert!(!html.contains("/media/"), "{html}");
    let json: Value =
        serde_json::from_slice(&get(&base, &format!("/api/clips/{clip_id}"), &[]).await.body)
            .unwrap();
    assert!(json["occurrences"]["items"][0]
        .get("episode_media_sha256")
        .is_none());
    let status: Value = serde_json::from_slice(&get(&base, "/api/status", &[]).await.body).unwrap();
    assert!(status.get("media_archive").is_none(), "{status}");
}

#[test]
fn matches_name_the_kept_copy() {
    let w = world();
    let lines =
        w.s.run(&["matches", "--media-archive", &w.archive_dir], &[])
            .expect_code(0)
            .json_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["episode_media_sha256"], w.sha.as_str());
    assert_eq!(lines[0]["clip_offsets_ns"][0], OFFSET_NS);
    // The variable works as the flag does.
    let lines =
        w.s.run(&["matches"], &[("ARCHIVIST_MEDIA_ARCHIVE", &w.archive_dir)])
            .expect_code(0)
            .json_lines();
    assert_eq!(lines[0]["episode_media_sha256"], w.sha.as_str());

    let csv =
        w.s.run(
            &[
                "matches",
                "--media-archive",
                &w.archive_dir,
                "--format",
                "csv",
            ],
            &[],
        )
        .expect_code(0)
        .stdout;
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header.last().map(String::as_str),
        Some("episode_media_sha256")
    );
    assert_eq!(
        header[..6],
        [
            "episode_title",
            "episode_date_aired",
            "clip_title",
            "clip_offsets_ns",
            "research_date",
            "clip_match_scores"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(&rows[0][6], w.sha.as_str());

    // Without an archive: as before, no copy named, no column added.
    let plain = w.s.run(&["matches"], &[]).expect_code(0).json_lines();
    assert!(
        plain[0].get("episode_media_sha256").is_none(),
        "{}",
        plain[0]
    );
    let csv =
        w.s.run(&["matches", "--format", "csv"], &[])
            .expect_code(0)
            .stdout;
    assert!(!csv.contains("episode_media_sha256"), "{csv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_api_the_copies_need_a_reader() {
    let w = world();
    let reader =
        w.s.run(
            &["token", "create", "--scope", "reader", "--name", "listener"],
            &[],
        )
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let (_serve, base) = serve(&w, &["--api", "--media-archive", &w.archive_dir]);
    let path = format!("/media/{}", w.sha);
    let none = get(&base, &path, &[]).await;
    assert_eq!(none.status, 401, "{}", none.text());
    let bearer = format!("Bearer {reader}");
    let part = get(
        &base,
        &path,
        &[("authorization", &bearer), ("range", "bytes=0-99")],
    )
    .await;
    assert_eq!(part.status, 206, "{}", part.text());
    assert!(part.body == w.bytes[..100]);
    let wrong = get(
        &base,
        &path,
        &[("authorization", "Bearer archivist_not-a-token")],
    )
    .await;
    assert_eq!(wrong.status, 401);
    // The clip's page, read with the token, plays the copy.
    let clips = get(&base, "/clips", &[("authorization", &bearer)])
        .await
        .text();
    let clip_id = first_id(&clips, "clips");
    let html = get(
        &base,
        &format!("/clips/{clip_id}"),
        &[("authorization", &bearer)],
    )
    .await
    .text();
    assert!(
        html.contains(&format!("src=\"/media/{}#t=17\"", w.sha)),
        "{html}"
    );

    // A remote reader's matches name the copy, as the server's own do.
    let server = base.clone();
    let remote =
        w.s.run(
            &["matches", "--server", &server, "--token", &reader],
            &[("DATABASE_URL", crate::common::api::NO_DATABASE)],
        )
        .expect_code(0)
        .json_lines();
    assert_eq!(remote[0]["episode_media_sha256"], w.sha.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_failed_the_check_is_never_played() {
    let w = world();
    let dir = w.archive_dir.clone();
    let sha = w.sha.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let archive = DirArchive::new(&dir).unwrap();
                let report = archive::VerifyReport {
                    checked_at: Utc::now(),
                    copies: 2,
                    bytes: 1,
                    failed: vec![(sha, "its bytes hash to something else".into())],
                };
                archive.put_report(&report).await.unwrap();
            })
    })
    .join()
    .unwrap();
    let (_serve, base) = serve(&w, &["--media-archive", &w.archive_dir]);
    let refused = get(&base, &format!("/media/{}", w.sha), &[]).await;
    assert_eq!(refused.status, 404, "{}", refused.text());
    assert_eq!(
        get(&base, &format!("/media/{}", w.other), &[]).await.status,
        200
    );
    let clip_id = first_id(&get(&base, "/clips", &[]).await.text(), "clips");
    let html = get(&base, &format!("/clips/{clip_id}"), &[]).await.text();
    assert!(
        html.contains("src=\"https://show.example.invalid/4012.wav#t=17\""),
        "{html}"
    );
    assert!(!html.contains(&format!("/media/{}", w.sha)), "{html}");
    let status: Value = serde_json::from_slice(&get(&base, "/api/status", &[]).await.body).unwrap();
    assert_eq!(
        status["media_archive"]["last_verify"]["failed"], 1,
        "{status}"
    );
    let page = get(&base, "/", &[]).await.text();
    assert!(page.contains("(not played)"), "{page}");
}
