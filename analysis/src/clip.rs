//! A clip's fingerprint: its landmarks and refinement windows, at each speed variant.
//! Computed once per clip content (see `cache.rs`) and shared between work items.

use std::path::Path;

use crate::decode;
use crate::error::Error;
use crate::landmarks::{fingerprint_all, Landmark};
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
    /// Length in frames.
    pub(crate) frames: u32,
    /// Length in samples at the analysis rate.
    pub(crate) samples: usize,
    pub(crate) windows: Vec<RefWindow>,
}

impl ClipPrint {
    /// Decodes the clip at `path` (whole: clips are short) and fingerprints it.
    pub fn from_file(path: &Path, params: &Params) -> Result<ClipPrint, Error> {
        let (samples, rate, hash) = decode::decode_all(path)?;
        let seconds = samples.len() as f64 / f64::from(rate.max(1));
        if seconds > params.max_clip_seconds {
            return Err(Error::ClipTooLong {
                path: path.to_owned(),
                seconds,
                max: params.max_clip_seconds,
            });
        }
        Ok(ClipPrint::from_samples(&samples, rate, hash, params))
    }

    /// Fingerprints mono samples at `rate` Hz; `hash` is recorded as the media hash.
    pub fn from_samples(samples: &[f32], rate: u32, hash: String, params: &Params) -> ClipPrint {
        let duration_ns = (samples.len() as u128 * 1_000_000_000 / u128::from(rate.max(1))) as u64;
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
                let (landmarks, frames) = fingerprint_all(&analysed, params);
                let windows =
                    choose_windows(&pre_emphasize(&analysed, params.pre_emphasis), params);
                Variant {
                    speed,
                    landmarks,
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
                        + v.windows.iter().map(RefWindow::bytes).sum::<usize>()
                })
                .sum::<usize>()
    }
}
