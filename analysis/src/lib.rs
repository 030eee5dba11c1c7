//! The reference audio analyser: where a clip occurs in an episode, found from the audio.
//!
//! Each file is decoded packet by packet, mixed to mono and resampled to 8 kHz; a
//! short-time Fourier transform gives a spectrogram whose prominent local maxima are paired
//! into landmarks (two peaks' frequencies and time difference, hashed). The clips' landmarks
//! form an inverted index; one streaming pass over the episode looks up each of its
//! landmarks and votes, per clip, for the offset at which the clip would have to start for
//! the two to agree. A true occurrence gathers many votes on one offset; each such cluster
//! is then refined to a fraction of a sample by cross-correlating short windows of the clip
//! against the episode's recent samples, and kept if the correlation confirms it. One pass
//! answers all the clips of a work item, and a clip that occurs several times gives several
//! offsets. The episode is never held whole: memory follows the clips and the longest clip.
//!
//! A jingle synthesised, mixed into twenty seconds of speech at 11.154 s, and found there to
//! the millisecond (samples in memory: a [`ClipPrint`] per clip, one [`EpisodeScan`] pass):
//!
//! ```
//! use std::sync::Arc;
//! use analysis::{synth, ClipPrint, EpisodeScan, Params};
//!
//! let rate = 8_000;
//! let jingle = synth::jingle(7, rate, 3.0);
//! let mut episode = synth::Speech::render(8, rate, synth::Voice::numbered(1), 20.0);
//! let at = 11 * rate as usize + 1_234;
//! for (e, j) in episode[at..].iter_mut().zip(&jingle) {
//!     *e += j;
//! }
//!
//! let params = Params::default();
//! let print = ClipPrint::from_samples(&jingle, rate, "jingle".into(), &params);
//! let mut scan = EpisodeScan::new(&params, &[Arc::new(print)], rate);
//! scan.push(&episode); // in pieces of any size, as they are decoded
//! let found = scan.finish(); // per clip, where it occurs
//!
//! let true_ns = at as u64 * 1_000_000_000 / u64::from(rate);
//! assert_eq!(found[0].len(), 1);
//! assert!(found[0][0].offset_ns.abs_diff(true_ns) < 1_000_000);
//! ```
//!
//! On files (any format symphonia decodes), the [`Analyser`] does the same, one pass per
//! episode for all its clips:
//!
//! ```no_run
//! use analysis::{Analyser, ClipInput, ClipOutcome, Params};
//! let analyser = Analyser::new(Params::default());
//! let report = analyser.analyse("episode.mp3".as_ref(), &[ClipInput::new("jingle.wav")])?;
//! for clip in &report.clips {
//!     match clip {
//!         ClipOutcome::Found(c) => println!("{:?}", c.offsets_ns()),
//!         ClipOutcome::Failed(e) => println!("failed: {e}"),
//!     }
//! }
//! # Ok::<(), analysis::Error>(())
//! ```
//!
//! # Layout
//!
//! - `params.rs`: [`Params`], every tuning parameter with the reason for its value.
//! - `decode.rs`: symphonia, packets to mono `f32`, gapless trimming, the file's SHA-256;
//!   sample rates and channel counts outside the bounds of `params.rs` refused.
//! - `guard.rs`: a panic inside symphonia caught, the failure of that file alone.
//! - `wav.rs`: a WAV's `fmt` chunk, checked before symphonia probes it.
//! - `ogg.rs`: a Vorbis comment header's lengths, checked before symphonia allocates them.
//! - `mp4.rs`: the encoder delay in an MP4's edit list (symphonia does not apply it).
//! - `resample.rs`: windowed-sinc resampling to the analysis rate, without delay.
//! - `spectrum.rs`: the STFT (realfft), log power per frame.
//! - `peaks.rs`: spectral peaks, density-capped by a sliding window.
//! - `landmarks.rs`: peak pairs and their hashes; [`landmarks::Fingerprinter`], the chain.
//! - `clip.rs`: [`ClipPrint`], a clip's landmarks and refinement windows per speed.
//! - `matcher.rs`: [`EpisodeScan`], the inverted index and the streaming vote.
//! - `refine.rs`: cross-correlation of windows for the precise offset and the score.
//! - `print.rs`: [`EpisodePrint`], what a later clip needs of an episode without its audio;
//!   `print_record.rs` records its packet table during the full decode, `print_window.rs`
//!   decodes a candidate's stretch from it, `print_analyse.rs` answers from a print.
//! - `findability.rs`: how findable a clip is ([`findability::Findability`]): the level above
//!   its background from which it is found, predicted by mixing it into synthetic backgrounds
//!   and running the analyser on each mix.
//! - `cache.rs`: clip fingerprints kept between calls, bounded, by content hash.
//! - `synth.rs`: deterministic test and demo audio with a truth record.
//! - `error.rs`: [`Error`].

mod cache;
pub mod clip;
pub mod decode;
mod error;
pub mod findability;
mod guard;
pub mod landmarks;
pub mod matcher;
mod mkv;
mod mp3;
mod mp4;
mod ogg;
pub mod params;
pub mod peaks;
pub mod print;
mod print_analyse;
mod print_record;
mod print_window;
pub mod refine;
pub mod resample;
pub mod spectrum;
pub mod synth;
pub mod tags;
mod wav;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

pub use clip::ClipPrint;
pub use error::Error;
pub use guard::catching as catching_decoder_panic;
pub use matcher::{EpisodeScan, Match};
pub use params::Params;
pub use print::{ByteSource, EpisodePrint, FileSource, PrintError};
pub use tags::{read_tags, Tags};

use cache::ClipCache;

/// The most clip findabilities an [`Analyser`] keeps (a hundred bytes or so each); past it
/// the kept ones are forgotten and computed again when asked for.
const MAX_FINDABILITIES: usize = 10_000;

/// Progress is reported at most this often (seconds of episode audio).
const PROGRESS_EVERY_SECONDS: u64 = 60;

/// A clip to look for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClipInput {
    /// The clip's file.
    pub path: PathBuf,
}

impl ClipInput {
    /// The clip in the file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> ClipInput {
        ClipInput { path: path.into() }
    }
}

/// What an analysis found.
#[derive(Debug)]
pub struct EpisodeReport {
    /// The episode's duration (nanoseconds), from the samples decoded.
    pub duration_ns: u64,
    /// The episode's audio decoded to make this report (nanoseconds): all of it for a full
    /// analysis; for one from a print, the stretches its refinement needed (the codec's
    /// pre-roll before each not counted).
    pub decoded_ns: u64,
    /// The episode file's SHA-256 (lower-case hex).
    pub hash: String,
    /// One outcome per clip, in the order given.
    pub clips: Vec<ClipOutcome>,
}

/// One clip's outcome: found (possibly nowhere), or failed (that clip only).
#[derive(Debug)]
pub enum ClipOutcome {
    /// The clip was analysed; it occurs at these places (possibly none).
    Found(ClipReport),
    /// The clip could not be analysed (unreadable, not audio…).
    Failed(Error),
}

/// A clip analysed against the episode.
#[derive(Debug, Clone)]
pub struct ClipReport {
    /// The clip's duration (nanoseconds).
    pub duration_ns: u64,
    /// The clip file's SHA-256 (lower-case hex).
    pub hash: String,
    /// Where it occurs, ascending offsets.
    pub matches: Vec<Match>,
}

impl ClipReport {
    /// The offsets (nanoseconds, ascending).
    pub fn offsets_ns(&self) -> Vec<u64> {
        self.matches.iter().map(|m| m.offset_ns).collect()
    }
}

/// How far the episode's decoding has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Episode audio decoded so far (nanoseconds).
    pub decoded_ns: u64,
    /// The episode's duration, if its container says.
    pub total_ns: Option<u64>,
}

/// The analyser: parameters and the clip fingerprint cache. Share one per process
/// (`&self` methods; the cache is locked briefly per clip).
pub struct Analyser {
    params: Params,
    cache: Mutex<ClipCache>,
    findabilities: Mutex<HashMap<String, findability::Findability>>,
    /// Clips whose findability a caller is predicting ([`Analyser::begin_findability`]).
    predicting: Mutex<std::collections::HashSet<String>>,
}

impl Analyser {
    /// An analyser with `params` (normally [`Params::default`]).
    pub fn new(params: Params) -> Analyser {
        Analyser {
            cache: Mutex::new(ClipCache::new(params.cache_bytes)),
            findabilities: Mutex::new(HashMap::new()),
            predicting: Mutex::new(std::collections::HashSet::new()),
            params,
        }
    }

    /// Its parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The clip's fingerprint: from the cache if the same content was seen before, else
    /// decoded and computed (and cached).
    pub fn clip(&self, path: &Path) -> Result<Arc<ClipPrint>, Error> {
        let hash = decode::hash_file(path)?;
        if let Some(p) = self.lock_cache().get(&hash) {
            return Ok(p);
        }
        let print = Arc::new(ClipPrint::from_file(path, &self.params)?);
        self.lock_cache().insert(Arc::clone(&print));
        Ok(print)
    }

    /// How findable the clip at `path` is ([`findability::predict`]): kept by content hash,
    /// so a researcher predicts each clip once however many episodes it is looked for in.
    /// Costs about twenty fingerprints of the clip the first time.
    pub fn findability(&self, path: &Path) -> Result<findability::Findability, Error> {
        let hash = decode::hash_file(path)?;
        self.findability_of(path, &hash)
    }

    /// The findability kept for the clip whose SHA-256 is `hash`, if it was predicted: never
    /// predicts (a researcher answers with what is kept and predicts after its answers).
    pub fn findability_kept(&self, hash: &str) -> Option<findability::Findability> {
        self.findabilities
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(hash)
            .cloned()
    }

    /// Claims the prediction of the clip whose SHA-256 is `hash`: false when it is kept or
    /// another caller is predicting it. [`Analyser::end_findability`] ends the claim.
    pub fn begin_findability(&self, hash: &str) -> bool {
        if self.findability_kept(hash).is_some() {
            return false;
        }
        self.predicting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(hash.to_owned())
    }

    /// Ends a claim of [`Analyser::begin_findability`].
    pub fn end_findability(&self, hash: &str) {
        self.predicting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(hash);
    }

    /// [`Analyser::findability`] of the clip at `path` whose SHA-256 is `hash` (as a
    /// [`ClipReport`] gives it: the file is not hashed again).
    pub fn findability_of(
        &self,
        path: &Path,
        hash: &str,
    ) -> Result<findability::Findability, Error> {
        let kept = self
            .findabilities
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(hash)
            .cloned();
        if let Some(f) = kept {
            return Ok(f);
        }
        let f = findability::of_file(path, &self.params)?;
        let mut kept = self
            .findabilities
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= MAX_FINDABILITIES {
            kept.clear();
        }
        kept.insert(hash.to_owned(), f.clone());
        Ok(f)
    }

    /// Where each clip occurs in the episode. A clip that cannot be analysed fails alone;
    /// an episode that cannot be decoded fails the call.
    pub fn analyse(&self, episode: &Path, clips: &[ClipInput]) -> Result<EpisodeReport, Error> {
        self.analyse_with_progress(episode, clips, &mut |_| {})
    }

    /// [`Analyser::analyse`], calling `progress` about once per minute of episode decoded.
    pub fn analyse_with_progress(
        &self,
        episode: &Path,
        clips: &[ClipInput],
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EpisodeReport, Error> {
        Ok(self.analyse_inner(episode, clips, progress, None)?.0)
    }

    /// The full analysis; printing (`Some(identity)`) also gives the episode's print.
    fn analyse_inner(
        &self,
        episode: &Path,
        clips: &[ClipInput],
        progress: &mut dyn FnMut(Progress),
        printing: Option<String>,
    ) -> Result<(EpisodeReport, Option<EpisodePrint>), Error> {
        let prints: Vec<Result<Arc<ClipPrint>, Error>> =
            clips.iter().map(|c| self.clip(&c.path)).collect();
        let usable: Vec<Arc<ClipPrint>> = prints
            .iter()
            .filter_map(|p| p.as_ref().ok().cloned())
            .collect();

        let mut decoder = if printing.is_some() {
            decode::Decoder::open_printing(episode)?
        } else {
            decode::Decoder::open(episode)?
        };
        let mut scan: Option<EpisodeScan> = None;
        let mut next_report = 0u64;
        while decoder.advance()? {
            let rate = decoder.sample_rate();
            let s = scan.get_or_insert_with(|| {
                let mut s = EpisodeScan::new(&self.params, &usable, rate);
                if printing.is_some() {
                    s.keep_peaks();
                }
                s
            });
            s.push(decoder.chunk());
            let decoded = decoder.frames_decoded();
            if decoded >= next_report {
                next_report = decoded + PROGRESS_EVERY_SECONDS * u64::from(rate);
                progress(Progress {
                    decoded_ns: ns(decoded, rate),
                    total_ns: decoder.total_frames().map(|n| ns(n, rate)),
                });
            }
        }
        let rate = decoder.sample_rate();
        let frames = decoder.frames_decoded();
        let duration_ns = ns(frames, rate);
        let (found, peaks) = scan.map(EpisodeScan::finish_keeping).unwrap_or_default();
        let log = decoder.take_packet_log();
        let hash = decoder.finish_hash()?;
        let mut found = found.into_iter();
        let mut outcomes = Vec::with_capacity(clips.len());
        for p in prints {
            outcomes.push(match p {
                Ok(print) => ClipOutcome::Found(ClipReport {
                    duration_ns: print.duration_ns(),
                    hash: print.hash().to_owned(),
                    matches: found.next().unwrap_or_default(),
                }),
                Err(e) => ClipOutcome::Failed(e),
            });
        }
        let print = printing.map(|identity| {
            print_analyse::assemble(
                &self.params,
                print_analyse::Printed {
                    identity,
                    duration_ns,
                    hash: hash.clone(),
                    rate,
                    frames,
                    media_len: std::fs::metadata(episode).map_or(0, |m| m.len()),
                    peaks,
                    log,
                },
            )
        });
        Ok((
            EpisodeReport {
                duration_ns,
                decoded_ns: duration_ns,
                hash,
                clips: outcomes,
            },
            print,
        ))
    }

    /// Clip fingerprints cached now: how many, and their bytes.
    pub fn cached_clips(&self) -> (usize, usize) {
        let cache = self.lock_cache();
        (cache.len(), cache.bytes())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, ClipCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `frames` at `rate` Hz in nanoseconds.
pub(crate) fn ns(frames: u64, rate: u32) -> u64 {
    (u128::from(frames) * 1_000_000_000 / u128::from(rate.max(1))) as u64
}
