//! MP3 files made of several streams one after the other: dynamic ad insertion serves an
//! episode with ads byte-concatenated before it or in its middle, each segment from its own
//! encoder (a stereo 128k 44.1 kHz ad before a mono 64k 22.05 kHz episode).
//!
//! Symphonia's MP3 reader treats the file as one stream: the first segment's gapless
//! information (the LAME tag's encoder delay and padding, its frame count) is applied to the
//! whole file, a later segment's own tag is dropped, and its decoder refuses a frame whose
//! channels or rate differ from the first. This module walks the file's frames as the reader
//! does, and finds where each segment starts: at a Xing/Info frame after the first frame, or
//! where the frames' sample rate, channels or layer change. `decode.rs` then trims each
//! segment by its own tag, makes a new decoder where the format changes, and converts a
//! segment at another rate to the first segment's.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Files longer than this are not walked (no segments: decoded as one stream, as before).
const MAX_WALK_BYTES: u64 = 4 << 30;

/// One segment of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Its first frame's index among the file's audio frames (Xing/Info frames not counted,
    /// as the reader does not give them as packets).
    pub first: u64,
    /// Frames (samples per channel) to drop from its start: the encoder's and decoder's delay.
    pub delay: u32,
    /// Frames to keep after the delay, when its tag says how many frames it has.
    pub keep: Option<u64>,
}

/// A file's frames and segments.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    /// Each audio frame's header word, in order (what the reader's packets start with).
    pub headers: Vec<u32>,
    pub segments: Vec<Segment>,
}

impl Layout {
    /// The segment audio frame `k` is in.
    pub(crate) fn segment_of(&self, k: u64) -> usize {
        self.segments
            .partition_point(|s| s.first <= k)
            .saturating_sub(1)
    }
}

/// What a frame header says (the fields used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// 0: MPEG 2.5, 2: MPEG 2, 3: MPEG 1.
    version: u32,
    /// 1: layer III, 2: layer II, 3: layer I.
    layer: u32,
    pub rate: u32,
    pub channels: usize,
    /// Bytes after the 4 of the header.
    size: usize,
}

impl Header {
    /// Parses a header word as symphonia does; `None` where it refuses one.
    pub(crate) fn parse(word: u32) -> Option<Header> {
        if word & 0xffe0_0000 != 0xffe0_0000 {
            return None;
        }
        let version = (word >> 19) & 3;
        let layer = (word >> 17) & 3;
        let bitrate_index = ((word >> 12) & 0xf) as usize;
        let rate_index = (word >> 10) & 3;
        if version == 1 || layer == 0 || bitrate_index == 0 || bitrate_index == 15 {
            return None;
        }
        const MPEG1_L1: [u32; 15] = [
            0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
        ];
        const MPEG1_L2: [u32; 15] = [
            0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
        ];
        const MPEG1_L3: [u32; 15] = [
            0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
        ];
        const MPEG2_L1: [u32; 15] = [
            0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256,
        ];
        const MPEG2_L23: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
        let kbps = match (version, layer) {
            (3, 3) => MPEG1_L1[bitrate_index],
            (3, 2) => MPEG1_L2[bitrate_index],
            (3, _) => MPEG1_L3[bitrate_index],
            (_, 3) => MPEG2_L1[bitrate_index],
            _ => MPEG2_L23[bitrate_index],
        };
        let bitrate = kbps * 1_000;
        let rate = match (rate_index, version) {
            (0, 3) => 44_100,
            (1, 3) => 48_000,
            (2, 3) => 32_000,
            (0, 2) => 22_050,
            (1, 2) => 24_000,
            (2, 2) => 16_000,
            (0, 0) => 11_025,
            (1, 0) => 12_000,
            (2, 0) => 8_000,
            _ => return None,
        };
        let mono = (word >> 6) & 3 == 3;
        if layer == 2 {
            let refused = if mono {
                [224_000, 256_000, 320_000, 384_000].contains(&bitrate)
            } else {
                [32_000, 48_000, 56_000, 80_000].contains(&bitrate)
            };
            if refused {
                return None;
            }
        }
        let (factor, slot) = match (layer, version) {
            (3, _) => (12, 4),
            (2, _) | (1, 3) => (144, 1),
            _ => (72, 1),
        };
        let padding = ((word >> 9) & 1) as usize;
        let slots = (factor * bitrate / rate) as usize + padding;
        Some(Header {
            version,
            layer,
            rate,
            channels: if mono { 1 } else { 2 },
            size: (slots * slot).checked_sub(4)?,
        })
    }

    /// Frames (samples per channel) a frame of this header gives.
    pub(crate) fn samples(&self) -> u64 {
        match (self.layer, self.version) {
            (3, _) => 384,
            (2, _) | (1, 3) => 1_152,
            _ => 576,
        }
    }

    /// Whether a frame of `other` can go to the same decoder (same layer, rate, channels).
    pub(crate) fn same_format(&self, other: &Header) -> bool {
        (self.version, self.layer, self.rate, self.channels)
            == (other.version, other.layer, other.rate, other.channels)
    }

    fn side_info_len(&self) -> usize {
        match (self.version == 3, self.channels == 1) {
            (true, true) => 17,
            (true, false) => 32,
            (false, true) => 9,
            (false, false) => 17,
        }
    }
}

/// A Xing/Info or VBRI frame (no audio: the reader drops it), with the gapless information of
/// the segment it starts: `(delay, keep)`.
fn tag_of(frame: &[u8], header: &Header) -> Option<(u32, Option<u64>)> {
    if frame.get(36..40) == Some(b"VBRI") {
        return Some((0, None));
    }
    if header.layer != 1 {
        return None;
    }
    let at = 4 + header.side_info_len();
    let id = frame.get(at..at + 4)?;
    if (id != b"Xing" && id != b"Info") || frame[4..at].iter().any(|&b| b != 0) {
        return None;
    }
    let be = |at: usize, n: usize| -> Option<u32> {
        Some(
            frame
                .get(at..at + n)?
                .iter()
                .fold(0u32, |v, &b| v << 8 | u32::from(b)),
        )
    };
    let flags = be(at + 4, 4)?;
    let mut q = at + 8;
    let mut frames = None;
    if flags & 1 != 0 {
        frames = Some(u64::from(be(q, 4)?));
        q += 4;
    }
    if flags & 2 != 0 {
        q += 4;
    }
    if flags & 4 != 0 {
        q += 100;
    }
    if flags & 8 != 0 {
        q += 4;
    }
    // The LAME extension: the encoder's name, then the delay and padding (12 bits each) 21
    // bytes in; symphonia counts the decoder's 529 samples in the delay, and out of the
    // padding.
    let (delay, padding) = match (frame.get(q..q + 4), be(q + 21, 3)) {
        (Some(name), Some(trim))
            if [b"LAME", b"Lavf", b"Lavc"].contains(&name.try_into().ok()?) =>
        {
            (529 + (trim >> 12), (trim & 0xfff).saturating_sub(529))
        }
        _ => (0, 0),
    };
    let keep = frames
        .map(|n| (n * header.samples()).saturating_sub(u64::from(delay) + u64::from(padding)));
    Some((delay, keep))
}

/// The segments of an MPEG audio file, found by walking its frames as symphonia's reader
/// does; `None` when it is not one, cannot be read, or is one stream (nothing to do: it is
/// decoded as before).
pub(crate) fn layout(path: &Path) -> Option<Layout> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    if len > MAX_WALK_BYTES {
        return None;
    }
    // ID3v2 tags before the stream (a 512 KB padded one, a cover picture).
    let mut pos = 0u64;
    loop {
        file.seek(SeekFrom::Start(pos)).ok()?;
        let mut id3 = [0u8; 10];
        if file.read_exact(&mut id3).is_err() || &id3[..3] != b"ID3" {
            break;
        }
        let size = id3[6..10]
            .iter()
            .fold(0u64, |v, &b| v << 7 | u64::from(b & 0x7f));
        let footer = if id3[5] & 0x10 != 0 { 10 } else { 0 };
        pos += 10 + size + footer;
    }
    file.seek(SeekFrom::Start(pos)).ok()?;
    let mut r = BufReader::with_capacity(1 << 16, file);
    let byte = |r: &mut BufReader<File>| -> Option<u8> {
        let mut b = [0u8; 1];
        r.read_exact(&mut b).ok()?;
        Some(b[0])
    };
    let mut layout = Layout::default();
    let mut frame = Vec::new();
    let mut current: Option<Header> = None;
    let mut first = true;
    'frames: loop {
        // Sync to a header the reader would take (its `sync_frame`, `parse_frame_header`).
        let (word, header) = loop {
            let mut sync = 0u32;
            loop {
                while sync & 0xffe0_0000 != 0xffe0_0000 {
                    let Some(b) = byte(&mut r) else {
                        break 'frames;
                    };
                    sync = sync << 8 | u32::from(b);
                }
                let ok = (sync >> 19) & 3 != 1
                    && (sync >> 17) & 3 != 0
                    && (sync >> 12) & 0xf != 0xf
                    && (sync >> 10) & 3 != 3;
                if ok {
                    break;
                }
                let Some(b) = byte(&mut r) else {
                    break 'frames;
                };
                sync = sync << 8 | u32::from(b);
            }
            if let Some(h) = Header::parse(sync) {
                break (sync, h);
            }
        };
        frame.clear();
        frame.extend_from_slice(&word.to_be_bytes());
        frame.resize(4 + header.size, 0);
        if r.read_exact(&mut frame[4..]).is_err() {
            break;
        }
        let tag = tag_of(&frame, &header);
        let k = layout.headers.len() as u64;
        match tag {
            Some((delay, keep)) => {
                // A tag starts a segment (the first frame's, the first segment's).
                if layout.segments.last().is_some_and(|s| s.first == k) {
                    layout.segments.pop();
                }
                layout.segments.push(Segment {
                    first: k,
                    delay,
                    keep,
                });
                current = Some(header);
            }
            None => {
                if first || current.is_none_or(|c| !c.same_format(&header)) {
                    if layout.segments.last().is_none_or(|s| s.first != k) {
                        layout.segments.push(Segment {
                            first: k,
                            delay: 0,
                            keep: None,
                        });
                    }
                    current = Some(header);
                }
                layout.headers.push(word);
            }
        }
        first = false;
    }
    (layout.segments.len() > 1).then_some(layout)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frame_sizes_are_the_standard_ones() {
        // MPEG 1 layer III, 128 kb/s, 44.1 kHz, no padding: 417 bytes.
        let h = Header::parse(0xfffb_9064).unwrap();
        assert_eq!(
            (h.rate, h.channels, h.size + 4, h.samples()),
            (44_100, 2, 417, 1_152)
        );
        // MPEG 2 layer III, 64 kb/s, 22.05 kHz, mono: 208 bytes, 576 samples.
        let h = Header::parse(0xfff3_80c4).unwrap();
        assert_eq!(
            (h.rate, h.channels, h.size + 4, h.samples()),
            (22_050, 1, 208, 576)
        );
        // MPEG 2.5, 8 kHz, 16 kb/s mono: 144 bytes.
        let h = Header::parse(0xffe3_28c4).unwrap();
        assert_eq!((h.rate, h.channels, h.size + 4), (8_000, 1, 144));
        assert_eq!(Header::parse(0xfffb_f064), None);
    }
}
