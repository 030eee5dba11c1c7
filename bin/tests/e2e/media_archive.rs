//! The media archive through the binary (`research --media-archive`), on the database bus
//! (SQLite), against a show whose server stitches a different pre-roll (15, 30 or 60 s of
//! other audio, in turn) before every download of an episode, with a new ETag each time, as
//! shows with dynamic ad insertion do. After a first pass and three clips added one by one:
//! the server saw each episode fetched once; no episode was analysed in full twice (one print
//! written each, every later clip answered from it); every recorded offset is within 10 ms of
//! where the clip is in the kept copy; the results name the kept copy's SHA-256. And an
//! episode the show deletes after the first pass is still answered for a new clip, from the
//! archive.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::common::pipeline::Scenario;
use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sha2::Digest;

const RATE: u32 = 22_050;
/// The pre-rolls stitched in, in turn (seconds).
const PREROLLS: [u32; 3] = [15, 30, 60];
/// How far a recorded offset may be from where the clip is in the kept copy.
const WITHIN_NS: i64 = 10_000_000;
/// Where each clip is in each episode (seconds from the episode's own start).
const AT: [[f64; 4]; 2] = [[10.0, 32.5, 55.0, 75.0], [70.0, 12.0, 40.25, 58.0]];

/// What the show's server serves and saw.
struct Show {
    /// The episodes' samples, by path.
    episodes: HashMap<String, Vec<f32>>,
    /// The pre-rolls, by length in seconds.
    prerolls: HashMap<u32, Vec<f32>>,
    /// Paths the show deleted (404).
    deleted: HashSet<String>,
    /// Requests by path.
    gets: BTreeMap<String, u32>,
    /// The pre-roll (seconds) of each download, by path, in order.
    served: HashMap<String, Vec<u32>>,
    downloads: u32,
}

/// 16-bit mono WAV bytes of `parts`, one after the other.
fn wav(parts: &[&[f32]]) -> Vec<u8> {
    let samples: usize = parts.iter().map(|p| p.len()).sum();
    let data_len = (samples * 2) as u32;
    let mut out = Vec::with_capacity(44 + samples * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&RATE.to_le_bytes());
    out.extend_from_slice(&(RATE * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    for part in parts {
        for s in *part {
            out.extend_from_slice(&((s.clamp(-1.0, 1.0) * 32_767.0) as i16).to_le_bytes());
        }
    }
    out
}

async fn serve(
    axum::extract::State(show): axum::extract::State<Arc<Mutex<Show>>>,
    uri: Uri,
) -> Response {
    let mut show = show.lock().unwrap();
    let path = uri.path().to_string();
    *show.gets.entry(path.clone()).or_default() += 1;
    if show.deleted.contains(&path) {
        return StatusCode::NOT_FOUND.into_response();
    }
    if !show.episodes.contains_key(&path) {
        return StatusCode::NOT_FOUND.into_response();
    }
    // Another pre-roll for every download, and another ETag: the same URL, another file.
    let preroll = PREROLLS[show.downloads as usize % PREROLLS.len()];
    show.downloads += 1;
    let body = wav(&[&show.prerolls[&preroll], &show.episodes[&path]]);
    let etag = format!("\"download-{}\"", show.downloads);
    show.served.entry(path).or_default().push(preroll);
    (StatusCode::OK, [(header::ETAG, etag)], body).into_response()
}

/// The show's server, on a thread of its own.
struct Server {
    base: String,
    show: Arc<Mutex<Show>>,
    _thread: std::thread::JoinHandle<()>,
}

impl Server {
    fn start(episodes: HashMap<String, Vec<f32>>) -> Server {
        let prerolls = PREROLLS
            .iter()
            .map(|&s| {
                let synth =
                    EpisodeSynth::new(700 + u64::from(s), RATE, f64::from(s), 1, vec![], vec![])
                        .with_bed(800 + u64::from(s), 0.05);
                (s, synth.render().0)
            })
            .collect();
        let show = Arc::new(Mutex::new(Show {
            episodes,
            prerolls,
            deleted: HashSet::new(),
            gets: BTreeMap::new(),
            served: HashMap::new(),
            // The first download is given 30 s, the second 60 s, the third 15 s, …
            downloads: 1,
        }));
        let shared = show.clone();
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
                    .fallback(axum::routing::get(serve))
                    .with_state(shared);
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        Server {
            base: format!("http://{addr}"),
            show,
            _thread: thread,
        }
    }

    fn gets(&self) -> BTreeMap<String, u32> {
        self.show.lock().unwrap().gets.clone()
    }

    /// The pre-roll of the one download of `path`.
    fn preroll(&self, path: &str) -> u32 {
        let show = self.show.lock().unwrap();
        let served = &show.served[path];
        assert_eq!(served.len(), 1, "{path} downloaded {} times", served.len());
        served[0]
    }

    fn delete(&self, path: &str) {
        self.show.lock().unwrap().deleted.insert(path.to_string());
    }
}

/// The four clips (WAV files in `dir`) and the two episodes' samples (90 s each, each clip
/// at [`AT`]).
fn audio(dir: &Path) -> (Vec<PathBuf>, HashMap<String, Vec<f32>>) {
    let made: Vec<Vec<f32>> = vec![
        Speech::render(41, RATE, Voice::numbered(2), 5.0),
        synth::jingle(42, RATE, 3.0),
        Speech::render(43, RATE, Voice::numbered(3), 4.0),
        Speech::render(44, RATE, Voice::numbered(1), 4.0),
    ];
    let mut paths = Vec::new();
    for (k, samples) in made.iter().enumerate() {
        let path = dir.join(format!("clip{k}.wav"));
        common::audio::write_samples(&path, RATE, samples);
        paths.push(path);
    }
    let clips: Vec<Arc<Vec<f32>>> = made.into_iter().map(Arc::new).collect();
    let mut episodes = HashMap::new();
    for (e, at) in AT.iter().enumerate() {
        let insertions = at
            .iter()
            .enumerate()
            .map(|(clip, &s)| Insertion {
                clip,
                offset: (s * f64::from(RATE)) as u64,
                gain: 0.9,
                over: false,
            })
            .collect();
        let seed = 50 + 10 * e as u64;
        let (samples, _) = EpisodeSynth::new(seed, RATE, 90.0, 2, clips.clone(), insertions)
            .with_bed(seed + 1, 0.03)
            .render();
        episodes.insert(format!("/ep{e}.wav"), samples);
    }
    (paths, episodes)
}

fn curated(title: &str, uri: &str, aired: Option<&str>, media_type: &str) -> String {
    let mut v = json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-10T08:00:00Z",
        "curator_information": "media_archive.rs",
        "title": title,
        "description": "",
        "media_uri": uri,
        "media_type": media_type,
        "priority": 0,
    });
    if let Some(aired) = aired {
        v["date_aired"] = json!(aired);
    }
    v.to_string() + "\n"
}

/// A scenario on the database bus with the two episodes curated on `server`.
fn scenario(server: &Server) -> Scenario {
    let mut s = Scenario::database(None);
    s.bus.set("ARCHIVIST_MAX_CLIPS", "50");
    s.bus.set("ARCHIVIST_ALLOW_PRIVATE_ADDRESSES", "true");
    s.run(&["migrate"], &[]).expect_code(0);
    let episodes: String = (0..AT.len())
        .map(|e| {
            curated(
                &format!("Episode {e}"),
                &format!("{}/ep{e}.wav", server.base),
                Some(&format!("2026-01-0{}T00:00:00Z", e + 1)),
                "wav",
            )
        })
        .collect();
    s.run_with_input(&["send", "curated_episodes"], &episodes)
        .expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    s
}

/// Curates clip `k` and researches what it makes with the archive and the print store
/// under the scenario's directory (and a media cache of its own, empty); the researcher's
/// log.
fn research_clip(s: &Scenario, clips: &[PathBuf], k: usize) -> String {
    let uri = format!("file://{}", clips[k].display());
    s.run_with_input(
        &["send", "curated_clips"],
        &curated(&format!("Clip {k}"), &uri, None, "wav"),
    )
    .expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let env = [
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", "4"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let cache = s
        .path()
        .join(format!("cache-{}", uuid::Uuid::new_v4().simple()));
    let (archive, store) = (s.path().join("archive"), s.path().join("prints"));
    let research = s
        .run(
            &[
                "research",
                "--once",
                "--concurrency",
                "1",
                "--cache-dir",
                &cache.display().to_string(),
                "--print-store",
                &store.display().to_string(),
                "--media-archive",
                &archive.display().to_string(),
            ],
            &[],
        )
        .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);
    research.stderr
}

/// The offsets recorded, by (episode title, clip title).
fn found(s: &Scenario) -> HashMap<(String, String), Vec<i64>> {
    let matches: Vec<Value> = s.run(&["matches"], &[]).expect_code(0).json_lines();
    matches
        .iter()
        .map(|m| {
            let offsets = m["clip_offsets_ns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_i64().unwrap())
                .collect();
            (
                (
                    m["episode_title"].as_str().unwrap().to_string(),
                    m["clip_title"].as_str().unwrap().to_string(),
                ),
                offsets,
            )
        })
        .collect()
}

/// Each result's `episode_hash`, by (episode title, clip title), from the datastore (and
/// `matches`' `episode_media_sha256` when it says it).
fn hashes(s: &Scenario) -> HashMap<(String, String), String> {
    let url = s.database_url();
    let rows: Vec<(String, String, String)> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let rows = sqlx::query_as(
                "SELECT e.title, c.title, r.episode_hash FROM research_results r \
                 JOIN episodes e ON e.id = r.episode_id JOIN clips c ON c.id = r.clip_id",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            pool.close().await;
            rows
        });
    let out: HashMap<(String, String), String> =
        rows.into_iter().map(|(e, c, h)| ((e, c), h)).collect();
    for m in s.run(&["matches"], &[]).expect_code(0).json_lines() {
        if let Some(sha) = m.get("episode_media_sha256").and_then(Value::as_str) {
            let key = (
                m["episode_title"].as_str().unwrap().to_string(),
                m["clip_title"].as_str().unwrap().to_string(),
            );
            assert_eq!(out.get(&key).map(String::as_str), Some(sha), "{m}");
        }
    }
    out
}

/// The kept copies in the archive directory (`media/<2 hex>/<sha256>`): each one's SHA-256
/// checked against its name, with its path.
fn kept_copies(archive: &Path) -> HashMap<String, PathBuf> {
    let mut out = HashMap::new();
    for shard in std::fs::read_dir(archive.join("media")).unwrap().flatten() {
        for copy in std::fs::read_dir(shard.path()).unwrap().flatten() {
            let name = copy.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            let bytes = std::fs::read(copy.path()).unwrap();
            let sha = hex(&sha2::Sha256::digest(&bytes));
            assert_eq!(sha, name, "a kept copy that is not what its name says");
            out.insert(name, copy.path());
        }
    }
    out
}

/// The chosen version of each episode in the archive directory, by title.
fn chosen(archive: &Path) -> HashMap<String, String> {
    std::fs::read_dir(archive.join("episodes"))
        .unwrap()
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|x| x == "json"))
        .map(|f| {
            let v: Value = serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
            (
                v["title"].as_str().unwrap().to_string(),
                v["chosen"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every offset of clip `k` in episode `e` where it is in that episode's kept copy (its
/// pre-roll, then the episode), and the results' hash that copy's.
fn assert_pinned(s: &Scenario, server: &Server, clips: std::ops::Range<usize>) {
    let archive = s.path().join("archive");
    let copies = kept_copies(&archive);
    assert_eq!(copies.len(), AT.len(), "one copy per episode: {copies:?}");
    let chosen = chosen(&archive);
    let found = found(s);
    let hashes = hashes(s);
    for (e, at) in AT.iter().enumerate() {
        let episode = format!("Episode {e}");
        let preroll = f64::from(server.preroll(&format!("/ep{e}.wav")));
        let copy = &chosen[&episode];
        assert!(copies.contains_key(copy), "{episode}: {copy} not kept");
        for k in clips.clone() {
            let key = (episode.clone(), format!("Clip {k}"));
            let offsets = found.get(&key).cloned().unwrap_or_default();
            let truth = ((preroll + at[k]) * 1e9).round() as i64;
            assert_eq!(offsets.len(), 1, "{key:?}: {offsets:?}, the truth {truth}");
            assert!(
                (offsets[0] - truth).abs() <= WITHIN_NS,
                "{key:?}: {offsets:?}, {} ms from where it is in the kept copy",
                (offsets[0] - truth) / 1_000_000
            );
            assert_eq!(hashes.get(&key), Some(copy), "{key:?}");
        }
    }
}

/// How many lines of `log` say `what` of `path`.
fn said(log: &str, what: &str, path: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(what) && l.contains(path))
        .count()
}

#[test]
fn stitched_ads_change_nothing_once_the_episode_is_kept() {
    let media = tempfile::tempdir().unwrap();
    let (clips, episodes) = audio(media.path());
    let server = Server::start(episodes);
    let s = scenario(&server);

    // The first pass, then three clips added one by one.
    let mut logs = Vec::new();
    for k in 0..4 {
        let log = research_clip(&s, &clips, k);
        assert!(!log.contains("episode print not used"), "clip {k}\n{log}");
        logs.push(log);
        assert_pinned(&s, &server, 0..k + 1);
    }
    let gets = server.gets();
    assert_eq!(
        gets,
        BTreeMap::from([("/ep0.wav".to_string(), 1), ("/ep1.wav".to_string(), 1)]),
        "each episode fetched once"
    );
    for e in 0..AT.len() {
        let path = format!("/ep{e}.wav");
        // One full analysis (which printed the episode), then answers from the print.
        let written: Vec<usize> = logs
            .iter()
            .map(|log| said(log, "episode print written", &path))
            .collect();
        assert_eq!(written, [1, 0, 0, 0], "{path}\n{}", logs.join("\n"));
        let from_print: Vec<usize> = logs
            .iter()
            .map(|log| said(log, "answered from the episode's print", &path))
            .collect();
        assert_eq!(from_print, [0, 1, 1, 1], "{path}\n{}", logs.join("\n"));
        assert_eq!(
            said(&logs[0], "episode media kept in the archive", &path),
            1
        );
    }
}

#[test]
fn an_episode_the_show_deleted_is_still_answered_from_the_archive() {
    let media = tempfile::tempdir().unwrap();
    let (clips, episodes) = audio(media.path());
    let server = Server::start(episodes);
    let s = scenario(&server);
    research_clip(&s, &clips, 0);
    assert_pinned(&s, &server, 0..1);

    server.delete("/ep0.wav");
    let before = server.gets();
    let log = research_clip(&s, &clips, 1);
    assert_eq!(server.gets(), before, "the show was asked\n{log}");
    assert!(!log.contains("media gone"), "{log}");
    assert_pinned(&s, &server, 0..2);
}
