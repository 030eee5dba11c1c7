//! Deterministic test and demo audio, synthesised: speech-like formant signals in several
//! voices, jingles, music beds, pink noise, a telephone ("voicemail") band-pass, and
//! episodes with clips inserted at known offsets together with the truth of where.
//!
//! Everything is a function of its seed: the same call gives the same samples on every
//! machine. Episodes are generated a chunk at a time ([`EpisodeSynth::fill`]), so an
//! hour-long one needs no more memory than a short one. The truth comes from the
//! generator ([`EpisodeSynth::truth`]); the analyser never writes it.

use std::f32::consts::PI;
use std::sync::Arc;

/// A small deterministic generator (SplitMix64): the same seed, the same numbers, always.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `[-1, 1)`.
    pub fn signed(&mut self) -> f32 {
        2.0 * self.unit() - 1.0
    }
}

/// A two-pole resonator (one formant).
#[derive(Debug, Clone, Default)]
struct Resonator {
    a0: f32,
    b1: f32,
    b2: f32,
    y1: f32,
    y2: f32,
}

impl Resonator {
    fn tune(&mut self, freq: f32, bandwidth: f32, rate: f32) {
        let freq = freq.min(0.45 * rate);
        let r = (-PI * bandwidth / rate).exp();
        self.b1 = 2.0 * r * (2.0 * PI * freq / rate).cos();
        self.b2 = -r * r;
        self.a0 = 1.0 - r;
    }

    fn step(&mut self, x: f32) -> f32 {
        let y = self.a0 * x + self.b1 * self.y1 + self.b2 * self.y2;
        self.y2 = self.y1;
        self.y1 = y;
        y
    }
}

/// A voice: pitch, vocal tract size and speaking rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Voice {
    /// Mean fundamental frequency (Hz).
    pub pitch_hz: f32,
    /// Formant frequencies relative to an adult male's (1.0); ~1.15 for a female voice.
    pub formant_scale: f32,
    /// Syllables per second.
    pub syllable_rate: f32,
}

impl Voice {
    /// The `i`-th of a set of distinct voices (low and high, fast and slow).
    pub fn numbered(i: u32) -> Voice {
        const VOICES: [(f32, f32, f32); 6] = [
            (105.0, 1.0, 4.0),
            (210.0, 1.17, 4.6),
            (135.0, 1.05, 3.4),
            (185.0, 1.12, 5.0),
            (95.0, 0.95, 4.3),
            (240.0, 1.22, 3.8),
        ];
        let (pitch_hz, formant_scale, syllable_rate) = VOICES[i as usize % VOICES.len()];
        Voice {
            pitch_hz,
            formant_scale,
            syllable_rate,
        }
    }
}

/// Vowel formants (F1, F2, F3) of an adult male voice, Hz.
const VOWELS: [(f32, f32, f32); 8] = [
    (730.0, 1090.0, 2440.0),
    (270.0, 2290.0, 3010.0),
    (530.0, 1840.0, 2480.0),
    (660.0, 1720.0, 2410.0),
    (570.0, 840.0, 2410.0),
    (300.0, 870.0, 2240.0),
    (440.0, 1020.0, 2240.0),
    (490.0, 1350.0, 1690.0),
];

#[derive(Debug, Clone, Copy)]
enum Segment {
    Vowel { f0: f32, slope: f32 },
    Fricative,
    Pause,
}

/// Speech-like sound: syllables of voiced formant sound, fricative noise and pauses, in one
/// voice. Not words, but it has what a fingerprint sees in speech: harmonics moving with
/// the pitch, formants, onsets and gaps.
#[derive(Debug, Clone)]
pub struct Speech {
    rng: Rng,
    rate: f32,
    voice: Voice,
    formants: [Resonator; 3],
    fricative: Resonator,
    phase: f32,
    segment: Segment,
    seg_len: usize,
    seg_pos: usize,
}

impl Speech {
    /// Speech in `voice` at `rate` Hz, from `seed`.
    pub fn new(seed: u64, rate: u32, voice: Voice) -> Speech {
        let mut s = Speech {
            rng: Rng::new(seed),
            rate: rate as f32,
            voice,
            formants: Default::default(),
            fricative: Resonator::default(),
            phase: 0.0,
            segment: Segment::Pause,
            seg_len: 0,
            seg_pos: 0,
        };
        s.next_segment();
        s
    }

    fn next_segment(&mut self) {
        let rng = &mut self.rng;
        let kind = rng.unit();
        let syllable = 1.0 / self.voice.syllable_rate;
        let (segment, seconds) = if kind < 0.7 {
            let v = VOWELS[(rng.next_u64() % VOWELS.len() as u64) as usize];
            let s = self.voice.formant_scale * rng.range(0.95, 1.05);
            for (r, (f, b)) in
                self.formants
                    .iter_mut()
                    .zip([(v.0, 70.0), (v.1, 100.0), (v.2, 140.0)])
            {
                r.tune(f * s, b, self.rate);
            }
            let f0 = self.voice.pitch_hz * rng.range(0.85, 1.2);
            (
                Segment::Vowel {
                    f0,
                    slope: rng.range(-0.4, 0.3) * f0,
                },
                syllable * rng.range(0.5, 1.1),
            )
        } else if kind < 0.85 {
            self.fricative
                .tune(rng.range(2200.0, 3600.0), 1500.0, self.rate);
            (Segment::Fricative, syllable * rng.range(0.25, 0.5))
        } else {
            (Segment::Pause, syllable * rng.range(0.2, 1.6))
        };
        self.segment = segment;
        self.seg_len = ((seconds * self.rate) as usize).max(1);
        self.seg_pos = 0;
    }

    /// Writes the next `out.len()` samples (peak level about 0.5).
    pub fn fill(&mut self, out: &mut [f32]) {
        for o in out.iter_mut() {
            if self.seg_pos >= self.seg_len {
                self.next_segment();
            }
            let x = self.seg_pos as f32 / self.seg_len as f32;
            // A raised-sine envelope: syllables start and end softly, as speech does.
            let env = (PI * x).sin();
            let y = match self.segment {
                Segment::Vowel { f0, slope } => {
                    let f = f0 + slope * x;
                    self.phase += f / self.rate;
                    if self.phase >= 1.0 {
                        self.phase -= 1.0;
                    }
                    // A glottal-like pulse train: rich in harmonics, falling ~12 dB/octave.
                    let pulse = if self.phase < 0.4 {
                        (PI * self.phase / 0.4).sin().powi(2)
                    } else {
                        0.0
                    } - 0.25;
                    let src = pulse + 0.02 * self.rng.signed();
                    let v: f32 = self.formants.iter_mut().map(|r| r.step(src)).sum();
                    0.5 * v * env
                }
                Segment::Fricative => 0.25 * self.fricative.step(self.rng.signed()) * env,
                Segment::Pause => 0.0,
            };
            *o = y;
            self.seg_pos += 1;
        }
    }

    /// `seconds` of speech in one buffer.
    pub fn render(seed: u64, rate: u32, voice: Voice, seconds: f32) -> Vec<f32> {
        let mut out = vec![0.0; (seconds * rate as f32) as usize];
        Speech::new(seed, rate, voice).fill(&mut out);
        out
    }
}

/// A jingle: a short tune of decaying harmonic notes over a noise-burst beat.
pub fn jingle(seed: u64, rate: u32, seconds: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let r = rate as f32;
    let n = (seconds * r) as usize;
    let mut out = vec![0.0f32; n];
    // A pentatonic scale around A4.
    let scale = [0.0f32, 2.0, 4.0, 7.0, 9.0, 12.0, 14.0, 16.0];
    let mut t = 0usize;
    while t < n {
        let len = (r * [0.15f32, 0.2, 0.3, 0.4][(rng.next_u64() % 4) as usize]) as usize;
        let semis = scale[(rng.next_u64() % scale.len() as u64) as usize] - 5.0;
        let freq = 440.0 * 2f32.powf(semis / 12.0);
        for (k, o) in out[t..(t + len).min(n)].iter_mut().enumerate() {
            let time = k as f32 / r;
            let env = (-time * 6.0).exp() * (1.0 - (-time * 400.0).exp());
            let ph = 2.0 * PI * freq * time;
            *o += 0.3 * env * (ph.sin() + 0.4 * (2.0 * ph).sin() + 0.2 * (3.0 * ph).sin());
        }
        // A percussive click at each note's start.
        for (k, o) in out[t..(t + len / 4).min(n)].iter_mut().enumerate() {
            *o += 0.15 * rng.signed() * (-(k as f32) / (0.01 * r)).exp();
        }
        t += len;
    }
    out
}

/// A music bed: sustained chords, changing every few seconds.
#[derive(Debug, Clone)]
pub struct MusicBed {
    rng: Rng,
    rate: f32,
    n: u64,
    chord: [f32; 3],
    chord_left: u64,
}

impl MusicBed {
    /// A bed at `rate` Hz from `seed`.
    pub fn new(seed: u64, rate: u32) -> MusicBed {
        MusicBed {
            rng: Rng::new(seed),
            rate: rate as f32,
            n: 0,
            chord: [220.0, 277.0, 330.0],
            chord_left: 0,
        }
    }

    /// Adds the next `out.len()` samples of the bed, at `gain`, to `out`.
    pub fn add(&mut self, out: &mut [f32], gain: f32) {
        for o in out.iter_mut() {
            if self.chord_left == 0 {
                let root = 110.0 * 2f32.powf((self.rng.next_u64() % 12) as f32 / 12.0);
                self.chord = [root, root * 1.26, root * 1.5];
                self.chord_left = (self.rate * self.rng.range(2.0, 5.0)) as u64;
            }
            let t = self.n as f32 / self.rate;
            let v: f32 = self.chord.iter().map(|f| (2.0 * PI * f * t).sin()).sum();
            *o += gain * v / 3.0;
            self.n += 1;
            self.chord_left -= 1;
        }
    }
}

/// Pink noise (−3 dB/octave; Paul Kellet's filter), RMS about 0.1 at gain 1.
#[derive(Debug, Clone)]
pub struct PinkNoise {
    rng: Rng,
    b: [f32; 7],
}

impl PinkNoise {
    /// Pink noise from `seed`.
    pub fn new(seed: u64) -> PinkNoise {
        PinkNoise {
            rng: Rng::new(seed),
            b: [0.0; 7],
        }
    }

    /// The next sample.
    pub fn next_sample(&mut self) -> f32 {
        let w = self.rng.signed() * 0.5;
        let b = &mut self.b;
        b[0] = 0.99886 * b[0] + w * 0.0555179;
        b[1] = 0.99332 * b[1] + w * 0.0750759;
        b[2] = 0.96900 * b[2] + w * 0.153_852;
        b[3] = 0.86650 * b[3] + w * 0.3104856;
        b[4] = 0.55000 * b[4] + w * 0.5329522;
        b[5] = -0.7616 * b[5] - w * 0.0168980;
        let y = b[..6].iter().sum::<f32>() + b[6] + w * 0.5362;
        b[6] = w * 0.115926;
        y * 0.11
    }
}

/// A biquad section (RBJ cookbook).
#[derive(Debug, Clone)]
struct Biquad {
    b: [f32; 3],
    a: [f32; 2],
    x: [f32; 2],
    y: [f32; 2],
}

impl Biquad {
    fn new(high_pass: bool, freq: f32, rate: f32) -> Biquad {
        let w = 2.0 * PI * freq / rate;
        let alpha = w.sin() / (2.0 * std::f32::consts::FRAC_1_SQRT_2);
        let c = w.cos();
        let a0 = 1.0 + alpha;
        let b = if high_pass {
            [(1.0 + c) / 2.0, -(1.0 + c), (1.0 + c) / 2.0]
        } else {
            [(1.0 - c) / 2.0, 1.0 - c, (1.0 - c) / 2.0]
        };
        Biquad {
            b: b.map(|v| v / a0),
            a: [-2.0 * c / a0, (1.0 - alpha) / a0],
            x: [0.0; 2],
            y: [0.0; 2],
        }
    }

    fn step(&mut self, x: f32) -> f32 {
        let y = self.b[0] * x + self.b[1] * self.x[0] + self.b[2] * self.x[1]
            - self.a[0] * self.y[0]
            - self.a[1] * self.y[1];
        self.x = [x, self.x[0]];
        self.y = [y, self.y[0]];
        y
    }
}

/// The telephone band: 300–3400 Hz, fourth-order slopes each side ("voicemail").
pub fn voicemail(samples: &mut [f32], rate: u32) {
    let r = rate as f32;
    let mut filters = [
        Biquad::new(true, 300.0, r),
        Biquad::new(true, 300.0, r),
        Biquad::new(false, 3400.0, r),
        Biquad::new(false, 3400.0, r),
    ];
    for s in samples.iter_mut() {
        *s = filters.iter_mut().fold(*s, |x, f| f.step(x));
    }
}

/// A first-order low-pass at `freq` Hz, in place (a "small low-pass" distortion).
pub fn low_pass(samples: &mut [f32], rate: u32, freq: f32) {
    let mut f = Biquad::new(false, freq, rate as f32);
    for s in samples.iter_mut() {
        *s = f.step(*s);
    }
}

/// The samples played at `speed` (1.01: 1% faster and higher), by linear interpolation.
pub fn change_speed(samples: &[f32], speed: f64) -> Vec<f32> {
    let n = (samples.len() as f64 / speed).floor() as usize;
    (0..n)
        .map(|i| {
            let x = i as f64 * speed;
            let k = x.floor() as usize;
            let f = (x - k as f64) as f32;
            let a = samples.get(k).copied().unwrap_or(0.0);
            let b = samples.get(k + 1).copied().unwrap_or(0.0);
            a + (b - a) * f
        })
        .collect()
}

/// A linear gain ramp from `from` at the first sample to `to` at the last, in place (a
/// level change that is not one constant gain: a producer riding the fader).
pub fn gain_ramp(samples: &mut [f32], from: f32, to: f32) {
    let last = samples.len().saturating_sub(1).max(1) as f32;
    for (i, s) in samples.iter_mut().enumerate() {
        *s *= from + (to - from) * i as f32 / last;
    }
}

/// Linear fades in and out over `seconds` at each end, in place (how a clip is often
/// spliced in).
pub fn fade(samples: &mut [f32], rate: u32, seconds: f32) {
    let n = ((seconds * rate as f32) as usize).clamp(1, samples.len().max(1));
    let len = samples.len();
    for i in 0..n.min(len) {
        let g = i as f32 / n as f32;
        samples[i] *= g;
        samples[len - 1 - i] *= g;
    }
}

/// A feed-forward dynamic range compressor, in place: above `threshold` (linear peak level)
/// the level rises only 1/`ratio` as fast; 5 ms attack, 100 ms release, and make-up gain
/// back to about the original peak level. Broadcast processing does this to a whole
/// episode, so the clip inside is reshaped by whatever surrounds it.
pub fn compress(samples: &mut [f32], rate: u32, threshold: f32, ratio: f32) {
    let r = rate as f32;
    let attack = (-1.0 / (0.005 * r)).exp();
    let release = (-1.0 / (0.1 * r)).exp();
    let makeup = (0.5 / threshold).powf(1.0 - 1.0 / ratio.max(1.0));
    let mut env = 0.0f32;
    for s in samples.iter_mut() {
        let x = s.abs();
        let k = if x > env { attack } else { release };
        env = k * env + (1.0 - k) * x;
        let gain = if env > threshold {
            (threshold / env).powf(1.0 - 1.0 / ratio.max(1.0))
        } else {
            1.0
        };
        *s *= gain * makeup;
    }
}

/// One clip placed in an episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Insertion {
    /// Which clip (index into [`EpisodeSynth::new`]'s clips).
    pub clip: usize,
    /// Where its first sample goes (episode samples).
    pub offset: u64,
    /// Its gain.
    pub gain: f32,
    /// Whether the episode's own sound goes on under it (talk-over) instead of stopping
    /// for it (an edit).
    pub over: bool,
}

/// An episode: alternating voices, an optional music bed and noise, and clips inserted at
/// known places. Generated a chunk at a time.
pub struct EpisodeSynth {
    rate: u32,
    len: u64,
    pos: u64,
    voices: Vec<Speech>,
    turn: usize,
    turn_left: u64,
    rng: Rng,
    bed: Option<(MusicBed, f32)>,
    noise: Option<(PinkNoise, f32)>,
    clips: Vec<Arc<Vec<f32>>>,
    insertions: Vec<Insertion>,
    scratch: Vec<f32>,
}

impl EpisodeSynth {
    /// An episode of `seconds` at `rate` Hz from `seed`, speech in `voices` voices taking
    /// turns; `clips` are the sounds `insertions` refer to.
    pub fn new(
        seed: u64,
        rate: u32,
        seconds: f64,
        voices: u32,
        clips: Vec<Arc<Vec<f32>>>,
        insertions: Vec<Insertion>,
    ) -> EpisodeSynth {
        let voices = (0..voices.max(1))
            .map(|v| {
                Speech::new(
                    seed.wrapping_mul(31).wrapping_add(u64::from(v)),
                    rate,
                    Voice::numbered(v),
                )
            })
            .collect();
        EpisodeSynth {
            rate,
            len: (seconds * f64::from(rate)) as u64,
            pos: 0,
            voices,
            turn: 0,
            turn_left: 0,
            rng: Rng::new(seed),
            bed: None,
            noise: None,
            clips,
            insertions,
            scratch: Vec::new(),
        }
    }

    /// Adds a music bed under the speech at `gain`.
    pub fn with_bed(mut self, seed: u64, gain: f32) -> EpisodeSynth {
        self.bed = Some((MusicBed::new(seed, self.rate), gain));
        self
    }

    /// Adds pink noise over everything (clips included) at `gain` (RMS ≈ 0.1 · gain).
    pub fn with_noise(mut self, seed: u64, gain: f32) -> EpisodeSynth {
        self.noise = Some((PinkNoise::new(seed), gain));
        self
    }

    /// Total samples.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the episode has no samples.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sample rate.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Where each clip truly starts (nanoseconds), per clip index, ascending: the part of
    /// an insertion past the episode's end is cut off, but it still counts.
    pub fn truth(&self) -> Vec<Vec<u64>> {
        let mut t = vec![Vec::new(); self.clips.len()];
        for i in &self.insertions {
            if i.offset < self.len {
                t[i.clip]
                    .push((u128::from(i.offset) * 1_000_000_000 / u128::from(self.rate)) as u64);
            }
        }
        for v in &mut t {
            v.sort_unstable();
        }
        t
    }

    /// Writes the next samples into `out`; returns how many (0 at the end).
    pub fn fill(&mut self, out: &mut [f32]) -> usize {
        let n = (self.len - self.pos).min(out.len() as u64) as usize;
        let out = &mut out[..n];
        // Speech, a turn at a time.
        let mut done = 0;
        while done < n {
            if self.turn_left == 0 {
                self.turn = (self.rng.next_u64() % self.voices.len() as u64) as usize;
                self.turn_left =
                    (f64::from(self.rate) * f64::from(self.rng.range(8.0, 40.0))) as u64;
            }
            let k = (self.turn_left.min((n - done) as u64)) as usize;
            self.voices[self.turn].fill(&mut out[done..done + k]);
            self.turn_left -= k as u64;
            done += k;
        }
        if let Some((bed, gain)) = &mut self.bed {
            bed.add(out, *gain);
        }
        // Clips: an edit replaces the sound under it; talk-over adds to it.
        let start = self.pos;
        for ins in &self.insertions {
            let clip = &self.clips[ins.clip];
            let (c0, c1) = (ins.offset, ins.offset + clip.len() as u64);
            let (a, b) = (c0.max(start), c1.min(start + n as u64));
            if a >= b {
                continue;
            }
            for s in a..b {
                let o = &mut out[(s - start) as usize];
                let v = ins.gain * clip[(s - c0) as usize];
                *o = if ins.over { *o + v } else { v };
            }
        }
        if let Some((noise, gain)) = &mut self.noise {
            for o in out.iter_mut() {
                *o += *gain * noise.next_sample();
            }
        }
        self.scratch.clear();
        self.pos += n as u64;
        n
    }

    /// The whole episode in one buffer (short episodes).
    pub fn render(mut self) -> (Vec<f32>, Vec<Vec<u64>>) {
        let truth = self.truth();
        let mut out = vec![0.0; self.len as usize];
        self.fill(&mut out);
        (out, truth)
    }
}

/// The RMS level of `samples`.
pub fn rms(samples: &[f32]) -> f32 {
    if samples.is_empty() {
        return 0.0;
    }
    (samples.iter().map(|x| x * x).sum::<f32>() / samples.len() as f32).sqrt()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sound() {
        let a = Speech::render(3, 16_000, Voice::numbered(1), 2.0);
        let b = Speech::render(3, 16_000, Voice::numbered(1), 2.0);
        let c = Speech::render(4, 16_000, Voice::numbered(1), 2.0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(
            rms(&a) > 0.02 && a.iter().all(|x| x.abs() < 1.0),
            "rms {}",
            rms(&a)
        );
    }

    #[test]
    fn insertions_land_where_the_truth_says() {
        let clip = Arc::new(vec![0.9f32; 100]);
        let synth = EpisodeSynth::new(
            1,
            8_000,
            1.0,
            2,
            vec![clip],
            vec![
                Insertion {
                    clip: 0,
                    offset: 1_000,
                    gain: 1.0,
                    over: false,
                },
                Insertion {
                    clip: 0,
                    offset: 7_950,
                    gain: 1.0,
                    over: false,
                },
            ],
        );
        let (samples, truth) = synth.render();
        assert_eq!(truth, vec![vec![125_000_000, 993_750_000]]);
        assert!(samples[1_000..1_100].iter().all(|&x| x == 0.9));
        assert_eq!(samples.len(), 8_000);
    }

    #[test]
    fn voicemail_removes_the_low_band() {
        let rate = 16_000;
        let mut low: Vec<f32> = (0..rate)
            .map(|i| (2.0 * PI * 100.0 * i as f32 / rate as f32).sin())
            .collect();
        let mut mid: Vec<f32> = (0..rate)
            .map(|i| (2.0 * PI * 1_000.0 * i as f32 / rate as f32).sin())
            .collect();
        voicemail(&mut low, rate as u32);
        voicemail(&mut mid, rate as u32);
        assert!(rms(&low[4_000..]) < 0.05 && rms(&mid[4_000..]) > 0.6);
    }
}
