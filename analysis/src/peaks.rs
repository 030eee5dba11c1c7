//! Spectral peaks: the time-frequency points that stand out, a sparse "constellation" that
//! survives noise, level changes and lossy coding.
//!
//! A point is a peak when it is the maximum of its neighbourhood (± `peak_freq_radius` bins,
//! ± `peak_time_radius` frames), louder than the absolute floor, and above its bin's mean
//! over ± `contrast_frames` frames by `min_prominence` (a centred window: the same sound
//! gives the same peaks in a clip and in an episode, whatever came before it); of those, a peak is kept when it is among the
//! `peaks_per_window` most prominent within `peak_window_frames` frames centred on it. Peaks
//! come out in time order, each as soon as no later frame can change its fate.

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
    per_window: usize,
    half_window: u32,
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
        PeakPicker {
            min_bin: params.min_bin,
            freq_radius: params.peak_freq_radius,
            time_radius: params.peak_time_radius,
            contrast: params.contrast_frames.max(params.peak_time_radius),
            min_prominence: params.min_prominence,
            log_floor: params.min_power.max(1e-30).ln(),
            per_window: params.peaks_per_window,
            half_window: (params.peak_window_frames / 2) as u32,
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
            let stronger = self
                .candidates
                .iter()
                .enumerate()
                .filter(|(j, o)| {
                    o.t >= lo
                        && o.t <= hi
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
}
