//! The packet table of a print, recorded during the full decode: for each packet symphonia's
//! reader gives, where its bytes lie in the media.
//!
//! A packet's bytes are a copy of the media's (an MP3 or FLAC frame, an MP4 sample, a run of
//! WAV frames), or of its pieces between Ogg page headers. The reader's stream buffers ahead
//! of it, so its position says little; instead the bytes read from the file are kept for a
//! while ([`Recent`]), and each packet is found among them: first right after the previous
//! packet (almost always), then at a place the reader seeked to, then by search.

use std::collections::{BTreeMap, VecDeque};

use crate::print::{PacketEntry, PacketExtra};

/// Bytes read from the media kept for finding packets in: the reader's read-ahead (at most
/// 64 KiB in symphonia's stream) and a largest packet, with margin.
const KEEP: usize = 1 << 20;
/// Read positions of the media's recent seeks kept.
const SEEKS: usize = 8;
/// Bytes of a packet searched for when it is neither next nor at a seek.
const PROBE: usize = 32;
/// How far past the previous packet's end the next one is searched for (a container's
/// framing between packets: an ADTS header, an Ogg page header, another track's chunk).
const SEARCH_AHEAD: u64 = 16 << 10;
/// Bytes after the previous packet's end each tried first (a frame header between packets).
const NEAR: u64 = 64;

/// The media's bytes read recently, by position.
#[derive(Default)]
pub(crate) struct Recent {
    chunks: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
    seeks: VecDeque<u64>,
}

impl Recent {
    /// Bytes `data` were read from position `pos`.
    pub(crate) fn record(&mut self, pos: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match self.chunks.back_mut() {
            Some((at, bytes)) if *at + bytes.len() as u64 == pos && bytes.len() < 1 << 16 => {
                bytes.extend_from_slice(data);
            }
            _ => self.chunks.push_back((pos, data.to_vec())),
        }
        self.bytes += data.len();
        while self.bytes > KEEP && self.chunks.len() > 1 {
            if let Some((_, old)) = self.chunks.pop_front() {
                self.bytes -= old.len();
            }
        }
    }

    /// The media was seeked to `pos`.
    pub(crate) fn seeked(&mut self, pos: u64) {
        self.seeks.push_back(pos);
        if self.seeks.len() > SEEKS {
            self.seeks.pop_front();
        }
    }

    /// The bytes known from `pos` to the end of the (newest) chunk holding it.
    fn at(&self, pos: u64) -> Option<&[u8]> {
        self.chunks.iter().rev().find_map(|(at, bytes)| {
            let i = usize::try_from(pos.checked_sub(*at)?).ok()?;
            bytes.get(i..).filter(|s| !s.is_empty())
        })
    }

    fn byte(&self, pos: u64) -> Option<u8> {
        self.at(pos).map(|s| s[0])
    }

    /// Whether `data` lies at `pos` (in pieces if Ogg page headers come between): its pieces.
    fn matches(&self, pos: u64, data: &[u8]) -> Option<Vec<(u64, u32)>> {
        let mut pieces = Vec::new();
        let (mut q, mut j, mut from) = (pos, 0usize, pos);
        while j < data.len() {
            let have = self.at(q)?;
            let rest = &data[j..];
            let k = have.len().min(rest.len());
            // Whole runs compared at once (memcmp); byte by byte only to find a mismatch.
            let n = if have[..k] == rest[..k] {
                k
            } else {
                have.iter().zip(rest).take_while(|(a, b)| a == b).count()
            };
            if n > 0 {
                j += n;
                q += n as u64;
                continue;
            }
            // An Ogg page header between two pieces of the packet: skipped.
            let page = (0..4)
                .map(|k| self.byte(q + k))
                .collect::<Option<Vec<u8>>>()?;
            if page != b"OggS" {
                return None;
            }
            let segments = self.byte(q + 26)?;
            if q > from {
                pieces.push((from, u32::try_from(q - from).ok()?));
            }
            q += 27 + u64::from(segments);
            from = q;
        }
        if q > from {
            pieces.push((from, u32::try_from(q - from).ok()?));
        }
        Some(pieces)
    }

    /// Where `data` lies: after `expected`, at a recent seek, or found by search (near
    /// `expected`, or, with none, anywhere when `anywhere`).
    fn find(&self, expected: Option<u64>, data: &[u8], anywhere: bool) -> Option<Vec<(u64, u32)>> {
        if data.is_empty() {
            return None;
        }
        let tries = expected.into_iter().chain(self.seeks.iter().rev().copied());
        for pos in tries {
            if let Some(p) = self.matches(pos, data) {
                return Some(p);
            }
        }
        // A few bytes of framing after the previous packet (an ADTS header).
        if let Some(e) = expected {
            for gap in 1..=NEAR {
                if let Some(p) = self.matches(e + gap, data) {
                    return Some(p);
                }
            }
        }
        // By search: near the previous packet's end, or (no previous packet) anywhere kept.
        if expected.is_none() && !anywhere {
            return None;
        }
        let (lo, hi) = expected.map_or((0, u64::MAX), |e| (e, e + SEARCH_AHEAD));
        let probe = &data[..data.len().min(PROBE)];
        for (at, bytes) in self.chunks.iter().rev() {
            let end = *at + bytes.len() as u64;
            if end <= lo || *at >= hi {
                continue;
            }
            let mut from = lo.saturating_sub(*at) as usize;
            let until = (hi.min(end) - *at) as usize;
            while let Some(i) = bytes[from..until.min(bytes.len())]
                .windows(probe.len())
                .position(|w| w == probe)
            {
                let pos = *at + (from + i) as u64;
                if let Some(p) = self.matches(pos, data) {
                    return Some(p);
                }
                from += i + 1;
            }
        }
        None
    }
}

/// The packet table being recorded.
#[derive(Default)]
pub(crate) struct PacketLog {
    pub packets: Vec<PacketEntry>,
    pub extras: BTreeMap<u32, PacketExtra>,
    next: Option<u64>,
    /// Packets whose bytes were not found.
    pub lost: usize,
    /// Searches of everything kept that found nothing (they stop after [`WIDE_SEARCHES`]:
    /// a stream whose packets are not in the file costs no more than that).
    wide_misses: usize,
}

/// Failed searches of all the bytes kept after which a packet is only looked for where it
/// is expected.
const WIDE_SEARCHES: usize = 64;

impl PacketLog {
    /// The next packet of the track: its bytes (found in `recent`), its trimming, the
    /// frames dropped from its start and the frames it added.
    pub(crate) fn packet(
        &mut self,
        recent: &Recent,
        data: &[u8],
        trim: (u32, u32),
        drop: u32,
        out: u32,
    ) {
        let i = self.packets.len() as u32;
        let found = recent.find(self.next, data, self.wide_misses < WIDE_SEARCHES);
        if found.is_none() && self.next.is_none() {
            self.wide_misses += 1;
        }
        let mut extra = PacketExtra {
            trim_start: trim.0,
            trim_end: trim.1,
            drop,
            pieces: Some(Vec::new()),
        };
        let entry = match &found {
            Some(pieces) if !pieces.is_empty() => {
                let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
                let end = last.0 + u64::from(last.1);
                if pieces.len() > 1 {
                    extra.pieces = Some(pieces.clone());
                }
                self.next = Some(end);
                PacketEntry {
                    pos: first.0,
                    len: u32::try_from(end - first.0).unwrap_or(u32::MAX),
                    out,
                }
            }
            _ => {
                self.lost += 1;
                extra.pieces = None;
                // Where the next packet lies is not known now: searched for more widely.
                let pos = self.next.take().unwrap_or(0);
                PacketEntry { pos, len: 0, out }
            }
        };
        let needed = extra.trim_start != 0
            || extra.trim_end != 0
            || extra.drop != 0
            || extra.pieces.as_ref().is_none_or(|p| !p.is_empty());
        if needed {
            self.extras.insert(i, extra);
        }
        self.packets.push(entry);
    }
}

impl PacketLog {
    /// A packet that cannot be decoded alone (a segment of a stitched MP3 after the first):
    /// it gave `out` frames; a window that needs it is decoded by a full analysis.
    pub(crate) fn unindexed(&mut self, out: u32) {
        let i = self.packets.len() as u32;
        let pos = self.next.take().unwrap_or(0);
        self.extras.insert(
            i,
            PacketExtra {
                pieces: None,
                ..PacketExtra::default()
            },
        );
        self.packets.push(PacketEntry { pos, len: 0, out });
    }

    /// `out` more frames for the last packet (a resampler's tail at the end of the stream).
    pub(crate) fn add_to_last(&mut self, out: u32) {
        if let Some(last) = self.packets.last_mut() {
            last.out = last.out.saturating_add(out);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn packets_are_found_next_after_a_seek_by_search_and_across_page_headers() {
        let mut r = Recent::default();
        let mut seed = 1u64;
        let media: Vec<u8> = (0..5_000)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 56) as u8
            })
            .collect();
        r.record(0, &media[..3_000]);
        r.record(3_000, &media[3_000..]);
        assert_eq!(
            r.find(Some(100), &media[100..150], true),
            Some(vec![(100, 50)])
        );
        assert_eq!(
            r.find(Some(1_200), &media[1_234..1_300], true),
            Some(vec![(1_234, 66)])
        );
        r.seeked(4_000);
        assert_eq!(
            r.find(None, &media[4_000..4_010], false),
            Some(vec![(4_000, 10)])
        );
        // A page header of 27 + 2 bytes between two pieces.
        let mut ogg = b"0123456789".to_vec();
        let mut header = b"OggS".to_vec();
        header.resize(26, 0);
        header.push(2);
        header.extend_from_slice(&[5, 5]);
        ogg.extend_from_slice(&header);
        ogg.extend_from_slice(b"abcde");
        let mut r = Recent::default();
        r.record(1_000, &ogg);
        assert_eq!(
            r.find(Some(1_004), b"456789abc", true),
            Some(vec![(1_004, 6), (1_039, 3)])
        );
        assert_eq!(r.find(Some(1_000), b"zz", true), None);
    }
}
