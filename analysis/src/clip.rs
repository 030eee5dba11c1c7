//! A clip's fingerprint: its landmarks and refinement windows, at each speed variant.
//! Computed once per clip content (see `cache.rs`) and shared between work items.

use std::path::Path;

use crate::decode;
use crate::error::Error;
use crate::landmarks::{fingerprint_with_peaks, Landmark};
use crate::params::Params;
use crate::refine::{choose_windows, pre_emphasize, RefWindow};
use crate::resample::resample_all;

/// Everything the matcher needs to know about one clip. Holds no samples beyond its
/// refinement windows.
#[derive(Debug, Clone)]
pub struct ClipPrint {
    hash: String,
    duration_ns: u64,
    pub(crate) variants: Vec<Variant>,
}

/// The clip as it would sound at one playback speed.
#[derive(Debug, Clone)]
pub(crate) struct Variant {
    /// Playback speed (1.0: as is).
    pub(crate) speed: f64,
    /// Landmarks, in anchor order.
    pub(crate) landmarks: Vec<Landmark>,
    /// Peaks `(frame, bin)` in time order, for the peak coincidences (the clip as is only:
    /// empty at other speeds).
    pub(crate) peaks: Vec<(u32, u16)>,
    /// Length in frames.
    pub(crate) frames: u32,
    /// Length in samples at the analysis rate.
    pub(crate) samples: usize,
    pub(crate) windows: Vec<RefWindow>,
}

impl ClipPrint {
    /// Decodes the clip at `path` (whole: clips are short) and fingerprints it.
    pub fn from_file(path: &Path, params: &Params) -> Result<ClipPrint, Error> {
        let (samples, rate, hash) = decode::decode_at_most(path, params.max_clip_seconds)?;
        Ok(ClipPrint::from_samples(&samples, rate, hash, params))
    }

    /// Fingerprints mono samples at `rate` Hz; `hash` is recorded as the media hash.
    pub fn from_samples(samples: &[f32], rate: u32, hash: String, params: &Params) -> ClipPrint {
        let duration_ns = (samples.len() as u128 * 1_000_000_000 / u128::from(rate.max(1))) as u64;
        // The clip's own print is denser than the episode's (see `clip_peaks_per_window`).
        let dense = Params {
            peaks_per_window: params.clip_peaks_per_window,
            fanout: params.clip_fanout,
            ..params.clone()
        };
        let variants = params
            .speed_variants
            .iter()
            .map(|&speed| {
                // Played at `speed`, the clip's samples go by as if recorded at rate · speed.
                // Both rates ×1000, so that 22,050 × 0.99 stays exact: rounded to whole hertz
                // it would drift a sample every few seconds, enough to misalign the windows.
                let as_rate = (f64::from(rate) * speed * 1000.0).round().max(1.0) as u32;
                let analysed = resample_all(
                    samples,
                    as_rate,
                    params.sample_rate.saturating_mul(1000),
                    params,
                );
                let (landmarks, peaks, frames) = fingerprint_with_peaks(&analysed, &dense);
                let peaks = if speed == 1.0 {
                    peaks.iter().map(|p| (p.t, p.f)).collect()
                } else {
                    Vec::new()
                };
                let windows =
                    choose_windows(&pre_emphasize(&analysed, params.pre_emphasis), params);
                Variant {
                    speed,
                    landmarks,
                    peaks,
                    frames,
                    samples: analysed.len(),
                    windows,
                }
            })
            .collect();
        ClipPrint {
            hash,
            duration_ns,
            variants,
        }
    }

    /// A print made of given variants (tests of the stages after fingerprinting).
    #[cfg(test)]
    pub(crate) fn from_variants(duration_ns: u64, variants: Vec<Variant>) -> ClipPrint {
        ClipPrint {
            hash: String::new(),
            duration_ns,
            variants,
        }
    }

    /// The clip file's SHA-256 (lower-case hex).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The clip's duration in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.duration_ns
    }

    /// Landmarks of the clip as is (speed 1).
    pub fn landmark_count(&self) -> usize {
        self.variants.first().map_or(0, |v| v.landmarks.len())
    }

    /// Bytes held, for the cache's budget.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.hash.len()
            + self
                .variants
                .iter()
                .map(|v| {
                    std::mem::size_of::<Variant>()
                        + v.landmarks.len() * std::mem::size_of::<Landmark>()
                        + v.peaks.len() * std::mem::size_of::<(u32, u16)>()
                        + v.windows.iter().map(RefWindow::bytes).sum::<usize>()
                })
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::synth::{Speech, Voice};

    #[test]
    fn a_clip_is_printed_at_each_speed_with_its_length_scaled() {
        let params = Params::default();
        let rate = 16_000;
        let samples = Speech::render(5, rate, Voice::numbered(2), 5.0);
        let print = ClipPrint::from_samples(&samples, rate, "h".into(), &params);
        assert_eq!(print.duration_ns(), 5_000_000_000);
        assert_eq!(print.hash(), "h");
        let speeds: Vec<f64> = print.variants.iter().map(|v| v.speed).collect();
        assert_eq!(speeds, params.speed_variants);
        for v in &print.variants {
            // Played at `speed`, 5 s last 5 / speed s: at 8 kHz, 40,000 / speed samples.
            let expected = 40_000.0 / v.speed;
            assert!(
                (v.samples as f64 - expected).abs() <= 2.0,
                "speed {}: {} samples",
                v.speed,
                v.samples
            );
            assert!(v.frames as usize * params.hop <= v.samples + params.fft_size);
            assert!(
                v.landmarks.len() > 500,
                "speed {}: {}",
                v.speed,
                v.landmarks.len()
            );
            assert!(
                v.landmarks.windows(2).all(|w| w[0].t <= w[1].t),
                "anchor order"
            );
            assert_eq!(v.windows.len(), params.refine_windows);
            assert_eq!(v.windows[0].start, 0, "the clip's start is always a window");
        }
        // A speed changes the landmarks' hashes (the frequencies move): the variants are
        // not copies of one another.
        let hashes = |v: &Variant| v.landmarks.iter().map(|l| l.hash).collect::<Vec<_>>();
        assert_ne!(hashes(&print.variants[0]), hashes(&print.variants[1]));
        assert_ne!(hashes(&print.variants[1]), hashes(&print.variants[2]));
        assert_eq!(print.landmark_count(), print.variants[0].landmarks.len());
        assert!(print.bytes() > print.variants.iter().map(|v| v.landmarks.len() * 8).sum());
    }

    #[test]
    fn the_variant_at_a_speed_matches_the_clip_played_at_that_speed() {
        let params = Params::default();
        let rate = 16_000;
        let samples = Speech::render(6, rate, Voice::numbered(1), 5.0);
        let print = ClipPrint::from_samples(&samples, rate, String::new(), &params);
        for v in &print.variants {
            let played = crate::synth::change_speed(&samples, v.speed);
            let direct = ClipPrint::from_samples(&played, rate, String::new(), &params);
            let theirs: std::collections::BTreeSet<_> =
                direct.variants[0].landmarks.iter().collect();
            let shared = v.landmarks.iter().filter(|l| theirs.contains(l)).count();
            // Most landmarks agree exactly (hash and frame): the variant is what a listener
            // of the sped-up clip would fingerprint.
            assert!(
                shared * 2 > v.landmarks.len(),
                "speed {}: {shared} of {}",
                v.speed,
                v.landmarks.len()
            );
        }
    }

    #[test]
    fn a_clip_longer_than_allowed_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for i in 0..8_000 * 3 {
            w.write_sample((i % 100) as i16).unwrap();
        }
        w.finalize().unwrap();
        let params = Params {
            max_clip_seconds: 2.0,
            ..Params::default()
        };
        let e = ClipPrint::from_file(&path, &params).unwrap_err();
        assert!(matches!(e, Error::ClipTooLong { .. }), "{e}");
        assert!(e.to_string().contains("long.wav"), "{e}");
    }
}
