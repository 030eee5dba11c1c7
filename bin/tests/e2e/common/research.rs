//! Helpers of the researcher's end-to-end tests: a local HTTP media server that can answer
//! 404, 500 then 200, slowly, or too large; a world of episodes and clips whose "audio" is
//! the text the test analysers (`bin/tests/analysers/`) read; the answers those analysers
//! must give; and running researchers and archivists against it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{archivist, archivist_with_input, command, BusEnv, Run};

/// How the media server answers one path.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// 200 with these bytes.
    Body(Vec<u8>),
    /// 404.
    NotFound,
    /// 500 the first `n` times (with `Retry-After: 0`), then 200 with the bytes.
    FailThen(u32, Vec<u8>),
    /// 200 with the bytes, each 16 bytes after a pause of `ms` milliseconds.
    Slow(u64, Vec<u8>),
    /// 302 to this URL.
    Redirect(String),
}

#[derive(Default)]
struct ServerState {
    answers: HashMap<String, Answer>,
    hits: HashMap<String, u32>,
}

/// A local HTTP server for media, on a thread of its own.
pub(crate) struct MediaServer {
    pub(crate) base: String,
    state: Arc<Mutex<ServerState>>,
    _runtime: std::thread::JoinHandle<()>,
}

impl MediaServer {
    pub(crate) fn start() -> Self {
        Self::start_on("127.0.0.1")
    }

    /// A server on another address (another loopback one, as `127.0.0.2`).
    pub(crate) fn start_on(ip: &'static str) -> Self {
        let state = Arc::new(Mutex::new(ServerState::default()));
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new()
                    .route("/{*path}", axum::routing::get(serve))
                    .with_state(shared);
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        MediaServer {
            base: format!("http://{addr}"),
            state,
            _runtime: thread,
        }
    }

    /// Answers `path` (as `/media/x`) with `answer` from now on.
    pub(crate) fn set(&self, path: &str, answer: Answer) {
        let mut s = self.state.lock().unwrap();
        s.answers.insert(path.to_string(), answer);
    }

    /// Requests for `path` so far.
    pub(crate) fn hits(&self, path: &str) -> u32 {
        *self.state.lock().unwrap().hits.get(path).unwrap_or(&0)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

async fn serve(
    axum::extract::State(state): axum::extract::State<Arc<Mutex<ServerState>>>,
    uri: axum::http::Uri,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let path = uri.path().to_string();
    let (answer, hit) = {
        let mut s = state.lock().unwrap();
        let hit = {
            let h = s.hits.entry(path.clone()).or_default();
            *h += 1;
            *h
        };
        (s.answers.get(&path).cloned(), hit)
    };
    match answer {
        None | Some(Answer::NotFound) => StatusCode::NOT_FOUND.into_response(),
        Some(Answer::Redirect(to)) => (StatusCode::FOUND, [("location", to)]).into_response(),
        Some(Answer::Body(bytes)) => bytes.into_response(),
        Some(Answer::FailThen(n, bytes)) => {
            if hit <= n {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    [("retry-after", "0")],
                    "try again",
                )
                    .into_response()
            } else {
                bytes.into_response()
            }
        }
        Some(Answer::Slow(ms, bytes)) => {
            let chunks: Vec<Vec<u8>> = bytes.chunks(16).map(|c| c.to_vec()).collect();
            let stream = futures::stream::iter(chunks).then(move |c| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, std::io::Error>(c)
            });
            axum::body::Body::from_stream(stream).into_response()
        }
    }
}

use futures::StreamExt;

/// How the analyser service answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// This status and no body (429, 503: try later).
    Status(u16),
    /// 200 and the analyser's first `n` lines, then the connection is cut mid-body.
    CutOff(usize),
}

/// The Python test analyser as an HTTP service (`research --http`): each POSTed item is given
/// to `analyser.py` on its standard input and its output is the response body, streamed.
/// The first requests get the scripted replies instead, one each, in order.
pub(crate) struct AnalyserService {
    pub(crate) url: String,
    _thread: std::thread::JoinHandle<()>,
}

impl AnalyserService {
    /// Answers 503 to the first `busy` requests.
    pub(crate) fn start(busy: u32) -> Self {
        Self::scripted((0..busy).map(|_| Reply::Status(503)).collect())
    }

    pub(crate) fn scripted(replies: Vec<Reply>) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let replies = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
                let app = axum::Router::new()
                    .route("/analyse", axum::routing::post(analyse))
                    .with_state(replies);
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        AnalyserService {
            url: format!("http://{addr}/analyse"),
            _thread: thread,
        }
    }
}

async fn analyse(
    axum::extract::State(replies): axum::extract::State<
        Arc<Mutex<std::collections::VecDeque<Reply>>>,
    >,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use tokio::io::AsyncWriteExt;
    let reply = replies.lock().unwrap().pop_front();
    if let Some(Reply::Status(code)) = reply {
        return axum::http::StatusCode::from_u16(code)
            .unwrap()
            .into_response();
    }
    let mut child = tokio::process::Command::new("python3")
        .arg(analysers().join("analyser.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let lines: Vec<Result<Vec<u8>, std::io::Error>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| Ok(format!("{l}\n").into_bytes()))
        .collect();
    let Some(Reply::CutOff(n)) = reply else {
        return axum::body::Body::from_stream(futures::stream::iter(lines)).into_response();
    };
    let mut cut: Vec<_> = lines.into_iter().take(n).collect();
    // An error in the body stream makes the server drop the connection mid-body; the pause
    // before it lets the server write out what came first (else it may drop it unsent).
    cut.push(Err(std::io::Error::other("cut off on purpose")));
    let stream = futures::stream::iter(cut).then(|chunk| async move {
        if chunk.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        chunk
    });
    axum::body::Body::from_stream(stream).into_response()
}

/// An "analyser service" that accepts connections and never reads or answers: a hung
/// service. Counts the connections it accepted.
pub(crate) struct SilentService {
    pub(crate) url: String,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    _thread: std::thread::JoinHandle<()>,
}

impl SilentService {
    pub(crate) fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/analyse", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        let thread = std::thread::spawn(move || {
            // Held open, never read: the client waits for an answer that never comes.
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                held.push(stream);
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        SilentService {
            url,
            accepted,
            _thread: thread,
        }
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The test analysers' directory.
pub(crate) fn analysers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/analysers")
}

/// `research --exec` arguments for the Python analyser with `mode`.
pub(crate) fn python(mode: &[&str]) -> Vec<String> {
    let mut v = vec![
        "python3".to_string(),
        analysers().join("analyser.py").display().to_string(),
    ];
    v.extend(mode.iter().map(|m| m.to_string()));
    v
}

/// `research` arguments for the analyser service at `url` (where the others give `--exec`'s).
pub(crate) fn http(url: &str) -> Vec<String> {
    vec!["--http".to_string(), url.to_string()]
}

/// `research --exec` arguments for the shell analyser.
pub(crate) fn shell() -> Vec<String> {
    vec![analysers().join("analyser.sh").display().to_string()]
}

/// The episode length every test episode has.
pub(crate) const EPISODE_NS: i64 = 3_600_000_000_000;

/// A pair the world's analysers find a clip in: clip `k` occurs in episode `i` when
/// `(i + k) % 3 == 0`, at one or two offsets.
pub(crate) fn offsets(i: usize, k: usize) -> Vec<i64> {
    if !(i + k).is_multiple_of(3) {
        return Vec::new();
    }
    let first = ((i * 100 + k) as i64 + 1) * 1_000_000_000;
    if k.is_multiple_of(2) {
        vec![first, first + 600_000_000_000]
    } else {
        vec![first]
    }
}

/// Where the world keeps a medium: on the media server, as a `file://` URL, or as a path
/// relative to the world's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Http,
    FileUrl,
    Path,
}

/// One test's world for researchers: a working directory, its datastore, its bus, a media
/// server, `episodes` episodes and `clips` clips.
pub(crate) struct World {
    dir: tempfile::TempDir,
    pub(crate) bus: BusEnv,
    pub(crate) server: MediaServer,
    pub(crate) episodes: usize,
    pub(crate) clips: usize,
}

pub(crate) fn episode_title(i: usize) -> String {
    format!("Episode {i}")
}

pub(crate) fn clip_title(k: usize) -> String {
    format!("Clip {k}")
}

/// The duration the test analysers report for clip `k` (from its file): each clip its own.
pub(crate) fn clip_duration_ns(k: usize) -> i64 {
    (k as i64 + 2) * 1_000_000_000
}

/// The text "audio" of clip `k`: its token, then its duration.
pub(crate) fn clip_audio(k: usize) -> Vec<u8> {
    format!("token-{k}\nDURATION {}\n", clip_duration_ns(k)).into_bytes()
}

/// Lowercase hex SHA-256 of `bytes`, as results carry it.
pub(crate) fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The text "audio" of episode `i` among `clips` clips.
pub(crate) fn episode_audio(i: usize, clips: usize) -> Vec<u8> {
    let mut text = format!("DURATION {EPISODE_NS}\n");
    for k in 0..clips {
        for o in offsets(i, k) {
            text.push_str(&format!("AT {o} token-{k}\n"));
        }
    }
    text.into_bytes()
}

impl World {
    /// `bus` with the datastore at `database_url` (None: SQLite in the working directory).
    pub(crate) fn new(
        mut bus: BusEnv,
        database_url: Option<&str>,
        episodes: usize,
        clips: usize,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database_url = match database_url {
            Some(u) => u.to_string(),
            None => format!("sqlite://{}", dir.path().join("archive.sqlite").display()),
        };
        bus.set("DATABASE_URL", &database_url);
        bus.set("ARCHIVIST_MAX_CLIPS", "2");
        bus.set("ARCHIVIST_START_JITTER", "0s");
        // An item whose analyser asks for later is held this long, not minutes.
        bus.set("ARCHIVIST_LATER_BACKOFF", "200ms");
        bus.set("RUST_LOG", "info");
        // The media server is on loopback: a researcher refuses it without the flag.
        bus.set("ARCHIVIST_ALLOW_PRIVATE_ADDRESSES", "true");
        std::fs::create_dir_all(dir.path().join("media")).unwrap();
        World {
            dir,
            bus,
            server: MediaServer::start(),
            episodes,
            clips,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The datastore's URL (also the database bus's).
    pub(crate) fn database_url(&self) -> String {
        self.bus
            .with(&[])
            .into_iter()
            .find(|(k, _)| *k == "DATABASE_URL")
            .map(|(_, v)| v.to_string())
            .unwrap()
    }

    /// Puts a medium where `kind` says and returns its URI.
    pub(crate) fn place(&self, name: &str, bytes: Vec<u8>, kind: Kind) -> String {
        match kind {
            Kind::Http => {
                let path = format!("/media/{name}");
                self.server.set(&path, Answer::Body(bytes));
                self.server.url(&path)
            }
            Kind::FileUrl | Kind::Path => {
                let file = self.path().join("media").join(name);
                std::fs::write(&file, bytes).unwrap();
                if kind == Kind::FileUrl {
                    format!("file://{}", file.display())
                } else {
                    // Relative to the working directory every command runs in: the researcher
                    // must still give the analysers an absolute `media_path`.
                    format!("media/{name}")
                }
            }
        }
    }

    /// The episode's `EpisodeInfo` with its media at `uri`.
    pub(crate) fn episode_json(&self, i: usize, uri: &str) -> Value {
        json!({
            "initial_date_curated": "2026-01-10T08:00:00Z",
            "last_date_curated": "2026-01-11T08:00:00Z",
            "curator_information": "e2e",
            "date_aired": format!("2025-03-{:02}T00:00:00Z", i + 1),
            "title": episode_title(i),
            "description": "",
            "media_uri": uri,
            "media_type": "mp3",
            "priority": 0,
        })
    }

    pub(crate) fn clip_json(&self, k: usize, uri: &str) -> Value {
        json!({
            "initial_date_curated": "2026-01-10T08:00:00Z",
            "last_date_curated": "2026-01-11T08:00:00Z",
            "curator_information": "e2e",
            "title": clip_title(k),
            "description": "",
            "media_uri": uri,
            "media_type": "mp3",
            "priority": 0,
        })
    }

    /// Places every medium (episodes on the media server, clips alternately as `file://`
    /// URLs and paths), sends the curated items and ingests them.
    pub(crate) fn curate(&self) {
        let episodes: Vec<String> = (0..self.episodes)
            .map(|i| {
                let uri = self.place(
                    &format!("e{i}.mp3"),
                    episode_audio(i, self.clips),
                    Kind::Http,
                );
                self.episode_json(i, &uri).to_string()
            })
            .collect();
        let clips: Vec<String> = (0..self.clips)
            .map(|k| {
                let kind = if k.is_multiple_of(2) {
                    Kind::FileUrl
                } else {
                    Kind::Path
                };
                let uri = self.place(&format!("c{k}.mp3"), clip_audio(k), kind);
                self.clip_json(k, &uri).to_string()
            })
            .collect();
        // The datastore (and the database bus's queues) first: `send` creates no database.
        self.run(&["migrate"], &[]).expect_code(0);
        self.send(&self.bus.episodes_queue.clone(), &episodes);
        self.send(&self.bus.clips_queue.clone(), &clips);
        self.run(&["episodes", "--once"], &[]).expect_code(0);
        self.run(&["clips", "--once"], &[]).expect_code(0);
    }

    pub(crate) fn send(&self, queue: &str, lines: &[String]) {
        archivist_with_input(
            self.path(),
            &["send", queue],
            &self.bus.with(&[]),
            &(lines.join("\n") + "\n"),
        )
        .expect_code(0);
    }

    pub(crate) fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        archivist(self.path(), args, &self.bus.with(extra))
    }

    /// `archivist research` with `args` then `--exec` and `exec`, started (not waited for).
    pub(crate) fn spawn_research(
        &self,
        args: &[&str],
        exec: &[String],
        extra: &[(&str, &str)],
    ) -> Child {
        let mut all: Vec<String> = vec!["research".into()];
        all.extend(args.iter().map(|a| a.to_string()));
        if !args.contains(&"--cache-dir") {
            all.push("--cache-dir".into());
            all.push(
                self.path()
                    .join(format!("cache-{}", uuid::Uuid::new_v4().simple()))
                    .display()
                    .to_string(),
            );
        }
        if exec.first().map(String::as_str) != Some("--http") {
            all.push("--exec".into());
        }
        all.extend(exec.iter().cloned());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        command(self.path(), &all, &self.bus.with(extra))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `archivist research --once --http URL` with `args`, waited for.
    pub(crate) fn research_http_once(&self, url: &str, args: &[&str]) -> Run {
        let cache = self.path().join("cache-http").display().to_string();
        let mut all = vec!["research", "--once", "--cache-dir", &cache, "--http", url];
        all.extend_from_slice(args);
        archivist(self.path(), &all, &self.bus.with(&[]))
    }

    /// `archivist research --once` with `args`, waited for.
    pub(crate) fn research_once(
        &self,
        args: &[&str],
        exec: &[String],
        extra: &[(&str, &str)],
    ) -> Run {
        let mut a = vec!["--once"];
        a.extend_from_slice(args);
        let child = self.spawn_research(&a, exec, extra);
        Run::from_output(child.wait_with_output().unwrap())
    }

    pub(crate) fn status(&self) -> Value {
        let run = self.run(&["status", "--json"], &[]).expect_code(0);
        serde_json::from_str(run.stdout.trim()).unwrap()
    }

    /// `queues --json`, by queue name.
    pub(crate) fn queue_depths(&self) -> HashMap<String, Value> {
        self.run(&["queues", "--json"], &[])
            .expect_code(0)
            .json_lines()
            .into_iter()
            .map(|q| (q["queue"].as_str().unwrap().to_string(), q))
            .collect()
    }

    /// The recorded matches as (episode, clip, offsets).
    pub(crate) fn matches(&self) -> BTreeSet<(String, String, Vec<i64>)> {
        self.run(&["matches"], &[])
            .expect_code(0)
            .json_lines()
            .iter()
            .map(|m| {
                (
                    m["episode_title"].as_str().unwrap().to_string(),
                    m["clip_title"].as_str().unwrap().to_string(),
                    m["clip_offsets_ns"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|o| o.as_i64().unwrap())
                        .collect(),
                )
            })
            .collect()
    }

    /// Every recorded (not failed) result as stored: (episode, clip) → (episode duration,
    /// episode hash, clip duration, clip hash). Read from the datastore's tables: no command
    /// shows them.
    pub(crate) fn stored_results(&self) -> BTreeMap<(String, String), (i64, String, i64, String)> {
        const SQL: &str = "SELECT e.title, c.title, r.episode_duration_ns, r.episode_hash, \
             r.clip_duration_ns, r.clip_hash FROM research_results r \
             JOIN episodes e ON e.id = r.episode_id JOIN clips c ON c.id = r.clip_id";
        type Row = (String, String, i64, String, i64, String);
        let url = self.database_url();
        let rows: Vec<Row> = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                if url.starts_with("sqlite:") {
                    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
                    let rows = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
                    pool.close().await;
                    rows
                } else {
                    let pool = sqlx::PgPool::connect(&url).await.unwrap();
                    let rows = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
                    pool.close().await;
                    rows
                }
            });
        rows.into_iter()
            .map(|(e, c, ed, eh, cd, ch)| ((e, c), (ed, eh, cd, ch)))
            .collect()
    }

    /// What [`World::stored_results`] holds when every pair is researched: the durations the
    /// analysers read from the media, the hashes of the media's bytes.
    pub(crate) fn expected_results(
        &self,
    ) -> BTreeMap<(String, String), (i64, String, i64, String)> {
        let mut out = BTreeMap::new();
        for i in 0..self.episodes {
            let episode_hash = sha256(&episode_audio(i, self.clips));
            for k in 0..self.clips {
                out.insert(
                    (episode_title(i), clip_title(k)),
                    (
                        EPISODE_NS,
                        episode_hash.clone(),
                        clip_duration_ns(k),
                        sha256(&clip_audio(k)),
                    ),
                );
            }
        }
        out
    }

    /// What the analysers find: every pair with offsets.
    pub(crate) fn expected_matches(&self) -> BTreeSet<(String, String, Vec<i64>)> {
        let mut out = BTreeSet::new();
        for i in 0..self.episodes {
            for k in 0..self.clips {
                let o = offsets(i, k);
                if !o.is_empty() {
                    out.insert((episode_title(i), clip_title(k), o));
                }
            }
        }
        out
    }

    /// Runs `pending-research` in `processes` processes at once, each believing in
    /// `researchers` researchers (None: the bus's count).
    pub(crate) fn pending_research_at_once(&self, processes: usize, researchers: Option<&str>) {
        let mut extra = vec![];
        if let Some(r) = researchers {
            extra.push(("ARCHIVIST_RESEARCHERS", r));
        }
        let env = self.bus.with(&extra);
        super::run_at_once(self.path(), &["pending-research"], &env, processes);
    }

    /// Rounds of racing `pending-research`, `researchers` researchers (`--once`, each with
    /// `concurrency` slots) at once, and `completed-research`, until every pair is recorded
    /// (researched or failed) or `deadline` passes.
    pub(crate) fn research_rounds(
        &self,
        researchers: usize,
        concurrency: &str,
        exec: &[String],
        deadline: Duration,
    ) {
        let until = Instant::now() + deadline;
        let pairs = (self.episodes * self.clips) as u64;
        let n = (researchers * concurrency.parse::<usize>().unwrap()).to_string();
        loop {
            self.pending_research_at_once(2, Some(&n));
            let children: Vec<Child> = (0..researchers)
                .map(|_| self.spawn_research(&["--once", "--concurrency", concurrency], exec, &[]))
                .collect();
            for child in children {
                Run::from_output(child.wait_with_output().unwrap()).expect_code(0);
            }
            self.run(&["completed-research"], &[]).expect_code(0);
            let s = self.status();
            let done =
                s["researched_pairs"].as_u64().unwrap() + s["failed_pairs"].as_u64().unwrap();
            if done == pairs {
                return;
            }
            assert!(Instant::now() < until, "not done in time: {s}");
        }
    }
}

/// Polls `check` until it returns true, failing after `deadline`.
pub(crate) fn eventually(what: &str, deadline: Duration, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !check() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` to exit, failing after `deadline`; what it gave.
pub(crate) fn exits_within(child: Child, what: &str, deadline: Duration) -> Run {
    let (tx, rx) = std::sync::mpsc::channel();
    // Waited for on a thread of its own, reading both pipes so that the child never blocks.
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(deadline) {
        Ok(out) => Run::from_output(out.unwrap()),
        Err(_) => panic!("{what} did not exit within {deadline:?}"),
    }
}

/// The value of the metric line `name` (with its labels, as `x_total{outcome="failed"}`) in a
/// Prometheus scrape, if present.
pub(crate) fn metric(scrape: &str, name: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok())?
    })
}

/// Sends `signal` (as `TERM`, `KILL`) to `pid`.
pub(crate) fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A free local port (bound and let go).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The body of `GET http://127.0.0.1:port/path`, or None while nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

/// Whether process `pid` is gone (or a zombie, which runs nothing: its parent died, and
/// whoever adopted it has not reaped it yet).
#[allow(dead_code)]
pub(crate) fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // `pid (comm) S …`: the state follows the last parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}
