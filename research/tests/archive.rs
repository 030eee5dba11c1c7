//! A researcher with a media archive (a directory, and the same directory seen as an archive
//! elsewhere, without local files): the first item of an episode fetches it and keeps it, the
//! next items read the kept copy without a request to the show's server (whose every download
//! is another file: a pre-roll stitched in per request, a new ETag), a damaged copy fails the
//! pair without analysing it, and a new `media_uri` is recorded as a second version while
//! research stays on the chosen one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use archive::{
    ArchiveError, CopyInfo, DirArchive, EpisodeVersions, Kept, MediaArchive, VerifyReport, Version,
};
use archivist::messages::{decode, CompletedResearchItem};
use axum::http::{header, StatusCode, Uri};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use messagebus::{Bus, MemoryBus};
use research::{Analyser, BoxError, Ending, Media, MediaConfig, ResearcherSettings, Run};
use tokio_util::sync::CancellationToken;

const RATE: u32 = 22_050;
const AIRED: &str = "2026-01-01T00:00:00Z";
/// The pre-rolls the server stitches in, in turn (seconds).
const PREROLLS: [f64; 3] = [1.0, 2.0, 3.0];

/// 16-bit mono WAV bytes of `samples`.
fn wav(samples: &[f32]) -> Vec<u8> {
    let data: Vec<u8> = samples
        .iter()
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
        .collect();
    let mut out = Vec::with_capacity(44 + data.len());
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&RATE.to_le_bytes());
    out.extend_from_slice(&(RATE * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    out
}

/// What the show's server serves and saw.
struct Show {
    episode: Vec<f32>,
    /// GETs by path.
    gets: HashMap<String, u32>,
    /// The pre-roll (seconds) of each download, by path, in order.
    prerolls: HashMap<String, Vec<f64>>,
    served: u32,
}

async fn show(
    axum::extract::State(show): axum::extract::State<Arc<Mutex<Show>>>,
    uri: Uri,
) -> axum::response::Response {
    let mut show = show.lock().unwrap();
    let path = uri.path().to_string();
    *show.gets.entry(path.clone()).or_default() += 1;
    let preroll = PREROLLS[show.served as usize % PREROLLS.len()];
    show.served += 1;
    show.prerolls.entry(path).or_default().push(preroll);
    let mut samples = synth::Speech::render(
        900 + u64::from(show.served),
        RATE,
        Voice::numbered(5),
        preroll as f32,
    );
    samples.extend_from_slice(&show.episode);
    let etag = format!("\"d{}\"", show.served);
    (StatusCode::OK, [(header::ETAG, etag)], wav(&samples)).into_response()
}

/// The show's server: every download of every path is the episode behind a pre-roll of its
/// own, with an ETag of its own.
async fn start_show(episode: Vec<f32>) -> (String, Arc<Mutex<Show>>) {
    let state = Arc::new(Mutex::new(Show {
        episode,
        gets: HashMap::new(),
        prerolls: HashMap::new(),
        served: 0,
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .fallback(axum::routing::get(show))
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, state)
}

/// Two clips (WAV files in `dir`) and a 30 s episode with clip 0 at 8 s and clip 1 at 20 s.
fn audio(dir: &Path) -> (Vec<PathBuf>, Vec<f32>) {
    let made = [
        Speech::render(41, RATE, Voice::numbered(2), 3.0),
        synth::jingle(42, RATE, 2.5),
    ];
    let mut paths = Vec::new();
    for (k, samples) in made.iter().enumerate() {
        let path = dir.join(format!("clip{k}.wav"));
        std::fs::write(&path, wav(samples)).unwrap();
        paths.push(path);
    }
    let insertions = [(0, 8.0), (1, 20.0)]
        .iter()
        .map(|&(clip, s): &(usize, f64)| Insertion {
            clip,
            offset: (s * f64::from(RATE)) as u64,
            gain: 0.9,
            over: false,
        })
        .collect();
    let clips = made.into_iter().map(Arc::new).collect();
    let (episode, _) = EpisodeSynth::new(50, RATE, 30.0, 2, clips, insertions)
        .with_bed(51, 0.03)
        .render();
    (paths, episode)
}

fn item(episode_uri: &str, clips: &[(&str, &Path)]) -> Vec<u8> {
    let now = "2026-01-02T03:04:05Z";
    let clips: Vec<_> = clips
        .iter()
        .map(|(title, path)| {
            serde_json::json!({
                "initial_date_curated": now, "last_date_curated": now,
                "curator_information": "test", "title": title, "description": "",
                "media_uri": path.display().to_string(), "media_type": "wav", "priority": 0
            })
        })
        .collect();
    serde_json::json!({
        "lease_id": uuid::Uuid::new_v4(),
        "lease_expires_at": (Utc::now() + chrono::Duration::hours(1)).to_rfc3339(),
        "episode": {
            "initial_date_curated": now, "last_date_curated": now,
            "curator_information": "test", "date_aired": AIRED,
            "title": "Episode 1", "description": "",
            "media_uri": episode_uri, "media_type": "wav", "priority": 0
        },
        "clips": clips,
    })
    .to_string()
    .into_bytes()
}

fn key() -> String {
    let aired = DateTime::parse_from_rfc3339(AIRED)
        .unwrap()
        .with_timezone(&Utc);
    archive::episode_key("Episode 1", &aired)
}

/// Answers every clip at 0, and keeps the episode's path it was handed, each time.
#[derive(Default)]
struct Recorder {
    episodes: Mutex<Vec<PathBuf>>,
}

#[async_trait::async_trait]
impl Analyser for Recorder {
    async fn start(&self, input: Vec<u8>, _lease: &str) -> Result<Box<dyn Run>, BoxError> {
        let item: serde_json::Value = serde_json::from_slice(&input)?;
        let path = item["episode"]["media_path"].as_str().ok_or("no path")?;
        self.episodes.lock().unwrap().push(PathBuf::from(path));
        let lines = item["clips"]
            .as_array()
            .ok_or("no clips")?
            .iter()
            .map(|clip| {
                serde_json::json!({
                    "clip_title": clip["title"], "clip_offsets_ns": [0],
                    "clip_duration_ns": 1_000_000_000u64, "episode_duration_ns": 30_000_000_000u64,
                })
                .to_string()
            })
            .collect();
        Ok(Box::new(Lines(lines)))
    }

    fn describe(&self) -> String {
        "recorder".into()
    }
}

struct Lines(VecDeque<String>);

#[async_trait::async_trait]
impl Run for Lines {
    async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
        Ok(self.0.pop_front())
    }

    async fn finish(&mut self) -> Ending {
        Ending::Done
    }

    async fn stop(self: Box<Self>) {}
}

/// The archive in a directory, seen as an archive elsewhere (S3) is: no local files, so
/// copies are made into the media cache and ranges read through [`MediaArchive::read`].
#[derive(Debug)]
struct Elsewhere(DirArchive, Mutex<u64>);

#[async_trait::async_trait]
impl MediaArchive for Elsewhere {
    async fn keep(&self, sha256: &str, file: &Path) -> Result<Kept, ArchiveError> {
        self.0.keep(sha256, file).await
    }
    async fn size(&self, sha256: &str) -> Result<Option<u64>, ArchiveError> {
        self.0.size(sha256).await
    }
    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Vec<u8>, ArchiveError> {
        *self.1.lock().unwrap() += range.end - range.start;
        self.0.read(sha256, range).await
    }
    async fn copy_to(&self, sha256: &str, dest: &Path) -> Result<u64, ArchiveError> {
        self.0.copy_to(sha256, dest).await
    }
    fn local_path(&self, _sha256: &str) -> Option<PathBuf> {
        None
    }
    async fn copies(&self) -> Result<Vec<CopyInfo>, ArchiveError> {
        self.0.copies().await
    }
    async fn verify(&self, sha256: &str) -> Result<Option<String>, ArchiveError> {
        self.0.verify(sha256).await
    }
    async fn versions(&self, key: &str) -> Result<Option<EpisodeVersions>, ArchiveError> {
        self.0.versions(key).await
    }
    async fn episodes(&self) -> Result<Vec<EpisodeVersions>, ArchiveError> {
        self.0.episodes().await
    }
    async fn record(
        &self,
        key: &str,
        title: &str,
        date_aired: DateTime<Utc>,
        version: Version,
    ) -> Result<EpisodeVersions, ArchiveError> {
        self.0.record(key, title, date_aired, version).await
    }
    async fn choose(&self, key: &str, sha256: &str) -> Result<EpisodeVersions, ArchiveError> {
        self.0.choose(key, sha256).await
    }
    async fn put_report(&self, report: &VerifyReport) -> Result<(), ArchiveError> {
        self.0.put_report(report).await
    }
    async fn report(&self) -> Result<Option<VerifyReport>, ArchiveError> {
        self.0.report().await
    }
    fn describe(&self) -> String {
        format!("elsewhere:{}", self.0.describe())
    }
}

/// One researcher run (`--once`) over `items`, with an empty media cache of its own under
/// `dir` and `archive`: the results.
async fn research(
    dir: &Path,
    archive: Arc<dyn MediaArchive>,
    analyser: Arc<dyn Analyser>,
    items: Vec<Vec<u8>>,
) -> Vec<CompletedResearchItem> {
    let bus = MemoryBus::default();
    bus.create_queue("pending_research").await.unwrap();
    bus.create_queue("completed_research").await.unwrap();
    let sender = bus.sender("pending_research").await.unwrap();
    for item in items {
        sender.send(item).await.unwrap();
    }
    let media = Media::new(MediaConfig {
        cache_dir: dir.join(format!("cache-{}", uuid::Uuid::new_v4().simple())),
        cache_size: 1 << 30,
        max_size: 1 << 30,
        media_roots: Vec::new(),
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        attempts: 1,
        addresses: net::address_policy::AddressPolicy::any(),
        min_rate: 0,
    })
    .unwrap()
    .with_archive(archive);
    let handle = research::start(
        CancellationToken::new(),
        vec![bus.receiver("pending_research").await.unwrap()],
        bus.sender("completed_research").await.unwrap(),
        analyser,
        media,
        ResearcherSettings {
            once: true,
            ..ResearcherSettings::default()
        },
    );
    handle.done.await.unwrap();
    let results = bus.receiver("completed_research").await.unwrap();
    let mut out = Vec::new();
    loop {
        let got = results
            .receive(100, Duration::from_millis(200))
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        for delivery in got {
            out.push(decode::<CompletedResearchItem>(delivery.body()).unwrap());
            delivery.ack().await.unwrap();
        }
    }
    out
}

fn gets(show: &Arc<Mutex<Show>>, path: &str) -> u32 {
    *show.lock().unwrap().gets.get(path).unwrap_or(&0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_item_keeps_the_episode_and_the_next_reads_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (clips, episode) = audio(dir.path());
    let (base, show) = start_show(episode).await;
    let uri = format!("{base}/episode.wav");
    let archive = Arc::new(DirArchive::new(dir.path().join("archive")).unwrap());
    let recorder = Arc::new(Recorder::default());

    let first = research(
        dir.path(),
        archive.clone(),
        recorder.clone(),
        vec![item(&uri, &[("clip 0", &clips[0])])],
    )
    .await;
    assert_eq!(gets(&show, "/episode.wav"), 1);
    let kept = archive.versions(&key()).await.unwrap().unwrap();
    assert_eq!(kept.versions.len(), 1);
    let chosen = kept.chosen().unwrap().clone();
    assert_eq!(chosen.media_uri, uri);
    assert_eq!(chosen.etag.as_deref(), Some("\"d1\""));
    assert_eq!(chosen.media_type.as_deref(), Some("wav"));
    let copy = archive.local_path(&chosen.sha256).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].episode_hash, chosen.sha256);
    assert_eq!(
        recorder.episodes.lock().unwrap().as_slice(),
        [copy.clone()],
        "the archive's own file, not a copy"
    );

    // Another clip, another item, an empty media cache: the kept copy, no request.
    let second = research(
        dir.path(),
        archive.clone(),
        recorder.clone(),
        vec![item(&uri, &[("clip 1", &clips[1])])],
    )
    .await;
    assert_eq!(gets(&show, "/episode.wav"), 1, "the show was asked again");
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].failure, None);
    assert_eq!(second[0].episode_hash, chosen.sha256);
    assert_eq!(recorder.episodes.lock().unwrap()[1], copy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_copy_fails_the_pair_without_analysing_it() {
    let dir = tempfile::tempdir().unwrap();
    let (clips, episode) = audio(dir.path());
    let (base, show) = start_show(episode).await;
    let uri = format!("{base}/episode.wav");
    for elsewhere in [false, true] {
        let dir = dir.path().join(format!("elsewhere-{elsewhere}"));
        let local = DirArchive::new(dir.join("archive")).unwrap();
        let archive: Arc<dyn MediaArchive> = if elsewhere {
            Arc::new(Elsewhere(local.clone(), Mutex::default()))
        } else {
            Arc::new(local.clone())
        };
        let recorder = Arc::new(Recorder::default());
        research(
            &dir,
            archive.clone(),
            recorder.clone(),
            vec![item(&uri, &[("clip 0", &clips[0])])],
        )
        .await;
        let asked = gets(&show, "/episode.wav");
        let sha256 = archive.versions(&key()).await.unwrap().unwrap().chosen;

        // A byte of the copy flipped on disk.
        let path = local.local_path(&sha256).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[5000] ^= 0xff;
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&path, perms).unwrap();
        std::fs::write(&path, &bytes).unwrap();

        let results = research(
            &dir,
            archive.clone(),
            recorder.clone(),
            vec![item(&uri, &[("clip 1", &clips[1])])],
        )
        .await;
        assert_eq!(results.len(), 1);
        let failure = results[0].failure.clone().expect("a failed pair");
        assert!(
            failure.contains("damaged")
                && failure.contains(&sha256)
                && failure.contains("archivist archive verify"),
            "{failure}"
        );
        assert_eq!(
            recorder.episodes.lock().unwrap().len(),
            1,
            "the damaged copy was analysed"
        );
        assert_eq!(
            gets(&show, "/episode.wav"),
            asked,
            "the show was asked again"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_media_uri_is_a_second_version_and_the_chosen_one_is_researched() {
    let dir = tempfile::tempdir().unwrap();
    let (clips, episode) = audio(dir.path());
    let (base, show) = start_show(episode).await;
    let archive = Arc::new(DirArchive::new(dir.path().join("archive")).unwrap());
    let recorder = Arc::new(Recorder::default());
    let first_uri = format!("{base}/episode.wav");
    research(
        dir.path(),
        archive.clone(),
        recorder.clone(),
        vec![item(&first_uri, &[("clip 0", &clips[0])])],
    )
    .await;
    let chosen = archive.versions(&key()).await.unwrap().unwrap().chosen;

    // The curator sees the episode moved: fetched and kept once, recorded, not chosen.
    let moved = format!("{base}/moved.wav");
    for clip in 1..3 {
        let results = research(
            dir.path(),
            archive.clone(),
            recorder.clone(),
            vec![item(&moved, &[(&format!("clip {clip}"), &clips[clip % 2])])],
        )
        .await;
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].episode_hash, chosen);
    }
    assert_eq!(gets(&show, "/moved.wav"), 1);
    assert_eq!(gets(&show, "/episode.wav"), 1);
    let kept = archive.versions(&key()).await.unwrap().unwrap();
    assert_eq!(kept.versions.len(), 2, "{kept:?}");
    assert_eq!(kept.chosen, chosen);
    assert_eq!(kept.versions[1].media_uri, moved);
    assert_ne!(kept.versions[1].sha256, chosen);
    let copy = archive.local_path(&chosen).unwrap();
    let given: HashSet<PathBuf> = recorder.episodes.lock().unwrap().iter().cloned().collect();
    assert_eq!(given, HashSet::from([copy]));
}

/// With prints (the reference analyser fetching the episode itself): the first clip is a
/// full analysis of the kept copy, the next an answer from its print, whose ranges come from
/// the archive; both where the clip is in the kept copy, and neither asks the show twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_of_a_kept_copy_are_used_without_asking_the_show() {
    let dir = tempfile::tempdir().unwrap();
    let (clips, episode) = audio(dir.path());
    let (base, show) = start_show(episode).await;
    let uri = format!("{base}/episode.wav");
    for elsewhere in [false, true] {
        let dir = dir.path().join(format!("elsewhere-{elsewhere}"));
        let local = DirArchive::new(dir.join("archive")).unwrap();
        let remote = Arc::new(Elsewhere(local.clone(), Mutex::default()));
        let archive: Arc<dyn MediaArchive> = if elsewhere {
            remote.clone()
        } else {
            Arc::new(local.clone())
        };
        let store = Arc::new(prints::DirStore::new(dir.join("prints"), 1 << 30).unwrap());
        let counters: Arc<research::printing::PrintCounters> = Arc::default();
        let run = |clip: usize| {
            let (dir, archive, store, counters) = (
                dir.clone(),
                archive.clone(),
                store.clone(),
                counters.clone(),
            );
            let it = item(&uri, &[(&format!("clip {clip}"), &clips[clip])]);
            async move {
                let bus = MemoryBus::default();
                bus.create_queue("pending_research").await.unwrap();
                bus.create_queue("completed_research").await.unwrap();
                bus.sender("pending_research")
                    .await
                    .unwrap()
                    .send(it)
                    .await
                    .unwrap();
                let media = Media::new(MediaConfig {
                    cache_dir: dir.join(format!("cache-{}", uuid::Uuid::new_v4().simple())),
                    cache_size: 1 << 30,
                    max_size: 1 << 30,
                    media_roots: Vec::new(),
                    connect_timeout: Duration::from_secs(5),
                    read_timeout: Duration::from_secs(5),
                    attempts: 1,
                    addresses: net::address_policy::AddressPolicy::any(),
                    min_rate: 0,
                })
                .unwrap()
                .with_archive(archive);
                let handle = research::start(
                    CancellationToken::new(),
                    vec![bus.receiver("pending_research").await.unwrap()],
                    bus.sender("completed_research").await.unwrap(),
                    Arc::new(research::reference::ReferenceAnalyser::with_prints(store)),
                    media,
                    ResearcherSettings {
                        once: true,
                        print_counters: counters,
                        ..ResearcherSettings::default()
                    },
                );
                handle.done.await.unwrap();
                let results = bus.receiver("completed_research").await.unwrap();
                let got = results.receive(10, Duration::from_secs(1)).await.unwrap();
                assert_eq!(got.len(), 1);
                decode::<CompletedResearchItem>(got[0].body()).unwrap()
            }
        };
        let asked = gets(&show, "/episode.wav");
        let first = run(0).await;
        assert_eq!(gets(&show, "/episode.wav"), asked + 1);
        let preroll = *show.lock().unwrap().prerolls["/episode.wav"]
            .last()
            .unwrap();
        let sha256 = archive.versions(&key()).await.unwrap().unwrap().chosen;
        assert_eq!(first.episode_hash, sha256);
        let at = |s: f64| ((preroll + s) * 1e9) as i64;
        assert_eq!(first.clip_offsets_ns.len(), 1, "{first:?}");
        assert!(
            (first.clip_offsets_ns[0] - at(8.0)).abs() <= 10_000_000,
            "{:?} against {}",
            first.clip_offsets_ns,
            at(8.0)
        );
        assert_eq!(counters.snapshot().written, 1);

        let second = run(1).await;
        assert_eq!(gets(&show, "/episode.wav"), asked + 1, "the show was asked");
        let counts = counters.snapshot();
        assert_eq!((counts.used, counts.written), (1, 1), "{counts:?}");
        assert!(counts.fallbacks.is_empty(), "{counts:?}");
        assert_eq!(second.episode_hash, sha256);
        assert_eq!(second.clip_offsets_ns.len(), 1, "{second:?}");
        assert!(
            (second.clip_offsets_ns[0] - at(20.0)).abs() <= 10_000_000,
            "{:?} against {}",
            second.clip_offsets_ns,
            at(20.0)
        );
        if elsewhere {
            let read = *remote.1.lock().unwrap();
            let size = archive.size(&sha256).await.unwrap().unwrap();
            assert!(
                read > 0 && read * 4 < size,
                "{read} bytes read of a {size}-byte copy"
            );
            assert_eq!(counts.range_bytes, read);
        } else {
            assert_eq!(counts.range_requests, 0, "the archive's own file is read");
        }
    }
}
