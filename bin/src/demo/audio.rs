//! The demo's audio, synthesised (crate `analysis`'s `synth`, no download, no encoder): each
//! clip of the data set as a WAV file, each episode as speech in two voices with its clips put
//! in at known places, and the truth of where, which only the generator knows. The reference
//! analyser then has to find them from the audio alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use analysis::synth::{self, EpisodeSynth, Insertion, Rng, Speech, Voice};
use anyhow::Context;

use crate::demo::clips::{ClipKind, CLIPS};

/// The sample rate of every file: the rate the reference analyser works at, so nothing is
/// lost, and the files stay small (16 kB a second).
pub(crate) const RATE: u32 = 8_000;
/// Episodes are at least this long.
const MIN_SECONDS: f64 = 30.0;

/// One episode's audio: its length and which clips go where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EpisodePlan {
    /// The episode number, which seeds its sound.
    pub(crate) number: u64,
    pub(crate) seconds: f64,
    /// Indexes into [`CLIPS`]; offsets in samples at [`RATE`].
    pub(crate) insertions: Vec<Insertion>,
}

impl EpisodePlan {
    /// Where each clip of [`CLIPS`] starts in the episode, in nanoseconds, ascending: the
    /// truth the demo's summary checks the analyser against. A clip cut off by the episode's
    /// end counts where it starts.
    pub(crate) fn truth(&self) -> Vec<Vec<i64>> {
        let mut truth = vec![Vec::new(); CLIPS.len()];
        let len = (self.seconds * f64::from(RATE)) as u64;
        for i in self.insertions.iter().filter(|i| i.offset < len) {
            if let Some(t) = truth.get_mut(i.clip) {
                t.push((i128::from(i.offset) * 1_000_000_000 / i128::from(RATE)) as i64);
            }
        }
        for t in &mut truth {
            t.sort_unstable();
        }
        truth
    }
}

/// Plans episode `number`: `occurrences(clip)` says how many times each clip of [`CLIPS`]
/// occurs. The intro opens the episode at 0 s; the others follow in a shuffled order with
/// speech between them; the outro closes it, and one episode in four ends in the middle of
/// its outro.
pub(crate) fn plan(number: u64, mut occurrences: impl FnMut(usize) -> u32) -> EpisodePlan {
    let mut rng = Rng::new(number);
    let sec = f64::from(RATE);
    let samples = |seconds: f32| (f64::from(seconds) * sec) as u64;
    let counts: Vec<u32> = (0..CLIPS.len()).map(&mut occurrences).collect();
    let mut insertions = Vec::new();
    let mut t = 0u64;
    let mut body = Vec::new();
    for (clip, (spec, &count)) in CLIPS.iter().zip(&counts).enumerate() {
        match spec.kind {
            ClipKind::Intro if count > 0 => {
                insertions.push(Insertion {
                    clip,
                    offset: 0,
                    gain: 0.9,
                    over: false,
                });
                t = samples(spec.seconds);
            }
            ClipKind::Intro | ClipKind::Outro => {}
            _ => body.extend(std::iter::repeat_n(clip, count as usize)),
        }
    }
    // Fisher–Yates with the episode's own generator: the same order every run.
    for i in (1..body.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        body.swap(i, j);
    }
    for clip in body {
        let spec = &CLIPS[clip];
        t += samples(rng.range(3.0, 7.0));
        let (gain, over) = match spec.kind {
            // A listener's call plays under the host, who talks over it.
            ClipKind::Voicemail => (0.8, true),
            ClipKind::Catchphrase => (1.0, false),
            _ => (0.9, false),
        };
        insertions.push(Insertion {
            clip,
            offset: t,
            gain,
            over,
        });
        t += samples(spec.seconds);
    }
    t = (t + samples(rng.range(3.0, 6.0))).max((MIN_SECONDS * sec) as u64);
    let outro = CLIPS
        .iter()
        .position(|c| c.kind == ClipKind::Outro)
        .filter(|&i| counts[i] > 0);
    let end = match outro {
        Some(clip) => {
            insertions.push(Insertion {
                clip,
                offset: t,
                gain: 0.9,
                over: false,
            });
            let len = samples(CLIPS[clip].seconds);
            if number.is_multiple_of(4) {
                t + len * 6 / 10
            } else {
                t + len + samples(1.5)
            }
        }
        None => t + samples(2.0),
    };
    EpisodePlan {
        number,
        seconds: end as f64 / sec,
        insertions,
    }
}

/// The sound of clip `index` of [`CLIPS`].
pub(crate) fn clip_samples(index: usize) -> Vec<f32> {
    let Some(spec) = CLIPS.get(index) else {
        return Vec::new();
    };
    let seed = 7_000 + index as u64;
    match spec.kind {
        ClipKind::Intro | ClipKind::Outro | ClipKind::Jingle => {
            synth::jingle(seed, RATE, spec.seconds)
        }
        // The host's voice (the episodes' first), saying something of its own.
        ClipKind::Catchphrase => Speech::render(seed, RATE, Voice::numbered(0), spec.seconds),
        ClipKind::Voicemail => {
            let mut s = Speech::render(seed, RATE, Voice::numbered(5), spec.seconds);
            synth::voicemail(&mut s, RATE);
            s
        }
        ClipKind::Ad => Speech::render(
            seed,
            RATE,
            Voice::numbered(3 + (index % 2) as u32),
            spec.seconds,
        ),
    }
}

/// Where episode `number`'s audio is.
pub(crate) fn episode_path(dir: &Path, number: u64) -> PathBuf {
    dir.join("episodes").join(format!("{number}.wav"))
}

/// Where the clip titled `title`'s audio is.
pub(crate) fn clip_path(dir: &Path, title: &str) -> PathBuf {
    let slug: String = title
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' | '-' | ':' => Some('-'),
            _ => None,
        })
        .collect();
    dir.join("clips").join(format!("{slug}.wav"))
}

/// Writes every clip and every planned episode under `dir` (files already there are
/// written again: the same bytes). Returns the seconds of audio written.
pub(crate) fn render(dir: &Path, plans: &[EpisodePlan]) -> anyhow::Result<f64> {
    for sub in ["episodes", "clips"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let clips: Vec<Arc<Vec<f32>>> = (0..CLIPS.len())
        .map(|i| Arc::new(clip_samples(i)))
        .collect();
    let mut seconds = 0.0;
    for (spec, samples) in CLIPS.iter().zip(&clips) {
        write_wav(&clip_path(dir, spec.title), &mut samples.iter().copied())?;
        seconds += samples.len() as f64 / f64::from(RATE);
    }
    for plan in plans {
        let mut episode = EpisodeSynth::new(
            plan.number.wrapping_mul(7_919),
            RATE,
            plan.seconds,
            2,
            clips.clone(),
            plan.insertions.clone(),
        );
        if plan.number.is_multiple_of(2) {
            episode = episode.with_bed(plan.number, 0.03);
        }
        let mut buf = vec![0f32; 1 << 15];
        let mut chunks = std::iter::from_fn(|| {
            let n = episode.fill(&mut buf);
            (n > 0).then(|| buf[..n].to_vec())
        })
        .flatten();
        write_wav(&episode_path(dir, plan.number), &mut chunks)?;
        seconds += plan.seconds;
    }
    Ok(seconds)
}

/// Writes `samples` as a 16-bit mono WAV file at [`RATE`].
fn write_wav(path: &Path, samples: &mut dyn Iterator<Item = f32>) -> anyhow::Result<()> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let cannot = || format!("cannot write {}", path.display());
    let mut w = hound::WavWriter::create(path, spec).with_context(cannot)?;
    for s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32_767.0) as i16)
            .with_context(cannot)?;
    }
    w.finalize().with_context(cannot)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn plans_put_the_intro_first_and_nothing_on_top_of_anything_else() {
        let p = plan(3990, |_| 1);
        assert_eq!(p.insertions[0].offset, 0);
        let mut spans: Vec<(u64, u64)> = p
            .insertions
            .iter()
            .map(|i| {
                let len = (f64::from(CLIPS[i.clip].seconds) * f64::from(RATE)) as u64;
                (i.offset, i.offset + len)
            })
            .collect();
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
        // Every clip occurs once; the outro is cut off in one episode of four (3990 is not).
        let truth = p.truth();
        assert!(truth.iter().all(|t| t.len() == 1), "{truth:?}");
        assert_eq!(p, plan(3990, |_| 1));
        let cut = plan(3992, |_| 1);
        let outro = cut.insertions.last().unwrap();
        let len = (cut.seconds * f64::from(RATE)) as u64;
        assert!(outro.offset < len && outro.offset + 4 * u64::from(RATE) > len);
    }

    #[test]
    fn a_clip_absent_from_a_plan_has_no_truth() {
        let p = plan(3991, |clip| u32::from(clip != 2));
        assert!(p.truth()[2].is_empty());
        assert!(p.seconds >= MIN_SECONDS);
    }
}
