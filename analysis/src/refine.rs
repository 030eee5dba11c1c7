//! Refinement: a voted offset (one 16 ms frame of uncertainty) made precise by normalised
//! cross-correlation of short windows of the clip against the episode's recent samples,
//! with parabolic interpolation between samples.
//!
//! Both signals are pre-emphasised; the clip's windows are its start (so a clip cut off by
//! the episode's end still has one) and its most energetic other stretches (so a clip that
//! starts in silence or under talk-over still has good ones). The matcher takes the offset
//! where the windows agree best together, and the median window's correlation there as the
//! match's score; thin evidence is judged again on the windows' quarter-second pieces
//! (`piece_scores`).

use std::collections::VecDeque;

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealToComplex};

use crate::params::Params;

/// A stretch of a clip (pre-emphasised, at the analysis rate) used for refinement.
#[derive(Debug, Clone)]
pub struct RefWindow {
    /// Where it starts in the clip (samples).
    pub start: usize,
    /// Its samples.
    pub samples: Vec<f32>,
    /// Their Euclidean norm.
    pub norm: f32,
}

impl RefWindow {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.samples.len() * 4 + std::mem::size_of::<Self>()
    }
}

/// `y[n] = x[n] − a·x[n−1]`, with `x[−1] = 0`.
pub fn pre_emphasize(samples: &[f32], a: f32) -> Vec<f32> {
    let mut prev = 0.0;
    samples
        .iter()
        .map(|&x| {
            let y = x - a * prev;
            prev = x;
            y
        })
        .collect()
}

/// Chooses a clip's refinement windows from its pre-emphasised samples.
pub fn choose_windows(samples: &[f32], params: &Params) -> Vec<RefWindow> {
    let len = params.refine_window.min(samples.len());
    if len == 0 {
        return Vec::new();
    }
    let step = (len / 2).max(1);
    let energy = |s: usize| samples[s..s + len].iter().map(|x| x * x).sum::<f32>();
    let mut starts: Vec<(usize, f32)> = (0..=(samples.len() - len))
        .step_by(step)
        .map(|s| (s, energy(s)))
        .collect();
    // The start and the end always (overlapping, for a clip shorter than two windows), then
    // the loudest others that do not overlap one already chosen. With both ends, a periodic
    // clip (a phone ringing for 1.5 s) shifted by a period leaves one of them outside itself,
    // where a single window would still lie on the ringing.
    let last = samples.len() - len;
    let mut chosen = vec![0usize];
    if last > 0 && params.refine_windows > 1 {
        chosen.push(last);
    }
    starts.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    for (s, e) in starts {
        if chosen.len() >= params.refine_windows.max(1) {
            break;
        }
        if e > 0.0 && chosen.iter().all(|&c| s.abs_diff(c) >= len) {
            chosen.push(s);
        }
    }
    chosen.sort_unstable();
    chosen
        .into_iter()
        .map(|start| {
            let w = samples[start..start + len].to_vec();
            let norm = w.iter().map(|x| x * x).sum::<f32>().sqrt();
            RefWindow {
                start,
                samples: w,
                norm,
            }
        })
        .collect()
}

/// The loudest `len` samples of `window` (the first of equally loud stretches, starting at
/// multiples of `len / 8`), as a window of its own: what the screen correlates
/// ([`Params::screen_window`]). The whole window when it is no longer than `len` (or `len`
/// is 0). Energies are summed in `f64` in one order, so both paths pick the same stretch.
pub(crate) fn loudest_piece(window: &RefWindow, len: usize) -> RefWindow {
    let w = &window.samples;
    if len == 0 || len >= w.len() {
        return window.clone();
    }
    let step = (len / 8).max(1);
    let mut best = (0usize, f64::MIN);
    for q in (0..=w.len() - len).step_by(step) {
        let e: f64 = w[q..q + len]
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum();
        if e > best.1 {
            best = (q, e);
        }
    }
    let samples = w[best.0..best.0 + len].to_vec();
    let norm = samples.iter().map(|x| x * x).sum::<f32>().sqrt();
    RefWindow {
        start: window.start + best.0,
        samples,
        norm,
    }
}

/// The episode's most recent samples at the analysis rate, pre-emphasised, in a ring of
/// fixed capacity: what the refinement of a late-finalised candidate needs, and no more.
pub struct History {
    buf: VecDeque<f32>,
    /// Absolute index of `buf[0]`.
    start: u64,
    cap: usize,
    a: f32,
    prev: f32,
}

impl History {
    /// A ring of `cap` samples with pre-emphasis coefficient `a`.
    pub fn new(cap: usize, a: f32) -> History {
        History {
            buf: VecDeque::with_capacity(cap),
            start: 0,
            cap,
            a,
            prev: 0.0,
        }
    }

    /// A history holding `samples`, already pre-emphasised, from absolute index `start` on
    /// (the print path: a stretch decoded for one candidate; see `print_window.rs`).
    pub(crate) fn from_emphasised(start: u64, samples: Vec<f32>) -> History {
        History {
            cap: samples.len(),
            buf: samples.into(),
            start,
            a: 0.0,
            prev: 0.0,
        }
    }

    /// Appends samples (plain; pre-emphasised here), dropping the oldest beyond capacity.
    pub fn push(&mut self, samples: &[f32]) {
        for &x in samples {
            self.buf.push_back(x - self.a * self.prev);
            self.prev = x;
        }
        let excess = self.buf.len().saturating_sub(self.cap);
        self.buf.drain(..excess);
        self.start += excess as u64;
    }

    /// One past the last sample's absolute index.
    pub fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Samples `from .. from + len` into `out`, zeros where the ring has none.
    fn segment(&self, from: i64, len: usize, out: &mut Vec<f32>) {
        out.clear();
        out.resize(len, 0.0);
        // The part of `from .. from + len` the ring holds, copied slice by slice.
        let rel = from - self.start as i64;
        let lo = rel.max(0);
        let hi = (rel + len as i64).min(self.buf.len() as i64);
        if lo >= hi {
            return;
        }
        let (a, b) = self.buf.as_slices();
        let (lo, hi) = (lo as usize, hi as usize);
        let mut dst = (lo as i64 - rel) as usize;
        for (part, offset) in [(a, 0), (b, a.len())] {
            let from = lo.max(offset).min(offset + part.len());
            let to = hi.max(offset).min(offset + part.len());
            if from < to {
                out[dst..dst + (to - from)].copy_from_slice(&part[from - offset..to - offset]);
                dst += to - from;
            }
        }
    }
}

/// Where a window was found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refined {
    /// The episode sample (fractional, at the analysis rate) where the window starts.
    pub position: f64,
    /// Normalised cross-correlation there (−1–1).
    pub correlation: f32,
}

/// Cross-correlates windows against the history by FFT (three real transforms of the next
/// power of two above window + search, instead of `window × (2·search + 1)` multiply-adds:
/// about 6× less work at the default sizes, which matters because most candidates that
/// reach refinement are chance vote clusters that it rejects).
pub struct Correlator {
    n: usize,
    forward: Arc<dyn RealToComplex<f32>>,
    inverse: Arc<dyn ComplexToReal<f32>>,
    seg: Vec<f32>,
    plain: Vec<f32>,
    win: Vec<f32>,
    seg_f: Vec<Complex<f32>>,
    win_f: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
    corr: Vec<f32>,
}

impl Correlator {
    /// A correlator for windows of up to `window` samples searched `± search`.
    pub fn new(window: usize, search: usize) -> Correlator {
        let n = (window + 2 * search + 1).next_power_of_two();
        let (forward, inverse) = {
            let mut planner = crate::spectrum::planner();
            (planner.plan_fft_forward(n), planner.plan_fft_inverse(n))
        };
        let scratch_len = forward.get_scratch_len().max(inverse.get_scratch_len());
        Correlator {
            n,
            seg: forward.make_input_vec(),
            plain: Vec::with_capacity(n),
            win: forward.make_input_vec(),
            seg_f: forward.make_output_vec(),
            win_f: forward.make_output_vec(),
            scratch: vec![Complex::default(); scratch_len],
            corr: inverse.make_output_vec(),
            forward,
            inverse,
        }
    }

    /// The normalised cross-correlation of `window` with `history` at every position from
    /// `expected − search` to `expected + search` (absolute samples), in order.
    pub fn curve(
        &mut self,
        window: &RefWindow,
        history: &History,
        expected: i64,
        search: usize,
    ) -> Option<Vec<f32>> {
        let w = window.samples.len();
        let span = w + 2 * search;
        if w == 0 || window.norm <= 0.0 || span > self.n {
            return None;
        }
        let mut seg = std::mem::take(&mut self.seg);
        history.segment(expected - search as i64, span, &mut seg);
        // The transform works in place: the plain samples are kept for the energies.
        self.plain.clear();
        self.plain.extend_from_slice(&seg);
        seg.resize(self.n, 0.0);
        self.win[..w].copy_from_slice(&window.samples);
        self.win[w..].fill(0.0);
        self.forward
            .process_with_scratch(&mut seg, &mut self.seg_f, &mut self.scratch)
            .ok()?;
        self.forward
            .process_with_scratch(&mut self.win, &mut self.win_f, &mut self.scratch)
            .ok()?;
        // seg ⋆ win: the product with the window's conjugate spectrum.
        for (s, c) in self.seg_f.iter_mut().zip(&self.win_f) {
            *s *= c.conj();
        }
        // A real signal's spectrum has real DC and Nyquist bins; rounding can leave a trace.
        if let Some(first) = self.seg_f.first_mut() {
            first.im = 0.0;
        }
        if let Some(last) = self.seg_f.last_mut() {
            last.im = 0.0;
        }
        self.inverse
            .process_with_scratch(&mut self.seg_f, &mut self.corr, &mut self.scratch)
            .ok()?;
        let scale = 1.0 / self.n as f64;
        let plain = &self.plain;
        let mut energy: f64 = plain[..w]
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum();
        let mut ncc = Vec::with_capacity(2 * search + 1);
        for s in 0..=2 * search {
            if s > 0 {
                let out = f64::from(plain[s - 1]);
                let inn = f64::from(plain[s + w - 1]);
                energy += inn * inn - out * out;
            }
            let num = f64::from(self.corr[s]) * scale;
            let den = f64::from(window.norm) * energy.max(0.0).sqrt();
            ncc.push(if den > 1e-9 { (num / den) as f32 } else { 0.0 });
        }
        self.seg = seg;
        Some(ncc)
    }

    /// Searches `expected ± search` for `window` in `history` (positions are absolute
    /// samples): the best normalised cross-correlation and where, to a fraction of a sample.
    pub fn refine(
        &mut self,
        window: &RefWindow,
        history: &History,
        expected: i64,
        search: usize,
    ) -> Option<Refined> {
        let ncc = self.curve(window, history, expected, search)?;
        let (best, delta) = peak(&ncc)?;
        Some(Refined {
            position: (expected - search as i64 + best as i64) as f64 + delta,
            correlation: ncc[best],
        })
    }
}

/// The normalised cross-correlation of each `piece`-sample stretch of `window` with the
/// episode where the window starts at `at` (absolute, fractional samples), the best of the
/// whole lags within `slack` of it, pushed onto `out`; stretches with less than a tenth of the
/// window's mean energy are left out (a clip's pauses). A true occurrence lines up every
/// stretch at once; a look-alike at another pace (the same words in the same voice) only
/// some.
pub(crate) fn piece_scores(
    window: &RefWindow,
    history: &History,
    at: f64,
    piece: usize,
    slack: usize,
    out: &mut Vec<f32>,
) {
    let w = &window.samples;
    // A window shorter than a piece (a clip shorter than one) is one piece.
    let piece = piece.min(w.len());
    if piece == 0 {
        return;
    }
    let mean_energy = window.norm * window.norm / w.len() as f32 * piece as f32;
    let base = at.round() as i64;
    let mut seg = Vec::new();
    for q in (0..=w.len() - piece).step_by(piece) {
        let p = &w[q..q + piece];
        let pe: f32 = p.iter().map(|x| x * x).sum();
        if pe <= 0.1 * mean_energy {
            continue;
        }
        history.segment(base + q as i64 - slack as i64, piece + 2 * slack, &mut seg);
        let mut best = f32::MIN;
        for s in 0..=2 * slack {
            let e = &seg[s..s + piece];
            let num: f32 = p.iter().zip(e).map(|(a, b)| a * b).sum();
            let ee: f32 = e.iter().map(|x| x * x).sum();
            let den = (pe * ee).sqrt();
            best = best.max(if den > 1e-12 { num / den } else { 0.0 });
        }
        out.push(best);
    }
}

/// The highest point of a curve: its index, and the fraction of a step (−0.5–0.5) to the top
/// of the parabola through it and its neighbours.
pub fn peak(curve: &[f32]) -> Option<(usize, f64)> {
    let (best, &top) = curve.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?;
    let delta = if best > 0 && best < curve.len() - 1 {
        let (l, c, r) = (
            f64::from(curve[best - 1]),
            f64::from(top),
            f64::from(curve[best + 1]),
        );
        let d = l - 2.0 * c + r;
        if d < 0.0 {
            (0.5 * (l - r) / d).clamp(-0.5, 0.5)
        } else {
            0.0
        }
    } else {
        0.0
    };
    Some((best, delta))
}

/// Taps either side of a point in [`value_at`]'s interpolation.
pub(crate) const INTERPOLATION_TAPS: i64 = 12;

/// The curve's value at fractional position `x`, by Hann-windowed sinc interpolation: a
/// correlation of signals band-limited below the analysis Nyquist frequency is itself
/// band-limited, so its samples determine it between them (to about 1% with 12 taps each
/// side). Outside the curve, it is taken as zero.
pub fn value_at(curve: &[f32], x: f64) -> f32 {
    use std::f64::consts::PI;
    let centre = x.floor() as i64;
    let mut acc = 0.0f64;
    for k in (centre - INTERPOLATION_TAPS + 1)..=(centre + INTERPOLATION_TAPS) {
        let Some(&v) = usize::try_from(k).ok().and_then(|i| curve.get(i)) else {
            continue;
        };
        let d = x - k as f64;
        let sinc = if d.abs() < 1e-12 {
            1.0
        } else {
            (PI * d).sin() / (PI * d)
        };
        let window = 0.5 + 0.5 * (PI * d / INTERPOLATION_TAPS as f64).cos();
        acc += f64::from(v) * sinc * window;
    }
    acc as f32
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn a_window_is_found_at_its_exact_place() {
        let p = Params::default();
        let episode = noise(40_000, 1);
        let clip = pre_emphasize(&episode[12_345..20_345], p.pre_emphasis);
        let windows = choose_windows(&clip, &p);
        assert_eq!(windows[0].start, 0);
        let mut h = History::new(50_000, p.pre_emphasis);
        h.push(&episode);
        // Voted 100 samples off: the search brings it back.
        let r = Correlator::new(8_000, 320)
            .refine(&windows[0], &h, 12_345 + 100, 320)
            .expect("refined");
        assert!((r.position - 12_345.0).abs() < 0.01, "{r:?}");
        assert!(r.correlation > 0.99);
    }

    #[test]
    fn a_half_sample_shift_is_interpolated() {
        let p = Params::default();
        // A band-limited signal sampled at two phases half a sample apart.
        let f = |t: f64| (t * 0.31).sin() + 0.5 * (t * 0.77 + 1.0).sin() + 0.3 * (t * 1.3).sin();
        let episode: Vec<f32> = (0..20_000).map(|i| f(i as f64) as f32).collect();
        let clip: Vec<f32> = (0..8_000).map(|i| f(i as f64 + 5_000.5) as f32).collect();
        let windows = choose_windows(&pre_emphasize(&clip, p.pre_emphasis), &p);
        let mut h = History::new(20_000, p.pre_emphasis);
        h.push(&episode);
        let r = Correlator::new(8_000, 50)
            .refine(&windows[0], &h, 5_000, 50)
            .expect("refined");
        assert!((r.position - 5_000.5).abs() < 0.1, "{r:?}");
    }

    /// The median of `window`'s piece scores where it starts at `at` in `h`.
    fn pieces_median(window: &RefWindow, h: &History, at: f64) -> f32 {
        let mut scores = Vec::new();
        piece_scores(window, h, at, 2000, 2, &mut scores);
        assert_eq!(scores.len(), 4);
        scores.sort_by(f32::total_cmp);
        scores[1]
    }

    /// `clip`'s first window refined in `episode` around sample 10,000: the window, the
    /// episode's history and where the window was found.
    fn found_near_10_000(clip: &[f32], episode: &[f32]) -> (RefWindow, History, Refined) {
        let p = Params::default();
        let window = choose_windows(&pre_emphasize(clip, p.pre_emphasis), &p)[0].clone();
        let mut h = History::new(episode.len(), p.pre_emphasis);
        h.push(episode);
        let whole = Correlator::new(8_000, 50)
            .refine(&window, &h, 10_000, 50)
            .expect("refined");
        assert!((whole.position - 10_000.0).abs() < 0.5, "{whole:?}");
        (window, h, whole)
    }

    #[test]
    fn a_window_under_noise_scores_about_as_well_in_each_piece_as_on_the_whole() {
        let clip = noise(8_000, 3);
        // At 10_000 under noise of the same level.
        let mut episode = noise(30_000, 4);
        for (e, c) in episode[10_000..18_000].iter_mut().zip(&clip) {
            *e += c;
        }
        let (window, h, whole) = found_near_10_000(&clip, &episode);
        let pieces = pieces_median(&window, &h, whole.position);
        assert!(whole.correlation > 0.6, "{whole:?}");
        assert!(pieces > 0.9 * whole.correlation, "{pieces} {whole:?}");
    }

    #[test]
    fn a_look_alike_that_lines_up_in_one_loud_stretch_only_fails_its_pieces() {
        // The clip's second quarter is loud; the episode has that quarter in place and other
        // sound of the same levels around it (the same words said at another pace line up
        // in one stretch only).
        let mut clip = noise(8_000, 5);
        clip[2_000..4_000].iter_mut().for_each(|x| *x *= 3.0);
        let mut episode = noise(30_000, 6);
        episode[12_000..14_000].copy_from_slice(&clip[2_000..4_000]);
        let (window, h, whole) = found_near_10_000(&clip, &episode);
        // The whole window scores well above the bar…
        assert!(whole.correlation > 0.5, "{whole:?}");
        // …on one piece: the others do not line up.
        let pieces = pieces_median(&window, &h, whole.position);
        assert!(pieces < 0.2, "{pieces} {whole:?}");
    }

    #[test]
    fn a_band_limited_curve_is_interpolated_between_its_samples() {
        let f = |t: f64| (t * 0.9).cos() + 0.5 * (t * 2.2 + 0.3).sin();
        let curve: Vec<f32> = (0..100).map(|i| f(f64::from(i)) as f32).collect();
        assert_eq!(value_at(&curve, 40.0), curve[40]);
        for x in [30.5, 41.25, 50.875, 60.1] {
            assert!((f64::from(value_at(&curve, x)) - f(x)).abs() < 0.02, "{x}");
        }
    }

    #[test]
    fn a_segment_is_the_rings_samples_wherever_they_wrap() {
        let mut h = History::new(100, 0.0);
        // Pushed in uneven pieces, so that the ring's storage wraps.
        let all: Vec<f32> = (0..250).map(|i| i as f32).collect();
        for piece in all.chunks(37) {
            h.push(piece);
        }
        let mut out = Vec::new();
        for (from, len) in [
            (100, 30),
            (140, 20),
            (150, 100),
            (200, 80),
            (260, 5),
            (0, 400),
        ] {
            h.segment(from, len, &mut out);
            let expected: Vec<f32> = (from..from + len as i64)
                .map(|i| {
                    if (150..250).contains(&i) {
                        i as f32
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_eq!(out, expected, "{from} {len}");
        }
    }

    #[test]
    fn the_ring_keeps_only_its_capacity() {
        let mut h = History::new(100, 0.0);
        h.push(&[1.0; 250]);
        assert_eq!(h.end(), 250);
        let mut out = Vec::new();
        h.segment(140, 20, &mut out);
        assert_eq!(&out[..10], &[0.0; 10]);
        assert_eq!(&out[10..], &[1.0; 10]);
    }
    #[test]
    fn the_screen_takes_a_windows_loudest_stretch() {
        // Quiet, then a loud second quarter, then quiet: the screen's stretch is the loud one.
        let mut samples = vec![0.01f32; 8000];
        for (k, x) in samples[2000..4000].iter_mut().enumerate() {
            *x = if k % 2 == 0 { 0.5 } else { -0.5 };
        }
        let norm = samples.iter().map(|x| x * x).sum::<f32>().sqrt();
        let window = RefWindow {
            start: 300,
            samples,
            norm,
        };
        let piece = loudest_piece(&window, 2000);
        assert_eq!(piece.start, 2300);
        assert_eq!(piece.samples.len(), 2000);
        let expected = piece.samples.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((piece.norm - expected).abs() < 1e-6);
        // No shorter than the window: the window itself.
        assert_eq!(loudest_piece(&window, 8000).start, 300);
        assert_eq!(loudest_piece(&window, 0).samples.len(), 8000);
    }
}
