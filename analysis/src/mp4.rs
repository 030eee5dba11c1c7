//! The encoder delay of an MP4/M4A file, from its edit list.
//!
//! An AAC encoder starts with priming samples (1024 for ffmpeg's, 2112 for Apple's) that
//! the MP4 container tells players to skip with an edit list (`moov/trak/edts/elst`, the
//! first edit's `media_time`). Symphonia 0.5 does not apply edit lists, so without this every
//! offset in an M4A episode would be late by ~23 ms. Only what is needed is parsed: the
//! first sound track's `elst` and its `mdhd` time scale.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The largest `moov` box read (bytes); a bigger one is not parsed (no trimming).
const MAX_MOOV: u64 = 64 << 20;

/// Samples (at `sample_rate`) the file's first sound track says to skip at its start, if
/// the file is MP4 with such an edit; `None` otherwise or when in doubt.
pub(crate) fn priming_samples(path: &Path, sample_rate: u32) -> Option<u64> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut pos = 0u64;
    while pos + 8 <= len {
        file.seek(SeekFrom::Start(pos)).ok()?;
        let (size, kind, header) = read_header(&mut file, len - pos)?;
        if &kind == b"moov" {
            if size > MAX_MOOV {
                return None;
            }
            let mut moov = vec![0u8; (size - header) as usize];
            file.read_exact(&mut moov).ok()?;
            return moov_priming(&moov, sample_rate);
        }
        pos += size;
    }
    None
}

/// Whether the file starts like an MP4 (`ftyp` box first).
pub(crate) fn is_mp4(path: &Path) -> bool {
    let mut head = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head[4..8] == b"ftyp")
}

fn read_header(r: &mut impl Read, remaining: u64) -> Option<(u64, [u8; 4], u64)> {
    let mut h = [0u8; 8];
    r.read_exact(&mut h).ok()?;
    let size32 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let kind = [h[4], h[5], h[6], h[7]];
    let (size, header) = match size32 {
        0 => (remaining, 8),
        1 => {
            let mut l = [0u8; 8];
            r.read_exact(&mut l).ok()?;
            (u64::from_be_bytes(l), 16)
        }
        n => (u64::from(n), 8),
    };
    (size >= header).then_some((size, kind, header))
}

/// The child boxes of a box's payload: `(kind, payload)`.
fn children(data: &[u8]) -> Vec<([u8; 4], &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 8 <= data.len() {
        let mut cursor = &data[pos..];
        let Some((size, kind, header)) = read_header(&mut cursor, (data.len() - pos) as u64) else {
            break;
        };
        let end = pos.saturating_add(size as usize).min(data.len());
        if size < header || pos + header as usize > end {
            break;
        }
        out.push((kind, &data[pos + header as usize..end]));
        pos = end;
    }
    out
}

fn child<'a>(data: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(data)
        .into_iter()
        .find(|(k, _)| k == kind)
        .map(|(_, d)| d)
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

fn be64(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(d.get(at..at + 8)?.try_into().ok()?))
}

fn moov_priming(moov: &[u8], sample_rate: u32) -> Option<u64> {
    for (kind, trak) in children(moov) {
        if &kind != b"trak" {
            continue;
        }
        let mdia = child(trak, b"mdia")?;
        let hdlr = child(mdia, b"hdlr")?;
        if hdlr.get(8..12) != Some(b"soun") {
            continue;
        }
        let mdhd = child(mdia, b"mdhd")?;
        let timescale = if mdhd.first() == Some(&1) {
            be32(mdhd, 20)?
        } else {
            be32(mdhd, 12)?
        };
        let elst = child(child(trak, b"edts")?, b"elst")?;
        let version = *elst.first()?;
        let count = be32(elst, 4)?;
        let mut at = 8;
        for _ in 0..count.min(16) {
            // An empty edit (media_time −1) delays the start; the first real one skips.
            let media_time = if version == 1 {
                let t = be64(elst, at + 8)? as i64;
                at += 20;
                t
            } else {
                let t = i64::from(be32(elst, at + 4)? as i32);
                at += 12;
                t
            };
            if media_time >= 0 {
                if timescale == 0 {
                    return None;
                }
                return Some(
                    (media_time as u128 * u128::from(sample_rate) / u128::from(timescale)) as u64,
                );
            }
        }
        return None;
    }
    None
}
