//! Resampling to the analysis rate: a streaming windowed-sinc (Kaiser) interpolator with a
//! precomputed table of kernel phases.
//!
//! The kernel is centred on each output instant, so the resampler adds no delay: output
//! sample `n` is the signal at input time `n · in_rate / out_rate` exactly. That matters
//! because a clip and an episode at different rates (44.1 and 48 kHz) go through different
//! resamplers, and any delay would be an offset error. The start is padded with silence, and
//! [`Resampler::finish`] pads the end, so output `n` exists for every input instant.

use std::sync::Arc;

use crate::params::Params;

/// Converts a stream of samples at one rate to another.
pub struct Resampler {
    in_rate: u64,
    out_rate: u64,
    /// Taps on each side of the output instant, in input samples.
    half: usize,
    phases: usize,
    /// `(phases + 1)` rows of `2 · half` taps.
    table: Arc<[f32]>,
    /// Input not yet consumed; `buf[0]` is input sample `buf_start` (negative: padding).
    buf: Vec<f32>,
    buf_start: i64,
    input_len: u64,
    next_out: u64,
}

impl Resampler {
    /// A resampler from `in_rate` to `out_rate` (Hz), with the kernel shape of `params`.
    pub fn new(in_rate: u32, out_rate: u32, params: &Params) -> Resampler {
        let in_rate = u64::from(in_rate.max(1));
        let out_rate = u64::from(out_rate.max(1));
        let fi = in_rate as f64;
        // Cutoff below the lower Nyquist frequency, as a fraction of the input rate.
        let cutoff = params.resampler_cutoff * (in_rate.min(out_rate) as f64) / 2.0 / fi;
        let zero_crossings = params.resampler_zero_crossings.max(1) as f64;
        let half = (zero_crossings / (2.0 * cutoff)).ceil().max(1.0) as usize;
        let phases = params.resampler_phases.max(1);
        let table = table(in_rate, out_rate, cutoff, half, phases, params);
        Resampler {
            in_rate,
            out_rate,
            half,
            phases,
            table,
            buf: vec![0.0; half],
            buf_start: -(half as i64),
            input_len: 0,
            next_out: 0,
        }
    }

    /// Feeds `input`, appending every output sample that can now be computed to `out`.
    pub fn process(&mut self, input: &[f32], out: &mut Vec<f32>) {
        self.buf.extend_from_slice(input);
        self.input_len += input.len() as u64;
        self.produce(out, false);
    }

    /// Ends the stream: pads the end with silence and appends the last output samples, one
    /// for every output instant before the end of the input.
    pub fn finish(&mut self, out: &mut Vec<f32>) {
        self.buf.extend(std::iter::repeat_n(0.0, self.half + 1));
        self.produce(out, true);
    }

    fn produce(&mut self, out: &mut Vec<f32>, last: bool) {
        let taps = 2 * self.half;
        let buf_end = self.buf_start + self.buf.len() as i64;
        loop {
            let pos = self.next_out * self.in_rate;
            if last && pos >= self.input_len * self.out_rate {
                break;
            }
            let mut i = (pos / self.out_rate) as i64;
            let rem = pos % self.out_rate;
            let mut p = ((rem * self.phases as u64 + self.out_rate / 2) / self.out_rate) as usize;
            if p == self.phases {
                p = 0;
                i += 1;
            }
            let first = i - self.half as i64 + 1;
            if first + taps as i64 > buf_end {
                break;
            }
            let at = (first - self.buf_start) as usize;
            let row = &self.table[p * taps..(p + 1) * taps];
            out.push(dot(&self.buf[at..at + taps], row));
            self.next_out += 1;
        }
        // Drop the input no later output needs.
        let next_first = (self.next_out * self.in_rate / self.out_rate) as i64 - self.half as i64;
        let drop = (next_first - self.buf_start).clamp(0, self.buf.len() as i64) as usize;
        if drop > 0 {
            self.buf.drain(..drop);
            self.buf_start += drop as i64;
        }
    }
}

/// Kernel tables made so far, by what they depend on: the print path makes resamplers for
/// every episode it answers from (tens of milliseconds of work against one clip), and the
/// table (257 phases of up to ~150 Kaiser-windowed taps) was a tenth of it.
type TableKey = (u64, u64, usize, u64, u64, usize);
static TABLES: std::sync::Mutex<Vec<(TableKey, Arc<[f32]>)>> = std::sync::Mutex::new(Vec::new());
/// Tables kept (a process resamples from a few rates).
const TABLES_KEPT: usize = 16;

/// The kernel's `(phases + 1)` rows of `2 · half` taps, made once per process for each set
/// of rates and parameters.
fn table(
    in_rate: u64,
    out_rate: u64,
    cutoff: f64,
    half: usize,
    phases: usize,
    params: &Params,
) -> Arc<[f32]> {
    let key = (
        in_rate,
        out_rate,
        params.resampler_zero_crossings,
        params.resampler_cutoff.to_bits(),
        params.resampler_kaiser_beta.to_bits(),
        phases,
    );
    // A poisoned lock only means another thread panicked while holding it: the list is
    // still whole (entries are pushed complete).
    let lock = |m: &'static std::sync::Mutex<_>| m.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, t)) = lock(&TABLES).iter().find(|(k, _)| *k == key) {
        return Arc::clone(t);
    }
    let taps = 2 * half;
    let beta = params.resampler_kaiser_beta;
    let i0_beta = bessel_i0(beta);
    let mut table = vec![0f32; (phases + 1) * taps];
    for p in 0..=phases {
        let frac = p as f64 / phases as f64;
        let row = &mut table[p * taps..(p + 1) * taps];
        let mut sum = 0.0;
        let mut values = vec![0f64; taps];
        for (j, v) in values.iter_mut().enumerate() {
            // Tap j is input sample i + j - half + 1; its distance from the instant:
            let u = frac - (j as f64 - half as f64 + 1.0);
            let r = u / half as f64;
            let window = if r.abs() >= 1.0 {
                0.0
            } else {
                bessel_i0(beta * (1.0 - r * r).sqrt()) / i0_beta
            };
            *v = 2.0 * cutoff * sinc(2.0 * cutoff * u) * window;
            sum += *v;
        }
        // Unity gain at DC for every phase: no ripple in level from phase to phase.
        for (t, v) in row.iter_mut().zip(&values) {
            *t = (*v / sum) as f32;
        }
    }
    let table: Arc<[f32]> = table.into();
    let mut tables = lock(&TABLES);
    if tables.len() >= TABLES_KEPT {
        tables.remove(0);
    }
    tables.push((key, Arc::clone(&table)));
    table
}

/// Resamples a whole (short) signal.
pub fn resample_all(input: &[f32], in_rate: u32, out_rate: u32, params: &Params) -> Vec<f32> {
    let mut r = Resampler::new(in_rate, out_rate, params);
    let mut out = Vec::with_capacity(
        (input.len() as u64 * u64::from(out_rate) / u64::from(in_rate.max(1))) as usize + 1,
    );
    r.process(input, &mut out);
    r.finish(&mut out);
    out
}

impl Resampler {
    /// The input samples output samples `from..to` use: `(first, end)`, as input indices
    /// (the first may be negative: the stream is padded with silence before its start).
    pub(crate) fn input_span(&self, from: u64, to: u64) -> (i64, i64) {
        let first = |n: u64| {
            let (i, _) = self.tap_position(n);
            i - self.half as i64 + 1
        };
        (
            first(from),
            first(to.max(from + 1) - 1) + 2 * self.half as i64,
        )
    }

    /// Output samples `from..to` of a stream of `total` input samples, computed from the
    /// stretch `input` that starts at input sample `input_start` (silence outside
    /// `0..total`, as the stream pads it): the same values [`Resampler::process`] gives
    /// there, when `input` covers [`Resampler::input_span`]. Appended to `out`.
    pub(crate) fn outputs(
        &self,
        input: &[f32],
        input_start: i64,
        total: u64,
        from: u64,
        to: u64,
        out: &mut Vec<f32>,
    ) {
        let taps = 2 * self.half;
        let mut window = vec![0f32; taps];
        for n in from..to {
            let (i, p) = self.tap_position(n);
            let first = i - self.half as i64 + 1;
            let row = &self.table[p * taps..(p + 1) * taps];
            // Inside the input and the stream: the samples as they are.
            if first >= 0 && (first + taps as i64) as u64 <= total {
                if let Some(slice) = usize::try_from(first - input_start)
                    .ok()
                    .and_then(|j| input.get(j..j + taps))
                {
                    out.push(dot(slice, row));
                    continue;
                }
            }
            for (k, w) in window.iter_mut().enumerate() {
                let at = first + k as i64;
                *w = if at < 0 || at as u64 >= total {
                    0.0
                } else {
                    usize::try_from(at - input_start)
                        .ok()
                        .and_then(|j| input.get(j))
                        .copied()
                        .unwrap_or(0.0)
                };
            }
            out.push(dot(&window, row));
        }
    }

    /// Output samples a stream of `total` input samples has.
    pub(crate) fn output_len(&self, total: u64) -> u64 {
        (u128::from(total) * u128::from(self.out_rate)).div_ceil(u128::from(self.in_rate)) as u64
    }

    /// Output `n`'s centre input sample and kernel phase, as `produce` computes them.
    fn tap_position(&self, n: u64) -> (i64, usize) {
        let pos = u128::from(n) * u128::from(self.in_rate);
        let out_rate = u128::from(self.out_rate);
        let mut i = (pos / out_rate) as i64;
        let rem = pos % out_rate;
        let mut p = ((rem * self.phases as u128 + out_rate / 2) / out_rate) as usize;
        if p == self.phases {
            p = 0;
            i += 1;
        }
        (i, p)
    }
}

/// Dot product, written with eight independent sums so that it vectorises.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        sum += x * y;
    }
    sum
}

fn sinc(x: f64) -> f64 {
    if x.abs() < 1e-12 {
        1.0
    } else {
        let px = std::f64::consts::PI * x;
        px.sin() / px
    }
}

/// The modified Bessel function of the first kind, order 0 (series; converges fast for the
/// β used here).
fn bessel_i0(x: f64) -> f64 {
    let mut sum = 1.0;
    let mut term = 1.0;
    let half = x / 2.0;
    for k in 1..64 {
        term *= (half / k as f64) * (half / k as f64);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn sine(freq: f64, rate: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / f64::from(rate)).sin() as f32)
            .collect()
    }

    #[test]
    fn output_length_follows_the_rate_ratio() {
        let p = Params::default();
        for (fi, n) in [
            (44_100u32, 44_100usize),
            (48_000, 12_345),
            (22_050, 1),
            (8_000, 800),
        ] {
            let out = resample_all(&vec![0.1; n], fi, 8_000, &p);
            let expected = (n as u64 * 8_000).div_ceil(u64::from(fi)) as usize;
            assert_eq!(out.len(), expected, "from {fi} Hz");
        }
    }

    #[test]
    fn a_passband_tone_keeps_its_level_and_phase() {
        let p = Params::default();
        // 1 kHz at 44.1 kHz: compare against the ideal 1 kHz at 8 kHz, sample by sample
        // (no delay, no gain change), away from the padded ends.
        let input = sine(1_000.0, 44_100, 44_100);
        let out = resample_all(&input, 44_100, 8_000, &p);
        let ideal = sine(1_000.0, 8_000, out.len());
        let err = out[200..7_800]
            .iter()
            .zip(&ideal[200..7_800])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(err < 0.01, "max error {err}");
    }

    #[test]
    fn a_tone_above_the_output_nyquist_is_removed() {
        let p = Params::default();
        let input = sine(6_000.0, 48_000, 48_000);
        let out = resample_all(&input, 48_000, 8_000, &p);
        let rms = (out[200..7_800].iter().map(|x| x * x).sum::<f32>() / 7_600.0).sqrt();
        assert!(rms < 0.001, "aliased rms {rms}");
    }

    #[test]
    fn streaming_in_pieces_equals_one_piece() {
        let p = Params::default();
        let input = sine(440.0, 44_100, 20_000);
        let whole = resample_all(&input, 44_100, 8_000, &p);
        let mut r = Resampler::new(44_100, 8_000, &p);
        let mut pieces = Vec::new();
        for chunk in input.chunks(1_153) {
            r.process(chunk, &mut pieces);
        }
        r.finish(&mut pieces);
        assert_eq!(whole, pieces);
    }

    #[test]
    fn dot_matches_the_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.01).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-3);
    }
}
