//! Remote researchers and the server's media archive: `archivist serve --api --media-archive
//! DIR --print-store DIR` on the database bus (SQLite), and two `research --server URL`
//! processes with the reference analyser, a researcher's token, empty media caches of their
//! own, and no bus, datastore, archive or print store of their own.
//!
//! The show (a counting server of the test's own) has an episode and its rerun: the same
//! recording at two addresses. The first researcher researches the first clip in both: it
//! fetches each from the show once, gives the server's archive the copy (one: the same
//! bytes) and its print store the print. Then the same late clip, in the rerun by the first
//! researcher (its cache holds the whole copy) and in the first airing by the second (an
//! empty cache): both answer from the server's print, reading ranges of the kept copy; the second reads at most 1.2 times the bytes the first read (the
//! researchers' `archivist_researcher_media_bytes_read_total`), its ranges through the API
//! are far less than the episode and no copy of the episode lands in its cache, and neither
//! reaches the show's server for it. The answers are those of a full analysis of the kept
//! copy. Needs `ffmpeg` (the episode is an MP3).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::common::api::{DEADLINE, NO_DATABASE};
use crate::common::pipeline::Scenario;
use crate::common::research::{free_port, http_get, metric, signal};
use crate::common::serving::{start_serving, Running};
use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

const RATE: u32 = 22_050;
/// How far an answer may be from the full analysis's.
const SAME_NS: i64 = 1_000_000;

/// The show's server: the episode's recording at `/{name}.mp3` (any name: an episode and
/// its rerun), and the requests it saw.
struct Show {
    base: String,
    requests: Arc<Mutex<u32>>,
    _thread: std::thread::JoinHandle<()>,
}

impl Show {
    fn start(body: Vec<u8>) -> Show {
        let requests = Arc::new(Mutex::new(0u32));
        let counted = requests.clone();
        let body = Arc::new(body);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new().route(
                    "/{name}",
                    axum::routing::get(move || {
                        let counted = counted.clone();
                        let body = body.clone();
                        async move {
                            *counted.lock().unwrap() += 1;
                            let answer: Response = (
                                StatusCode::OK,
                                [(axum::http::header::ETAG, "\"v1\"")],
                                body.as_ref().clone(),
                            )
                                .into_response();
                            answer
                        }
                    }),
                );
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        Show {
            base: format!("http://{addr}"),
            requests,
            _thread: thread,
        }
    }

    fn requests(&self) -> u32 {
        *self.requests.lock().unwrap()
    }
}

fn ffmpeg(input: &Path, output: &Path) {
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
        .arg(input)
        .args(["-ar", "44100", "-c:a", "libmp3lame", "-b:a", "128k"])
        .arg(output)
        .status()
        .expect("ffmpeg is needed: run scripts/test.sh, or apt-get install ffmpeg");
    assert!(status.success(), "ffmpeg failed on {}", input.display());
}

/// The clips (WAV files in `dir`) and an episode (MP3 bytes) with them.
fn audio(dir: &Path) -> (Vec<PathBuf>, Vec<u8>) {
    let made: Vec<Vec<f32>> = vec![
        Speech::render(41, RATE, Voice::numbered(2), 5.0),
        synth::jingle(42, RATE, 3.0),
        Speech::render(43, RATE, Voice::numbered(3), 4.0),
    ];
    let mut clips = Vec::new();
    for (k, samples) in made.iter().enumerate() {
        let path = dir.join(format!("clip{k}.wav"));
        common::audio::write_samples(&path, RATE, samples);
        clips.push(path);
    }
    let at = [(0, 20.0), (1, 95.5), (2, 150.0), (0, 170.25)];
    let insertions = at
        .iter()
        .map(|&(clip, s): &(usize, f64)| Insertion {
            clip,
            offset: (s * f64::from(RATE)) as u64,
            gain: 0.9,
            over: false,
        })
        .collect();
    let samples = made.into_iter().map(Arc::new).collect();
    let mut synth = EpisodeSynth::new(50, RATE, 200.0, 2, samples, insertions).with_bed(51, 0.03);
    let wav = dir.join("episode.wav");
    common::audio::write_wav(&wav, RATE, &mut |b| synth.fill(b));
    let mp3 = dir.join("episode.mp3");
    ffmpeg(&wav, &mp3);
    (clips, std::fs::read(&mp3).unwrap())
}

fn curated(title: &str, uri: &str, aired: Option<&str>) -> String {
    let mut v = json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-10T08:00:00Z",
        "curator_information": "remote_archive.rs",
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

/// A remote researcher at work: its process (stopped when dropped), its metrics' port, its
/// log file.
struct Researcher {
    child: Option<Child>,
    metrics: u16,
    log: PathBuf,
}

impl Drop for Researcher {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Researcher {
    /// `research --server http://SERVER` with the reference analyser and the media cache
    /// `cache`, serving its metrics.
    fn start(s: &Scenario, server: &str, token: &str, cache: &Path, name: &str) -> Researcher {
        let metrics = free_port();
        let log = s.path().join(format!("{name}.log"));
        let url = format!("http://{server}");
        let metrics_addr = format!("127.0.0.1:{metrics}");
        let cache = cache.display().to_string();
        let args = [
            "research",
            "--server",
            url.as_str(),
            "--concurrency",
            "1",
            "--cache-dir",
            cache.as_str(),
            "--metrics-addr",
            metrics_addr.as_str(),
        ];
        // No bus, datastore, archive or print store of its own: only the API.
        let env = [
            ("ARCHIVIST_TOKEN", token),
            ("DATABASE_URL", NO_DATABASE),
            // The show is on loopback.
            ("ARCHIVIST_ALLOW_PRIVATE_ADDRESSES", "true"),
            ("RUST_LOG", "info"),
        ];
        let child = common::command(s.path(), &args, &env)
            .env_remove("ARCHIVIST_MEDIA_ARCHIVE")
            .env_remove("ARCHIVIST_PRINT_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        Researcher {
            child: Some(child),
            metrics,
            log,
        }
    }

    fn scrape(&self) -> Option<String> {
        http_get(self.metrics, "/metrics")
    }

    /// Waits until it finished `items` items; then what it counted, and stops it.
    fn finish(mut self, items: f64) -> (String, String) {
        let mut scrape = String::new();
        let until = Instant::now() + DEADLINE;
        loop {
            let done = self.scrape().is_some_and(|text| {
                let done = metric(
                    &text,
                    "archivist_researcher_items_total{outcome=\"finished\"}",
                )
                .unwrap_or(0.0);
                scrape = text;
                done >= items
            });
            if done {
                break;
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            assert!(
                !exited && !log.contains("ERROR") && Instant::now() < until,
                "the remote researcher did not finish its item:\n{log}\n{scrape}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let child = self.child.take().unwrap();
        signal(child.id(), "TERM");
        common::research::exits_within(child, "the remote researcher", DEADLINE);
        (scrape, std::fs::read_to_string(&self.log).unwrap())
    }
}

/// Curates clip `k`.
fn add_clip(s: &Scenario, clips: &[PathBuf], k: usize) {
    let uri = format!("file://{}", clips[k].display());
    s.run_with_input(
        &["send", "curated_clips"],
        &curated(&format!("Clip {k}"), &uri, None),
    )
    .expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
}

/// One work-assignment run believing in `researchers` researchers (besides the remote ones
/// still present): with 0, one item, of the latest episode aired.
fn assign(s: &Scenario, researchers: &str) {
    let env = [
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", researchers),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
}

/// The offsets recorded for clip `k` in the episode `episode`.
fn found(s: &Scenario, episode: &str, k: usize) -> Vec<i64> {
    let matches: Vec<Value> = s.run(&["matches"], &[]).expect_code(0).json_lines();
    matches
        .iter()
        .find(|m| m["clip_title"] == format!("Clip {k}") && m["episode_title"] == episode)
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

/// The offsets a full analysis finds of `clip` in the file `episode`.
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
    assert!(!want.is_empty(), "{what}: the full analysis found nothing");
    assert_eq!(got.len(), want.len(), "{what}: {got:?} against {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= SAME_NS, "{what}: {got:?} against {want:?}");
    }
}

/// The files under `dir` (recursively) whose names are 64 hex digits: the archive's copies.
fn copies(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(copies(&path));
        } else if entry.file_name().len() == 64 {
            out.push(path);
        }
    }
    out
}

/// The bytes of the files under `dir`, recursively.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                dir_size(&path)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

/// The bytes of episode media the researcher read for the items it answered.
fn media_read(scrape: &str) -> f64 {
    metric(scrape, "archivist_researcher_media_bytes_read_total").unwrap_or(0.0)
}

#[test]
fn remote_researchers_share_the_server_s_archive_and_prints() {
    let media = tempfile::tempdir().unwrap();
    let (clips, episode) = audio(media.path());
    let show = Show::start(episode.clone());
    let mut s = Scenario::database(None);
    s.bus.set("ARCHIVIST_MAX_CLIPS", "50");
    s.bus.set("ARCHIVIST_ALLOW_PRIVATE_ADDRESSES", "true");
    s.run(&["migrate"], &[]).expect_code(0);
    // An episode and its rerun a week later: the same recording at two addresses, so that
    // the two researchers' late clips are the same work.
    let (first, rerun) = ("Episode", "Episode (rerun)");
    s.run_with_input(
        &["send", "curated_episodes"],
        &(curated(
            first,
            &format!("{}/episode.mp3", show.base),
            Some("2026-01-01T00:00:00Z"),
        ) + &curated(
            rerun,
            &format!("{}/rerun.mp3", show.base),
            Some("2026-01-08T00:00:00Z"),
        )),
    )
    .expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    let archive = s.path().join("archive");
    let prints = s.path().join("server-prints");
    let (archive_arg, prints_arg) = (archive.display().to_string(), prints.display().to_string());
    let (_gateway, addr): (Running, String) = start_serving(
        &s,
        &[
            "serve",
            "--api",
            "--addr",
            "127.0.0.1:0",
            "--media-archive",
            &archive_arg,
            "--print-store",
            &prints_arg,
        ],
        &[],
        DEADLINE,
    );
    let token = s
        .run(
            &[
                "token",
                "create",
                "--scope",
                "researcher",
                "--name",
                "volunteers",
            ],
            &[],
        )
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let first_cache = s.path().join("cache-first");
    let second_cache = s.path().join("cache-second");

    // The first pass: the first researcher fetches each episode from the show, gives the
    // server the copy (one: the same bytes) and the print.
    add_clip(&s, &clips, 0);
    assign(&s, "2");
    let (_, log) = Researcher::start(&s, &addr, &token, &first_cache, "first-0").finish(2.0);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(show.requests(), 2, "each episode fetched once\n{log}");
    let kept = copies(&archive.join("media"));
    assert_eq!(
        kept.len(),
        1,
        "one copy kept on the server: {kept:?}\n{log}"
    );
    let kept = kept[0].clone();
    assert!(
        std::fs::read(&kept).unwrap() == episode,
        "the copy is the episode"
    );
    assert!(log.contains("episode print written"), "{log}");
    let want = |k: usize| full_analysis(s.path(), &kept, &clips[k]);
    let clip0 = want(0);
    assert_same(&found(&s, first, 0), &clip0, "clip 0");
    assert_same(&found(&s, rerun, 0), &clip0, "clip 0 (rerun)");
    assert!(
        std::fs::read_dir(&prints).unwrap().count() >= 1,
        "the print is the server's"
    );

    // A late clip, in the rerun by the first researcher: its cache holds the whole copy.
    add_clip(&s, &clips, 1);
    assign(&s, "0");
    let (scrape, log) = Researcher::start(&s, &addr, &token, &first_cache, "first-1").finish(1.0);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(show.requests(), 2, "the show not asked again\n{log}");
    assert!(log.contains("answered from the episode's print"), "{log}");
    let first_read = media_read(&scrape);
    assert!(
        first_read > 0.0 && first_read * 10.0 < episode.len() as f64,
        "ranges read: {first_read} bytes\n{scrape}"
    );
    let clip1 = want(1);
    assert_same(&found(&s, rerun, 1), &clip1, "clip 1 (rerun)");
    assert!(found(&s, first, 1).is_empty(), "one item: the rerun's");

    // The same late clip in the first airing, by the second researcher, its cache empty:
    // ranges of the kept copy through the API.
    assign(&s, "0");
    let (scrape, log) = Researcher::start(&s, &addr, &token, &second_cache, "second-1").finish(1.0);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(
        show.requests(),
        2,
        "the show not asked by the second\n{log}"
    );
    assert!(log.contains("answered from the episode's print"), "{log}");
    let second_read = media_read(&scrape);
    let fetched = metric(&scrape, "archivist_researcher_range_bytes_total").unwrap_or(0.0) as u64;
    let cached = dir_size(&second_cache);
    eprintln!(
        "late clip: the first researcher read {first_read} bytes of the episode, the second \
         {second_read} ({fetched} bytes of ranges through the API, {cached} bytes in its cache, \
         of a {}-byte episode)",
        episode.len()
    );
    assert!(
        second_read <= 1.2 * first_read,
        "the second read {second_read} bytes, the first {first_read}\n{log}"
    );
    assert!(
        fetched > 0 && fetched * 2 < episode.len() as u64,
        "{fetched} bytes of ranges through the API for a {}-byte episode\n{log}",
        episode.len()
    );
    assert!(
        cached * 2 < episode.len() as u64,
        "no copy of the episode in the second's cache: {cached} bytes\n{log}"
    );
    assert_same(&found(&s, first, 1), &clip1, "clip 1");
}
