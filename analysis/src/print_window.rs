//! Decoding a stretch of an episode from its print's packet table: the packets that hold
//! the stretch, and a few before them, are fetched by byte range and fed to a fresh codec
//! decoder; the samples come out as the full decode gave them.
//!
//! Pre-roll: a decoder started cold is wrong for a packet or two. An MP3 frame's main data
//! may begin up to 511 bytes back in earlier frames (the bit reservoir), and its first
//! granule overlaps the previous frame's last; AAC and Vorbis overlap each block with the
//! previous one (and Vorbis gives nothing for the first packet at all). At least
//! [`PRE_ROLL_PACKETS`] packets and [`PRE_ROLL_BYTES`] bytes are decoded and dropped first;
//! from there the decoder's state is what it was in the full decode, and the samples are
//! the same (FLAC and PCM need none of it, and cost the same few packets).

use std::collections::BTreeMap;
use std::io;

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::Packet;

use crate::guard;
use crate::print::{ByteSource, EpisodePrint, PacketExtra, MAX_PACKET_BYTES};

/// Packets decoded and dropped before a stretch, at least…
pub(crate) const PRE_ROLL_PACKETS: usize = 2;
/// …and at least this many bytes of them (MP3's reservoir reaches 511 bytes back from the
/// frame before).
pub(crate) const PRE_ROLL_BYTES: u64 = 1_536;
/// Stretches of the media closer than this are fetched in one read.
const MERGE_GAP: u64 = 4_096;
/// The most bytes of media a frame of a stretch takes: 16 channels of 64-bit PCM (every
/// compressed stream far less). With a few packets of pre-roll and at the edges, it bounds
/// what a stretch fetches, whatever a print's packet table says.
const MAX_BYTES_PER_FRAME: u64 = 128;
/// Packets a stretch may hold beyond one per frame and its pre-roll: those that give no
/// frames (a Vorbis stream's first, a packet an edit list drops whole).
const EXTRA_PACKETS: usize = 64;

/// Why a stretch could not be decoded from the print.
#[derive(Debug)]
pub(crate) enum WindowError {
    /// Reading the media failed.
    Io(io::Error),
    /// The print cannot give this stretch: a packet not found when printing, a decoder that
    /// does not decode its packets alone, samples other than the full decode's.
    Unusable(String),
}

/// The media's bytes fetched so far, by position (blocks may overlap).
pub(crate) struct Fetched<'a> {
    media: &'a mut dyn ByteSource,
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl<'a> Fetched<'a> {
    pub(crate) fn new(media: &'a mut dyn ByteSource) -> Fetched<'a> {
        Fetched {
            media,
            blocks: BTreeMap::new(),
        }
    }

    /// Makes sure `start..end` is fetched, reading only what is not yet.
    fn ensure(&mut self, start: u64, end: u64) -> io::Result<()> {
        let mut q = start;
        while q < end {
            if let Some(covered) = self.covered_to(q) {
                q = covered;
                continue;
            }
            let next = self.blocks.range(q..end).next().map_or(end, |(&s, _)| s);
            let len = usize::try_from(next - q)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "stretch too long"))?;
            let bytes = self.media.read_at(q, len)?;
            if bytes.len() != len {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("media ends before byte {}", q + len as u64),
                ));
            }
            self.blocks.insert(q, bytes);
            q = next;
        }
        Ok(())
    }

    /// The end of the fetched block covering `pos`, if one does.
    fn covered_to(&self, pos: u64) -> Option<u64> {
        self.blocks
            .range(..=pos)
            .map(|(&s, b)| s + b.len() as u64)
            .filter(|&e| e > pos)
            .max()
    }

    /// Bytes `start..end` (fetched before), appended to `out`.
    fn copy(&self, start: u64, end: u64, out: &mut Vec<u8>) -> Option<()> {
        let mut q = start;
        while q < end {
            let (&s, b) = self
                .blocks
                .range(..=q)
                .rev()
                .find(|(&s, b)| s + b.len() as u64 > q)?;
            let to = (s + b.len() as u64).min(end);
            out.extend_from_slice(&b[(q - s) as usize..(to - s) as usize]);
            q = to;
        }
        Some(())
    }
}

/// A print's packets, with where each one's samples start in the episode.
pub(crate) struct Packets<'p> {
    print: &'p EpisodePrint,
    /// `starts[i]`: the episode frame packet `i`'s first sample is; `starts[n]`: the end.
    starts: Vec<u64>,
}

impl<'p> Packets<'p> {
    pub(crate) fn new(print: &'p EpisodePrint) -> Packets<'p> {
        let mut starts = Vec::with_capacity(print.packets.len() + 1);
        let mut at = 0u64;
        for p in &print.packets {
            starts.push(at);
            at += u64::from(p.out);
        }
        starts.push(at);
        Packets { print, starts }
    }

    /// The episode's frames `from..to` (at its own rate, mono), decoded from the media.
    pub(crate) fn decode(
        &self,
        fetched: &mut Fetched<'_>,
        from: u64,
        to: u64,
    ) -> Result<Vec<f32>, WindowError> {
        let unusable = |m: &str| WindowError::Unusable(m.to_owned());
        let n = self.print.packets.len();
        let to = to.min(self.starts[n]);
        if from >= to {
            return Ok(Vec::new());
        }
        // The packets holding the stretch: the first whose samples end after `from`, up to
        // the first that starts at or after `to`.
        let first = self.starts[1..].partition_point(|&end| end <= from);
        let last = self.starts[..n].partition_point(|&s| s < to);
        let mut pre = first;
        let mut bytes = 0u64;
        while pre > 0 && (first - pre < PRE_ROLL_PACKETS || bytes < PRE_ROLL_BYTES) {
            pre -= 1;
            bytes += u64::from(self.print.packets[pre].len);
        }
        // A print's table is untrusted: what it makes the stretch fetch and decode is
        // bounded by the stretch's frames.
        let frames = to - from;
        let most_packets = usize::try_from(frames)
            .unwrap_or(usize::MAX)
            .saturating_add(PRE_ROLL_PACKETS + PRE_ROLL_BYTES as usize + EXTRA_PACKETS);
        if last - pre > most_packets {
            return Err(WindowError::Unusable(format!(
                "the print names {} packets for a stretch of {frames} frames",
                last - pre
            )));
        }
        let most_bytes = frames
            .saturating_mul(MAX_BYTES_PER_FRAME)
            .saturating_add((PRE_ROLL_PACKETS as u64 + 2) * u64::from(MAX_PACKET_BYTES))
            .saturating_add(PRE_ROLL_BYTES);
        let mut total = 0u64;
        for i in pre..last {
            for (s, e) in self.pieces(i).into_iter().flatten() {
                total = total.saturating_add(e - s);
            }
        }
        if total > most_bytes {
            return Err(WindowError::Unusable(format!(
                "the print names {total} bytes of packets for a stretch of {frames} frames, \
                 over {most_bytes}"
            )));
        }
        // Fetch: the packets' runs of bytes, near ones merged.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for i in pre..last {
            for (s, e) in self
                .pieces(i)
                .ok_or_else(|| unusable("a packet not indexed"))?
            {
                match runs.last_mut() {
                    Some(r) if s >= r.0 && s <= r.1 + MERGE_GAP => r.1 = r.1.max(e),
                    _ => runs.push((s, e)),
                }
            }
        }
        for (s, e) in runs {
            fetched.ensure(s, e).map_err(WindowError::Io)?;
        }
        let params = self
            .print
            .codec
            .parameters()
            .ok_or_else(|| unusable("a codec the print cannot decode alone"))?;
        let mut decoder: Box<dyn Decoder> =
            guard::catch(|| crate::decode::codecs().make(&params, &DecoderOptions::default()))
                .map_err(|m| WindowError::Unusable(format!("the decoder panicked: {m}")))?
                .map_err(|e| WindowError::Unusable(format!("no decoder: {e}")))?;
        let mut samples = Vec::with_capacity((to - from) as usize);
        let mut buffer: Option<SampleBuffer<f32>> = None;
        let mut data = Vec::new();
        for i in pre..last {
            let entry = self.print.packets[i];
            let extra = self.print.extras.get(&(i as u32));
            data.clear();
            for (s, e) in self
                .pieces(i)
                .ok_or_else(|| unusable("a packet not indexed"))?
            {
                fetched
                    .copy(s, e, &mut data)
                    .ok_or_else(|| unusable("a packet's bytes were not fetched"))?;
            }
            let mut packet = Packet::new_from_slice(0, self.starts[i], u64::from(entry.out), &data);
            packet.trim_start = extra.map_or(0, |x| x.trim_start);
            packet.trim_end = extra.map_or(0, |x| x.trim_end);
            let decoded = guard::catch(|| decoder.decode(&packet).map(|_| ()));
            let wanted = i >= first;
            match decoded {
                Ok(Ok(())) => {}
                // Cold pre-roll may not decode (its reservoir is not there): dropped anyway.
                Ok(Err(SymphoniaError::DecodeError(_))) if !wanted || entry.out == 0 => continue,
                Ok(Err(e)) => return Err(WindowError::Unusable(format!("decoding: {e}"))),
                Err(m) => return Err(WindowError::Unusable(format!("the decoder panicked: {m}"))),
            }
            if !wanted {
                continue;
            }
            let audio = decoder.last_decoded();
            let spec = *audio.spec();
            let frames = audio.frames();
            let drop = extra.map_or(0, |x| x.drop) as usize;
            if frames < drop || (frames - drop) as u64 != u64::from(entry.out) {
                if entry.out == 0 {
                    continue;
                }
                return Err(WindowError::Unusable(format!(
                    "packet {i} gave {frames} frames, {} in the full decode",
                    entry.out
                )));
            }
            if entry.out == 0 {
                continue;
            }
            let channels = spec.channels.count().max(1);
            let buf = match &mut buffer {
                Some(b) if b.capacity() >= audio.capacity() * channels => b,
                slot => slot.insert(SampleBuffer::new(audio.capacity() as u64, spec)),
            };
            buf.copy_interleaved_ref(audio);
            let interleaved = &buf.samples()[drop * channels..];
            let frames = frames - drop;
            // Mixed to mono exactly as `decode.rs` does.
            let mono: Vec<f32> = if channels == 1 {
                interleaved[..frames].to_vec()
            } else {
                let scale = 1.0 / channels as f32;
                interleaved
                    .chunks_exact(channels)
                    .take(frames)
                    .map(|f| f.iter().sum::<f32>() * scale)
                    .collect()
            };
            let start = self.starts[i];
            let lo = from.saturating_sub(start) as usize;
            let hi = ((to - start) as usize).min(mono.len());
            if lo < hi {
                samples.extend_from_slice(&mono[lo..hi]);
            }
        }
        if samples.len() as u64 != to - from {
            return Err(WindowError::Unusable(format!(
                "{} frames decoded for {}",
                samples.len(),
                to - from
            )));
        }
        Ok(samples)
    }

    /// Packet `i`'s runs of bytes; `None` if it was not found when printing.
    fn pieces(&self, i: usize) -> Option<Vec<(u64, u64)>> {
        let entry = self.print.packets[i];
        match self.print.extras.get(&(i as u32)) {
            Some(PacketExtra { pieces: None, .. }) => None,
            Some(PacketExtra {
                pieces: Some(p), ..
            }) if !p.is_empty() => Some(p.iter().map(|&(s, l)| (s, s + u64::from(l))).collect()),
            _ => Some(vec![(entry.pos, entry.pos + u64::from(entry.len))]),
        }
    }
}
