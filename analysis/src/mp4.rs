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
            // Nor more than the file holds: a header's size is not an allocation.
            if size > MAX_MOOV || size > len - pos {
                return None;
            }
            let mut moov = vec![0u8; (size - header) as usize];
            file.read_exact(&mut moov).ok()?;
            return moov_priming(&moov, sample_rate);
        }
        // A crafted 64-bit size must not wrap the position back (a loop without end).
        pos = pos.checked_add(size)?;
    }
    None
}

/// The largest sample (packet) accepted, in bytes: symphonia reads each into a buffer of the
/// size its `stsz` entry says. An AAC frame is at most 768 bytes a channel; 1 MiB is far
/// above any audio packet and far below a crafted 4,294,967,295.
const MAX_SAMPLE_BYTES: u64 = 1 << 20;

/// Bytes of the file searched for the `ftyp` box (symphonia's probe finds it past junk too).
const FTYP_SEARCH: usize = 64 << 10;

/// The sample-table boxes symphonia reads into a vector sized from the box's own entry count
/// (`Vec::with_capacity(count)`, before reading a single entry): `(kind, bytes from the
/// payload's start to the count, bytes an entry takes)`. A crafted count of 4,294,967,295 asked
/// for 17 GB and aborted the process. `stsz` has entries only when its sample size is 0.
const TABLES: [(&[u8; 4], usize, u64); 5] = [
    (b"stts", 4, 8),
    (b"stsc", 4, 12),
    (b"stsz", 8, 4),
    (b"stco", 4, 4),
    (b"co64", 4, 8),
];

/// Checks, before symphonia reads an MP4, that no sample table counts more entries than the
/// rest of the file could hold, no sample is larger than an audio packet, and `moov` is one
/// this module reads (at most 64 MiB: a hundred hours of AAC's tables); the problem
/// otherwise. Not MP4, or unreadable: `Ok` (the probe says what it finds).
pub(crate) fn check_tables(path: &Path) -> Result<(), String> {
    let Ok(mut file) = File::open(path) else {
        return Ok(());
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return Ok(());
    };
    let mut head = vec![0u8; FTYP_SEARCH.min(len as usize)];
    if file.read_exact(&mut head).is_err() {
        return Ok(());
    }
    let Some(ftyp) = head.windows(4).position(|w| w == b"ftyp") else {
        return Ok(());
    };
    let mut pos = ftyp.saturating_sub(4) as u64;
    while pos + 8 <= len {
        if file.seek(SeekFrom::Start(pos)).is_err() {
            return Ok(());
        }
        let Some((size, kind, _)) = read_header(&mut file, len - pos) else {
            return Ok(());
        };
        if &kind == b"moov" {
            if size > MAX_MOOV {
                return Err(format!(
                    "its moov box of {size} bytes is over the {MAX_MOOV} bytes read"
                ));
            }
            let mut region = vec![0u8; (len - pos).min(MAX_MOOV) as usize];
            if file.seek(SeekFrom::Start(pos)).is_err() || file.read_exact(&mut region).is_err() {
                return Ok(());
            }
            check_region(&region, 0, len - pos, 0, false)?;
        }
        let Some(next) = pos.checked_add(size) else {
            return Ok(());
        };
        pos = next;
    }
    Ok(())
}

/// Boxes whose payload is boxes (after this many bytes of fields), from `moov` down to the
/// sample tables and the tags symphonia reads.
const CONTAINERS: [(&[u8; 4], usize); 12] = [
    (b"moov", 0),
    (b"trak", 0),
    (b"mdia", 0),
    (b"minf", 0),
    (b"stbl", 0),
    (b"edts", 0),
    (b"dinf", 0),
    (b"udta", 0),
    (b"meta", 4),
    (b"ilst", 0),
    (b"stsd", 8),
    (b"mp4a", 28),
];

/// Every sample table under the box at `at` of `region` (the file from the `moov` on, `rest`
/// bytes to the file's end). Walked as symphonia walks it: a parent's size says where its
/// children may start, and each child then lasts as long as its own size says, even past its
/// parent's end (a crafted parent's size must not hide from this check a table that
/// symphonia still reads).
fn check_region(
    region: &[u8],
    at: usize,
    rest: u64,
    depth: u32,
    in_ilst: bool,
) -> Result<(), String> {
    let Some((size, kind, header)) = box_at(region, at) else {
        return Ok(());
    };
    // Symphonia reads many a box's payload into a buffer of the size it says.
    let left = rest.saturating_sub(at as u64);
    if size as u64 > left {
        // A crafted kind is no name to print.
        let name = if kind.iter().all(|b| b.is_ascii_alphanumeric() || *b == b' ') {
            format!("{} box", String::from_utf8_lossy(&kind))
        } else {
            "box of no known kind".to_owned()
        };
        return Err(format!(
            "its {name} says {size} bytes, more than the {left} left in the file"
        ));
    }
    let payload = at + header;
    // An `ilst` item is a box of boxes too, whatever its kind.
    let fields = match CONTAINERS.iter().find(|(k, _)| **k == kind) {
        Some((_, fields)) => Some(*fields),
        None => in_ilst.then_some(0),
    };
    if let Some(fields) = fields.filter(|_| depth < 10) {
        // Size 0: to the end of the file.
        let end = if size == 0 {
            region.len()
        } else {
            at.saturating_add(size)
        };
        let mut child = payload + fields;
        while child < end && child + 8 <= region.len() {
            check_region(region, child, rest, depth + 1, &kind == b"ilst")?;
            match box_at(region, child) {
                Some((0, _, _)) | None => break,
                Some((child_size, _, child_header)) => {
                    child = child.saturating_add(child_size.max(child_header));
                }
            }
        }
        return Ok(());
    }
    let Some((name, count_at, entry)) = TABLES.iter().find(|(k, _, _)| **k == kind) else {
        return Ok(());
    };
    // After the version and flags (4 bytes), which symphonia does not check.
    let fields = payload + 4;
    if **name == *b"stsz" {
        // Each sample is read into a buffer of its size: bounded too.
        let largest = match be32(region, fields) {
            Some(0) => {
                let count = be32(region, fields + 4).unwrap_or(0) as usize;
                (0..count)
                    .map_while(|i| be32(region, fields + 8 + 4 * i))
                    .max()
                    .unwrap_or(0)
            }
            Some(constant) => constant,
            None => return Ok(()),
        };
        if u64::from(largest) > MAX_SAMPLE_BYTES {
            return Err(format!(
                "its stsz box says a sample of {largest} bytes, over the {MAX_SAMPLE_BYTES} \
                 an audio packet may take"
            ));
        }
        if be32(region, fields) != Some(0) {
            return Ok(());
        }
    }
    let count_at = fields + count_at - 4;
    let Some(count) = be32(region, count_at) else {
        return Ok(());
    };
    let room = rest.saturating_sub((count_at + 4) as u64);
    if u64::from(count) * entry > room {
        return Err(format!(
            "its {} box says {count} entries, more than the {room} bytes after it hold",
            String::from_utf8_lossy(&name[..])
        ));
    }
    Ok(())
}

/// The box at `at`: its size (0: to the end), kind and header length.
fn box_at(region: &[u8], at: usize) -> Option<(usize, [u8; 4], usize)> {
    let size32 = be32(region, at)?;
    let kind: [u8; 4] = region.get(at + 4..at + 8)?.try_into().ok()?;
    Some(match size32 {
        1 => (usize::try_from(be64(region, at + 8)?).ok()?, kind, 16),
        n => (n as usize, kind, 8),
    })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// A box: 32-bit size, kind, payload.
    fn mp4_box(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut b = ((payload.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(payload);
        b
    }

    fn hdlr(kind: &[u8; 4]) -> Vec<u8> {
        // version/flags, pre_defined, handler type, reserved, an empty name.
        let mut p = vec![0u8; 8];
        p.extend_from_slice(kind);
        p.extend_from_slice(&[0u8; 13]);
        mp4_box(b"hdlr", &p)
    }

    fn mdhd_v0(timescale: u32) -> Vec<u8> {
        // version/flags, creation, modification, timescale, duration, language, pre_defined.
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&timescale.to_be_bytes());
        p.extend_from_slice(&[0u8; 8]);
        mp4_box(b"mdhd", &p)
    }

    fn mdhd_v1(timescale: u32) -> Vec<u8> {
        let mut p = vec![1, 0, 0, 0];
        p.extend_from_slice(&[0u8; 16]);
        p.extend_from_slice(&timescale.to_be_bytes());
        p.extend_from_slice(&[0u8; 12]);
        mp4_box(b"mdhd", &p)
    }

    /// An `elst` of version 0 with these media times (duration 1000, rate 1.0 each).
    fn elst_v0(times: &[i32]) -> Vec<u8> {
        let mut p = vec![0u8; 4];
        p.extend_from_slice(&(times.len() as u32).to_be_bytes());
        for t in times {
            p.extend_from_slice(&1_000u32.to_be_bytes());
            p.extend_from_slice(&t.to_be_bytes());
            p.extend_from_slice(&0x0001_0000u32.to_be_bytes());
        }
        mp4_box(b"elst", &p)
    }

    fn elst_v1(times: &[i64]) -> Vec<u8> {
        let mut p = vec![1, 0, 0, 0];
        p.extend_from_slice(&(times.len() as u32).to_be_bytes());
        for t in times {
            p.extend_from_slice(&1_000u64.to_be_bytes());
            p.extend_from_slice(&t.to_be_bytes());
            p.extend_from_slice(&0x0001_0000u32.to_be_bytes());
        }
        mp4_box(b"elst", &p)
    }

    fn trak(handler: &[u8; 4], mdhd: Vec<u8>, elst: Vec<u8>) -> Vec<u8> {
        let mdia = mp4_box(b"mdia", &[hdlr(handler), mdhd].concat());
        let edts = mp4_box(b"edts", &elst);
        mp4_box(
            b"trak",
            &[mp4_box(b"tkhd", &[0u8; 84]), edts, mdia].concat(),
        )
    }

    /// A `moov` payload: a video track first (its edit list is not the sound's), then sound.
    fn moov_payload() -> Vec<u8> {
        [
            mp4_box(b"mvhd", &[0u8; 100]),
            trak(b"vide", mdhd_v0(90_000), elst_v0(&[3_000])),
            trak(b"soun", mdhd_v0(44_100), elst_v0(&[-1, 2_112])),
        ]
        .concat()
    }

    #[test]
    fn the_sound_tracks_first_real_edit_gives_the_priming() {
        let moov = moov_payload();
        assert_eq!(moov_priming(&moov, 44_100), Some(2_112));
        // In the decoder's rate, when the media's time scale differs.
        assert_eq!(moov_priming(&moov, 22_050), Some(1_056));
        let v1 = trak(b"soun", mdhd_v1(48_000), elst_v1(&[1_024]));
        assert_eq!(moov_priming(&v1_moov(v1), 48_000), Some(1_024));
    }

    fn v1_moov(trak: Vec<u8>) -> Vec<u8> {
        [mp4_box(b"mvhd", &[0u8; 100]), trak].concat()
    }

    #[test]
    fn a_file_with_ftyp_and_moov_is_read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.m4a");
        let file = [
            mp4_box(b"ftyp", b"M4A \0\0\0\0isomM4A "),
            mp4_box(b"free", &[0u8; 10]),
            mp4_box(b"moov", &moov_payload()),
            mp4_box(b"mdat", &[0u8; 64]),
        ]
        .concat();
        std::fs::write(&path, &file).unwrap();
        assert!(is_mp4(&path));
        assert_eq!(priming_samples(&path, 44_100), Some(2_112));
        // Cut inside the moov: not parsed, no trimming.
        std::fs::write(&path, &file[..file.len() - 100]).unwrap();
        assert_eq!(priming_samples(&path, 44_100), None);
    }

    #[test]
    fn a_sample_table_must_hold_the_entries_it_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.m4a");
        let file = |table: Vec<u8>| {
            let stbl = mp4_box(b"stbl", &table);
            let minf = mp4_box(b"minf", &stbl);
            let mdia = mp4_box(b"mdia", &[hdlr(b"soun"), mdhd_v0(44_100), minf].concat());
            [
                mp4_box(b"ftyp", b"M4A \0\0\0\0isomM4A "),
                mp4_box(b"moov", &mp4_box(b"trak", &mdia)),
            ]
            .concat()
        };
        // Two entries of 8 bytes, as counted.
        let stts = |count: u32| {
            let mut p = vec![0u8; 4];
            p.extend_from_slice(&count.to_be_bytes());
            p.extend_from_slice(&[0u8; 16]);
            mp4_box(b"stts", &p)
        };
        std::fs::write(&path, file(stts(2))).unwrap();
        assert_eq!(check_tables(&path), Ok(()));
        std::fs::write(&path, file(stts(u32::MAX))).unwrap();
        let e = check_tables(&path).unwrap_err();
        assert!(e.contains("stts box says 4294967295 entries"), "{e}");
        // Found when a parent box's size lies and hides it from a walk of the tree.
        let mut lying = file(stts(u32::MAX));
        let trak = lying.windows(4).position(|w| w == b"trak").unwrap();
        lying[trak - 4..trak].copy_from_slice(&16u32.to_be_bytes());
        std::fs::write(&path, &lying).unwrap();
        assert!(check_tables(&path).is_err());
        // A constant sample size has no entries, whatever the count.
        let mut stsz = vec![0u8; 4];
        stsz.extend_from_slice(&1_024u32.to_be_bytes());
        stsz.extend_from_slice(&u32::MAX.to_be_bytes());
        std::fs::write(&path, file(mp4_box(b"stsz", &stsz))).unwrap();
        assert_eq!(check_tables(&path), Ok(()));
        stsz[4..8].copy_from_slice(&0u32.to_be_bytes());
        std::fs::write(&path, file(mp4_box(b"stsz", &stsz))).unwrap();
        assert!(check_tables(&path).is_err());
        // Two samples, the second one of 4 GB.
        let mut stsz = vec![0u8; 8];
        stsz.extend_from_slice(&2u32.to_be_bytes());
        stsz.extend_from_slice(&512u32.to_be_bytes());
        stsz.extend_from_slice(&u32::MAX.to_be_bytes());
        std::fs::write(&path, file(mp4_box(b"stsz", &stsz))).unwrap();
        let e = check_tables(&path).unwrap_err();
        assert!(e.contains("a sample of 4294967295 bytes"), "{e}");
        // Not MP4 at all: nothing to say.
        std::fs::write(&path, b"RIFF....WAVEfmt ").unwrap();
        assert_eq!(check_tables(&path), Ok(()));
    }

    #[test]
    fn malformed_boxes_give_no_priming_and_never_panic() {
        let good = moov_payload();
        // No edit list, no sound track, a zero time scale, an edit list that claims more
        // entries than it has, only empty edits.
        let no_edts = mp4_box(
            b"trak",
            &mp4_box(b"mdia", &[hdlr(b"soun"), mdhd_v0(44_100)].concat()),
        );
        assert_eq!(moov_priming(&no_edts, 44_100), None);
        assert_eq!(
            moov_priming(&trak(b"vide", mdhd_v0(1), elst_v0(&[5])), 1),
            None
        );
        assert_eq!(
            moov_priming(&trak(b"soun", mdhd_v0(0), elst_v0(&[5])), 44_100),
            None
        );
        let mut short = elst_v0(&[-1]);
        short[12..16].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(
            moov_priming(&trak(b"soun", mdhd_v0(44_100), short), 44_100),
            None
        );
        assert_eq!(
            moov_priming(&trak(b"soun", mdhd_v0(44_100), elst_v0(&[-1, -1])), 44_100),
            None
        );
        // Sizes that lie: smaller than the header, past the end, 64-bit and huge, zero.
        for size in [0u32, 1, 4, 7, 0xFFFF_FFFF] {
            let mut bad = good.clone();
            bad[..4].copy_from_slice(&size.to_be_bytes());
            let _ = moov_priming(&bad, 44_100);
        }
        // Every byte of the payload changed in turn, to values that matter to a parser.
        for at in 0..good.len() {
            for v in [0u8, 1, 0x7F, 0x80, 0xFF] {
                let mut bad = good.clone();
                bad[at] = v;
                let _ = moov_priming(&bad, 44_100);
            }
            let _ = moov_priming(&good[..at], 44_100);
        }
    }

    #[test]
    fn a_file_whose_box_sizes_lie_is_not_trimmed_and_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.m4a");
        // A 64-bit size that wraps the read position back to the file's start: unchecked,
        // the walk went round for ever in a release build (and panicked in a debug one).
        let mut wrap = mp4_box(b"ftyp", b"M4A ");
        let mut big = 1u32.to_be_bytes().to_vec();
        big.extend_from_slice(b"free");
        big.extend_from_slice(&(u64::MAX - 11).to_be_bytes());
        wrap.extend_from_slice(&big);
        std::fs::write(&path, &wrap).unwrap();
        assert_eq!(priming_samples(&path, 44_100), None);
        // A moov larger than the file, and one larger than the parser reads.
        for size in [1_000u64, MAX_MOOV + 1] {
            let mut f = mp4_box(b"ftyp", b"M4A ");
            f.extend_from_slice(&1u32.to_be_bytes());
            f.extend_from_slice(b"moov");
            f.extend_from_slice(&size.to_be_bytes());
            f.extend_from_slice(&[0u8; 32]);
            std::fs::write(&path, &f).unwrap();
            assert_eq!(priming_samples(&path, 44_100), None);
        }
        std::fs::write(&path, b"ftyp").unwrap();
        assert!(!is_mp4(&path));
        assert_eq!(priming_samples(&path, 44_100), None);
    }
}
