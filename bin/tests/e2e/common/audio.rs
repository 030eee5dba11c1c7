//! Audio files for the tests that analyse: synthesised samples written as 16-bit mono WAV.

use std::path::Path;

/// Writes what `synth` fills (a buffer at a time, 0 at the end) to `path` at `rate` Hz.
pub(crate) fn write_wav(path: &Path, rate: u32, synth: &mut dyn FnMut(&mut [f32]) -> usize) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    let mut buf = vec![0f32; 1 << 16];
    loop {
        let n = synth(&mut buf);
        if n == 0 {
            break;
        }
        for &s in &buf[..n] {
            w.write_sample((s.clamp(-1.0, 1.0) * 32_767.0) as i16)
                .unwrap();
        }
    }
    w.finalize().unwrap();
}

/// Writes `samples` to `path` at `rate` Hz.
pub(crate) fn write_samples(path: &Path, rate: u32, samples: &[f32]) {
    let mut at = 0;
    write_wav(path, rate, &mut |buf| {
        let n = buf.len().min(samples.len() - at);
        buf[..n].copy_from_slice(&samples[at..at + n]);
        at += n;
        n
    });
}
