//! The cases of issue 32's opening table, made by the test's own generator: a 4-second tonal
//! jingle (RMS 0.32) mixed at 40 s into 88 s of speech-like signal (RMS 0.098), at jingle
//! gains of +6, 0, −3, −6 and −12 dB, and with the speech turned down instead (−6 to −20 dB).
//! Each is found within 10 ms of 40 s, and nowhere else: a match at a wrong offset is worse
//! than none.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use analysis::synth::{self, EpisodeSynth};
use analysis::{ClipPrint, EpisodeScan, Match, Params};

const RATE: u32 = 16_000;
const AT_S: f64 = 40.0;

fn scaled(mut v: Vec<f32>, target_rms: f32) -> Vec<f32> {
    let g = target_rms / synth::rms(&v).max(1e-9);
    v.iter_mut().for_each(|x| *x *= g);
    v
}

/// The speech (two voices taking turns) and the jingle, at the table's levels.
fn sources(seed: u64) -> (Vec<f32>, Vec<f32>) {
    let (speech, _) = EpisodeSynth::new(seed, RATE, 88.0, 2, Vec::new(), Vec::new()).render();
    let jingle = synth::jingle(seed + 1, RATE, 4.0);
    (scaled(speech, 0.098), scaled(jingle, 0.32))
}

/// The jingle found in `speech · speech_gain + jingle · jingle_gain at 40 s`.
fn found(seed: u64, jingle_db: f32, speech_db: f32) -> Vec<Match> {
    let (speech, jingle) = sources(seed);
    let (gj, gs) = (10f32.powf(jingle_db / 20.0), 10f32.powf(speech_db / 20.0));
    let at = (AT_S * f64::from(RATE)) as usize;
    let mut mix: Vec<f32> = speech.iter().map(|x| x * gs).collect();
    for (k, x) in jingle.iter().enumerate() {
        mix[at + k] += gj * x;
    }
    let params = Params::default();
    let print = Arc::new(ClipPrint::from_samples(
        &jingle,
        RATE,
        String::new(),
        &params,
    ));
    let mut scan = EpisodeScan::new(&params, &[print], RATE);
    for chunk in mix.chunks(4_096) {
        scan.push(chunk);
    }
    scan.finish().remove(0)
}

fn assert_found_at_40s(jingle_db: f32, speech_db: f32) {
    for seed in [1, 2, 3] {
        let m = found(seed, jingle_db, speech_db);
        assert!(
            !m.is_empty(),
            "seed {seed}, jingle {jingle_db} dB, speech {speech_db} dB: not found"
        );
        for x in &m {
            let err_ms = (x.offset_ns as f64 / 1e9 - AT_S).abs() * 1e3;
            assert!(
                err_ms <= 10.0,
                "seed {seed}, jingle {jingle_db} dB, speech {speech_db} dB: {x:?} is {err_ms:.1} ms off"
            );
        }
    }
}

#[test]
fn a_jingle_6_db_up_under_speech_is_found_at_its_offset() {
    assert_found_at_40s(6.0, 0.0);
}

#[test]
fn a_jingle_at_0_db_under_speech_is_found_at_its_offset() {
    assert_found_at_40s(0.0, 0.0);
}

#[test]
fn a_jingle_3_db_down_under_speech_is_found_at_its_offset() {
    assert_found_at_40s(-3.0, 0.0);
}

#[test]
fn a_jingle_6_db_down_under_speech_is_found_at_its_offset() {
    assert_found_at_40s(-6.0, 0.0);
}

#[test]
fn a_jingle_12_db_down_under_speech_is_found_at_its_offset() {
    assert_found_at_40s(-12.0, 0.0);
}

#[test]
fn a_jingle_with_the_speech_turned_down_is_found_at_its_offset() {
    for speech_db in [-6.0, -10.0, -14.0, -20.0] {
        assert_found_at_40s(0.0, speech_db);
    }
}

/// A sound effect that repeats every 76 ms (a busy tone's beeps: 38 ms of 425 Hz and 850 Hz,
/// 38 ms of silence, for 2 s): it votes as much for a period off as for its place. Under
/// the speech at 0 dB, it is found at its offset or not at all (a strict beep train is
/// alike a period off but for its two ends, and may be refused as ambiguous); never a
/// period off.
#[test]
fn a_periodic_sound_effect_is_never_found_a_period_off() {
    let beeps: Vec<f32> = (0..2 * RATE as usize)
        .map(|i| {
            let t = i as f32 / RATE as f32;
            if (i % 1_216) < 608 {
                let w = std::f32::consts::TAU * t;
                (w * 425.0).sin() + 0.5 * (w * 850.0).sin()
            } else {
                0.0
            }
        })
        .collect();
    let beeps = scaled(beeps, 0.098);
    let params = Params::default();
    for seed in [1, 2, 3] {
        let (speech, _) = sources(seed);
        let at = (AT_S * f64::from(RATE)) as usize;
        let mut mix = speech.clone();
        for (k, x) in beeps.iter().enumerate() {
            mix[at + k] += x;
        }
        let print = Arc::new(ClipPrint::from_samples(
            &beeps,
            RATE,
            String::new(),
            &params,
        ));
        let mut scan = EpisodeScan::new(&params, &[print], RATE);
        for chunk in mix.chunks(4_096) {
            scan.push(chunk);
        }
        let found = scan.finish().remove(0);
        for x in found {
            let err_ms = (x.offset_ns as f64 / 1e9 - AT_S).abs() * 1e3;
            assert!(err_ms <= 10.0, "seed {seed}: {x:?} is {err_ms:.1} ms off");
        }
    }
}

/// A sawtooth jingle (every note a harmonic-rich tone on one tuning, as the corpus's
/// `sox synth` jingles) at the end of 60 s of speech, cut off by the episode's end after
/// `present_s`, at an odd sample offset at 16 kHz (half a sample off the 8 kHz analysis
/// grid, where a sawtooth's whole-lag correlation falls furthest).
fn cut_off_jingle(seed: u64, present_s: f64) -> (Vec<Match>, f64) {
    let mut rng = synth::Rng::new(seed);
    let tune = 228.0f64;
    let scale = [0, 2, 4, 7, 9, 12, 14, 16];
    let mut jingle = Vec::new();
    while jingle.len() < 4 * RATE as usize {
        let step = (0.15 + (rng.next_u64() % 100) as f64 / 100.0 * 0.15) * f64::from(RATE);
        let f = tune * 2f64.powf(f64::from(scale[(rng.next_u64() % 8) as usize]) / 12.0);
        let n = step as usize;
        jingle.extend((0..n).map(|i| {
            let t = i as f64 / f64::from(RATE);
            let saw = 2.0 * (t * f - (t * f + 0.5).floor());
            // Each note fades out over its last 40%, as the corpus's do.
            let fade = ((n - i) as f64 / (0.4 * n as f64)).min(1.0);
            (saw * fade * 0.3) as f32
        }));
    }
    jingle.truncate(4 * RATE as usize);
    let (speech, _) = sources(seed);
    let at = 60 * RATE as usize + 1;
    let mut mix: Vec<f32> = speech[..at].to_vec();
    mix.extend_from_slice(&jingle[..(present_s * f64::from(RATE)) as usize]);
    let params = Params::default();
    let print = Arc::new(ClipPrint::from_samples(
        &jingle,
        RATE,
        String::new(),
        &params,
    ));
    let mut scan = EpisodeScan::new(&params, &[print], RATE);
    for chunk in mix.chunks(4_096) {
        scan.push(chunk);
    }
    (scan.finish().remove(0), at as f64 / f64::from(RATE))
}

/// A clip cut off by the episode's end is found when two seconds of it are there, and is
/// never reported more than 10 ms off however little of it is left.
#[test]
fn a_jingle_cut_off_by_the_end_is_found_at_its_offset_or_not_at_all() {
    for seed in [1, 2, 3] {
        for present_s in [1.2, 1.5, 2.0, 3.0] {
            let (m, at_s) = cut_off_jingle(seed, present_s);
            for x in &m {
                let err_ms = (x.offset_ns as f64 / 1e9 - at_s).abs() * 1e3;
                assert!(
                    err_ms <= 10.0,
                    "seed {seed}, {present_s} s present: {x:?} is {err_ms:.1} ms off"
                );
            }
            if present_s >= 2.0 {
                assert!(
                    !m.is_empty(),
                    "seed {seed}, {present_s} s present: not found"
                );
            }
        }
    }
}
