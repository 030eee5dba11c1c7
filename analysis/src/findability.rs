//! How findable a clip is: the level above its background (in dB) from which the analyser
//! finds it, predicted from the clip alone.
//!
//! A steady tone, a chime or a clip of one or two landmarks is found only when it is louder
//! than what plays under it; a rich jingle or a spoken phrase is found well below it. The
//! prediction does what the corpus does to a clip (`scripts/make-analysis-corpus.sh`,
//! "Clips under speech and music beds"), on a small scale and with the analyser itself: the
//! clip, resampled once to the analysis rate and printed once ([`ClipPrint`]), is mixed
//! into a few synthetic backgrounds ([`crate::synth`]: two voices of speech, a music bed with
//! a tune, speech over a bed; each from a fixed seed) at a level of [`LEVELS_DB`] clip to
//! background (the clip's RMS against the background's over the clip's span, as the corpus
//! places its clips), and each short mix is scanned by [`EpisodeScan`], the analyser's own
//! entry point, with the same [`Params`]. The clip is found in a mix when an answer lies
//! within 10 ms of where it was put, and found at a level when it is found in at least
//! [`QUORUM`] of the [`BACKGROUNDS`]. It is *findable from* the lowest level at which it is
//! found, taking it as found at every louder level.
//!
//! The levels are searched, not all tried: 0 dB first, then −6 and −12 dB while it is found,
//! or +6 and +12 dB until it is; at a level the backgrounds are tried until the quorum is met
//! or can no longer be. A clip found everywhere costs 3 levels × 3 mixes, a clip found nowhere
//! 3 × 2. A clip longer than [`MAX_SECONDS`] is judged on its first [`MAX_SECONDS`]: more of a
//! clip only makes it easier to find, so the prediction is then a bound (the clip is findable
//! at least from there). Everything is deterministic: the same clip and parameters give the
//! same answer on every machine.
//!
//! Beside the level, three cheap features say why: the clip's landmarks per second, the share
//! of its energy in the band the analyser looks at (94 Hz to 3.75 kHz, below the analysis
//! rate's Nyquist of 4 kHz), and how steady its spectrum is from frame to frame (a held tone
//! gives the peak picker nothing to rise above its own mean).

use std::path::Path;
use std::sync::Arc;

use crate::clip::ClipPrint;
use crate::decode;
use crate::error::Error;
use crate::matcher::EpisodeScan;
use crate::params::Params;
use crate::resample::resample_all;
use crate::spectrum::Spectrogram;
use crate::synth::{self, MusicBed, Speech, Voice};

/// The clip-to-background levels that may be tried (dB), loudest first.
pub const LEVELS_DB: [i32; 5] = [12, 6, 0, -6, -12];

/// The level tried first (an index into [`LEVELS_DB`]): 0 dB.
const FIRST_LEVEL: usize = 2;

/// The backgrounds a clip is tried in.
pub const BACKGROUNDS: usize = 4;

/// In how many of the [`BACKGROUNDS`] a clip must be found at a level to count as found there.
pub const QUORUM: usize = 4;

/// The longest stretch of a clip that is tried (seconds): its start.
pub const MAX_SECONDS: f64 = 6.0;

/// Background before the clip in each mix (seconds): more than the peak picker's context
/// (±0.26 s), so that the clip's first peaks are judged as inside an episode.
const LEAD_SECONDS: f64 = 0.75;

/// Background after the clip (seconds).
const TAIL_SECONDS: f64 = 0.5;

/// How far from the truth an answer may lie and still count (nanoseconds): the analyser's
/// 10 ms target.
const TOLERANCE_NS: u64 = 10_000_000;

/// A clip's findability, predicted from the clip alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Findability {
    /// The lowest level above its background (dB; of [`LEVELS_DB`]) from which the clip is
    /// found. `None`: not found even at the loudest level tried (+12 dB): a steady tone,
    /// silence, a click.
    pub from_db: Option<i32>,
    /// Per level of [`LEVELS_DB`] (same order): whether the clip was found there (in at least
    /// [`QUORUM`] backgrounds); `None` where the search did not try it.
    pub found: [Option<bool>; LEVELS_DB.len()],
    /// The clip's landmarks per second (as printed, at speed 1).
    pub landmarks_per_s: f32,
    /// The share of the clip's energy in the band the analyser looks at (its peaks' bins,
    /// about 94 Hz to 3.75 kHz), from 0 to 1.
    pub in_band: f32,
    /// How steady the clip's spectrum is from one 16 ms frame to the next, from 0 to 1: one
    /// less the share of its in-band magnitude that changes (a held tone near 1, a bell's
    /// ring about 0.97, speech and jingles 0.75–0.85).
    pub steadiness: f32,
    /// Seconds of the clip that were tried (at most [`MAX_SECONDS`]).
    pub tried_s: f32,
}

impl Findability {
    /// One sentence for a person: "findable from +6 dB over its background".
    pub fn describe(&self) -> String {
        describe(self.from_db)
    }
}

/// A findability level ([`Findability::from_db`]) as one sentence for a person.
pub fn describe(from_db: Option<i32>) -> String {
    match from_db {
        Some(db) => format!("findable from {} over its background", signed_db(db)),
        None => format!(
            "not found even {} over its background: cut a longer or cleaner clip",
            signed_db(LEVELS_DB[0])
        ),
    }
}

/// `6` as "+6 dB", `-6` as "−6 dB".
pub fn signed_db(db: i32) -> String {
    match db {
        0 => "0 dB".to_owned(),
        d if d > 0 => format!("+{d} dB"),
        d => format!("\u{2212}{} dB", d.unsigned_abs()),
    }
}

/// Predicts the findability of the clip in the file at `path` (decoded as the analyser
/// decodes a clip: a clip longer than `params.max_clip_seconds` is refused).
pub fn of_file(path: &Path, params: &Params) -> Result<Findability, Error> {
    let (samples, rate, _) = decode::decode_at_most(path, params.max_clip_seconds)?;
    Ok(predict(&samples, rate, params))
}

/// Predicts the findability of `samples` (mono, at `rate` Hz) with the analyser of `params`.
///
/// Cost: at most 9 scans of the clip (at most [`MAX_SECONDS`]) plus 1.25 s, at the analysis
/// rate: for a clip of a few seconds about ten to twenty times the cost of fingerprinting it
/// (`cargo bench -p analysis --bench accuracy -- --overlay-only --findability` measures it).
pub fn predict(samples: &[f32], rate: u32, params: &Params) -> Findability {
    let ar = params.sample_rate.max(1);
    let keep = ((MAX_SECONDS * f64::from(rate)) as usize).min(samples.len());
    let clip = resample_all(&samples[..keep], rate, ar, params);
    let tried_s = clip.len() as f32 / ar as f32;
    let (in_band, steadiness) = features(&samples[..keep], rate, params);
    let print = Arc::new(ClipPrint::from_samples(&clip, ar, String::new(), params));
    let landmarks_per_s = if tried_s > 0.0 {
        print.landmark_count() as f32 / tried_s
    } else {
        0.0
    };
    let mut found = [None; LEVELS_DB.len()];
    // The level is the clip's as a person hears it, every frequency counted (as the corpus
    // places its clips): a clip whose sound lies above 4 kHz is mixed as loud as it sounds,
    // and the analyser hears only what is left of it below.
    let clip_rms = synth::rms(&samples[..keep]);
    if clip_rms > 0.0 && !clip.is_empty() {
        let lead = (LEAD_SECONDS * f64::from(ar)) as usize + 37;
        let len = lead + clip.len() + (TAIL_SECONDS * f64::from(ar)) as usize;
        let backgrounds: Vec<(Vec<f32>, f32)> = (0..BACKGROUNDS)
            .map(|b| {
                let background = background(b, ar, len);
                let span = synth::rms(&background[lead..lead + clip.len()])
                    .max(0.5 * synth::rms(&background));
                (background, span)
            })
            .collect();
        let found_at_level = |db: i32| {
            let (mut hits, mut misses) = (0, 0);
            for (background, span) in &backgrounds {
                let gain = span * 10f32.powf(db as f32 / 20.0) / clip_rms;
                let mut mix = background.clone();
                for (m, c) in mix[lead..].iter_mut().zip(&clip) {
                    *m += gain * c;
                }
                // Kept within full scale, as a file would hold it.
                let peak = mix.iter().fold(0.0f32, |p, x| p.max(x.abs()));
                if peak > 0.99 {
                    let k = 0.99 / peak;
                    mix.iter_mut().for_each(|x| *x *= k);
                }
                if found_in(&print, &mix, ar, lead, params) {
                    hits += 1;
                } else {
                    misses += 1;
                }
                if hits >= QUORUM {
                    return true;
                }
                if misses > BACKGROUNDS - QUORUM {
                    return false;
                }
            }
            false
        };
        // From 0 dB quieter while found, else louder until found.
        let first = found_at_level(LEVELS_DB[FIRST_LEVEL]);
        found[FIRST_LEVEL] = Some(first);
        let steps: Vec<usize> = if first {
            (FIRST_LEVEL + 1..LEVELS_DB.len()).collect()
        } else {
            (0..FIRST_LEVEL).rev().collect()
        };
        for i in steps {
            let f = found_at_level(LEVELS_DB[i]);
            found[i] = Some(f);
            if f != first {
                break;
            }
        }
    }
    // The quietest level found with every louder level found or not tried (taken as found).
    let mut from_db = None;
    for (i, &db) in LEVELS_DB.iter().enumerate() {
        match found[i] {
            Some(false) if from_db.is_some() => break,
            Some(false) => {}
            Some(true) => from_db = Some(db),
            None => {}
        }
    }
    Findability {
        from_db,
        found,
        landmarks_per_s,
        in_band,
        steadiness,
        tried_s,
    }
}

/// Whether the analyser finds `print` in `mix` within [`TOLERANCE_NS`] of sample `at`.
fn found_in(print: &Arc<ClipPrint>, mix: &[f32], rate: u32, at: usize, params: &Params) -> bool {
    let mut scan = EpisodeScan::new(params, std::slice::from_ref(print), rate);
    scan.push(mix);
    let truth = crate::ns(at as u64, rate);
    scan.finish().first().is_some_and(|m| {
        m.iter()
            .any(|m| m.offset_ns.abs_diff(truth) <= TOLERANCE_NS)
    })
}

/// Background `which` of [`BACKGROUNDS`], `len` samples at `rate` Hz: 0 and 1 speech in two
/// voices, 2 a music bed with a tune over it, 3 speech over a music bed.
fn background(which: usize, rate: u32, len: usize) -> Vec<f32> {
    let seconds = len as f32 / rate as f32;
    let mut out = vec![0.0f32; len];
    match which {
        0 => Speech::new(4_601, rate, Voice::numbered(0)).fill(&mut out),
        1 => Speech::new(4_602, rate, Voice::numbered(1)).fill(&mut out),
        2 => {
            MusicBed::new(4_603, rate).add(&mut out, 0.25);
            let tune = synth::jingle(4_604, rate, seconds);
            for (o, t) in out.iter_mut().zip(&tune) {
                *o += 0.5 * t;
            }
        }
        _ => {
            Speech::new(4_605, rate, Voice::numbered(3)).fill(&mut out);
            MusicBed::new(4_606, rate).add(&mut out, 0.1);
        }
    }
    out
}

/// The share of the clip's energy in the analysed bins, and its steadiness (see
/// [`Findability`]), from the analyser's own spectrogram at the clip's own rate (what lies
/// above 4 kHz is lost to the analysis-rate resampler: it counts against the share).
fn features(clip: &[f32], rate: u32, params: &Params) -> (f32, f32) {
    // Frames as long in time as the analyser's, so that bin `k` is the same frequency as
    // the analyser's bin `k`; the whole band, 0 Hz to the clip's Nyquist.
    let scale = f64::from(rate) / f64::from(params.sample_rate.max(1));
    let n = ((params.fft_size as f64 * scale).round() as usize).max(2);
    let full = Params {
        fft_size: n,
        hop: ((params.hop as f64 * scale).round() as usize).max(1),
        min_bin: 0,
        max_bin: n / 2,
        ..params.clone()
    };
    let (lo, hi) = (params.min_bin, params.max_bin.min(params.fft_size / 2));
    let mut spec = Spectrogram::new(&full);
    let (mut total, mut band) = (0f64, 0f64);
    let (mut changed, mut compared) = (0f64, 0f64);
    let mut previous: Vec<f64> = Vec::new();
    let mut on_frame = |_: u32, log_power: &[f32]| {
        let power: Vec<f64> = log_power.iter().map(|&l| f64::from(l).exp()).collect();
        total += power.iter().sum::<f64>();
        let inside: Vec<f64> = power[lo.min(power.len())..(hi + 1).min(power.len())].to_vec();
        band += inside.iter().sum::<f64>();
        // Magnitudes, so that a change is weighed as the ear and the peak picker see it
        // rather than by the loudest bin alone.
        let now: Vec<f64> = inside.iter().map(|p| p.sqrt()).collect();
        if previous.len() == now.len() {
            changed += now
                .iter()
                .zip(&previous)
                .map(|(a, b)| (a - b).abs())
                .sum::<f64>();
            compared += now.iter().zip(&previous).map(|(a, b)| a + b).sum::<f64>();
        }
        previous = now;
    };
    spec.push(clip, &mut on_frame);
    spec.finish(&mut on_frame);
    let in_band = if total > 0.0 { band / total } else { 0.0 };
    let steadiness = if compared > 0.0 {
        1.0 - changed / compared
    } else {
        0.0
    };
    (in_band as f32, steadiness as f32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn tone(rate: u32, seconds: f32, hz: f32) -> Vec<f32> {
        (0..(seconds * rate as f32) as usize)
            .map(|i| 0.3 * (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin())
            .collect()
    }

    #[test]
    fn a_steady_tone_is_predicted_hard_to_find() {
        let params = Params::default();
        let f = predict(&tone(16_000, 3.0, 1_000.0), 16_000, &params);
        assert_eq!(f.from_db, None, "{f:?}");
        assert!(f.steadiness > 0.95, "{f:?}");
        assert!(
            f.describe().starts_with("not found even +12 dB"),
            "{}",
            f.describe()
        );
    }

    #[test]
    fn a_rich_jingle_is_predicted_findable_below_its_background() {
        let params = Params::default();
        let f = predict(&synth::jingle(7, 16_000, 3.0), 16_000, &params);
        let db = f.from_db.expect("a jingle is found");
        assert!(db <= 0, "{f:?}");
        assert!(f.landmarks_per_s > 20.0, "{f:?}");
        assert!(f.in_band > 0.9, "{f:?}");
        assert!(f.steadiness < 0.9, "{f:?}");
        // The same clip, the same answer: the prediction is deterministic.
        assert_eq!(predict(&synth::jingle(7, 16_000, 3.0), 16_000, &params), f);
    }

    #[test]
    fn silence_and_an_empty_clip_are_not_findable() {
        let params = Params::default();
        for clip in [vec![], vec![0.0f32; 16_000]] {
            let f = predict(&clip, 16_000, &params);
            assert_eq!(f.from_db, None);
            assert_eq!(f.found, [None; LEVELS_DB.len()]);
        }
    }

    #[test]
    fn levels_read_as_a_person_writes_them() {
        assert_eq!(signed_db(6), "+6 dB");
        assert_eq!(signed_db(0), "0 dB");
        assert_eq!(signed_db(-12), "\u{2212}12 dB");
        let f = Findability {
            from_db: Some(6),
            found: [None, Some(true), Some(false), None, None],
            landmarks_per_s: 3.0,
            in_band: 1.0,
            steadiness: 0.5,
            tried_s: 1.0,
        };
        assert_eq!(f.describe(), "findable from +6 dB over its background");
    }
}
