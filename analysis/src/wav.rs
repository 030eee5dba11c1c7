//! A WAV file's format, read from its `fmt` chunk before symphonia probes the file, and the
//! lengths in its header that symphonia would refuse but ffmpeg and sox read past.
//!
//! Symphonia builds a `TimeBase` from the sample rate while probing, and panics on 0 Hz. The
//! panic is caught (`guard.rs`), but its words ("TimeBase cannot have 0 numerator or
//! denominator") do not tell a user what is wrong with the file; read here first, the header's
//! sample rate and channel count are checked and named like every other stream's.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Chunks looked at before `fmt ` (it is normally the first; `LIST`, `bext`, `JUNK` may come
/// first).
const MAX_CHUNKS: usize = 64;

/// The bytes of a WAV header to show symphonia in place of the file's: `(offset, value)` of
/// the RIFF and `data` chunk lengths, when they do not say where the audio ends. A recorder
/// streaming a WAV writes its lengths last (0 in both until then: a file cut short, or never
/// patched), and some writers put a large placeholder (0xFFFFFFF0, 0x80000000) in them;
/// symphonia accepts only 0xFFFFFFFF in both ("length unknown"). Such lengths are shown to it
/// as 0xFFFFFFFF, and the audio is read to the end of the file, as ffmpeg does. Lengths that
/// fit the file are left as they are. Nothing is sized from these lengths: the reader reads
/// a packet at a time, and stops at the end of the file.
pub(crate) fn length_patches(path: &Path) -> Vec<(u64, [u8; 4])> {
    patches_of(path).unwrap_or_default()
}

fn patches_of(path: &Path) -> Option<Vec<(u64, [u8; 4])>> {
    let mut file = File::open(path).ok()?;
    let file_len = file.metadata().ok()?.len();
    let mut head = [0u8; 12];
    file.read_exact(&mut head).ok()?;
    if &head[0..4] != b"RIFF" || &head[8..12] != b"WAVE" {
        return None;
    }
    let riff = u64::from(u32::from_le_bytes([head[4], head[5], head[6], head[7]]));
    let mut pos = 12u64;
    for _ in 0..MAX_CHUNKS {
        file.seek(SeekFrom::Start(pos)).ok()?;
        let mut chunk = [0u8; 8];
        file.read_exact(&mut chunk).ok()?;
        let len = u64::from(u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]));
        if &chunk[0..4] == b"data" {
            let unknown = u64::from(u32::MAX);
            let mut patches = Vec::new();
            // The data chunk must lie in the RIFF chunk (8 bytes of header before it).
            let in_riff = riff != unknown && pos + 8 + len <= riff + 8;
            if len != unknown && (len == 0 || pos + 8 + len > file_len) {
                patches.push((pos + 4, u32::MAX.to_le_bytes()));
                patches.push((4, u32::MAX.to_le_bytes()));
            } else if riff != unknown && (riff == 0 || !in_riff) {
                patches.push((4, u32::MAX.to_le_bytes()));
            }
            return Some(patches);
        }
        pos = pos + 8 + len + len % 2;
        if pos >= file_len {
            return None;
        }
    }
    None
}

/// `(sample rate, channels)` as the `fmt` chunk says, if the file is a RIFF WAVE file with
/// one; `None` otherwise or when it cannot be read (symphonia then says what it finds).
pub(crate) fn format(path: &Path) -> Option<(u32, u16)> {
    let mut file = File::open(path).ok()?;
    let mut head = [0u8; 12];
    file.read_exact(&mut head).ok()?;
    if &head[0..4] != b"RIFF" || &head[8..12] != b"WAVE" {
        return None;
    }
    let mut pos = 12u64;
    for _ in 0..MAX_CHUNKS {
        file.seek(SeekFrom::Start(pos)).ok()?;
        let mut chunk = [0u8; 8];
        file.read_exact(&mut chunk).ok()?;
        let len = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        if &chunk[0..4] == b"fmt " {
            let mut fmt = [0u8; 8];
            file.read_exact(&mut fmt).ok()?;
            let channels = u16::from_le_bytes([fmt[2], fmt[3]]);
            let rate = u32::from_le_bytes([fmt[4], fmt[5], fmt[6], fmt[7]]);
            return Some((rate, channels));
        }
        // Chunks are padded to an even length.
        pos = pos + 8 + u64::from(len) + u64::from(len % 2);
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_fmt_chunk_is_found_after_other_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wav");
        let mut bytes = b"RIFF\0\0\0\0WAVE".to_vec();
        bytes.extend_from_slice(b"JUNK\x03\0\0\0abc\0");
        bytes.extend_from_slice(b"fmt \x10\0\0\0\x01\0\x02\0\x44\xac\0\0");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(format(&path), Some((44_100, 2)));
        std::fs::write(&path, b"RIFF\0\0\0\0AVI fmt ").unwrap();
        assert_eq!(format(&path), None);
    }

    fn wav(riff: u32, data: u32, samples: usize) -> Vec<u8> {
        let mut bytes = b"RIFF".to_vec();
        bytes.extend_from_slice(&riff.to_le_bytes());
        bytes.extend_from_slice(
            b"WAVEfmt \x10\0\0\0\x01\0\x01\0\x44\xac\0\0\x88\x58\x01\0\x02\0\x10\0",
        );
        bytes.extend_from_slice(b"data");
        bytes.extend_from_slice(&data.to_le_bytes());
        bytes.resize(bytes.len() + 2 * samples, 1);
        bytes
    }

    #[test]
    fn lengths_past_the_file_or_zero_are_shown_as_unknown_and_true_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wav");
        let unknown = u32::MAX.to_le_bytes();
        let both = vec![(40, unknown), (4, unknown)];
        for (riff, data, expected) in [
            (236, 200, vec![]),
            (u32::MAX, u32::MAX, vec![]),
            (0, 0, both.clone()),
            (0xFFFF_FFF0, 0xFFFF_FFF0, both.clone()),
            (36 + 200, 0x8000_0000, both),
            (0, 200, vec![(4, unknown)]),
        ] {
            std::fs::write(&path, wav(riff, data, 100)).unwrap();
            assert_eq!(length_patches(&path), expected, "riff {riff}, data {data}");
        }
    }
}
