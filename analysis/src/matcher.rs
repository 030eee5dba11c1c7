//! Matching: an inverted index of the clips' landmark hashes, and one streaming pass over
//! the episode that votes into an offset histogram per clip (and speed variant).
//!
//! A landmark of the episode at frame `te` whose hash the clip has at frame `tc` votes for
//! the clip starting at frame `te − tc`. A true occurrence piles its votes on one offset;
//! chance agreements scatter. Votes come in anchor order, so an offset is final once the
//! episode has gone a clip's length past it: the histogram is a sliding window (memory
//! follows the clips, not the episode), and a clip that occurs several times gives several
//! clusters. Each cluster's best offset is refined at once, while the episode's samples
//! around it are still in the [`History`] ring.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::clip::ClipPrint;
use crate::landmarks::{Fingerprinter, Landmark};
use crate::params::Params;
use crate::peaks::Peak;
use crate::refine::{loudest_piece, peak, piece_scores, value_at, Correlator, History, RefWindow};
use crate::resample::Resampler;

/// Offsets this close (frames) to the previous candidate join its cluster.
const CLUSTER_GAP: i64 = 2;
/// Each window's score is its best correlation within this many samples of the common lag
/// (0.25 ms at 8 kHz): a clip whose speed differs slightly from its variant's drifts by a
/// sample or two over its length, far less than a period of any note.
pub(crate) const SCORE_SLACK: usize = 2;
/// The score is looked for at this many points per sample (1/8 sample: at 8 kHz a 3.6 kHz
/// component, the highest analysed, is then at most 0.2 rad off its peak, under 2% lost).
pub(crate) const SCORE_STEPS: usize = 8;
/// Input samples handled at a time (at most ~0.1 s at 48 kHz; the ring's margin is larger).
const PIECE: usize = 4_096;
/// How far (in mean correlation per window) a local maximum of the lag curve may lie below
/// the highest at whole lags and still be interpolated: half a sample off the grid, a
/// clip's highest harmonics (3.6 kHz at 8 kHz) lose up to 0.35 at the nearest whole lag
/// (measured: a sawtooth jingle 0.66 at both whole lags, ~1.0 between them).
const INTERPOLATION_REACH: f32 = 0.4;
/// The most local maxima interpolated (the highest at whole lags).
const MAX_MAXIMA: usize = 24;

/// The height of `curve`'s summit near whole lag `k` (within one sample either side), by
/// band-limited interpolation: where it lies (fractional lag) and how high it is.
fn summit(curve: &[f32], k: usize) -> (f64, f32) {
    let steps = SCORE_STEPS as f64;
    let (mut at, mut top) = (k as f64, value_at(curve, k as f64));
    for i in 0..=2 * SCORE_STEPS {
        let x = k as f64 - 1.0 + i as f64 / steps;
        let v = value_at(curve, x);
        if v > top {
            (at, top) = (x, v);
        }
    }
    // A parabola through the best step and its neighbours: the summit to ~1/100 sample.
    let (l, r) = (
        f64::from(value_at(curve, at - 1.0 / steps)),
        f64::from(value_at(curve, at + 1.0 / steps)),
    );
    let d = l - 2.0 * f64::from(top) + r;
    if d < 0.0 {
        at += (0.5 * (l - r) / d).clamp(-0.5, 0.5) / steps;
    }
    (at, top)
}

/// A place where a clip occurs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Match {
    /// Where the clip's first sample lies in the episode (nanoseconds from its start).
    pub offset_ns: u64,
    /// Normalised cross-correlation of the clip and the episode there (0–1): how alike they
    /// are sample by sample (1: identical; noise and coding lower it).
    pub score: f32,
    /// Landmark hashes that agreed on this offset (± one frame).
    pub votes: u32,
    /// The playback speed at which the clip matched best (1.0: as is).
    pub speed: f64,
}

struct Cluster {
    last: i64,
    best: i64,
    best_votes: u32,
    /// Peak coincidences at `best` (a cluster of them: see [`Params::peak_hit_min`]).
    best_hits: u32,
    /// Whether the cluster is of peak coincidences, not of landmark votes.
    weak: bool,
}

impl Cluster {
    /// Adds offset `o` (its votes and coincidences) to the open cluster `open` when it lies
    /// within [`CLUSTER_GAP`] of it, the offset with the most votes (a cluster of
    /// coincidences: the most coincidences) its best; otherwise `o` starts a new cluster, and
    /// the one it ends is returned.
    fn grow(
        open: &mut Option<Cluster>,
        o: i64,
        votes: u32,
        hits: u32,
        weak: bool,
    ) -> Option<Cluster> {
        if let Some(c) = open.as_mut().filter(|c| o - c.last <= CLUSTER_GAP) {
            c.last = o;
            let better = if weak {
                hits > c.best_hits
            } else {
                votes > c.best_votes
            };
            if better {
                (c.best, c.best_votes, c.best_hits) = (o, votes, hits);
            }
            return None;
        }
        open.replace(Cluster {
            last: o,
            best: o,
            best_votes: votes,
            best_hits: hits,
            weak,
        })
    }
}

/// One clip at one speed: its votes and its open cluster.
struct Entry {
    clip: usize,
    variant: usize,
    frames: i64,
    /// Votes per offset, densely, from offset `base` on: the live window only (offsets not
    /// yet final), so its length stays about a clip's frames plus the pipeline's lookahead.
    votes: VecDeque<u16>,
    /// Peak coincidences per offset, from `base` on, as `votes`.
    hits: VecDeque<u16>,
    base: i64,
    prev: Option<(i64, u32)>,
    prev_hits: Option<(i64, u32)>,
    cluster: Option<Cluster>,
    /// The open cluster of peak coincidences.
    weak: Option<Cluster>,
    /// The coincidences an offset needs to be a candidate (0: this entry has none).
    hit_bar: u32,
    /// The latest landmark clusters' offsets (`first..=last`): a cluster of coincidences
    /// they cover was refined with them.
    spans: VecDeque<(i64, i64)>,
}

/// Landmark clusters remembered per entry ([`Entry::spans`]).
const SPANS: usize = 8;

/// One pass over an episode against a set of clips. Feed it the episode's samples in order
/// ([`EpisodeScan::push`]) and [`EpisodeScan::finish`] it.
pub struct EpisodeScan {
    params: Params,
    clips: Vec<Arc<ClipPrint>>,
    /// `(hash, entry, frame)`, sorted.
    index: Vec<(u32, u32, u32)>,
    /// The clips' peaks for the coincidences: `(entry, frame)` by bin, bin `b`'s at
    /// `peak_index[peak_from[b]..peak_from[b + 1]]`. Empty when they are off.
    peak_index: Vec<(u32, u32)>,
    peak_from: Vec<u32>,
    /// The episode's peaks found in the current step.
    fresh: Vec<Peak>,
    /// One bit per hash (21 bits): whether any clip has it. Most of an episode's landmarks
    /// are in no clip; this spares them the index's binary search.
    present: Vec<u64>,
    entries: Vec<Entry>,
    resampler: Resampler,
    fingerprinter: Fingerprinter,
    history: History,
    /// Made for the first candidate refined (its buffers are ~0.4 MB; most passes from a
    /// print have none).
    correlator: Option<Correlator>,
    /// The screen's, for windows of [`Params::screen_window`] searched near the votes.
    screen_correlator: Option<Correlator>,
    analysed: Vec<f32>,
    landmarks: Vec<Landmark>,
    found: Vec<Vec<Match>>,
    in_samples: u64,
    in_rate: u32,
    /// Every cluster closed: `(entry, best offset, its votes)`, before refinement.
    #[cfg(test)]
    closed: Vec<(usize, i64, u32)>,
    /// The most offsets an entry's votes or coincidences ever held at once.
    #[cfg(test)]
    pub(crate) widest: usize,
    /// The print path: candidates kept for [`EpisodeScan::refine_with`], not refined at once.
    deferred: Option<Vec<Candidate>>,
}

/// A vote cluster waiting for its refinement (the print path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    entry: usize,
    /// The voted offset (frames).
    pub(crate) best: i64,
    /// Its votes (± one frame): the match's `votes` if the refinement keeps it.
    pub(crate) votes: u32,
    /// Peak coincidences at `best`.
    hits: u32,
    /// A cluster of peak coincidences, not of votes.
    pub(crate) weak: bool,
}

impl EpisodeScan {
    /// A scan of an episode at `in_rate` Hz against `clips`.
    pub fn new(params: &Params, clips: &[Arc<ClipPrint>], in_rate: u32) -> EpisodeScan {
        let mut entries = Vec::new();
        let mut index = Vec::new();
        let mut by_bin: Vec<(u16, u32, u32)> = Vec::new();
        let mut longest = 0usize;
        let hits_on = params.peak_hit_min > 0;
        for (c, clip) in clips.iter().enumerate() {
            for (v, variant) in clip.variants.iter().enumerate() {
                let e = entries.len() as u32;
                index.extend(variant.landmarks.iter().map(|l| (l.hash, e, l.t)));
                longest = longest.max(variant.samples);
                let hit_bar = if hits_on && !variant.peaks.is_empty() {
                    let share = params.peak_hit_fraction * variant.peaks.len() as f32;
                    params.peak_hit_min.max(share.ceil() as u32)
                } else {
                    0
                };
                if hit_bar > 0 {
                    by_bin.extend(variant.peaks.iter().map(|&(t, f)| (f, e, t)));
                }
                entries.push(Entry {
                    clip: c,
                    variant: v,
                    frames: i64::from(variant.frames),
                    votes: VecDeque::new(),
                    hits: VecDeque::new(),
                    base: -i64::from(variant.frames) - 1,
                    prev: None,
                    prev_hits: None,
                    cluster: None,
                    weak: None,
                    hit_bar,
                    spans: VecDeque::new(),
                });
            }
        }
        index.sort_unstable();
        by_bin.sort_unstable();
        let bins = by_bin.last().map_or(0, |p| usize::from(p.0) + 1);
        let mut peak_from = vec![0u32; bins + 1];
        for &(f, _, _) in &by_bin {
            peak_from[usize::from(f) + 1] += 1;
        }
        for b in 0..bins {
            peak_from[b + 1] += peak_from[b];
        }
        let peak_index: Vec<(u32, u32)> = by_bin.into_iter().map(|(_, e, t)| (e, t)).collect();
        let mut present = vec![0u64; 1 << 15];
        for &(h, _, _) in &index {
            if let Some(word) = present.get_mut((h >> 6) as usize) {
                *word |= 1 << (h & 63);
            }
        }
        // The ring must reach back from the newest sample to a candidate finalised a
        // clip's length (plus the pipeline's lookahead) after its start, and its search.
        let lookahead_frames = params.peak_time_radius
            + params.peak_window_frames
            + params.pair_max_dt as usize
            + params.fft_size / params.hop.max(1)
            + 16;
        let cap = longest
            + (lookahead_frames + 2 * CLUSTER_GAP as usize + 8) * params.hop
            + params.fft_size
            + 2 * params.refine_search.max(params.periodic_search)
            + params.refine_window;
        let mut fingerprinter = Fingerprinter::new(params);
        if !peak_index.is_empty() {
            fingerprinter.hand_out_peaks();
        }
        EpisodeScan {
            resampler: Resampler::new(in_rate, params.sample_rate, params),
            fingerprinter,
            history: History::new(cap, params.pre_emphasis),
            correlator: None,
            screen_correlator: None,
            params: params.clone(),
            clips: clips.to_vec(),
            index,
            peak_index,
            peak_from,
            fresh: Vec::new(),
            present,
            entries,
            analysed: Vec::new(),
            landmarks: Vec::new(),
            found: vec![Vec::new(); clips.len()],
            in_samples: 0,
            in_rate,
            #[cfg(test)]
            closed: Vec::new(),
            #[cfg(test)]
            widest: 0,
            deferred: None,
        }
    }

    /// Printing: keeps the episode's peaks ([`EpisodeScan::finish_keeping`]).
    pub(crate) fn keep_peaks(&mut self) {
        self.fingerprinter.keep_peaks();
    }

    /// [`EpisodeScan::finish`], and the peaks kept.
    pub(crate) fn finish_keeping(mut self) -> (Vec<Vec<Match>>, Vec<Peak>) {
        self.analysed.clear();
        self.resampler.finish(&mut self.analysed);
        self.step(true);
        let peaks = self.fingerprinter.take_peaks();
        (self.matches(), peaks)
    }

    /// The print path: a scan given the episode's landmarks rather than its samples, whose
    /// candidates wait for [`EpisodeScan::refine_with`].
    pub(crate) fn deferring(params: &Params, clips: &[Arc<ClipPrint>]) -> EpisodeScan {
        let mut scan = EpisodeScan::new(params, clips, params.sample_rate);
        scan.deferred = Some(Vec::new());
        scan
    }

    /// The print path: the episode's next landmarks (anchor order) and peaks (time order);
    /// every landmark and peak to come is at `frontier` or later (`None`: none comes).
    pub(crate) fn push_landmarks(
        &mut self,
        landmarks: &[Landmark],
        peaks: &[(u32, u16)],
        frontier: Option<i64>,
    ) {
        self.landmarks.clear();
        self.landmarks.extend_from_slice(landmarks);
        self.vote();
        if !self.peak_index.is_empty() {
            self.fresh.clear();
            self.fresh.extend(peaks.iter().map(|&(t, f)| Peak {
                t,
                f,
                prominence: 0.0,
            }));
            self.vote_peaks();
        }
        let frontier = frontier.unwrap_or(i64::MAX / 4);
        for e in 0..self.entries.len() {
            self.finalise(e, frontier);
        }
    }

    /// Whether some clip has landmark hash `hash`: a landmark without one votes for nothing.
    #[inline]
    pub(crate) fn may_vote(&self, hash: u32) -> bool {
        self.present
            .get((hash >> 6) as usize)
            .is_some_and(|w| (w >> (hash & 63)) & 1 == 1)
    }

    /// The print path: the candidates closed so far.
    pub(crate) fn take_candidates(&mut self) -> Vec<Candidate> {
        self.deferred
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The stretches of the episode (samples at the analysis rate, `from..to`) that `c`'s
    /// windows read when searched `± search` samples around its votes: the refinement reads
    /// `± max(refine_search, periodic_search)` (its rivals), the tests before it less.
    pub(crate) fn needs(&self, c: &Candidate, search: usize) -> Vec<(i64, i64)> {
        let entry = &self.entries[c.entry];
        let variant = &self.clips[entry.clip].variants[entry.variant];
        let (hop, search) = (self.params.hop as i64, search as i64);
        variant
            .windows
            .iter()
            .map(|w| {
                let start = c.best * hop + w.start as i64;
                (start - search, start + w.samples.len() as i64 + search)
            })
            .collect()
    }

    /// The print path: the clip and variant `c` is a candidate of.
    pub(crate) fn candidate_clip(&self, c: &Candidate) -> (Arc<ClipPrint>, usize, i64) {
        let entry = &self.entries[c.entry];
        (Arc::clone(&self.clips[entry.clip]), entry.variant, c.best)
    }

    /// The print path: the index (among the scan's clips) of the clip `c` is a candidate of.
    pub(crate) fn candidate_index(&self, c: &Candidate) -> usize {
        self.entries[c.entry].clip
    }

    /// The print path: the matches of clip `clip` recorded so far (before the same
    /// occurrence found twice is kept once).
    pub(crate) fn recorded(&self, clip: usize) -> &[Match] {
        self.found.get(clip).map_or(&[], Vec::as_slice)
    }

    /// The print path: refines `c` against `history` (its stretches, decoded), as a full
    /// analysis would have against the episode's recent samples.
    pub(crate) fn refine_with(&mut self, c: Candidate, history: History) {
        self.history = history;
        let cluster = Cluster {
            last: c.best,
            best: c.best,
            best_votes: c.votes,
            best_hits: c.hits,
            weak: c.weak,
        };
        self.refine(c.entry, &cluster);
    }

    /// Per clip, the matches recorded, the same occurrence found twice kept once.
    pub(crate) fn matches(mut self) -> Vec<Vec<Match>> {
        let mut found = std::mem::take(&mut self.found);
        for (c, matches) in found.iter_mut().enumerate() {
            *matches = suppress(std::mem::take(matches), self.clips[c].duration_ns());
        }
        found
    }

    /// Feeds the episode's next samples (mono, at the scan's input rate).
    pub fn push(&mut self, samples: &[f32]) {
        // In pieces: candidates are refined between pieces, and the ring must still hold
        // their samples then (it holds a clip's length and a margin, not a whole push).
        for piece in samples.chunks(PIECE) {
            self.in_samples += piece.len() as u64;
            self.analysed.clear();
            self.resampler.process(piece, &mut self.analysed);
            self.step(false);
        }
    }

    /// Ends the episode: finalises every offset. Returns, per clip in the order given, its
    /// matches in ascending offset order.
    pub fn finish(mut self) -> Vec<Vec<Match>> {
        self.analysed.clear();
        self.resampler.finish(&mut self.analysed);
        self.step(true);
        let mut found = std::mem::take(&mut self.found);
        for (c, matches) in found.iter_mut().enumerate() {
            *matches = suppress(std::mem::take(matches), self.clips[c].duration_ns());
        }
        found
    }

    /// Input samples taken so far.
    pub fn samples_in(&self) -> u64 {
        self.in_samples
    }

    /// The input rate.
    pub fn in_rate(&self) -> u32 {
        self.in_rate
    }

    fn step(&mut self, last: bool) {
        self.history.push(&self.analysed);
        self.landmarks.clear();
        self.fingerprinter.push(&self.analysed, &mut self.landmarks);
        if last {
            self.fingerprinter.finish(&mut self.landmarks);
        }
        self.vote();
        if !self.peak_index.is_empty() {
            self.fresh.clear();
            self.fingerprinter.take_fresh(&mut self.fresh);
            self.vote_peaks();
        }
        let frontier = if last {
            i64::MAX / 4
        } else {
            i64::from(self.fingerprinter.pending_from())
        };
        for e in 0..self.entries.len() {
            self.finalise(e, frontier);
        }
    }

    /// Each landmark in `self.landmarks` votes, for every clip entry with its hash, for the
    /// offset at which that clip would start.
    fn vote(&mut self) {
        for i in 0..self.landmarks.len() {
            let l = self.landmarks[i];
            let bit = self
                .present
                .get((l.hash >> 6) as usize)
                .map(|w| w >> (l.hash & 63));
            if bit.is_some_and(|b| b & 1 == 0) {
                continue;
            }
            let from = self.index.partition_point(|x| x.0 < l.hash);
            for &(h, e, tc) in &self.index[from..] {
                if h != l.hash {
                    break;
                }
                let entry = &mut self.entries[e as usize];
                let at = i64::from(l.t) - i64::from(tc) - entry.base;
                // Offsets below `base` are final; no landmark to come can reach them.
                if at < 0 {
                    continue;
                }
                let at = at as usize;
                if at >= entry.votes.len() {
                    entry.votes.resize(at + 1, 0);
                }
                entry.votes[at] = entry.votes[at].saturating_add(1);
            }
        }
        #[cfg(test)]
        self.note_widest();
    }

    #[cfg(test)]
    fn note_widest(&mut self) {
        let widest = self.entries.iter().map(|e| e.votes.len().max(e.hits.len()));
        self.widest = self.widest.max(widest.max().unwrap_or(0));
    }

    /// Each peak in `self.fresh` counts, for every clip peak within `peak_hit_bins` bins of
    /// it, for the offset that lines the two up.
    fn vote_peaks(&mut self) {
        let reach = i32::from(self.params.peak_hit_bins);
        let bins = self.peak_from.len().saturating_sub(1) as i32;
        for p in &self.fresh {
            let f = i32::from(p.f);
            for b in (f - reach).max(0)..=(f + reach).min(bins - 1) {
                let b = b as usize;
                let (from, to) = (self.peak_from[b] as usize, self.peak_from[b + 1] as usize);
                for &(e, tc) in &self.peak_index[from..to] {
                    let entry = &mut self.entries[e as usize];
                    let at = i64::from(p.t) - i64::from(tc) - entry.base;
                    if at < 0 {
                        continue;
                    }
                    let at = at as usize;
                    if at >= entry.hits.len() {
                        entry.hits.resize(at + 1, 0);
                    }
                    entry.hits[at] = entry.hits[at].saturating_add(1);
                }
            }
        }
        #[cfg(test)]
        self.note_widest();
    }

    /// Finalises entry `e`'s offsets that no landmark to come can vote for.
    fn finalise(&mut self, e: usize, frontier: i64) {
        // A vote for offset o comes from an anchor at o + tc, tc < frames: offsets below
        // frontier − frames are complete; one more frame for the ± 1 window.
        let limit = frontier - self.entries[e].frames - 1;
        loop {
            let entry = &mut self.entries[e];
            if entry.base >= limit {
                break;
            }
            if entry.votes.is_empty() && entry.hits.is_empty() {
                // Nothing waiting: everything below the limit is final, and empty.
                entry.base = limit;
                break;
            }
            if entry.votes.is_empty() && entry.hit_bar > 0 {
                // Most offsets have a few coincidences and no vote: a run of them whose
                // windows (each with its neighbours) hold none reaching a third of the bar
                // cannot make a candidate, and is final at once.
                let bar = entry.hit_bar;
                let quiet = |h: u32| 3 * h < bar;
                let run = usize::try_from(limit - entry.base)
                    .unwrap_or(0)
                    .min(entry.hits.len());
                let look = (run + 1).min(entry.hits.len());
                let loud = entry.hits.range(..look).position(|&h| !quiet(u32::from(h)));
                let before = entry.prev_hits.filter(|p| p.0 == entry.base - 1);
                let skip = if before.is_some_and(|p| !quiet(p.1)) {
                    0
                } else {
                    loud.map_or(run, |k| run.min(k.saturating_sub(1)))
                };
                if skip > 0 {
                    let last = u32::from(entry.hits[skip - 1]);
                    entry.hits.drain(..skip);
                    entry.base += skip as i64;
                    entry.prev = None;
                    entry.prev_hits = (last > 0).then_some((entry.base - 1, last));
                    continue;
                }
            }
            let o = entry.base;
            entry.base += 1;
            let sum = window_sum(&mut entry.votes, &mut entry.prev, o);
            let hits = window_sum(&mut entry.hits, &mut entry.prev_hits, o);
            if hits >= entry.hit_bar && entry.hit_bar > 0 {
                if let Some(done) = Cluster::grow(&mut entry.weak, o, sum, hits, true) {
                    self.close_weak(e, done);
                }
            }
            if sum < self.params.min_votes {
                continue;
            }
            let entry = &mut self.entries[e];
            let extends = entry
                .cluster
                .as_ref()
                .is_some_and(|c| o - c.last <= CLUSTER_GAP);
            let ended = Cluster::grow(&mut entry.cluster, o, sum, hits, false);
            // The span of the cluster `o` is in: the open one's, or a new one.
            match entry.spans.back_mut() {
                Some(span) if extends => span.1 = o,
                _ => {
                    if entry.spans.len() == SPANS {
                        entry.spans.pop_front();
                    }
                    entry.spans.push_back((o, o));
                }
            }
            if let Some(done) = ended {
                self.decide(e, done);
            }
        }
        if self.entries[e]
            .cluster
            .as_ref()
            .is_some_and(|c| c.last + CLUSTER_GAP < limit)
        {
            self.close(e);
        }
        let weak = &mut self.entries[e].weak;
        if let Some(done) = weak.take_if(|c| c.last + CLUSTER_GAP < limit) {
            self.close_weak(e, done);
        }
    }

    /// A closed cluster of entry `e`'s peak coincidences: refined unless a cluster of votes
    /// covered its offset (and was refined there already).
    fn close_weak(&mut self, e: usize, cluster: Cluster) {
        let covered = self.entries[e].spans.iter().any(|&(from, to)| {
            from - CLUSTER_GAP <= cluster.best && cluster.best <= to + CLUSTER_GAP
        });
        tracing::debug!(
            clip = self.entries[e].clip,
            frame = cluster.best,
            hits = cluster.best_hits,
            votes = cluster.best_votes,
            covered,
            "coincidences"
        );
        if !covered {
            self.decide(e, cluster);
        }
    }

    /// Closes entry `e`'s open cluster of votes.
    fn close(&mut self, e: usize) {
        if let Some(cluster) = self.entries[e].cluster.take() {
            self.decide(e, cluster);
        }
    }

    /// A closed cluster: refined now, or kept for [`EpisodeScan::refine_with`] (the print
    /// path).
    fn decide(&mut self, e: usize, cluster: Cluster) {
        #[cfg(test)]
        self.closed.push((e, cluster.best, cluster.best_votes));
        if let Some(deferred) = &mut self.deferred {
            deferred.push(Candidate {
                entry: e,
                best: cluster.best,
                votes: cluster.best_votes,
                hits: cluster.best_hits,
                weak: cluster.weak,
            });
            return;
        }
        self.refine(e, &cluster);
    }

    /// Refines a cluster of entry `e` and records it if it holds.
    fn refine(&mut self, e: usize, cluster: &Cluster) {
        let (c, v) = (self.entries[e].clip, self.entries[e].variant);
        let variant = &self.clips[c].variants[v];
        let hop = self.params.hop as i64;
        let end = self.history.end() as i64;
        // Searched wide, for rivals; the offset itself must lie near the votes.
        let near = self.params.refine_search;
        let search = near.max(self.params.periodic_search);
        let window = self.params.refine_window;
        let (history, correlator) = (
            &self.history,
            self.correlator
                .get_or_insert_with(|| Correlator::new(window, search)),
        );
        // Each window the episode covers (a clip cut off by the end loses its last ones),
        // correlated at every lag around the voted offset.
        let inside: Vec<&RefWindow> = variant
            .windows
            .iter()
            .filter(|w| cluster.best * hop + (w.start + w.samples.len()) as i64 <= end)
            .collect();
        let mut curve = |w: &RefWindow| {
            correlator.curve(w, history, cluster.best * hop + w.start as i64, search)
        };
        // The screen: most candidates are chance vote clusters, and the clip's loudest
        // window alone, correlating nowhere near the bar at any lag, rejects them at a
        // quarter of the cost of all the windows.
        let loudest = inside
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.norm.total_cmp(&b.1.norm))
            .map(|(i, _)| i);
        let mut curves: Vec<Vec<f32>> = Vec::with_capacity(inside.len());
        if let Some(i) = loudest {
            let agree = self.params.agreement();
            // First the loudest stretch of that window alone, when the screen is shorter
            // than a window ([`Params::screen_window`]): from a print, all a chance
            // candidate then costs is that stretch's audio.
            let screen = self.params.screen_window;
            if screen > 0 && screen < inside[i].samples.len() {
                let piece = loudest_piece(inside[i], screen);
                let small = self
                    .screen_correlator
                    .get_or_insert_with(|| Correlator::new(screen, agree));
                let expected = cluster.best * hop + piece.start as i64;
                let Some(near) = small.curve(&piece, history, expected, agree) else {
                    return;
                };
                if near.iter().copied().fold(f32::MIN, f32::max) < self.params.refine_screen {
                    return;
                }
            }
            let Some(first) = curve(inside[i]) else {
                return;
            };
            let around_votes = &first[search - agree..=search + agree];
            if around_votes.iter().copied().fold(f32::MIN, f32::max) < self.params.refine_screen {
                return;
            }
            curves.push(first);
            curves.extend(
                inside
                    .iter()
                    .enumerate()
                    .filter(|&(k, _)| k != i)
                    .filter_map(|(_, w)| curve(w)),
            );
        }
        // One offset for the whole clip: the lag where the windows agree best together. A
        // single window of a tonal clip (a jingle's steady note) correlates almost as well one
        // period off; all of them at once only at the true lag.
        let mut sum = vec![0f32; 2 * search + 1];
        for c in &curves {
            for (s, v) in sum.iter_mut().zip(c) {
                *s += v;
            }
        }
        let windows = curves.len().max(1) as f32;
        // The lags are compared by the curve's height between samples, not at them: the
        // correlation of band-limited signals is band-limited, and a tonal clip with strong
        // high harmonics half a sample off the 8 kHz grid correlates far lower at the two
        // nearest whole lags than at its peak (a sawtooth jingle: 0.66 at both, ~1.0 between
        // them), while a neighbour a few periods away can sit on the grid and win (17.5 ms
        // off). Every local maximum that could still be the highest once interpolated is.
        let Some((top_at, _)) = peak(&sum) else {
            return;
        };
        let reach = INTERPOLATION_REACH * windows;
        let mut maxima: Vec<usize> = (1..sum.len().saturating_sub(1))
            .filter(|&k| {
                sum[k] >= sum[top_at] - reach && sum[k] >= sum[k - 1] && sum[k] >= sum[k + 1]
            })
            .collect();
        maxima.sort_by(|&a, &b| sum[b].total_cmp(&sum[a]).then(a.cmp(&b)));
        maxima.truncate(MAX_MAXIMA);
        let heights: Vec<(f64, f32)> = maxima.iter().map(|&k| summit(&sum, k)).collect();
        let Some(&(at, top)) = heights.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
            return;
        };
        // The best lag must be where the votes are, and without a rival: another local
        // maximum, further than an acceptable error, nearly as high. Otherwise the clip is
        // periodic here (a ringing phone, a tremolo, a held note): its votes pile up a period
        // or several off as well, and the best correlation of the wide search can be a
        // period off too (under a music bed at −6 dB a ring 229 ms off outscored the true
        // one). No answer rather than a wrong one.
        let lobe = self.params.periodic_lobe as f64;
        let rival = heights
            .iter()
            .filter(|h| (h.0 - at).abs() > lobe)
            .map(|h| h.1)
            .fold(f32::MIN, f32::max);
        let (best_mean, rival_mean) = (top / windows, rival / windows);
        let from_votes = at - search as f64;
        tracing::debug!(
            clip = c,
            speed = variant.speed,
            frame = cluster.best,
            lag = from_votes,
            best_mean,
            rival_mean,
            "rival"
        );
        // Except for a clip cut off by the episode's end: the peaks of its last frames (the
        // episode's last) are lost, and what votes remain can pile up on a repeat of its
        // melody (a jingle's votes 291 ms off, its windows' summit at its true place).
        let cut_off = inside.len() < variant.windows.len();
        let off_votes = !cut_off && from_votes.abs() > self.params.agreement() as f64;
        if off_votes || rival_mean >= best_mean - self.params.periodic_margin {
            tracing::debug!(clip = c, frame = cluster.best, "periodic: refused");
            return;
        }
        let lag = at.round() as usize;
        let start = (cluster.best * hop - search as i64) as f64 + at;
        // The score: the median window's correlation there. A true occurrence lines every
        // window up at once; a stretch that merely looks alike (the same voice on the same
        // vowel, a note another jingle shares) lines up one and leaves the others low.
        // Between samples, not only at them: an occurrence half a sample off the 8 kHz grid
        // (an odd sample offset at 16 kHz) scored 0.71–0.83 at the nearest whole lag where the
        // same audio on the grid scored 1.0; the interpolated curve gives it back (0.998).
        let mut scores: Vec<f32> = curves
            .iter()
            .map(|c| {
                let from = lag as f64 - SCORE_SLACK as f64;
                (0..=2 * SCORE_SLACK * SCORE_STEPS)
                    .map(|k| value_at(c, from + k as f64 / SCORE_STEPS as f64))
                    .fold(f32::MIN, f32::max)
            })
            .collect();
        scores.sort_by(f32::total_cmp);
        let Some(&correlation) = scores.get((scores.len().max(1) - 1) / 2) else {
            return;
        };
        // One window is thin evidence (a clip cut off early by the episode's end): it must
        // look more alike.
        let bar = self
            .params
            .score_bar(scores.len(), cluster.weak, cluster.best_votes);
        tracing::debug!(
            clip = c,
            speed = variant.speed,
            frame = cluster.best,
            votes = cluster.best_votes,
            hits = cluster.best_hits,
            weak = cluster.weak,
            correlation,
            "candidate"
        );
        if correlation < bar {
            return;
        }
        // Thin evidence (a candidate of coincidences alone, or a low score) must line up in
        // every stretch, not only on the whole: a look-alike at another pace (the same words
        // in the same voice) lines up in some and scores on them.
        if cluster.weak
            || correlation < self.params.min_correlation_weak
            || cluster.best_votes < self.params.judge_votes
        {
            let pieces = self.pieces(&inside, start);
            tracing::debug!(
                clip = c,
                frame = cluster.best,
                pieces,
                "judged by its pieces"
            );
            if pieces < self.params.judge_ratio * correlation {
                return;
            }
        }
        // A clip at the very start can refine a fraction of a sample before it; further
        // before, the windows would be matched against silence that is not there.
        let limit = -(SCORE_SLACK as f64);
        if start < limit {
            return;
        }
        let offset_ns = (start.max(0.0) * 1e9 / f64::from(self.params.sample_rate)).round() as u64;
        self.found[c].push(Match {
            offset_ns,
            score: correlation.clamp(0.0, 1.0),
            votes: cluster.best_votes,
            speed: variant.speed,
        });
    }

    /// The median, over the pieces of the clip's windows `inside` the episode, of each
    /// piece's correlation where the clip starts at `start` (samples, absolute).
    fn pieces(&self, inside: &[&RefWindow], start: f64) -> f32 {
        let mut scores = Vec::new();
        for w in inside {
            piece_scores(
                w,
                &self.history,
                start + w.start as f64,
                self.params.judge_piece,
                SCORE_SLACK,
                &mut scores,
            );
        }
        scores.sort_by(f32::total_cmp);
        scores
            .get((scores.len().max(1) - 1) / 2)
            .copied()
            .unwrap_or(0.0)
    }
}

/// The count at offset `o` (the front of `counts`, taken off) with its neighbours': the one
/// before it (`prev`, if it was `o − 1`) and the one after (the new front).
fn window_sum(counts: &mut VecDeque<u16>, prev: &mut Option<(i64, u32)>, o: i64) -> u32 {
    let count = u32::from(counts.pop_front().unwrap_or(0));
    if count == 0 {
        *prev = None;
        return 0;
    }
    let before = prev.filter(|p| p.0 == o - 1).map_or(0, |p| p.1);
    let after = u32::from(counts.front().copied().unwrap_or(0));
    *prev = Some((o, count));
    before + count + after
}

/// A match's rank among the matches of its clip ([`suppress`]): votes × score (the score
/// is at most 1, so at most its votes).
pub(crate) fn rank(m: &Match) -> f32 {
    m.votes as f32 * m.score
}

/// Matches of one clip closer than this (ns) are the same occurrence ([`suppress`]).
pub(crate) fn suppression_radius(duration_ns: u64) -> u64 {
    duration_ns.max(1_000_000_000)
}

/// Of matches closer than the clip's length (or one second), keeps the best: the same
/// occurrence found at two speeds, or a clip's partial self-similarity (a clip cannot occur
/// overlapping itself). Ascending offsets.
pub(crate) fn suppress(mut matches: Vec<Match>, duration_ns: u64) -> Vec<Match> {
    let radius = suppression_radius(duration_ns);
    matches.sort_by(|a, b| {
        rank(b)
            .total_cmp(&rank(a))
            .then(a.offset_ns.cmp(&b.offset_ns))
    });
    let mut kept: Vec<Match> = Vec::new();
    for m in matches {
        if kept
            .iter()
            .all(|k| k.offset_ns.abs_diff(m.offset_ns) >= radius)
        {
            kept.push(m);
        }
    }
    kept.sort_by_key(|m| m.offset_ns);
    kept
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::clip::Variant;
    use crate::synth::Rng;

    /// A clip of 300 frames (4.8 s) with 600 landmarks of distinct hashes, at speed 1 only.
    fn clip(seed: u64) -> (Arc<ClipPrint>, Vec<Landmark>) {
        let mut rng = Rng::new(seed);
        let mut landmarks: Vec<Landmark> = (0..600)
            .map(|i| Landmark {
                // Distinct hashes per clip: the seed picks a range of its own.
                hash: (seed as u32) << 16 | i,
                t: (rng.next_u64() % 300) as u32,
            })
            .collect();
        landmarks.sort_by_key(|l| l.t);
        let variant = Variant {
            speed: 1.0,
            landmarks: landmarks.clone(),
            peaks: Vec::new(),
            frames: 300,
            samples: 300 * 128,
            windows: Vec::new(),
        };
        let print = ClipPrint::from_variants(4_800_000_000, vec![variant]);
        (Arc::new(print), landmarks)
    }

    fn shifted(landmarks: &[Landmark], by: u32) -> impl Iterator<Item = Landmark> + '_ {
        landmarks.iter().map(move |l| Landmark {
            hash: l.hash,
            t: l.t + by,
        })
    }

    /// The offsets (frames) with at least `min` votes for entry `e`, and their votes.
    fn voted(scan: &EpisodeScan, e: usize, min: u16) -> Vec<(i64, u16)> {
        let entry = &scan.entries[e];
        entry
            .votes
            .iter()
            .enumerate()
            .filter(|(_, &v)| v >= min)
            .map(|(i, &v)| (entry.base + i as i64, v))
            .collect()
    }

    #[test]
    fn a_clips_landmarks_vote_for_where_they_were_inserted() {
        let params = Params::default();
        let (a, la) = clip(1);
        let (b, _) = clip(2);
        let mut scan = EpisodeScan::new(&params, &[a, b], 8_000);
        scan.landmarks = shifted(&la, 1_000).collect();
        scan.vote();
        // Every landmark of clip 1 agrees on frame 1,000; clip 2 got no vote at all.
        assert_eq!(voted(&scan, 0, 1), vec![(1_000, 600)]);
        assert!(voted(&scan, 1, 1).is_empty());
    }

    #[test]
    fn two_occurrences_give_two_clusters_and_chance_agreements_none() {
        // At 4 votes: this episode's 300 chance agreements reach 3 votes at two offsets,
        // which at the default 3 are clusters too, for the refinement to reject.
        let params = Params {
            min_votes: 4,
            ..Params::default()
        };
        let (a, la) = clip(1);
        let mut scan = EpisodeScan::new(&params, &[a], 8_000);
        let mut episode: Vec<Landmark> = shifted(&la, 1_000).chain(shifted(&la, 2_500)).collect();
        // Unrelated sound: the clip's hashes at random times (each agreeing with the clip by
        // chance on scattered offsets) and hashes it does not have.
        let mut rng = Rng::new(9);
        episode.extend((0..300).map(|_| Landmark {
            hash: la[(rng.next_u64() % la.len() as u64) as usize].hash,
            t: (rng.next_u64() % 4_000) as u32,
        }));
        episode.extend((0..3_000).map(|i| Landmark {
            hash: 7 << 16 | i,
            t: (rng.next_u64() % 4_000) as u32,
        }));
        episode.sort_by_key(|l| l.t);
        scan.landmarks = episode;
        scan.vote();
        let strong = voted(&scan, 0, params.min_votes as u16);
        assert_eq!(
            strong.iter().map(|v| v.0).collect::<Vec<_>>(),
            vec![1_000, 2_500],
            "{strong:?}"
        );
        // Finalised: one cluster per occurrence, at its offset, with every landmark's vote
        // (chance votes may add a few).
        scan.finalise(0, i64::MAX / 4);
        assert_eq!(scan.closed.len(), 2, "{:?}", scan.closed);
        for (&(e, best, votes), at) in scan.closed.iter().zip([1_000, 2_500]) {
            assert_eq!((e, best), (0, at));
            assert!((600..610).contains(&votes), "{votes}");
        }
        // Refinement rejected both: the history holds no samples to confirm them with.
        assert!(scan.found[0].is_empty());
    }

    /// A clip of 300 frames with 120 peaks (and the landmarks of `clip(seed)`).
    fn clip_with_peaks(seed: u64) -> (Arc<ClipPrint>, Vec<Landmark>, Vec<(u32, u16)>) {
        let (print, landmarks) = clip(seed);
        let mut rng = Rng::new(seed + 100);
        let mut peaks: Vec<(u32, u16)> = (0..120)
            .map(|_| {
                let t = (rng.next_u64() % 300) as u32;
                (t, 6 + (rng.next_u64() % 235) as u16)
            })
            .collect();
        peaks.sort_unstable();
        let mut variant = print.variants[0].clone();
        variant.peaks = peaks.clone();
        let print = ClipPrint::from_variants(4_800_000_000, vec![variant]);
        (Arc::new(print), landmarks, peaks)
    }

    fn peaks_at(peaks: &[(u32, u16)], by: u32) -> Vec<Peak> {
        peaks
            .iter()
            .map(|&(t, f)| Peak {
                t: t + by,
                f,
                prominence: 1.0,
            })
            .collect()
    }

    #[test]
    fn a_clip_with_no_landmark_left_is_a_candidate_by_its_peaks_in_place() {
        let params = Params {
            peak_hit_min: 10,
            peak_hit_fraction: 0.1,
            peak_hit_bins: 1,
            ..Params::default()
        };
        let (a, _, peaks) = clip_with_peaks(1);
        let mut scan = EpisodeScan::new(&params, &[a], 8_000);
        assert_eq!(scan.entries[0].hit_bar, 12, "max(10, 0.1 × 120)");
        // A fifth of the clip's peaks survive in place at frame 1,000, some a bin or a frame
        // off; and a busy background: 2,000 peaks at random.
        let mut episode: Vec<Peak> = peaks_at(&peaks, 1_000)
            .into_iter()
            .step_by(5)
            .enumerate()
            .map(|(i, mut p)| {
                match i % 3 {
                    1 => p.f += 1,
                    2 => p.t += 1,
                    _ => {}
                }
                p
            })
            .collect();
        assert_eq!(episode.len(), 24);
        let mut rng = Rng::new(7);
        episode.extend((0..2_000).map(|_| Peak {
            t: (rng.next_u64() % 4_000) as u32,
            f: 6 + (rng.next_u64() % 235) as u16,
            prominence: 1.0,
        }));
        episode.sort_by_key(|p| p.t);
        scan.fresh = episode;
        scan.vote_peaks();
        scan.finalise(0, i64::MAX / 4);
        // One candidate, where the clip is (a frame either way: some of its peaks came a
        // frame late); no landmark vote anywhere.
        assert_eq!(scan.closed.len(), 1, "{:?}", scan.closed);
        let (e, at, votes) = scan.closed[0];
        assert!(
            (e, votes) == (0, 0) && (1_000..=1_001).contains(&at),
            "{at}"
        );
    }

    #[test]
    fn coincidences_finalised_in_runs_give_the_candidates_of_every_offset_counted() {
        // Chance coincidences everywhere (a dense background in the clip's bins) and a few
        // offsets above the bar: the runs `finalise` passes over at once must leave the
        // same candidates as counting every offset's window would.
        let params = Params {
            peak_hit_min: 7,
            peak_hit_fraction: 0.0,
            ..Params::default()
        };
        let (a, _, peaks) = clip_with_peaks(3);
        let bins: Vec<u16> = peaks.iter().map(|p| p.1).collect();
        let mut rng = Rng::new(11);
        let mut episode: Vec<Peak> = (0..6_000)
            .map(|_| Peak {
                t: (rng.next_u64() % 5_000) as u32,
                f: bins[(rng.next_u64() % bins.len() as u64) as usize],
                prominence: 1.0,
            })
            .collect();
        for at in [700, 2_000, 2_004, 3_900] {
            episode.extend(peaks_at(&peaks, at).into_iter().step_by(9));
        }
        episode.sort_by_key(|p| p.t);
        // By hand: every offset's coincidences, their ± 1 sums (as for votes, an offset with
        // none of its own has none), clustered as `finalise` does.
        let mut hits = std::collections::BTreeMap::<i64, u32>::new();
        for p in &episode {
            for &(tc, f) in &peaks {
                if f == p.f {
                    *hits.entry(i64::from(p.t) - i64::from(tc)).or_default() += 1;
                }
            }
        }
        let count = |o: i64| hits.get(&o).copied().unwrap_or(0);
        let mut expected: Vec<(i64, u32)> = Vec::new();
        let mut last = i64::MIN;
        for o in -400..5_400 {
            let sum = count(o - 1) + count(o) + count(o + 1);
            if count(o) == 0 || sum < 7 {
                continue;
            }
            match expected.last_mut() {
                Some(best) if o - last <= CLUSTER_GAP => {
                    if sum > best.1 {
                        *best = (o, sum);
                    }
                }
                _ => expected.push((o, sum)),
            }
            last = o;
        }
        assert!(expected.len() >= 3, "{expected:?}");
        // The scan, fed and finalised in steps as a pass over the episode is.
        let mut scan = EpisodeScan::new(&params, &[a], 8_000);
        for step in episode.chunks(250) {
            scan.fresh = step.to_vec();
            scan.vote_peaks();
            let frontier = step.last().map_or(0, |p| i64::from(p.t));
            scan.finalise(0, frontier);
        }
        scan.finalise(0, i64::MAX / 4);
        let closed: Vec<i64> = scan.closed.iter().map(|c| c.1).collect();
        let expected: Vec<i64> = expected.iter().map(|c| c.0).collect();
        assert_eq!(closed, expected);
    }

    #[test]
    fn peaks_in_place_where_landmarks_voted_add_no_second_candidate() {
        let params = Params {
            peak_hit_min: 10,
            peak_hit_fraction: 0.1,
            ..Params::default()
        };
        let (a, landmarks, peaks) = clip_with_peaks(1);
        let mut scan = EpisodeScan::new(&params, &[a], 8_000);
        scan.landmarks = shifted(&landmarks, 1_000).collect();
        scan.vote();
        scan.fresh = peaks_at(&peaks, 1_001);
        scan.vote_peaks();
        // And the peaks alone elsewhere.
        scan.fresh = peaks_at(&peaks, 2_500);
        scan.vote_peaks();
        scan.finalise(0, i64::MAX / 4);
        let closed: Vec<(i64, u32)> = scan.closed.iter().map(|c| (c.1, c.2)).collect();
        assert_eq!(closed, vec![(1_000, 600), (2_500, 0)], "{:?}", scan.closed);
    }

    #[test]
    fn an_exact_copy_off_the_analysis_grid_still_scores_about_1() {
        use crate::synth::{EpisodeSynth, Insertion, Speech, Voice};
        let params = Params::default();
        let rate = 16_000;
        let clip = Speech::render(14, rate, Voice::numbered(2), 5.0);
        // Odd offsets at 16 kHz fall half a sample between the 8 kHz analysis samples.
        let insertions = [0, 320_007, 480_005]
            .into_iter()
            .map(|offset| Insertion {
                clip: 0,
                offset,
                gain: 1.0,
                over: false,
            })
            .collect();
        let (episode, truth) =
            EpisodeSynth::new(15, rate, 40.0, 2, vec![Arc::new(clip.clone())], insertions).render();
        let print = Arc::new(ClipPrint::from_samples(&clip, rate, String::new(), &params));
        let mut scan = EpisodeScan::new(&params, &[print], rate);
        scan.push(&episode);
        let found = scan.finish();
        assert_eq!(found[0].len(), 3, "{:?}", found[0]);
        for (m, t) in found[0].iter().zip(&truth[0]) {
            assert!(m.offset_ns.abs_diff(*t) < 100_000, "{m:?} vs {t}");
            assert!(m.score > 0.95, "{m:?}");
        }
    }

    #[test]
    fn close_matches_of_one_clip_keep_the_best_and_far_ones_all() {
        let m = |offset_s: u64, votes: u32, score: f32| Match {
            offset_ns: offset_s * 1_000_000_000,
            score,
            votes,
            speed: 1.0,
        };
        // The same occurrence at two speeds (2 s apart is inside a 5 s clip), and one far.
        let kept = suppress(
            vec![m(12, 40, 0.5), m(10, 100, 0.9), m(30, 20, 0.4)],
            5_000_000_000,
        );
        assert_eq!(kept, vec![m(10, 100, 0.9), m(30, 20, 0.4)]);
    }
}
