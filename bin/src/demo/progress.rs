//! The demo's progress display (an indicatif bar on a terminal, a log line a second
//! otherwise) and its closing summary (text, or one JSON object with `--json`).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use datastore::Status;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::demo::truth::Check;

/// How often a log line reports progress when standard error is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// Shows research progress.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    last_log: Instant,
}

impl Progress {
    /// A bar of `total` pairs on a terminal, log lines otherwise.
    pub(crate) fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{spinner} {elapsed:>4} [{bar:30}] {pos}/{len} pairs researched, {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(120));
            crate::logging::show_bar(&bar);
            bar
        });
        Progress {
            bar,
            total,
            last_log: Instant::now(),
        }
    }

    /// Shows the latest counts.
    pub(crate) fn update(&mut self, s: &Status) {
        let msg = format!(
            "{} matches, {} active leases",
            s.matched_pairs, s.active_leases
        );
        match &self.bar {
            Some(bar) => {
                bar.set_position(s.researched_pairs.min(self.total));
                bar.set_message(msg);
            }
            None if self.last_log.elapsed() >= LOG_EVERY => {
                self.last_log = Instant::now();
                tracing::info!(
                    "researched {}/{} pairs, {msg} ({} episodes, {} clips stored)",
                    s.researched_pairs,
                    self.total,
                    s.episodes,
                    s.clips
                );
            }
            None => {}
        }
    }

    /// Now `total` pairs (a new clip made more).
    pub(crate) fn set_total(&mut self, total: u64) {
        self.total = total;
        if let Some(bar) = &self.bar {
            bar.set_length(total);
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            crate::logging::hide_bar();
            bar.finish_and_clear();
        }
    }
}

/// One pass of research: the first (every clip but the new one), or the new clip's, curated
/// once the first was done. What the researchers did in it, from their counters.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Pass {
    /// The clips curated for it.
    pub(crate) clips: Vec<String>,
    /// The research pairs its clips made.
    pub(crate) research_pairs: u64,
    /// Work items the researchers took.
    pub(crate) work_items: u64,
    /// Of those, answered from the episode's print.
    pub(crate) items_from_prints: u64,
    pub(crate) prints_written: u64,
    /// Prints there but not used (changed media, damaged…): analysed in full.
    pub(crate) print_fallbacks: u64,
    /// Episode audio decoded.
    pub(crate) audio_decoded_seconds: f64,
    /// Bytes of episode media read: whole files in full analyses, ranges from prints.
    pub(crate) media_bytes_read: u64,
    pub(crate) elapsed_ms: u64,
    /// Its clips' matches against the truth.
    pub(crate) analysis: Check,
}

/// What the demo did, as `demo --json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    pub(crate) datastore: String,
    /// Where the demo's audio is (it stays: the matches point into it).
    pub(crate) media: String,
    pub(crate) audio_minutes: f64,
    /// The reference analyser's answers against the truth of the generated audio (every
    /// clip, the new one's included).
    pub(crate) analysis: Check,
    /// The first pass: every clip but the new one, every episode analysed (and printed).
    pub(crate) first_pass: Pass,
    /// The new clip's pass, answered from the episodes' prints.
    pub(crate) new_clip_pass: Pass,
    pub(crate) episodes: u64,
    pub(crate) clips: u64,
    pub(crate) research_pairs: u64,
    pub(crate) researched_pairs: u64,
    pub(crate) research_executions: u64,
    pub(crate) pairs_researched_once: u64,
    pub(crate) pairs_researched_more_than_once: u64,
    pub(crate) pairs_not_researched: u64,
    pub(crate) matched_pairs: u64,
    pub(crate) matches_found_by_researchers: u64,
    pub(crate) researchers: u32,
    pub(crate) work_items: u64,
    pub(crate) leases_created: u64,
    pub(crate) leases_expired: u64,
    pub(crate) pairs_reclaimed: u64,
    pub(crate) stall: Option<String>,
    pub(crate) messages_dead_lettered: u64,
    pub(crate) poison_messages_sent: u64,
    pub(crate) dead_letters_by_queue: BTreeMap<String, u64>,
    pub(crate) lease_duration_ms: u64,
    pub(crate) elapsed_ms: u64,
    pub(crate) all_researched_once: bool,
    pub(crate) problems: Vec<String>,
    /// Commands to explore the results with (the datastore stays).
    pub(crate) explore: Vec<String>,
    /// What the media archive holds once the demo is done.
    pub(crate) archive: ArchiveHeld,
}

/// What the demo's media archive holds: the researchers kept each episode there.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ArchiveHeld {
    /// The archive, as `--media-archive` names it.
    pub(crate) archive: String,
    /// Episodes with a version kept.
    pub(crate) episodes: u64,
    /// Copies kept.
    pub(crate) copies: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Why it could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) unreadable: Option<String>,
}

impl Summary {
    /// Prints the summary on standard output.
    pub(crate) fn print(&self, json: bool) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if json {
            serde_json::to_writer(&mut out, self)?;
            writeln!(out)?;
        } else {
            self.write_text(&mut out)?;
        }
        out.flush()
    }

    fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let percent = if self.research_pairs == 0 {
            0.0
        } else {
            100.0 * self.researched_pairs as f64 / self.research_pairs as f64
        };
        let dead: Vec<String> = self
            .dead_letters_by_queue
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(q, n)| format!("{q}: {n}"))
            .collect();
        writeln!(out, "archivist demo: summary")?;
        writeln!(out, "  datastore        {}", self.datastore)?;
        writeln!(
            out,
            "  data set         {} episodes x {} clips = {} research pairs",
            self.episodes, self.clips, self.research_pairs
        )?;
        writeln!(
            out,
            "  researched       {} of {} pairs ({percent:.1}%) by {} researchers, {} work items",
            self.researched_pairs, self.research_pairs, self.researchers, self.work_items
        )?;
        writeln!(
            out,
            "  matches          {} pairs matched",
            self.matched_pairs
        )?;
        let a = &self.analysis;
        writeln!(
            out,
            "  analysis         {:.1} minutes of generated audio in {}",
            self.audio_minutes, self.media
        )?;
        writeln!(
            out,
            "                   found {} of {} clip occurrences put in (recall {:.3}), {} false \
             matches, {} of {} absent pairs matched",
            a.found,
            a.occurrences,
            a.recall,
            a.false_matches,
            a.absent_pairs_matched,
            a.absent_pairs
        )?;
        writeln!(
            out,
            "                   offset error median {:.2} ms, p95 {:.2} ms, max {:.2} ms",
            a.offset_error_ms_median, a.offset_error_ms_p95, a.offset_error_ms_max
        )?;
        let (f, n) = (&self.first_pass, &self.new_clip_pass);
        writeln!(
            out,
            "  first pass       {} clips, {} pairs in {} work items: {} answered from prints, \
             {} prints written",
            f.clips.len(),
            f.research_pairs,
            f.work_items,
            f.items_from_prints,
            f.prints_written
        )?;
        writeln!(
            out,
            "                   {} of audio decoded, {} of media read, in {:.1}s",
            audio(f.audio_decoded_seconds),
            bytes(f.media_bytes_read),
            f.elapsed_ms as f64 / 1000.0
        )?;
        writeln!(
            out,
            "  new clip         {} curated after the first pass: {} pairs in {} work items, \
             {} answered from prints",
            n.clips
                .iter()
                .map(|c| format!("{c:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            n.research_pairs,
            n.work_items,
            n.items_from_prints
        )?;
        writeln!(
            out,
            "                   {} of audio decoded ({} of the first pass's), {} of media \
             read ({}), in {:.1}s",
            audio(n.audio_decoded_seconds),
            share(n.audio_decoded_seconds, f.audio_decoded_seconds),
            bytes(n.media_bytes_read),
            share(n.media_bytes_read as f64, f.media_bytes_read as f64),
            n.elapsed_ms as f64 / 1000.0
        )?;
        writeln!(
            out,
            "                   found {} of {} occurrences put in, {} false matches, offset \
             error max {:.2} ms",
            n.analysis.found,
            n.analysis.occurrences,
            n.analysis.false_matches,
            n.analysis.offset_error_ms_max
        )?;
        writeln!(
            out,
            "  leases           {} created ({} lease), {} expired, {} pairs reclaimed",
            self.leases_created,
            humantime::format_duration(Duration::from_millis(self.lease_duration_ms)),
            self.leases_expired,
            self.pairs_reclaimed
        )?;
        if let Some(stall) = &self.stall {
            writeln!(out, "                   {stall}")?;
        }
        let held = &self.archive;
        match &held.unreadable {
            None => writeln!(
                out,
                "  media archive    {} episodes, {} copies, {} in {}",
                held.episodes,
                held.copies,
                bytes(held.bytes),
                held.archive
            )?,
            Some(why) => writeln!(
                out,
                "  media archive    {} could not be read: {why}",
                held.archive
            )?,
        }
        writeln!(
            out,
            "  dead-lettered    {} messages ({}); {} poison messages sent",
            self.messages_dead_lettered,
            if dead.is_empty() {
                "none".to_string()
            } else {
                dead.join(", ")
            },
            self.poison_messages_sent
        )?;
        writeln!(
            out,
            "  elapsed          {:.1}s",
            self.elapsed_ms as f64 / 1000.0
        )?;
        if self.all_researched_once {
            writeln!(
                out,
                "  check            OK: every pair was researched exactly once \
                 ({} research executions for {} pairs)",
                self.research_executions, self.research_pairs
            )?;
        } else {
            writeln!(out, "  check            FAILED:")?;
            for p in &self.problems {
                writeln!(out, "                   - {p}")?;
            }
        }
        writeln!(out)?;
        writeln!(out, "The results stay in the datastore. Explore them with:")?;
        for command in &self.explore {
            writeln!(out, "  {command}")?;
        }
        Ok(())
    }
}

/// Seconds of audio for people: `42.0 s`, `23.5 minutes`.
fn audio(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{:.1} minutes", seconds / 60.0)
    }
}

/// Bytes for people: `812 B`, `40.2 kB`, `23.4 MB`.
fn bytes(n: u64) -> String {
    let n = n as f64;
    if n < 1e3 {
        format!("{n} B")
    } else if n < 1e6 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{:.1} MB", n / 1e6)
    }
}

/// `part` as a percentage of `whole`.
fn share(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "-".to_string()
    }
}
