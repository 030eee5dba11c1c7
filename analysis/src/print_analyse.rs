//! The analyser with prints: a full analysis that also prints the episode, and the same
//! answers from a print and a few seconds of audio per candidate.
//!
//! From a print, the peaks are paired into the episode's landmarks again (pairing is cheap
//! and deterministic: the same peaks give the same landmarks, in the same order) and vote
//! as in a full analysis; each vote cluster is then refined on its stretches of the episode
//! alone, decoded from the packets the print's table names (`print_window.rs`), resampled
//! and pre-emphasised to the values the full analysis had there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::landmarks::PairZone;
use crate::matcher::{rank, suppression_radius, Candidate, EpisodeScan, Match};
use crate::matcher::{SCORE_SLACK, SCORE_STEPS};
use crate::params::Params;
use crate::peaks::Peak;
use crate::print::{self, ByteSource, CodecSpec, EpisodePrint};
use crate::print_record::PacketLog;
use crate::print_window::{Fetched, Packets, WindowError};
use crate::refine::{loudest_piece, value_at, Correlator, History, RefWindow, INTERPOLATION_TAPS};
use crate::resample::Resampler;
use crate::Progress;
use crate::{Analyser, ClipInput, ClipOutcome, ClipPrint, ClipReport, EpisodeReport, Error};

/// Landmarks voted at a time on the print path.
const BATCH: usize = 4_096;
/// The most frames (of 16 ms) a batch of votes spans on the print path: about a minute.
const MAX_BATCH_FRAMES: u32 = 4_096;
/// How far below [`Params::refine_screen`] a window must correlate for the print path to
/// reject its candidate on the screen alone.
const SCREEN_MARGIN: f32 = 1e-3;

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
        // Read prints are checked already; checked again here, as the pass relies on it.
        print
            .check(&self.params)
            .map_err(|why| unusable(name.clone(), &why))?;
        let expected = print::params_version(&self.params);
        if print.params_version != expected {
            return Err(unusable(
                name,
                "the print was made with other peak parameters",
            ));
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
        let candidates = vote(&self.params, &mut scan, &print.peaks);
        refiner.refine(&mut scan, candidates, &name)?;

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
            decoded_ns: crate::ns(refiner.decoded, print.rate),
            hash: print.hash.clone(),
            clips,
        })
    }
}

/// The print's peaks paired into the episode's landmarks again and voted: the candidates.
///
/// The peaks are paired as a full analysis's `Pairer` pairs them, anchor by anchor once its
/// zone is complete, and voted in batches (of [`BATCH`] landmarks made); only the landmarks
/// whose hash some clip has are kept, the rest (most of them) could not vote. A batch also
/// ends before a peak more than [`MAX_BATCH_FRAMES`] after its first (a long silence, or a
/// print's forged jump): the votes of a batch are kept by offset, from the batch's first to
/// its last, so their memory follows the frames a batch spans, never a gap between peaks.
fn vote(params: &Params, scan: &mut EpisodeScan, peaks: &[(u32, u16)]) -> Vec<Candidate> {
    let zone = PairZone::new(params);
    let mut landmarks = Vec::new();
    let mut candidates = Vec::new();
    // The first anchor not yet paired, and the landmarks made since the last batch.
    let (mut front, mut made, mut voted) = (0, 0, 0);
    for (i, &(t, _)) in peaks.iter().enumerate() {
        while front <= i && zone.closed(peaks[front].0, t) {
            made += zone.anchor(peaks, front, |h| scan.may_vote(h), &mut landmarks);
            front += 1;
        }
        if i > voted && t.saturating_sub(peaks[voted].0) > MAX_BATCH_FRAMES {
            // Every landmark to come is anchored at a waiting peak (`front <= i`) or a
            // later one; every peak to come is at `t` or later.
            let frontier = peaks[front].0.min(t);
            scan.push_landmarks(&landmarks, &peaks[voted..i], Some(i64::from(frontier)));
            voted = i;
            landmarks.clear();
            made = 0;
            candidates.extend(scan.take_candidates());
        }
        if made >= BATCH {
            // Every landmark to come is anchored at a waiting peak or a later one.
            let next = peaks.get(i + 1).map_or(t, |p| p.0);
            let frontier = if front <= i {
                peaks[front].0.min(next)
            } else {
                next
            };
            scan.push_landmarks(&landmarks, &peaks[voted..=i], Some(i64::from(frontier)));
            voted = i + 1;
            landmarks.clear();
            made = 0;
            candidates.extend(scan.take_candidates());
        }
    }
    for a in front..peaks.len() {
        zone.anchor(peaks, a, |h| scan.may_vote(h), &mut landmarks);
    }
    scan.push_landmarks(&landmarks, &peaks[voted..], None);
    candidates.extend(scan.take_candidates());
    candidates
}

/// Refines the print path's candidates on their stretches of the episode.
struct Refiner<'a> {
    params: Params,
    print: &'a EpisodePrint,
    /// The packet table's index, made when a first stretch is decoded (most episodes,
    /// against a clip they do not hold, have no candidate to refine).
    packets: Option<Packets<'a>>,
    fetched: Fetched<'a>,
    resampler: Resampler,
    /// The decoded stream's rate, its frames, and its samples at the analysis rate.
    rate: u32,
    frames: u64,
    analysed: u64,
    /// Made for the first candidate screened.
    correlator: Option<Correlator>,
    /// The screen's, for [`Params::screen_window`] (made for the first candidate screened).
    screen_correlator: Option<Correlator>,
    kernel: Option<Kernel>,
    /// Stretches of the episode at the analysis rate (not pre-emphasised) computed so far,
    /// by first sample; they do not overlap. The speed variants of a clip and the windows
    /// looked at twice (to reject, then to refine) share them.
    plain: BTreeMap<u64, Vec<f32>>,
    /// Frames of the decoded stream computed (the codec's pre-roll not counted).
    decoded: u64,
}

impl<'a> Refiner<'a> {
    fn new(params: &Params, print: &'a EpisodePrint, media: &'a mut dyn ByteSource) -> Self {
        let resampler = Resampler::new(print.rate, params.sample_rate, params);
        Refiner {
            rate: print.rate,
            params: params.clone(),
            print,
            packets: None,
            fetched: Fetched::new(media),
            analysed: resampler.output_len(print.frames),
            frames: print.frames,
            correlator: None,
            screen_correlator: None,
            kernel: None,
            plain: BTreeMap::new(),
            decoded: 0,
            resampler,
        }
    }

    /// Refines the scan's candidates, most votes first, with as little of the media as
    /// decides each: a candidate whose match would be suppressed by one already kept is
    /// not refined at all ([`Refiner::surely_suppressed`]); one the full analysis's screen
    /// rejects is rejected from its loudest window alone ([`Refiner::screened_out`]); one
    /// whose windows prove it below the bar is rejected from those
    /// ([`Refiner::surely_rejected`]); the rest are refined as in a full analysis, on
    /// their windows and the rival search around them.
    fn refine(
        &mut self,
        scan: &mut EpisodeScan,
        mut candidates: Vec<Candidate>,
        name: &Path,
    ) -> Result<(), Error> {
        let error = |e| match e {
            WindowError::Io(source) => Error::Io {
                path: name.to_owned(),
                source,
            },
            WindowError::Unusable(reason) => unusable(name.to_owned(), &reason),
        };
        // Stable: candidates of equal votes stay in episode order.
        candidates.sort_by_key(|c| std::cmp::Reverse(c.votes));
        let wide = self.params.refine_search.max(self.params.periodic_search);
        let mut counts = [0usize; 4];
        for c in candidates {
            if self.surely_suppressed(scan, &c) {
                counts[0] += 1;
                continue;
            }
            if self.screened_out(scan, &c).map_err(error)? {
                counts[1] += 1;
                continue;
            }
            let reach = self.reach(scan, &c);
            if self
                .surely_rejected(scan, &c, reach, &scan.needs(&c, reach))
                .map_err(error)?
            {
                counts[2] += 1;
                continue;
            }
            counts[3] += 1;
            let history = self.history(&scan.needs(&c, wide)).map_err(error)?;
            scan.refine_with(c, history);
        }
        tracing::debug!(
            suppressed = counts[0],
            screened = counts[1],
            rejected = counts[2],
            refined = counts[3],
            decoded_ms = self.decoded * 1_000 / u64::from(self.rate.max(1)),
            "candidates from the print"
        );
        Ok(())
    }

    /// Whether `c`'s match, whatever its score, would be dropped as the same occurrence as
    /// a match already recorded ([`crate::matcher::suppress`]: of a clip's matches closer
    /// than its length, the highest votes × score is kept). Candidates come most votes
    /// first, so every candidate still to come ranks at most `c.votes`; the recorded
    /// matches ranked above that are kept or dropped whatever comes later. If one of
    /// those kept lies nearer than the radius to every offset `c` could refine to (within
    /// the search around its votes), `c` cannot be kept, and a match not kept suppresses
    /// nothing. Typically a true occurrence's other speed variants.
    fn surely_suppressed(&self, scan: &EpisodeScan, c: &Candidate) -> bool {
        let (clip, _, _) = scan.candidate_clip(c);
        let radius = suppression_radius(clip.duration_ns());
        let bound = c.votes as f32;
        let mut above: Vec<&Match> = scan
            .recorded(scan.candidate_index(c))
            .iter()
            .filter(|m| rank(m) > bound)
            .collect();
        if above.is_empty() {
            return false;
        }
        above.sort_by(|a, b| {
            rank(b)
                .total_cmp(&rank(a))
                .then(a.offset_ns.cmp(&b.offset_ns))
        });
        let mut kept: Vec<&Match> = Vec::new();
        for m in above {
            if kept
                .iter()
                .all(|k| k.offset_ns.abs_diff(m.offset_ns) >= radius)
            {
                kept.push(m);
            }
        }
        // The refined start lies within the search of the votes (and half a sample).
        let centre = (c.best * self.params.hop as i64) as f64;
        let reach = self.params.refine_search as f64 + 2.0;
        let ns = |samples: f64| samples.max(0.0) * 1e9 / f64::from(self.params.sample_rate);
        let (lo, hi) = (
            ns(centre - reach).floor() as u64,
            ns(centre + reach).ceil() as u64,
        );
        kept.iter()
            .any(|k| k.offset_ns.abs_diff(lo) < radius && k.offset_ns.abs_diff(hi) < radius)
    }

    /// The full analysis's screen, from the one window it looks at: whether `c`'s loudest
    /// window (of those inside the episode) correlates below [`Params::refine_screen`] at
    /// every lag near its votes. Only that window is fetched, with the search around it;
    /// a margin covers the rounding of a transform over a shorter stretch than the full
    /// analysis's (a candidate within it goes on to the tests after).
    fn screened_out(&mut self, scan: &EpisodeScan, c: &Candidate) -> Result<bool, WindowError> {
        let (clip, variant, best) = scan.candidate_clip(c);
        let Some(variant) = clip.variants.get(variant) else {
            return Ok(false);
        };
        let hop = self.params.hop as i64;
        let inside: Vec<&RefWindow> = variant
            .windows
            .iter()
            .filter(|w| best * hop + (w.start + w.samples.len()) as i64 <= self.analysed as i64)
            .collect();
        // As the full analysis picks it (the last of equally loud ones).
        let Some(w) = inside.iter().max_by(|a, b| a.norm.total_cmp(&b.norm)) else {
            // No window inside: the refinement records nothing.
            return Ok(true);
        };
        let near = self.params.agreement();
        // The full analysis screens the window's loudest stretch first when the screen is
        // shorter than a window ([`Params::screen_window`]): only that stretch is fetched.
        let screen = self.params.screen_window;
        let piece;
        let (w, small) = if screen > 0 && screen < w.samples.len() {
            piece = loudest_piece(w, screen);
            (&piece, true)
        } else {
            (*w, false)
        };
        let expected = best * hop + w.start as i64;
        let need = (
            expected - near as i64,
            expected + (w.samples.len() + near) as i64,
        );
        let history = self.history(&[need])?;
        let correlator = if small {
            self.screen_correlator
                .get_or_insert_with(|| Correlator::new(screen, near))
        } else {
            self.correlator()
        };
        let Some(curve) = correlator.curve(w, &history, expected, near) else {
            // A silent or empty window: the full analysis stops there too.
            return Ok(true);
        };
        let top = curve.iter().copied().fold(f32::MIN, f32::max);
        Ok(top < self.params.refine_screen - SCREEN_MARGIN)
    }

    /// How far from `c`'s votes the refinement may answer (samples): as far as the votes
    /// may disagree ([`Params::vote_agreement`]), or the whole wide search for a clip cut
    /// off by the episode's end (answered at its summit wherever its votes are).
    fn reach(&self, scan: &EpisodeScan, c: &Candidate) -> usize {
        let (clip, variant, best) = scan.candidate_clip(c);
        let hop = self.params.hop as i64;
        let cut_off = clip.variants.get(variant).is_some_and(|v| {
            v.windows
                .iter()
                .any(|w| best * hop + (w.start + w.samples.len()) as i64 > self.analysed as i64)
        });
        if cut_off {
            self.params.refine_search.max(self.params.periodic_search)
        } else {
            self.params.agreement()
        }
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
        c: &Candidate,
        search: usize,
        needs: &[(i64, i64)],
    ) -> Result<bool, WindowError> {
        let (clip, variant, best) = scan.candidate_clip(c);
        let Some(variant) = clip.variants.get(variant) else {
            return Ok(false);
        };
        let hop = self.params.hop as i64;
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
        let bar = self.params.score_bar(inside.len(), c.weak, c.votes);
        let enough = (inside.len() - 1) / 2 + 1;
        let mut low = 0;
        for (k, &i) in inside.iter().enumerate() {
            if low + (inside.len() - k) < enough {
                return Ok(false);
            }
            let w = &variant.windows[i];
            let history = self.history(&needs[i..=i])?;
            let expected = best * hop + w.start as i64;
            let Some(curve) = self.correlator().curve(w, &history, expected, search) else {
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

    fn correlator(&mut self) -> &mut Correlator {
        let (window, search) = (self.params.refine_window, self.params.refine_search);
        self.correlator
            .get_or_insert_with(|| Correlator::new(window, search))
    }

    /// The episode's samples `a..b` at the analysis rate, from those computed before and the
    /// media for the rest.
    fn plain(&mut self, a: u64, b: u64) -> Result<Vec<f32>, WindowError> {
        let mut out = Vec::with_capacity((b - a) as usize);
        let mut q = a;
        while q < b {
            if let Some((&s, v)) = self.plain.range(..=q).next_back() {
                let end = s + v.len() as u64;
                if end > q {
                    let to = end.min(b);
                    out.extend_from_slice(&v[(q - s) as usize..(to - s) as usize]);
                    q = to;
                    continue;
                }
            }
            let next = self.plain.range(q..).next().map_or(b, |(&s, _)| s.min(b));
            let (first, end) = self.resampler.input_span(q, next);
            let (in_from, in_to) = (first.max(0) as u64, (end.max(0) as u64).min(self.frames));
            let print = self.print;
            let input = self
                .packets
                .get_or_insert_with(|| Packets::new(print))
                .decode(&mut self.fetched, in_from, in_to)?;
            self.decoded += in_to.saturating_sub(in_from);
            let mut samples = Vec::with_capacity((next - q) as usize);
            self.resampler
                .outputs(&input, in_from as i64, self.frames, q, next, &mut samples);
            out.extend_from_slice(&samples);
            self.plain.insert(q, samples);
            q = next;
        }
        Ok(out)
    }

    /// Whether the curve is below `bar` at every point the refinement may take a window's
    /// score at (`lag − SCORE_SLACK … lag + SCORE_SLACK` in steps of `1 / SCORE_STEPS`, for
    /// every lag searched). A point is computed as the refinement computes it
    /// ([`value_at`]) unless a bound shows it low: the interpolation's absolute kernel sum
    /// (measured on [`value_at`] itself) times the largest sample it reaches.
    fn best_anywhere_below(&mut self, curve: &[f32], search: usize, bar: f32) -> bool {
        let kernel = self.kernel.get_or_insert_with(kernel_magnitudes);
        let steps = SCORE_STEPS as f64;
        let slack = SCORE_SLACK as f64;
        let points = (2 * search + 2 * SCORE_SLACK) * SCORE_STEPS;
        // Margin for rounding: the refinement computes its points as `lag − slack + k/steps`.
        let bar = bar - 1e-3;
        let top = curve.iter().fold(0f32, |m, v| m.max(v.abs()));
        let mut exact = 0;
        for j in 0..=points {
            // `x = centre + phase / steps`; the bound: Σ |curve[k]| · |kernel(x − k)|.
            let (centre, phase) = (
                (j / SCORE_STEPS) as i64 - SCORE_SLACK as i64,
                j % SCORE_STEPS,
            );
            let (taps, gain) = &kernel[phase];
            if top * gain < bar {
                continue;
            }
            let bound: f32 = taps
                .iter()
                .filter_map(|&(d, m)| Some(curve.get(usize::try_from(centre - d).ok()?)?.abs() * m))
                .sum();
            if bound < bar {
                continue;
            }
            exact += 1;
            if exact > MAX_EXACT_POINTS || value_at(curve, j as f64 / steps - slack) >= bar {
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
            let plain = self.plain(from, b)?;
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

/// Per phase of [`value_at`]: `(centre − k, |weight|)` for each sample `k` it weighs, and
/// the sum of those magnitudes.
type Kernel = Vec<(Vec<(i64, f32)>, f32)>;

/// Points a window's bound may leave to [`value_at`] before the window counts as not
/// provably low (its candidate is then refined in full).
const MAX_EXACT_POINTS: usize = 64;

/// The magnitudes of [`value_at`]'s kernel at each phase the score uses, measured on
/// impulses: per phase, `(centre − k, |weight|)` for every sample `k` it weighs (with a
/// margin of 1%), and their sum.
fn kernel_magnitudes() -> Kernel {
    let reach = INTERPOLATION_TAPS + 2;
    let n = (2 * reach + 1) as usize;
    let middle = reach;
    (0..SCORE_STEPS)
        .map(|step| {
            let x = middle as f64 + step as f64 / SCORE_STEPS as f64;
            let taps: Vec<(i64, f32)> = (0..n)
                .filter_map(|k| {
                    let mut impulse = vec![0f32; n];
                    impulse[k] = 1.0;
                    let m = value_at(&impulse, x).abs() * 1.01;
                    (m > 0.0).then_some((middle - k as i64, m))
                })
                .collect();
            let gain = taps.iter().map(|t| t.1).sum();
            (taps, gain)
        })
        .collect()
}

fn unusable(path: PathBuf, reason: &str) -> Error {
    Error::Decode {
        path,
        codec: "print".into(),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::synth::{Speech, Voice};

    /// Frames of the print path's votes are kept from a batch's first offset to its last: a
    /// jump of the peaks' frames (a long silence, or a print's forged one) once sized them
    /// by the jump (4 G offsets for a jump of 2^32 frames).
    #[test]
    fn a_long_gap_between_peaks_keeps_the_votes_to_a_batch_s_span() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clip.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for s in Speech::render(5, 8_000, Voice::numbered(1), 3.0) {
            w.write_sample((s.clamp(-1.0, 1.0) * 32_000.0) as i16)
                .unwrap();
        }
        w.finalize().unwrap();
        let analyser = Analyser::new(Params::default());
        // The clip as its own episode: its peaks, then the same 30 M frames (five days) on.
        let (_, print) = analyser
            .analyse_printing(&path, &[], "x".into(), &mut |_| {})
            .unwrap();
        let clip = analyser.clip(&path).unwrap();
        let gap = 30_000_000u32;
        let mut peaks = print.peaks.clone();
        peaks.extend(print.peaks.iter().map(|&(t, f)| (t + gap, f)));
        let mut scan = EpisodeScan::deferring(&analyser.params, &[clip]);
        let candidates = vote(&analyser.params, &mut scan, &peaks);
        let bound = (MAX_BATCH_FRAMES as usize) * 2 + (1 << 12);
        assert!(scan.widest <= bound, "votes over {} offsets", scan.widest);
        let at = |o: i64| candidates.iter().any(|c| (c.best - o).abs() <= 1);
        assert!(at(0), "{candidates:?}");
        assert!(at(i64::from(gap)), "{candidates:?}");
    }
}
