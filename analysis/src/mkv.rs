//! A Matroska/WebM file's element sizes, checked before symphonia reads it.
//!
//! Symphonia's Matroska reader allocates a binary or string element at the size its header
//! says (`vec![0; size]`) before reading it; a crafted size of 2^40 aborts the process. The
//! elements are walked here (into the container elements symphonia descends into), and each
//! must fit in its parent and the file, so that no allocation is larger than the file.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// The EBML header's ID: a file starting with it is Matroska or WebM.
const EBML: u32 = 0x1A45_DFA3;

/// Elements whose payload is elements (walked into).
const MASTERS: [u32; 24] = [
    EBML,
    0x1853_8067, // Segment
    0x114D_9B74, // SeekHead
    0x4DBB,      // Seek
    0x1549_A966, // Info
    0x1654_AE6B, // Tracks
    0xAE,        // TrackEntry
    0xE1,        // Audio
    0xE0,        // Video
    0x6D80,      // ContentEncodings
    0x6240,      // ContentEncoding
    0x1F43_B675, // Cluster
    0xA0,        // BlockGroup
    0x1C53_BB6B, // Cues
    0xBB,        // CuePoint
    0xB7,        // CueTrackPositions
    0x1254_C367, // Tags
    0x7373,      // Tag
    0x63C0,      // Targets
    0x67C8,      // SimpleTag
    0x1043_A770, // Chapters
    0x45B9,      // EditionEntry
    0xB6,        // ChapterAtom
    0x1941_A469, // Attachments
];

/// Elements walked at most (a file of more is not checked further: its clusters are many
/// small elements, each read as it comes).
const MAX_ELEMENTS: usize = 1 << 20;

/// The problem with an element's size, if the file is Matroska and one does not fit; `Ok`
/// otherwise (the probe says what else it finds).
pub(crate) fn check_sizes(path: &Path) -> Result<(), String> {
    let Ok(file) = File::open(path) else {
        return Ok(());
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return Ok(());
    };
    let mut r = BufReader::new(file);
    let mut head = [0u8; 4];
    if r.read_exact(&mut head).is_err() || u32::from_be_bytes(head) != EBML {
        return Ok(());
    }
    if r.seek(SeekFrom::Start(0)).is_err() {
        return Ok(());
    }
    // The ends of the elements being walked into (the file's first).
    let mut ends = vec![len];
    let mut pos = 0u64;
    for _ in 0..MAX_ELEMENTS {
        while ends.last().is_some_and(|&e| pos >= e) && ends.len() > 1 {
            ends.pop();
        }
        let end = ends.last().copied().unwrap_or(len);
        if pos >= len {
            return Ok(());
        }
        let Some((id, id_len)) = vint(&mut r, true) else {
            return Ok(());
        };
        let Some((size, size_len)) = vint(&mut r, false) else {
            return Ok(());
        };
        let start = pos + id_len + size_len;
        let left = end.saturating_sub(start);
        let unknown = size_len > 0 && size == (1u64 << (7 * size_len)) - 1;
        if MASTERS.contains(&(id as u32)) {
            // A master of unknown size (live WebM) runs to its parent's end.
            ends.push(if unknown {
                end
            } else {
                start.saturating_add(size)
            });
            if !unknown && size > left {
                return Err(too_long(id, size, left));
            }
            pos = start;
            continue;
        }
        if unknown || size > left {
            return Err(too_long(id, size, left));
        }
        pos = start + size;
        if r.seek(SeekFrom::Start(pos)).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

fn too_long(id: u64, size: u64, left: u64) -> String {
    format!("its Matroska element {id:#x} says {size} bytes, more than the {left} left around it")
}

/// An EBML variable-length integer: `(value, bytes)`; an ID keeps its length marker.
fn vint(r: &mut impl Read, id: bool) -> Option<(u64, u64)> {
    let mut first = [0u8; 1];
    r.read_exact(&mut first).ok()?;
    let n = first[0].leading_zeros() as usize + 1;
    if n > if id { 4 } else { 8 } {
        return None;
    }
    let mut rest = [0u8; 7];
    r.read_exact(&mut rest[..n - 1]).ok()?;
    let lead = if id {
        u64::from(first[0])
    } else {
        u64::from(first[0]) & ((1u64 << (8 - n)) - 1)
    };
    let value = rest[..n - 1]
        .iter()
        .fold(lead, |v, &b| v << 8 | u64::from(b));
    Some((value, n as u64))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_element_larger_than_the_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.webm");
        // EBML header (a DocType "webm"), a Segment of unknown size, Tracks holding a
        // CodecPrivate (0x63A2) that says 2^32 bytes.
        let mut b = vec![0x1A, 0x45, 0xDF, 0xA3, 0x87, 0x42, 0x82, 0x84];
        b.extend_from_slice(b"webm");
        b.extend_from_slice(&[
            0x18, 0x53, 0x80, 0x67, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        ]);
        b.extend_from_slice(&[0x16, 0x54, 0xAE, 0x6B, 0x8C, 0xAE, 0x8A]);
        b.extend_from_slice(&[0x63, 0xA2, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00]);
        std::fs::write(&path, &b).unwrap();
        let e = check_sizes(&path).unwrap_err();
        assert!(e.contains("0x63a2 says 4294967296 bytes"), "{e}");
        // The same with a CodecPrivate of 0 bytes fits.
        b.truncate(b.len() - 17);
        b.extend_from_slice(&[0x16, 0x54, 0xAE, 0x6B, 0x85, 0xAE, 0x83, 0x63, 0xA2, 0x80]);
        std::fs::write(&path, &b).unwrap();
        assert_eq!(check_sizes(&path), Ok(()));
    }
}
