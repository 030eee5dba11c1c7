//! [`ReferenceAnalyser`]: the reference analyser (crate `analysis`) behind the [`Analyser`]
//! trait; `archivist research` runs it when neither `--exec` nor `--http` is given. It runs
//! in the researcher's process, on a blocking thread per work item, and speaks the same
//! protocol as any other analyser (progress lines while the episode decodes, then one line
//! per clip), so the runtime validates and sends its answers exactly as it does an external
//! program's.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;

use crate::analyser::{Analyser, BoxError, Ending, Run};

/// The reference analyser, shared by every slot (its clip fingerprint cache with it).
pub struct ReferenceAnalyser {
    analyser: Arc<analysis::Analyser>,
}

impl ReferenceAnalyser {
    /// The reference analyser with its default parameters.
    pub fn new() -> Self {
        ReferenceAnalyser {
            analyser: Arc::new(analysis::Analyser::new(analysis::Params::default())),
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
        }))
    }

    fn describe(&self) -> String {
        "the reference analyser".into()
    }
}

/// Analyses one item, sending protocol lines as it goes; the ending for the runtime.
fn analyse(
    analyser: &analysis::Analyser,
    input: &Input,
    lines: &mpsc::UnboundedSender<String>,
) -> Ending {
    let clips: Vec<analysis::ClipInput> = input
        .clips
        .iter()
        .map(|c| analysis::ClipInput::new(c.media_path.clone()))
        .collect();
    let mut progress = |p: analysis::Progress| {
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
    };
    let report =
        match analyser.analyse_with_progress(&input.episode.media_path, &clips, &mut progress) {
            Ok(report) => report,
            // A file that will not decode will not decode next time either: every pair fails,
            // with the reason. A passing failure (reading the file) tries the item again.
            Err(e) if e.is_retryable() => return Ending::Failed(format!("the episode: {e}")),
            Err(e) => {
                for clip in &input.clips {
                    let _ = lines.send(
                        json!({ "clip_title": clip.title, "failure": format!("the episode: {e}") })
                            .to_string(),
                    );
                }
                return Ending::Done;
            }
        };
    for (clip, outcome) in input.clips.iter().zip(&report.clips) {
        let line = match outcome {
            analysis::ClipOutcome::Found(found) => json!({
                "clip_title": clip.title,
                "clip_offsets_ns": found.offsets_ns(),
                "clip_match_scores": found.matches.iter().map(|m| score(m.score)).collect::<Vec<_>>(),
                "clip_duration_ns": found.duration_ns,
                "episode_duration_ns": report.duration_ns,
            }),
            analysis::ClipOutcome::Failed(e) if e.is_retryable() => continue,
            analysis::ClipOutcome::Failed(e) => json!({
                "clip_title": clip.title,
                "failure": e.to_string(),
            }),
        };
        let _ = lines.send(line.to_string());
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
}
