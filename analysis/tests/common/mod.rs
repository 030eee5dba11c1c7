//! What the analyser's integration tests and benchmarks share: writing generated samples as a
//! WAV file, and encoding it with ffmpeg (`scripts/test.sh` installs it). The benchmarks take
//! this file in with `#[path]`.
#![allow(dead_code)] // each test binary uses what it needs of it

use std::path::Path;
use std::process::Command;

/// `samples` (−1–1, clipped beyond) as a 16-bit mono WAV at `rate` Hz.
pub(crate) fn write_wav(path: &Path, samples: &[f32], rate: u32) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).expect("create wav");
    for &s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32_767.0) as i16)
            .expect("write sample");
    }
    w.finalize().expect("finalize wav");
}

/// `ffmpeg -i input ARGS output`, which must succeed.
pub(crate) fn ffmpeg(input: &Path, output: &Path, args: &[&str]) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
        .arg(input)
        .args(args)
        .arg(output)
        .status()
        .expect("ffmpeg is needed for these tests: run scripts/test.sh, or apt-get install ffmpeg");
    assert!(status.success(), "ffmpeg failed for {}", output.display());
}
