//! [`ReferenceAnalyser`]: the reference analyser (crate `analysis`) behind the [`Analyser`]
//! trait; `archivist research` runs it when neither `--exec` nor `--http` is given. It runs
//! in the researcher's process, on a blocking thread per work item, and speaks the same
//! protocol as any other analyser (progress lines while the episode decodes, then one line
//! per clip), so the runtime validates and sends its answers exactly as it does an external
//! program's.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;

use crate::analyser::{Analyser, BoxError, Ending, Run};
use crate::episode::{EpisodeError, EpisodeMedia};
use crate::printing::{Fallback, Freshness, MediaIdentity};

/// The reference analyser, shared by every slot (its clip fingerprint cache with it).
pub struct ReferenceAnalyser {
    analyser: Arc<analysis::Analyser>,
    /// Where episode prints are kept, if anywhere.
    prints: Option<Arc<dyn prints::PrintStore>>,
}

impl ReferenceAnalyser {
    /// The reference analyser with its default parameters.
    pub fn new() -> Self {
        ReferenceAnalyser {
            analyser: Arc::new(analysis::Analyser::new(analysis::Params::default())),
            prints: None,
        }
    }

    /// The reference analyser with its default parameters and episode prints kept in
    /// `store`: it fetches each item's episode itself ([`Analyser::fetches_episode`]), only
    /// when the episode has no print it can use.
    pub fn with_prints(store: Arc<dyn prints::PrintStore>) -> Self {
        ReferenceAnalyser {
            prints: Some(store),
            ..ReferenceAnalyser::new()
        }
    }
}

impl Default for ReferenceAnalyser {
    fn default() -> Self {
        Self::new()
    }
}

/// What the analyser needs of the work item as the runtime hands it over.
#[derive(serde::Deserialize)]
struct Input {
    episode: WithPath,
    clips: Vec<ClipWithPath>,
}

#[derive(serde::Deserialize)]
struct WithPath {
    media_path: PathBuf,
}

#[derive(serde::Deserialize)]
struct ClipWithPath {
    title: String,
    media_path: PathBuf,
}

#[async_trait]
impl Analyser for ReferenceAnalyser {
    async fn start(&self, input: Vec<u8>, _lease: &str) -> Result<Box<dyn Run>, BoxError> {
        let input: Input = serde_json::from_slice(&input)?;
        let (lines, rx) = mpsc::unbounded_channel();
        let analyser = Arc::clone(&self.analyser);
        let task = tokio::task::spawn_blocking(move || analyse(&analyser, &input, &lines));
        Ok(Box::new(ReferenceRun {
            lines: rx,
            task: Some(task),
            hash: None,
        }))
    }

    fn describe(&self) -> String {
        "the reference analyser".into()
    }

    fn fetches_episode(&self) -> bool {
        self.prints.is_some()
    }

    async fn start_fetching(
        &self,
        input: Vec<u8>,
        _lease: &str,
        episode: EpisodeMedia,
    ) -> Result<Box<dyn Run>, BoxError> {
        let input: Input = serde_json::from_slice(&input)?;
        let (lines, rx) = mpsc::unbounded_channel();
        let hash = Arc::new(OnceLock::new());
        let item = Lazy {
            analyser: Arc::clone(&self.analyser),
            store: self.prints.clone(),
            input,
            episode,
            hash: hash.clone(),
            runtime: tokio::runtime::Handle::current(),
        };
        let task = tokio::task::spawn_blocking(move || item.analyse(&lines));
        Ok(Box::new(ReferenceRun {
            lines: rx,
            task: Some(task),
            hash: Some(hash),
        }))
    }
}

/// One item whose episode the analyser fetches itself, if it needs its audio.
struct Lazy {
    analyser: Arc<analysis::Analyser>,
    store: Option<Arc<dyn prints::PrintStore>>,
    input: Input,
    episode: EpisodeMedia,
    /// The episode's SHA-256, set before the first answer is sent.
    hash: Arc<OnceLock<String>>,
    runtime: tokio::runtime::Handle,
}

impl Lazy {
    fn analyse(self, lines: &mpsc::UnboundedSender<String>) -> Ending {
        let clips = clip_inputs(&self.input);
        let mut progress = progress(lines);
        let outcome = analyse_episode(
            &self.analyser,
            self.store.as_deref(),
            &self.episode,
            &clips,
            &self.runtime,
            &mut progress,
        );
        match outcome {
            EpisodeOutcome::Analysed { report, hash } => {
                let _ = self.hash.set(hash);
                say(&self.analyser, report, &self.input, lines, &|text: &str| {
                    self.episode.name_uri(text)
                })
            }
            EpisodeOutcome::Unfetched(e) => self.unfetched(e, lines),
            EpisodeOutcome::Failed(why) => Ending::Failed(why),
        }
    }

    /// The episode could not be had: gone, every pair fails; else the item is tried again.
    fn unfetched(&self, e: EpisodeError, lines: &mpsc::UnboundedSender<String>) -> Ending {
        match e {
            EpisodeError::Gone(why) => {
                tracing::info!(reason = %why, "episode media gone: every pair fails");
                for clip in &self.input.clips {
                    let _ = lines.send(
                        json!({ "clip_title": clip.title, "failure": format!("episode {why}") })
                            .to_string(),
                    );
                }
                Ending::Done
            }
            EpisodeError::Passing(why) => Ending::Failed(format!("episode media: {why}")),
            EpisodeError::Cancelled => Ending::Failed("the researcher is stopping".into()),
        }
    }
}

/// What [`analyse_episode`] came to.
#[derive(Debug)]
pub enum EpisodeOutcome {
    /// Analysed, from the episode's print or in full: the report (or why the analysis
    /// failed) and the SHA-256 of the episode's bytes.
    Analysed {
        /// The analysis's report.
        report: Result<analysis::EpisodeReport, analysis::Error>,
        /// The SHA-256 of the episode's bytes, lowercase hex.
        hash: String,
    },
    /// The episode could not be had.
    Unfetched(EpisodeError),
    /// Answering from the print failed for a reason that may pass (a range request that
    /// timed out): try again later.
    Failed(String),
}

/// What came of trying the episode's print.
enum Tried {
    /// Answered from it, or ended for a reason a full analysis would share.
    Done(EpisodeOutcome),
    /// Not used: analyse in full; `afresh`: the media changed, download it again.
    Fallback { afresh: bool },
    /// There is none (or the store could not be read).
    None,
}

/// One episode against `clips`: from its print in `store` when there is one made from the
/// same media (a conditional request, or the file's size and time) and of this analyser's
/// format, fetching only the byte ranges its candidates need; else a full analysis, which
/// (with a store) writes the episode's new print. Each print not used is counted and said
/// once in the log ([`crate::printing::PrintCounters`]). Blocking: call it from a blocking
/// thread; `runtime` runs its requests.
pub fn analyse_episode(
    analyser: &analysis::Analyser,
    store: Option<&dyn prints::PrintStore>,
    episode: &EpisodeMedia,
    clips: &[analysis::ClipInput],
    runtime: &tokio::runtime::Handle,
    progress: &mut dyn FnMut(analysis::Progress),
) -> EpisodeOutcome {
    let mut afresh = false;
    if let Some(store) = store {
        match from_print(analyser, store, episode, clips, runtime) {
            Tried::Done(outcome) => return outcome,
            Tried::Fallback { afresh: a } => afresh = a,
            Tried::None => {}
        }
    }
    let fetched = match runtime.block_on(episode.fetch(afresh)) {
        Ok(fetched) => fetched,
        Err(e) => return EpisodeOutcome::Unfetched(e),
    };
    let hash = fetched.sha256.clone();
    let identity = fetched
        .identity
        .clone()
        .filter(MediaIdentity::can_be_checked);
    // A full analysis reads the whole file and decodes all of it.
    let counted = |report: &Result<analysis::EpisodeReport, analysis::Error>| {
        if let Ok(report) = report {
            let bytes = std::fs::metadata(&fetched.path).map_or(0, |m| m.len());
            episode.counters().analysed(report.decoded_ns, bytes);
        }
    };
    let (Some(store), Some(identity)) = (store, identity) else {
        let report = analyser.analyse_with_progress(&fetched.path, clips, progress);
        counted(&report);
        return EpisodeOutcome::Analysed { report, hash };
    };
    let printed = analyser.analyse_printing(&fetched.path, clips, identity.to_text(), progress);
    let report = printed.map(|(report, print)| {
        let bytes = print.to_bytes();
        // Known already: the fetch above needed it.
        let key = runtime
            .block_on(episode.print_key())
            .unwrap_or_else(|_| prints::print_key(episode.uri()));
        let shown = messagebus::redact_url(episode.uri());
        match runtime.block_on(store.put(&key, &bytes)) {
            Ok(()) => episode.counters().written(&shown, bytes.len()),
            Err(e) => {
                tracing::warn!(episode = %shown, error = %e, "could not keep the episode's print")
            }
        }
        report
    });
    counted(&report);
    EpisodeOutcome::Analysed { report, hash }
}

/// A [`analysis::ByteSource`] that counts the bytes read through it.
struct Counted<'a> {
    inner: &'a mut dyn analysis::ByteSource,
    bytes: u64,
}

impl analysis::ByteSource for Counted<'_> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&mut self, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let read = self.inner.read_at(start, len)?;
        self.bytes += read.len() as u64;
        Ok(read)
    }
}

/// Tries to answer from the episode's print.
fn from_print(
    analyser: &analysis::Analyser,
    store: &dyn prints::PrintStore,
    episode: &EpisodeMedia,
    clips: &[analysis::ClipInput],
    runtime: &tokio::runtime::Handle,
) -> Tried {
    let counters = episode.counters();
    let shown = messagebus::redact_url(episode.uri());
    let key = match runtime.block_on(episode.print_key()) {
        Ok(key) => key,
        Err(e) => return Tried::Done(EpisodeOutcome::Unfetched(e)),
    };
    let fallback = |why: Fallback, detail: &str, afresh: bool| {
        counters.fallback(&shown, why, detail);
        Tried::Fallback { afresh }
    };
    let bytes = match runtime.block_on(store.get(&key)) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Tried::None,
        Err(prints::StoreError::Damaged { why, .. }) => {
            return fallback(Fallback::Damaged, &why, false)
        }
        Err(e) => {
            tracing::warn!(episode = %shown, error = %e, "cannot read the print store: analysing the episode in full");
            return Tried::None;
        }
    };
    let print = match analysis::EpisodePrint::from_bytes(&bytes, analyser.params()) {
        Ok(print) => print,
        Err(analysis::PrintError::Damaged(why)) => return fallback(Fallback::Damaged, &why, false),
        Err(e) => return fallback(Fallback::OtherVersion, &e.to_string(), false),
    };
    let Some(identity) = MediaIdentity::parse(print.identity()) else {
        return fallback(
            Fallback::OtherVersion,
            "its media identity is not one this researcher reads",
            false,
        );
    };
    match runtime.block_on(episode.freshness(&identity)) {
        Ok(Freshness::Same) => {}
        Ok(Freshness::Changed) => {
            return fallback(Fallback::ChangedMedia, "a new ETag, time or size", true)
        }
        Ok(Freshness::Gone(why)) => {
            return Tried::Done(EpisodeOutcome::Unfetched(EpisodeError::Gone(why)))
        }
        Err(e) => return Tried::Done(EpisodeOutcome::Unfetched(e)),
    }
    let mut ranges = match runtime.block_on(episode.ranges(&identity, runtime.clone())) {
        Ok(Some(ranges)) => ranges,
        Ok(None) => return Tried::None,
        Err(e) => return Tried::Done(EpisodeOutcome::Unfetched(e)),
    };
    let mut counted = Counted {
        inner: &mut ranges,
        bytes: 0,
    };
    let answered = analyser.analyse_from_print(&print, &mut counted, clips);
    let read = counted.bytes;
    match answered {
        Ok(report) => {
            counters.used(&shown);
            counters.analysed(report.decoded_ns, read);
            Tried::Done(EpisodeOutcome::Analysed {
                report: Ok(report),
                hash: print.hash().to_string(),
            })
        }
        Err(e) => match ranges.fallback() {
            Some(why) => fallback(why, &e.to_string(), why == Fallback::ChangedMedia),
            None if e.is_retryable() => Tried::Done(EpisodeOutcome::Failed(format!(
                "the episode's print: {}",
                episode.name_uri(&e.to_string())
            ))),
            None => fallback(Fallback::Damaged, &e.to_string(), false),
        },
    }
}

/// Analyses one item, sending protocol lines as it goes; the ending for the runtime.
fn analyse(
    analyser: &Arc<analysis::Analyser>,
    input: &Input,
    lines: &mpsc::UnboundedSender<String>,
) -> Ending {
    let clips = clip_inputs(input);
    let mut progress = progress(lines);
    let report = analyser.analyse_with_progress(&input.episode.media_path, &clips, &mut progress);
    // The runtime names the media by their URIs in failure reasons.
    say(analyser, report, input, lines, &|text| text.to_string())
}

fn clip_inputs(input: &Input) -> Vec<analysis::ClipInput> {
    input
        .clips
        .iter()
        .map(|c| analysis::ClipInput::new(c.media_path.clone()))
        .collect()
}

/// Progress lines while the episode decodes.
fn progress(lines: &mpsc::UnboundedSender<String>) -> impl FnMut(analysis::Progress) + '_ {
    move |p: analysis::Progress| {
        let minutes = |ns: u64| ns / 60_000_000_000;
        let said = match p.total_ns {
            Some(total) => format!(
                "decoded {} of {} minutes",
                minutes(p.decoded_ns),
                minutes(total).max(1)
            ),
            None => format!("decoded {} minutes", minutes(p.decoded_ns)),
        };
        let _ = lines.send(json!({ "progress": said }).to_string());
    }
}

/// Sends the lines of an analysis's `report` (or its error); `named` names media by their
/// URIs in failure reasons. Each clip found (possibly nowhere) carries how findable it is,
/// predicted once per clip content by `analyser` (kept there). The ending for the runtime.
fn say(
    analyser: &Arc<analysis::Analyser>,
    report: Result<analysis::EpisodeReport, analysis::Error>,
    input: &Input,
    lines: &mpsc::UnboundedSender<String>,
    named: &dyn Fn(&str) -> String,
) -> Ending {
    let report = match report {
        Ok(report) => report,
        // A file that will not decode will not decode next time either: every pair fails,
        // with the reason. A passing failure (reading the file) tries the item again.
        Err(e) if e.is_retryable() => return Ending::Failed(named(&format!("the episode: {e}"))),
        Err(e) => {
            let why = named(&format!("the episode: {e}"));
            for clip in &input.clips {
                let _ = lines.send(json!({ "clip_title": clip.title, "failure": why }).to_string());
            }
            return Ending::Done;
        }
    };
    let mut unpredicted = Vec::new();
    for (clip, outcome) in input.clips.iter().zip(&report.clips) {
        let line = match outcome {
            analysis::ClipOutcome::Found(found) => {
                let mut line = json!({
                    "clip_title": clip.title,
                    "clip_offsets_ns": found.offsets_ns(),
                    "clip_match_scores": found.matches.iter().map(|m| score(m.score)).collect::<Vec<_>>(),
                    "clip_duration_ns": found.duration_ns,
                    "episode_duration_ns": report.duration_ns,
                });
                // Only a prediction already made rides on the answer: predicting costs about
                // twenty fingerprints of the clip, and an answer waiting for it would keep the
                // lease waiting too (six slots predicting the same clips at once let a demo's
                // five-second leases expire). Unpredicted clips are predicted below, after
                // every answer of the item is sent, and later answers carry it.
                match analyser.findability_kept(&found.hash) {
                    Some(f) => line["clip_findable_from_db"] = json!(f.from_db),
                    None => unpredicted.push((clip, found.hash.clone())),
                }
                line
            }
            analysis::ClipOutcome::Failed(e) if e.is_retryable() => continue,
            analysis::ClipOutcome::Failed(e) => json!({
                "clip_title": clip.title,
                "failure": named(&e.to_string()),
            }),
        };
        let _ = lines.send(line.to_string());
    }
    // Predicted on a thread of their own, once per clip whatever the slots ask (the runtime
    // sends the item's last answer when this returns, and the lease waits for no prediction).
    // A clip that printed decodes; if the prediction fails all the same, later answers go
    // without it.
    let todo: Vec<(std::path::PathBuf, String)> = unpredicted
        .into_iter()
        .filter(|(_, hash)| analyser.begin_findability(hash))
        .map(|(clip, hash)| (clip.media_path.clone(), hash))
        .collect();
    if !todo.is_empty() {
        let analyser = Arc::clone(analyser);
        std::thread::spawn(move || {
            for (path, hash) in todo {
                if let Err(e) = analyser.findability_of(&path, &hash) {
                    tracing::debug!(error = %e, "no findability");
                }
                analyser.end_findability(&hash);
            }
        });
    }
    Ending::Done
}

/// A match's score as the protocol carries it: the `f32`'s shortest decimal (as `analyse
/// --json` prints it) as an `f64`, within 0 to 1.
fn score(s: f32) -> f64 {
    let wide = s.to_string().parse().unwrap_or(f64::from(s));
    if wide.is_nan() {
        0.0
    } else {
        wide.clamp(0.0, 1.0)
    }
}

/// One item under analysis: the lines so far, then the ending.
struct ReferenceRun {
    lines: mpsc::UnboundedReceiver<String>,
    task: Option<tokio::task::JoinHandle<Ending>>,
    /// The episode's hash, when the analyser fetches the episode itself.
    hash: Option<Arc<OnceLock<String>>>,
}

#[async_trait]
impl Run for ReferenceRun {
    async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
        Ok(self.lines.recv().await)
    }

    async fn finish(&mut self) -> Ending {
        match self.task.take() {
            Some(task) => task
                .await
                .unwrap_or_else(|e| Ending::Failed(format!("the reference analyser stopped: {e}"))),
            None => Ending::Failed("the reference analyser was stopped".into()),
        }
    }

    async fn stop(self: Box<Self>) {
        // A blocking thread cannot be interrupted: it finishes its item, and what it says is
        // dropped with the receiver.
    }

    fn episode_hash(&self) -> Option<String> {
        self.hash.as_ref()?.get().cloned()
    }
}
