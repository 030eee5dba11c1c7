//! Landmarks: pairs of peaks, hashed with their frequencies and time difference (Wang's
//! landmark method, as in audfprint and Olaf), and the [`Fingerprinter`] that runs the
//! whole chain from samples at the analysis rate to landmarks.
//!
//! A hash says "a peak at bin `f1`, and another `df` bins away `dt` frames later": 21 bits,
//! `f1` (8) | `df + 64` (7) | `dt` (6). It does not depend on level or on where the pair
//! sits in time, so the same pair in a clip and in an episode gives the same hash, and the
//! difference of their anchor times is the clip's offset.

use std::collections::VecDeque;

use crate::params::Params;
use crate::peaks::{Peak, PeakPicker};
use crate::spectrum::Spectrogram;

/// A hashed peak pair anchored at frame `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Landmark {
    /// The pair's hash (21 bits).
    pub hash: u32,
    /// The anchor peak's frame.
    pub t: u32,
}

/// The hash of a pair: anchor bin, bin difference, frame difference.
pub fn hash(f1: u16, df: i32, dt: u32) -> u32 {
    (u32::from(f1) & 0xff) << 13 | (((df + 64) as u32) & 0x7f) << 6 | (dt & 0x3f)
}

/// Pairs peaks as they come, in time order.
pub struct Pairer {
    zone: PairZone,
    peaks: VecDeque<Peak>,
}

impl Pairer {
    /// A pairer with the fan-out and target zone of `params`.
    pub fn new(params: &Params) -> Pairer {
        Pairer {
            zone: PairZone::new(params),
            peaks: VecDeque::new(),
        }
    }

    /// The earliest anchor frame a landmark still to come can have, if any peak waits.
    pub fn pending_from(&self) -> Option<u32> {
        self.peaks.front().map(|p| p.t)
    }

    /// Takes the next peak (time order); appends the landmarks of every anchor whose target
    /// zone is now complete.
    pub fn push(&mut self, peak: Peak, out: &mut Vec<Landmark>) {
        self.peaks.push_back(peak);
        while self
            .peaks
            .front()
            .is_some_and(|a| self.zone.closed(a.t, peak.t))
        {
            self.emit_front(out);
        }
    }

    /// Ends the stream: the remaining anchors pair with what there is.
    pub fn finish(&mut self, out: &mut Vec<Landmark>) {
        while !self.peaks.is_empty() {
            self.emit_front(out);
        }
    }

    fn emit_front(&mut self, out: &mut Vec<Landmark>) {
        let Some(a) = self.peaks.pop_front() else {
            return;
        };
        let later = self.peaks.iter().map(|b| (b.t, b.f));
        self.zone.pair((a.t, a.f), later, |_| true, out);
    }
}

/// The target zone: which later peaks an anchor pairs with (the first `fanout` within
/// `pair_max_dt` frames and `pair_max_df` bins). The one rule both [`Pairer`] (peaks as they
/// come) and the print path go through; the print path pairs a whole run of peaks at once,
/// anchor by anchor, without a queue, keeping only the hashes a clip has (no other can vote).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PairZone {
    fanout: usize,
    max_dt: u32,
    max_df: i32,
}

impl PairZone {
    /// The zone of `params`, as [`Pairer::new`] takes it.
    pub(crate) fn new(params: &Params) -> PairZone {
        PairZone {
            fanout: params.fanout,
            max_dt: params.pair_max_dt.clamp(1, 63),
            max_df: params.pair_max_df.min(63) as i32,
        }
    }

    /// Whether the anchor at frame `anchor` is complete once a peak at frame `t` has come:
    /// [`Pairer::push`]'s test (peaks come in time order).
    pub(crate) fn closed(&self, anchor: u32, t: u32) -> bool {
        // In u64: an anchor near the end of the frame range (a print's) does not overflow.
        u64::from(anchor) + u64::from(self.max_dt) < u64::from(t)
    }

    /// The landmarks anchored at `peaks[a]` (`(frame, bin)`, in time order), as
    /// [`Pairer`] makes them once every peak of its zone has come: those whose hash `keep`
    /// accepts are appended to `out`. Returns how many it made, kept or not.
    #[inline]
    pub(crate) fn anchor(
        &self,
        peaks: &[(u32, u16)],
        a: usize,
        keep: impl Fn(u32) -> bool,
        out: &mut Vec<Landmark>,
    ) -> usize {
        match (peaks.get(a), peaks.get(a + 1..)) {
            (Some(&anchor), Some(later)) => self.pair(anchor, later.iter().copied(), keep, out),
            _ => 0,
        }
    }

    /// The rule itself: `anchor` (`(frame, bin)`) paired with the first `fanout` of the
    /// `later` peaks (time order) that lie in its zone; those whose hash `keep` accepts are
    /// appended to `out`. Returns how many pairs it made, kept or not.
    #[inline]
    pub(crate) fn pair(
        &self,
        (at, af): (u32, u16),
        later: impl Iterator<Item = (u32, u16)>,
        keep: impl Fn(u32) -> bool,
        out: &mut Vec<Landmark>,
    ) -> usize {
        let mut n = 0;
        for (bt, bf) in later {
            // Peaks come in time order (`bt >= at`); a difference, not a sum, cannot overflow.
            if n == self.fanout || bt.saturating_sub(at) > self.max_dt {
                break;
            }
            // Without a branch on whether the pair is in the zone (about half are not, at
            // random): the filter is asked either way, and kept only counts for one that is.
            let df = i32::from(bf) - i32::from(af);
            let pair = (bt != at) & (df.abs() <= self.max_df);
            let hash = hash(af, df, bt.saturating_sub(at));
            if pair & keep(hash) {
                out.push(Landmark { hash, t: at });
            }
            n += usize::from(pair);
        }
        n
    }
}

/// Samples at the analysis rate in, landmarks out: spectrogram, peaks, pairs.
pub struct Fingerprinter {
    spectrogram: Spectrogram,
    picker: PeakPicker,
    pairer: Pairer,
    peaks: Vec<Peak>,
    /// Printing: every peak found, kept (see `print.rs`).
    kept: Option<Vec<Peak>>,
    /// The scan's peak coincidences: the peaks found since they were last taken.
    fresh: Option<Vec<Peak>>,
}

impl Fingerprinter {
    /// A fingerprinter with `params`.
    pub fn new(params: &Params) -> Fingerprinter {
        Fingerprinter {
            spectrogram: Spectrogram::new(params),
            picker: PeakPicker::new(params),
            pairer: Pairer::new(params),
            peaks: Vec::new(),
            kept: None,
            fresh: None,
        }
    }

    /// Feeds samples; appends the landmarks now final to `out`, in anchor order.
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<Landmark>) {
        let (picker, peaks) = (&mut self.picker, &mut self.peaks);
        self.spectrogram
            .push(samples, &mut |t, power| picker.push_frame(t, power, peaks));
        self.pair(out);
    }

    /// Ends the stream; appends the last landmarks.
    pub fn finish(&mut self, out: &mut Vec<Landmark>) {
        let (picker, peaks) = (&mut self.picker, &mut self.peaks);
        self.spectrogram
            .finish(&mut |t, power| picker.push_frame(t, power, peaks));
        self.picker.finish(&mut self.peaks);
        self.pair(out);
        self.pairer.finish(out);
    }

    /// Every landmark still to come is anchored at this frame or later.
    pub fn pending_from(&self) -> u32 {
        let next = self
            .spectrogram
            .next_frame()
            .min(self.picker.pending_from());
        self.pairer.pending_from().map_or(next, |p| p.min(next))
    }

    /// Frames emitted so far.
    pub fn frames(&self) -> u32 {
        self.spectrogram.next_frame()
    }

    /// Keeps every peak from now on, for [`Fingerprinter::take_peaks`].
    pub(crate) fn keep_peaks(&mut self) {
        self.kept.get_or_insert_with(Vec::new);
    }

    /// The peaks kept so far, in the order they were found.
    pub(crate) fn take_peaks(&mut self) -> Vec<Peak> {
        self.kept.take().unwrap_or_default()
    }

    /// Hands out every peak from now on, as it is found ([`Fingerprinter::take_fresh`]).
    pub(crate) fn hand_out_peaks(&mut self) {
        self.fresh.get_or_insert_with(Vec::new);
    }

    /// The peaks found since the last call (time order), appended to `into`.
    pub(crate) fn take_fresh(&mut self, into: &mut Vec<Peak>) {
        if let Some(fresh) = &mut self.fresh {
            into.append(fresh);
        }
    }

    fn pair(&mut self, out: &mut Vec<Landmark>) {
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(&self.peaks);
        }
        if let Some(fresh) = &mut self.fresh {
            fresh.extend_from_slice(&self.peaks);
        }
        for p in self.peaks.drain(..) {
            self.pairer.push(p, out);
        }
    }
}

/// The landmarks of a whole (short) signal at the analysis rate, sorted by anchor time.
pub fn fingerprint_all(samples: &[f32], params: &Params) -> (Vec<Landmark>, u32) {
    let (landmarks, _, frames) = fingerprint_with_peaks(samples, params);
    (landmarks, frames)
}

/// [`fingerprint_all`], and the signal's peaks (time order).
pub(crate) fn fingerprint_with_peaks(
    samples: &[f32],
    params: &Params,
) -> (Vec<Landmark>, Vec<Peak>, u32) {
    let mut f = Fingerprinter::new(params);
    f.keep_peaks();
    let mut out = Vec::new();
    f.push(samples, &mut out);
    f.finish(&mut out);
    let peaks = f.take_peaks();
    (out, peaks, f.frames())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn peak(t: u32, f: u16) -> Peak {
        Peak {
            t,
            f,
            prominence: 1.0,
        }
    }

    #[test]
    fn hashes_pack_their_fields() {
        assert_eq!(hash(10, 0, 5), 10 << 13 | 64 << 6 | 5);
        assert_ne!(hash(10, 1, 5), hash(10, -1, 5));
        assert_ne!(hash(10, 1, 5), hash(11, 1, 5));
        assert!(hash(255, 63, 63) < 1 << 21);
    }

    #[test]
    fn anchors_pair_with_the_next_peaks_in_their_zone() {
        let p = Params {
            fanout: 2,
            pair_max_dt: 10,
            pair_max_df: 20,
            ..Params::default()
        };
        let mut pairer = Pairer::new(&p);
        let mut out = Vec::new();
        for pk in [
            peak(0, 50),
            peak(0, 60),
            peak(3, 100),
            peak(4, 55),
            peak(8, 45),
            peak(30, 50),
        ] {
            pairer.push(pk, &mut out);
        }
        pairer.finish(&mut out);
        let first: Vec<_> = out.iter().filter(|l| l.t == 0).map(|l| l.hash).collect();
        // (0,50): skips (0,60) (same frame) and (3,100) (too far in frequency).
        assert_eq!(first[..2], [hash(50, 5, 4), hash(50, -5, 8)]);
        // The last peak has no partner within 10 frames.
        assert!(out.iter().all(|l| l.t != 30));
    }

    #[test]
    fn a_zone_over_a_run_of_peaks_pairs_as_the_pairer_does() {
        let p = Params::default();
        let mut seed = 3u64;
        let mut t = 0u32;
        let peaks: Vec<(u32, u16)> = (0..5_000)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Several peaks a frame at times, gaps longer than the zone at others.
                t += [0, 0, 1, 1, 2, 3, 7, 70][(seed >> 61) as usize];
                (t, ((seed >> 20) % 256) as u16)
            })
            .collect();
        let mut pairer = Pairer::new(&p);
        let mut expected = Vec::new();
        for &(t, f) in &peaks {
            pairer.push(
                Peak {
                    t,
                    f,
                    prominence: 0.0,
                },
                &mut expected,
            );
        }
        pairer.finish(&mut expected);
        let zone = PairZone::new(&p);
        let (mut all, mut kept, mut made) = (Vec::new(), Vec::new(), 0);
        for a in 0..peaks.len() {
            made += zone.anchor(&peaks, a, |_| true, &mut all);
            zone.anchor(&peaks, a, |h| h.is_multiple_of(3), &mut kept);
        }
        assert_eq!(all, expected);
        assert_eq!(made, expected.len());
        let filtered: Vec<Landmark> = expected
            .into_iter()
            .filter(|l| l.hash.is_multiple_of(3))
            .collect();
        assert_eq!(kept, filtered);
    }

    #[test]
    fn anchors_at_the_end_of_the_frame_range_pair_without_overflow() {
        // A print's peaks are read from untrusted bytes: frames near u32::MAX once
        // overflowed `anchor + max_dt` (a panic in debug builds, a wrong zone in release).
        let p = Params::default();
        let zone = PairZone::new(&p);
        let end = u32::MAX;
        assert!(!zone.closed(end - 1, end));
        assert!(!zone.closed(end, end));
        assert!(zone.closed(0, end));
        let peaks = [(end - 40, 100u16), (end - 2, 101), (end, 99)];
        let mut out = Vec::new();
        let made = zone.anchor(&peaks, 0, |_| true, &mut out);
        assert_eq!(made, 2);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|l| l.t == end - 40));
        assert_eq!(zone.anchor(&peaks, 1, |_| true, &mut out), 1);
        assert_eq!(zone.anchor(&peaks, 2, |_| true, &mut out), 0);
    }

    #[test]
    fn a_shifted_signal_gives_the_same_hashes_shifted() {
        let p = Params::default();
        let mut seed = 7u64;
        let noise: Vec<f32> = (0..40_000)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        let (a, _) = fingerprint_all(&noise[12_800..], &p);
        let (b, _) = fingerprint_all(&noise, &p);
        // 12,800 samples = 100 frames: inner landmarks of `a` appear in `b` 100 frames later.
        let bset: std::collections::HashSet<(u32, u32)> = b.iter().map(|l| (l.hash, l.t)).collect();
        let inner: Vec<_> = a.iter().filter(|l| l.t > 70 && l.t < 150).collect();
        let found = inner
            .iter()
            .filter(|l| bset.contains(&(l.hash, l.t + 100)))
            .count();
        assert!(
            !inner.is_empty() && found * 10 >= inner.len() * 8,
            "{found} of {}",
            inner.len()
        );
    }
}
