//! Spectral peaks: the time-frequency points that stand out, a sparse "constellation" that
//! survives noise, level changes and lossy coding.
//!
//! A point is a peak when it is the maximum of its neighbourhood (± `peak_freq_radius` bins,
//! ± `peak_time_radius` frames), louder than the absolute floor, and above its bin's mean
//! over ± `contrast_frames` frames by `min_prominence` (a centred window: the same sound
//! gives the same peaks in a clip and in an episode, whatever came before it); of those, a peak is kept when it is among the
//! `peaks_per_window` most prominent within `peak_window_frames` frames centred on it. With
//! `peak_bands` above 1 the bins are split into that many bands and a peak is ranked only
//! against the peaks of its own band, each band keeping `peaks_per_window / peak_bands`
//! (rounded up): a loud, dense source in one band (a voice's harmonics, a bed's chords) no
//! longer takes the places of a quieter source's peaks in another. Peaks come out in time
//! order, each as soon as no later frame can change its fate.

use std::collections::VecDeque;

use crate::params::Params;

/// A spectral peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    /// Frame index.
    pub t: u32,
    /// Bin index (absolute, not relative to `min_bin`).
    pub f: u16,
    /// Height above the bin's background (natural log of power).
    pub prominence: f32,
}

struct Frame {
    t: u32,
    power: Vec<f32>,
    /// The maximum over ± `peak_freq_radius` bins.
    freq_max: Vec<f32>,
}

/// Finds peaks frame by frame.
pub struct PeakPicker {
    min_bin: usize,
    freq_radius: usize,
    time_radius: usize,
    /// Frames either side in the contrast mean (at least `time_radius`).
    contrast: usize,
    min_prominence: f32,
    log_floor: f32,
    /// Peaks kept per band within a selection window.
    per_window: usize,
    half_window: u32,
    /// The band of each bin, relative to `min_bin` (all 0 with one band).
    band_of: Vec<u8>,
    frames: VecDeque<Frame>,
    /// Per bin, the sum of the log power of the frames `summed_from..` received so far.
    sum: Vec<f64>,
    summed_from: u32,
    received: u32,
    /// Local maxima awaiting the sliding-window selection, in time order.
    candidates: VecDeque<Peak>,
    /// Frames before this one have been evaluated.
    evaluated: u32,
    /// Candidates before this index of `candidates` have been decided.
    decided: usize,
}

impl PeakPicker {
    /// A peak picker with the parameters of `params`.
    pub fn new(params: &Params) -> PeakPicker {
        let bands = band_of_bins(params);
        let count = bands.last().map_or(1, |&b| usize::from(b) + 1);
        PeakPicker {
            min_bin: params.min_bin,
            freq_radius: params.peak_freq_radius,
            time_radius: params.peak_time_radius,
            contrast: params.contrast_frames.max(params.peak_time_radius),
            min_prominence: params.min_prominence,
            log_floor: params.min_power.max(1e-30).ln(),
            per_window: params.peaks_per_window.div_ceil(count),
            half_window: (params.peak_window_frames / 2) as u32,
            band_of: bands,
            frames: VecDeque::new(),
            sum: Vec::new(),
            summed_from: 0,
            received: 0,
            candidates: VecDeque::new(),
            evaluated: 0,
            decided: 0,
        }
    }

    /// The earliest frame a peak still to come out can have.
    pub fn pending_from(&self) -> u32 {
        self.candidates
            .get(self.decided)
            .map_or(self.evaluated, |c| c.t.min(self.evaluated))
    }

    /// Takes frame `t` (log power of bins `min_bin..=max_bin`; frames in order from 0);
    /// appends final peaks to `out`.
    pub fn push_frame(&mut self, t: u32, power: &[f32], out: &mut Vec<Peak>) {
        let r = self.freq_radius;
        let n = power.len();
        let freq_max = (0..n)
            .map(|i| {
                power[i.saturating_sub(r)..(i + r + 1).min(n)]
                    .iter()
                    .copied()
                    .fold(f32::MIN, f32::max)
            })
            .collect();
        if self.sum.len() != n {
            self.sum = vec![0.0; n];
        }
        for (s, &p) in self.sum.iter_mut().zip(power) {
            *s += f64::from(p);
        }
        self.received = t + 1;
        self.frames.push_back(Frame {
            t,
            power: power.to_vec(),
            freq_max,
        });
        // Frame t - contrast now has all its neighbours and its whole contrast window.
        while self.evaluated + (self.contrast as u32) <= t {
            self.evaluate(self.evaluated);
        }
        self.select(out, false);
    }

    /// Ends the stream: evaluates the last frames and lets out the remaining peaks.
    pub fn finish(&mut self, out: &mut Vec<Peak>) {
        while self.evaluated < self.received {
            self.evaluate(self.evaluated);
        }
        self.select(out, true);
    }

    fn evaluate(&mut self, c: u32) {
        self.evaluated = c + 1;
        // The contrast window is c - contrast ..= c + contrast: drop older frames' sums.
        let lo = c.saturating_sub(self.contrast as u32);
        while self.summed_from < lo {
            if let Some(f) = self.frames.iter().find(|f| f.t == self.summed_from) {
                for (s, &p) in self.sum.iter_mut().zip(&f.power) {
                    *s -= f64::from(p);
                }
            }
            self.summed_from += 1;
        }
        let count = f64::from(self.received - self.summed_from).max(1.0);
        let keep_from = lo.min(c.saturating_sub(self.time_radius as u32));
        while self.frames.front().is_some_and(|f| f.t < keep_from) {
            self.frames.pop_front();
        }
        let lo_n = c.saturating_sub(self.time_radius as u32);
        let hi_n = c + self.time_radius as u32;
        let Some(centre) = self.frames.iter().find(|f| f.t == c) else {
            return;
        };
        let neighbours: Vec<&Frame> = self
            .frames
            .iter()
            .filter(|f| f.t >= lo_n && f.t <= hi_n)
            .collect();
        for (i, &p) in centre.power.iter().enumerate() {
            if p < self.log_floor || p < centre.freq_max[i] {
                continue;
            }
            // Height above the bin's mean over the contrast window: onsets and moving
            // harmonics stand out, a steady tone does not.
            let prominence = p - (self.sum[i] / count) as f32;
            if prominence < self.min_prominence {
                continue;
            }
            if neighbours.iter().all(|f| f.freq_max[i] <= p) {
                // Plateaus: only the lowest bin of equal neighbours in this frame counts.
                if i > 0 && centre.power[i - 1] == p {
                    continue;
                }
                self.candidates.push_back(Peak {
                    t: c,
                    f: (i + self.min_bin) as u16,
                    prominence,
                });
            }
        }
    }

    /// Decides every candidate whose whole selection window has been evaluated (before
    /// `evaluated_to - half_window`), or all of them at the end.
    fn select(&mut self, out: &mut Vec<Peak>, all: bool) {
        let limit = self.evaluated.saturating_sub(self.half_window);
        while self.decided < self.candidates.len() {
            let c = self.candidates[self.decided];
            if !all && c.t >= limit {
                break;
            }
            let lo = c.t.saturating_sub(self.half_window);
            let hi = c.t + self.half_window;
            let band = self.band(c.f);
            let stronger = self
                .candidates
                .iter()
                .enumerate()
                .filter(|(j, o)| {
                    o.t >= lo
                        && o.t <= hi
                        && self.band(o.f) == band
                        && (o.prominence > c.prominence
                            || (o.prominence == c.prominence && *j < self.decided))
                })
                .count();
            if stronger < self.per_window {
                out.push(c);
            }
            self.decided += 1;
        }
        // Forget candidates no undecided candidate's window reaches.
        let next_t = self
            .candidates
            .get(self.decided)
            .map_or(self.evaluated, |c| c.t);
        let forget_before = next_t.saturating_sub(self.half_window);
        while self.candidates.front().is_some_and(|c| c.t < forget_before) {
            self.candidates.pop_front();
            self.decided -= 1;
        }
    }

    fn band(&self, f: u16) -> u8 {
        self.band_of
            .get(usize::from(f).saturating_sub(self.min_bin))
            .copied()
            .unwrap_or(0)
    }
}

/// The band of each bin `min_bin..=max_bin` (index 0 is `min_bin`): `peak_bands` bands (at
/// least 1, at most one per bin), equal in width or, with `peak_bands_log`, in ratio of
/// their edge frequencies.
fn band_of_bins(params: &Params) -> Vec<u8> {
    let n = params.max_bin.saturating_sub(params.min_bin) + 1;
    let bands = params.peak_bands.clamp(1, n.min(256));
    if bands == 1 {
        return vec![0; n];
    }
    let lo = params.min_bin.max(1) as f64;
    let hi = (params.max_bin + 1).max(params.min_bin + 1) as f64;
    (0..n)
        .map(|i| {
            let band = if params.peak_bands_log {
                // Edges lo·(hi/lo)^(k/bands); a bin belongs where its centre lies.
                let x = ((params.min_bin + i) as f64 + 0.5).max(lo);
                ((x / lo).ln() / (hi / lo).ln() * bands as f64) as usize
            } else {
                i * bands / n
            };
            band.min(bands - 1) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn params() -> Params {
        Params {
            min_bin: 0,
            max_bin: 63,
            ..Params::default()
        }
    }

    #[test]
    fn an_isolated_bump_is_one_peak_at_its_place() {
        let p = params();
        let mut picker = PeakPicker::new(&p);
        let mut out = Vec::new();
        for t in 0..100u32 {
            let mut frame = vec![-5.0f32; 64];
            if t == 50 {
                frame[20] = 3.0;
                frame[19] = 1.0;
                frame[21] = 1.0;
            }
            picker.push_frame(t, &frame, &mut out);
        }
        picker.finish(&mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!((out[0].t, out[0].f), (50, 20));
    }

    #[test]
    fn silence_gives_no_peaks() {
        let p = params();
        let mut picker = PeakPicker::new(&p);
        let mut out = Vec::new();
        for t in 0..200 {
            picker.push_frame(t, &[(1e-20f32).ln(); 64], &mut out);
        }
        picker.finish(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn density_is_capped_by_the_sliding_window() {
        let p = Params {
            peaks_per_window: 4,
            peak_window_frames: 64,
            ..params()
        };
        let mut picker = PeakPicker::new(&p);
        let mut out = Vec::new();
        // A fresh bump every 8 frames, each in its own place: 8 per 64 frames offered.
        for t in 0..640u32 {
            let mut frame = vec![-5.0f32; 64];
            if t % 8 == 0 {
                frame[(t as usize / 8 * 7) % 60 + 2] = 2.0 + (t % 5) as f32;
            }
            picker.push_frame(t, &frame, &mut out);
        }
        picker.finish(&mut out);
        for w in 0..10u32 {
            let n = out
                .iter()
                .filter(|k| k.t >= w * 64 + 32 && k.t < w * 64 + 96)
                .count();
            assert!(n <= 6, "window {w}: {n}");
        }
        assert!(out.len() >= 30 && out.windows(2).all(|w| w[0].t <= w[1].t));
    }

    /// A loud source offering 16 peaks a window in bins 0–31 and a quiet one offering 8 in
    /// bins 40–60, with 8 kept a window.
    fn loud_and_quiet(bands: usize) -> Vec<Peak> {
        let p = Params {
            peaks_per_window: 8,
            peak_window_frames: 64,
            peak_bands: bands,
            ..params()
        };
        let mut picker = PeakPicker::new(&p);
        let mut out = Vec::new();
        for t in 0..640u32 {
            let mut frame = vec![-5.0f32; 64];
            if t % 4 == 0 {
                frame[[2, 12, 22][(t as usize / 4) % 3]] = 6.0 + (t % 7) as f32 * 0.1;
            }
            if t % 8 == 2 {
                frame[[40, 50, 60][(t as usize / 8) % 3]] = 0.0 + (t % 5) as f32 * 0.1;
            }
            picker.push_frame(t, &frame, &mut out);
        }
        picker.finish(&mut out);
        out
    }

    #[test]
    fn a_loud_source_in_one_band_leaves_a_quiet_one_its_peaks_in_another() {
        let quiet = |out: &[Peak]| out.iter().filter(|k| k.f >= 32).count();
        // One band: the loud source's 16 a window outrank all of the quiet one's.
        let one = loud_and_quiet(1);
        assert_eq!(quiet(&one), 0, "{one:?}");
        // Two bands: each keeps 4 a window, so the quiet source keeps about half its 80.
        let two = loud_and_quiet(2);
        assert!(quiet(&two) >= 30, "{}", quiet(&two));
        assert!(two.len() <= one.len() + 8, "{} vs {}", two.len(), one.len());
        for w in 0..10u32 {
            let (lo, hi) = (w * 64 + 32, w * 64 + 96);
            let n = |b: bool| {
                two.iter()
                    .filter(|k| k.t >= lo && k.t < hi && (k.f >= 32) == b)
                    .count()
            };
            assert!(
                n(false) <= 6 && n(true) <= 6,
                "window {w}: {} {}",
                n(false),
                n(true)
            );
        }
        assert!(two.windows(2).all(|w| w[0].t <= w[1].t));
    }

    #[test]
    fn bands_cover_every_bin_in_order() {
        for log in [false, true] {
            for bands in [1, 2, 3, 4, 6] {
                let p = Params {
                    peak_bands: bands,
                    peak_bands_log: log,
                    ..Params::default()
                };
                let of = band_of_bins(&p);
                assert_eq!(of.len(), p.max_bin - p.min_bin + 1);
                assert_eq!(of[0], 0);
                assert_eq!(usize::from(of[of.len() - 1]), bands - 1, "{log} {bands}");
                assert!(of.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1));
            }
        }
        let none = Params {
            peak_bands: 0,
            ..Params::default()
        };
        assert!(band_of_bins(&none).iter().all(|&b| b == 0));
    }
}
