//! The analyser with prints: a full analysis that also prints the episode, and the same
//! answers from a print and a few seconds of audio per candidate.
//!
//! From a print, the peaks are paired into the episode's landmarks again (pairing is cheap
//! and deterministic: the same peaks give the same landmarks, in the same order) and vote
//! as in a full analysis; each vote cluster is then refined on its stretches of the episode
//! alone, decoded from the packets the print's table names (`print_window.rs`), resampled
//! and pre-emphasised to the values the full analysis had there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::landmarks::Pairer;
use crate::matcher::EpisodeScan;
use crate::params::Params;
use crate::peaks::Peak;
use crate::print::{self, ByteSource, CodecSpec, EpisodePrint};
use crate::print_record::PacketLog;
use crate::print_window::{Fetched, Packets, WindowError};
use crate::matcher::{SCORE_SLACK, SCORE_STEPS};
use crate::refine::{value_at, Correlator, History, INTERPOLATION_TAPS};
use crate::resample::Resampler;
use crate::{Analyser, ClipInput, ClipOutcome, ClipPrint, ClipReport, EpisodeReport, Error};
use crate::Progress;

/// Landmarks voted at a time on the print path.
const BATCH: usize = 4_096;

/// What the full analysis gathered for the print.
pub(crate) struct Printed {
    pub identity: String,
    pub duration_ns: u64,
    pub hash: String,
    pub rate: u32,
    pub frames: u64,
    pub media_len: u64,
    pub peaks: Vec<Peak>,
    pub log: Option<(PacketLog, CodecSpec)>,
}

/// The print of a full analysis.
pub(crate) fn assemble(params: &Params, p: Printed) -> EpisodePrint {
    let (log, codec) = p.log.unwrap_or_default();
    if log.lost > 0 {
        tracing::debug!(
            lost = log.lost,
            "packets not found in the media: the print cannot refine around them"
        );
    }
    EpisodePrint {
        params_version: print::params_version(params),
        duration_ns: p.duration_ns,
        hash: p.hash,
        identity: p.identity,
        rate: p.rate,
        frames: p.frames,
        media_len: p.media_len,
        peaks: print::compact(&p.peaks),
        codec,
        packets: log.packets,
        extras: log.extras,
    }
}

impl Analyser {
    /// A full analysis ([`Analyser::analyse_with_progress`]) that also returns the episode's
    /// print, with `identity` (what identifies the media now, opaque here) recorded in it.
    pub fn analyse_printing(
        &self,
        episode: &Path,
        clips: &[ClipInput],
        identity: String,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(EpisodeReport, EpisodePrint), Error> {
        let (report, print) = self.analyse_inner(episode, clips, progress, Some(identity))?;
        let print = print.ok_or_else(|| unusable(episode.to_owned(), "no print was made"))?;
        Ok((report, print))
    }

    /// The answers of a full analysis of the episode `print` was made from, from the print
    /// and a few seconds of audio per candidate read through `media` (the same media: the
    /// caller checks its identity). Fails with [`Error::Io`] when `media` cannot be read and
    /// [`Error::Decode`] when the print cannot give a stretch; the caller then analyses the
    /// episode in full.
    pub fn analyse_from_print(
        &self,
        print: &EpisodePrint,
        media: &mut dyn ByteSource,
        clips: &[ClipInput],
    ) -> Result<EpisodeReport, Error> {
        let name = PathBuf::from(format!("episode {}", print.hash()));
        let expected = print::params_version(&self.params);
        if print.params_version != expected {
            return Err(unusable(name, "the print was made with other peak parameters"));
        }
        if media.len() != print.media_len {
            return Err(unusable(
                name,
                &format!(
                    "the media is {} bytes, {} when printed",
                    media.len(),
                    print.media_len
                ),
            ));
        }
        let prints: Vec<Result<Arc<ClipPrint>, Error>> =
            clips.iter().map(|c| self.clip(&c.path)).collect();
        let usable: Vec<Arc<ClipPrint>> = prints
            .iter()
            .filter_map(|p| p.as_ref().ok().cloned())
            .collect();

        let mut scan = EpisodeScan::deferring(&self.params, &usable);
        let mut refiner = Refiner::new(&self.params, print, media);
        let mut pairer = Pairer::new(&self.params);
        let mut landmarks = Vec::new();
        for (i, &(t, f)) in print.peaks.iter().enumerate() {
            pairer.push(
                Peak {
                    t,
                    f,
                    prominence: 0.0,
                },
                &mut landmarks,
            );
            if landmarks.len() >= BATCH {
                // Every landmark to come is anchored at a waiting peak or a later one.
                let next = print.peaks.get(i + 1).map_or(t, |p| p.0);
                let frontier = pairer.pending_from().map_or(next, |p| p.min(next));
                scan.push_landmarks(&landmarks, Some(i64::from(frontier)));
                landmarks.clear();
                refiner.refine(&mut scan, &name)?;
            }
        }
        pairer.finish(&mut landmarks);
        scan.push_landmarks(&landmarks, None);
        refiner.refine(&mut scan, &name)?;

        let mut found = scan.matches().into_iter();
        let clips = prints
            .into_iter()
            .map(|p| match p {
                Ok(clip) => ClipOutcome::Found(ClipReport {
                    duration_ns: clip.duration_ns(),
                    hash: clip.hash().to_owned(),
                    matches: found.next().unwrap_or_default(),
                }),
                Err(e) => ClipOutcome::Failed(e),
            })
            .collect();
        Ok(EpisodeReport {
            duration_ns: print.duration_ns,
            hash: print.hash.clone(),
            clips,
        })
    }
}

/// Refines the print path's candidates on their stretches of the episode.
struct Refiner<'a> {
    params: Params,
    packets: Packets<'a>,
    fetched: Fetched<'a>,
    resampler: Resampler,
    /// Frames of the decoded stream, and samples at the analysis rate.
    frames: u64,
    analysed: u64,
    correlator: Correlator,
    kernel_gain: Option<f32>,
}

impl<'a> Refiner<'a> {
    fn new(params: &Params, print: &'a EpisodePrint, media: &'a mut dyn ByteSource) -> Self {
        let resampler = Resampler::new(print.rate, params.sample_rate, params);
        Refiner {
            params: params.clone(),
            packets: Packets::new(print),
            fetched: Fetched::new(media),
            analysed: resampler.output_len(print.frames),
            frames: print.frames,
            correlator: Correlator::new(params.refine_window, params.refine_search),
            kernel_gain: None,
            resampler,
        }
    }

    /// Refines every candidate the scan has closed.
    fn refine(&mut self, scan: &mut EpisodeScan, name: &Path) -> Result<(), Error> {
        let error = |e| match e {
            WindowError::Io(source) => Error::Io {
                path: name.to_owned(),
                source,
            },
            WindowError::Unusable(reason) => unusable(name.to_owned(), &reason),
        };
        for c in scan.take_candidates() {
            let needs = scan.needs(&c);
            if self.surely_rejected(scan, &c, &needs).map_err(error)? {
                continue;
            }
            let history = self.history(&needs).map_err(error)?;
            scan.refine_with(c, history);
        }
        Ok(())
    }

    /// Whether the refinement would reject `c` whatever its other windows hold, from as few
    /// of its windows as prove it: its score is the median window's correlation (at the
    /// windows' common lag), so once more than half of them correlate below the bar at
    /// every lag searched, it is below the bar. Each window's best anywhere is computed on
    /// the same points the score is taken on, so this never rejects what the refinement
    /// keeps; it saves fetching the other windows of a chance vote cluster.
    fn surely_rejected(
        &mut self,
        scan: &EpisodeScan,
        c: &crate::matcher::Candidate,
        needs: &[(i64, i64)],
    ) -> Result<bool, WindowError> {
        let (clip, variant, best) = scan.candidate_clip(c);
        let Some(variant) = clip.variants.get(variant) else {
            return Ok(false);
        };
        let (hop, search) = (self.params.hop as i64, self.params.refine_search);
        // The windows the refinement uses: inside the episode, and not silent.
        let inside: Vec<usize> = variant
            .windows
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                best * hop + (w.start + w.samples.len()) as i64 <= self.analysed as i64
                    && !w.samples.is_empty()
                    && w.norm > 0.0
            })
            .map(|(i, _)| i)
            .collect();
        if inside.is_empty() {
            return Ok(true);
        }
        let bar = if inside.len() < 2 {
            self.params.min_correlation_one_window
        } else {
            self.params.min_correlation
        };
        let enough = (inside.len() - 1) / 2 + 1;
        let mut low = 0;
        for (k, &i) in inside.iter().enumerate() {
            if low + (inside.len() - k) < enough {
                return Ok(false);
            }
            let w = &variant.windows[i];
            let history = self.history(&needs[i..=i])?;
            let expected = best * hop + w.start as i64;
            let Some(curve) = self.correlator.curve(w, &history, expected, search) else {
                return Ok(false);
            };
            if self.best_anywhere_below(&curve, search, bar) {
                low += 1;
                if low >= enough {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Whether the curve is below `bar` at every point the refinement may take a window's
    /// score at (`lag − SCORE_SLACK … lag + SCORE_SLACK` in steps of `1 / SCORE_STEPS`, for
    /// every lag searched). A point is computed as the refinement computes it
    /// ([`value_at`]) unless a bound shows it low: the interpolation's absolute kernel sum
    /// (measured on [`value_at`] itself) times the largest sample it reaches.
    fn best_anywhere_below(&mut self, curve: &[f32], search: usize, bar: f32) -> bool {
        let gain = *self.kernel_gain.get_or_insert_with(kernel_gain);
        let reach = INTERPOLATION_TAPS + 1;
        let steps = SCORE_STEPS as f64;
        let slack = SCORE_SLACK as f64;
        let points = (2 * search + 2 * SCORE_SLACK) * SCORE_STEPS;
        // Margin for rounding: the refinement computes its points as `lag − slack + k/steps`.
        let bar = bar - 1e-3;
        for j in 0..=points {
            let x = j as f64 / steps - slack;
            let centre = x.floor() as i64;
            let near = ((centre - reach).max(0)..=(centre + reach).max(0))
                .filter_map(|k| curve.get(k as usize))
                .fold(0f32, |m, v| m.max(v.abs()));
            if near * gain < bar {
                continue;
            }
            if value_at(curve, x) >= bar {
                return false;
            }
        }
        true
    }

    /// The episode's pre-emphasised samples at the analysis rate over `needs` (zeros
    /// between them), ending where the episode does if it ends first.
    fn history(&mut self, needs: &[(i64, i64)]) -> Result<History, WindowError> {
        let lo = needs.iter().map(|n| n.0).min().unwrap_or(0).max(0) as u64;
        let hi = (needs.iter().map(|n| n.1).max().unwrap_or(0).max(0) as u64).min(self.analysed);
        let mut samples = vec![0f32; hi.saturating_sub(lo) as usize];
        let mut stretches: Vec<(u64, u64)> = needs
            .iter()
            .map(|&(a, b)| (a.max(0) as u64, (b.max(0) as u64).min(hi)))
            .filter(|(a, b)| a < b)
            .collect();
        stretches.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in stretches {
            match merged.last_mut() {
                Some(m) if a <= m.1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let a_coef = self.params.pre_emphasis;
        for (a, b) in merged {
            // One sample before, for the pre-emphasis (silence before the episode).
            let from = a.saturating_sub(1);
            let (first, end) = self.resampler.input_span(from, b);
            let (in_from, in_to) = (
                first.max(0) as u64,
                (end.max(0) as u64).min(self.frames),
            );
            let input = self.packets.decode(&mut self.fetched, in_from, in_to)?;
            let mut plain = Vec::with_capacity((b - from) as usize);
            self.resampler
                .outputs(&input, in_from as i64, self.frames, from, b, &mut plain);
            let mut prev = if a > 0 { plain[0] } else { 0.0 };
            let body = if a > 0 { &plain[1..] } else { &plain[..] };
            for (k, &x) in body.iter().enumerate() {
                samples[(a - lo) as usize + k] = x - a_coef * prev;
                prev = x;
            }
        }
        Ok(History::from_emphasised(lo, samples))
    }
}

/// The most [`value_at`] can give at any point of a curve whose samples are at most 1 in
/// magnitude: the largest sum of its kernel's magnitudes over the phases the score uses,
/// measured on impulses (with a margin of 1%).
fn kernel_gain() -> f32 {
    let n = (4 * INTERPOLATION_TAPS + 8) as usize;
    let middle = (n / 2) as f64;
    let mut best = 0f32;
    for step in 0..SCORE_STEPS {
        let x = middle + step as f64 / SCORE_STEPS as f64;
        let mut sum = 0f32;
        for k in 0..n {
            let mut impulse = vec![0f32; n];
            impulse[k] = 1.0;
            sum += value_at(&impulse, x).abs();
        }
        best = best.max(sum);
    }
    best * 1.01
}

fn unusable(path: PathBuf, reason: &str) -> Error {
    Error::Decode {
        path,
        codec: "print".into(),
        reason: reason.to_owned(),
    }
}
