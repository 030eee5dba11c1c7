//! A WAV file's format, read from its `fmt` chunk before symphonia probes the file.
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
}
