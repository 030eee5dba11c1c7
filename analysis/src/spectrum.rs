//! The short-time Fourier transform: samples at the analysis rate in, one log-power
//! spectrum per hop out (Hann window, bins `min_bin..=max_bin` only).
//!
//! Frame `t` covers samples `t·hop .. t·hop + fft_size`: a clip and an episode are framed
//! from their own sample 0, so an offset of `k` frames is `k · hop` samples.

use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use crate::params::Params;

/// realfft's planner, one for the process: it keeps every plan it made. Planning a
/// transform (its twiddle factors: sines and cosines) was a fifth of a pass from a print,
/// where every episode made three plans again. A plan is the same whoever asks for it.
static PLANNER: LazyLock<Mutex<RealFftPlanner<f32>>> =
    LazyLock::new(|| Mutex::new(RealFftPlanner::new()));

/// The process's FFT planner (a poisoned lock only means another thread panicked while
/// planning: the plans kept are whole).
pub(crate) fn planner() -> MutexGuard<'static, RealFftPlanner<f32>> {
    PLANNER.lock().unwrap_or_else(|e| e.into_inner())
}

/// A streaming spectrogram.
pub struct Spectrogram {
    fft: Arc<dyn RealToComplex<f32>>,
    window: Vec<f32>,
    input: Vec<f32>,
    output: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
    hop: usize,
    min_bin: usize,
    max_bin: usize,
    /// Samples not yet consumed; `buf[0]` is sample `buf_start`.
    buf: Vec<f32>,
    buf_start: u64,
    total: u64,
    next_frame: u32,
    frame: Vec<f32>,
}

impl Spectrogram {
    /// A spectrogram with the frame, hop and band of `params`.
    pub fn new(params: &Params) -> Spectrogram {
        let n = params.fft_size.max(2);
        let fft = planner().plan_fft_forward(n);
        let window = (0..n)
            .map(|i| {
                let x = std::f64::consts::PI * 2.0 * i as f64 / n as f64;
                (0.5 - 0.5 * x.cos()) as f32
            })
            .collect();
        let max_bin = params.max_bin.min(n / 2);
        let min_bin = params.min_bin.min(max_bin);
        Spectrogram {
            input: fft.make_input_vec(),
            output: fft.make_output_vec(),
            scratch: fft.make_scratch_vec(),
            fft,
            window,
            hop: params.hop.max(1),
            min_bin,
            max_bin,
            buf: Vec::new(),
            buf_start: 0,
            total: 0,
            next_frame: 0,
            frame: vec![0.0; max_bin - min_bin + 1],
        }
    }

    /// The index of the next frame to come out: every earlier frame has been emitted.
    pub fn next_frame(&self) -> u32 {
        self.next_frame
    }

    /// Feeds samples; calls `on_frame(t, log_power)` for each complete frame.
    pub fn push(&mut self, samples: &[f32], on_frame: &mut dyn FnMut(u32, &[f32])) {
        self.buf.extend_from_slice(samples);
        self.total += samples.len() as u64;
        self.frames(on_frame, false);
    }

    /// Ends the stream: the frames whose centre lies inside the signal, zero-padded.
    pub fn finish(&mut self, on_frame: &mut dyn FnMut(u32, &[f32])) {
        let n = self.window.len();
        self.buf.extend(std::iter::repeat_n(0.0, n));
        self.frames(on_frame, true);
    }

    fn frames(&mut self, on_frame: &mut dyn FnMut(u32, &[f32]), last: bool) {
        let n = self.window.len();
        loop {
            let start = u64::from(self.next_frame) * self.hop as u64;
            if last && start + (n as u64) / 2 >= self.total {
                break;
            }
            let at = (start - self.buf_start) as usize;
            if at + n > self.buf.len() {
                break;
            }
            for ((dst, x), w) in self
                .input
                .iter_mut()
                .zip(&self.buf[at..at + n])
                .zip(&self.window)
            {
                *dst = x * w;
            }
            if self
                .fft
                .process_with_scratch(&mut self.input, &mut self.output, &mut self.scratch)
                .is_err()
            {
                // Only possible with buffers of the wrong length, which `new` rules out.
                break;
            }
            for (dst, c) in self
                .frame
                .iter_mut()
                .zip(&self.output[self.min_bin..=self.max_bin])
            {
                *dst = (c.norm_sqr() + 1e-20).ln();
            }
            on_frame(self.next_frame, &self.frame);
            self.next_frame += 1;
        }
        let keep_from = u64::from(self.next_frame) * self.hop as u64;
        let drop = (keep_from.saturating_sub(self.buf_start) as usize).min(self.buf.len());
        self.buf.drain(..drop);
        self.buf_start += drop as u64;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_tone_peaks_in_its_bin_in_every_frame() {
        let p = Params::default();
        let mut s = Spectrogram::new(&p);
        // 1 kHz at 8 kHz with 512-point frames: bin 64.
        let tone: Vec<f32> = (0..8_000)
            .map(|i| (2.0 * std::f32::consts::PI * 1_000.0 * i as f32 / 8_000.0).sin())
            .collect();
        let mut frames = Vec::new();
        s.push(&tone, &mut |t, f| {
            let (best, _) =
                f.iter()
                    .enumerate()
                    .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
            frames.push((t, best + p.min_bin));
        });
        s.finish(&mut |t, _| frames.push((t, 0)));
        // Frames whose window fits: (8000 - 512) / 128 + 1 = 59, then the padded tail.
        assert!(frames[..59]
            .iter()
            .enumerate()
            .all(|(i, &(t, b))| t as usize == i && b == 64));
        assert_eq!(frames.len(), 8_000 / 128 - 1);
    }
}
