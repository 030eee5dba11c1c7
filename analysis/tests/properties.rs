//! Property: a clip inserted anywhere in an episode is found there, within 10 ms, under any
//! one of the distortions the analyser must tolerate (gain, added noise, ±1% speed, a small
//! low-pass), and nowhere else.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use analysis::{ClipPrint, EpisodeScan, Params};
use proptest::prelude::*;

const RATE: u32 = 16_000;
const SECONDS: f64 = 40.0;

#[derive(Debug, Clone, Copy)]
enum Distortion {
    Gain(f32),
    /// Pink noise at this SNR (dB) against the episode's speech.
    Noise(f32),
    Speed(f64),
    LowPass(f32),
}

fn distortion() -> impl Strategy<Value = Distortion> {
    prop_oneof![
        (0.1f32..2.0).prop_map(Distortion::Gain),
        (10f32..30.0).prop_map(Distortion::Noise),
        prop_oneof![Just(0.99), Just(1.01)].prop_map(Distortion::Speed),
        (2_500f32..5_000.0).prop_map(Distortion::LowPass),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn an_inserted_clip_is_found_at_its_offset(
        seed in 0u64..1_000,
        offset_ms in 0u64..34_000,
        distortion in distortion(),
    ) {
        let params = Params::default();
        let clip = Speech::render(seed, RATE, Voice::numbered(seed as u32), 5.0);
        let mut inserted = clip.clone();
        let mut gain = 1.0;
        match distortion {
            Distortion::Gain(g) => gain = g,
            Distortion::Speed(s) => inserted = synth::change_speed(&clip, s),
            Distortion::LowPass(f) => synth::low_pass(&mut inserted, RATE, f),
            Distortion::Noise(_) => {}
        }
        let offset = offset_ms * u64::from(RATE) / 1_000;
        let insertion = Insertion { clip: 0, offset, gain, over: false };
        let mut episode = EpisodeSynth::new(seed + 1, RATE, SECONDS, 2, vec![Arc::new(inserted)], vec![insertion]);
        if let Distortion::Noise(snr) = distortion {
            let level = synth::rms(&clip);
            // PinkNoise has an RMS of about 0.1 at gain 1.
            episode = episode.with_noise(seed + 2, level * 10f32.powf(-snr / 20.0) / 0.1);
        }
        let truth = episode.truth()[0][0];
        let (samples, _) = episode.render();
        let print = Arc::new(ClipPrint::from_samples(&clip, RATE, String::new(), &params));
        let mut scan = EpisodeScan::new(&params, &[print], RATE);
        for chunk in samples.chunks(3_000) {
            scan.push(chunk);
        }
        let found = scan.finish();
        prop_assert_eq!(found[0].len(), 1, "{:?}", found[0]);
        let err = found[0][0].offset_ns.abs_diff(truth);
        prop_assert!(err <= 10_000_000, "error {} µs: {:?}", err / 1_000, found[0][0]);
    }
}
