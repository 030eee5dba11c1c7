//! Episode prints: what a later clip needs to be found in an episode without its audio.
//!
//! A print holds the episode's spectral peaks (the landmarks are recomputed from them at
//! query time: pairs are eight times as many as peaks), its duration and SHA-256, what
//! identified the media when it was printed (opaque here), and a packet table: for every
//! packet of the audio stream, where its bytes lie in the media and how many samples it gave.
//! With that table a candidate's few seconds are decoded from the packets around them alone
//! (see `print_window.rs`): fetched by byte range, fed to a fresh codec decoder after a few
//! packets of pre-roll (MP3's bit reservoir, the MDCT overlap of AAC and Vorbis), so that no
//! container is parsed at query time (no MP4 sample table, no Ogg page search).
//!
//! The binary form: `APRT`, the format version (u16), the peak parameters' version (u64),
//! the body (varints), and the SHA-256 of everything before it. A damaged or truncated print,
//! one of another format version, or one made with peak parameters other than the caller's
//! is refused ([`PrintError`]); the caller then analyses the episode in full.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use sha2::{Digest, Sha256};
use symphonia::core::audio::Channels;
use symphonia::core::codecs::{self, CodecParameters, CodecType};

use crate::params::{Params, MAX_CHANNELS, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};
use crate::peaks::Peak;

/// The print's layout version. Bump it when the layout changes, and when the code that makes
/// the peaks (`spectrum.rs`, `peaks.rs`, `resample.rs`, `decode.rs`) changes what it gives
/// for the same parameters: old prints are then refused rather than trusted.
/// 2: raw ADTS AAC without its encoder priming (1,024 samples); Opus; stitched MP3s.
pub const FORMAT_VERSION: u16 = 2;

const MAGIC: &[u8; 4] = b"APRT";
const CHECKSUM_LEN: usize = 32;

// A print is untrusted input: anyone who can write the shared print store can plant one, and
// its checksum has no key. Every value read from it is bounded as issue 30 bounded every
// media header, before anything is sized or computed from it ([`EpisodePrint::check`]).

/// The most frames one packet gives, and so the most a decoder's buffer is sized for (from
/// the print's `max_frames_per_packet`): FLAC's largest block is 65,535 frames; Vorbis's
/// 8,192, Opus's 5,760, AAC's 2,048, MP3's 1,152, symphonia's WAV packets 1,152.
pub(crate) const MAX_FRAMES_PER_PACKET: u64 = 1 << 16;
/// The most bytes of media one packet (or piece of one) takes: a FLAC frame of 65,535 frames
/// of 8 channels of 32-bit samples stored verbatim is 2 MiB, every other codec's far less.
pub(crate) const MAX_PACKET_BYTES: u32 = 4 << 20;
/// The longest episode a print may describe: a week of audio. The longest podcast episodes
/// run a day; past this, a duration is not an episode's.
pub(crate) const MAX_SECONDS: u64 = 7 * 24 * 3_600;
/// The most codec private data (an AAC AudioSpecificConfig, FLAC's STREAMINFO, Vorbis's
/// identification and setup headers: a few KiB at most in practice).
const MAX_EXTRA_DATA: usize = 1 << 20;
/// The most bytes of media identity (an ETag, a time and a length, as JSON).
const MAX_IDENTITY: usize = 64 << 10;
/// The most bits a sample is stored in (64-bit float PCM).
const MAX_BITS_PER_SAMPLE: u32 = 64;

/// Why a print was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrintError {
    /// The bytes are not a whole print: truncated, altered, or not a print at all.
    #[error("damaged episode print: {0}")]
    Damaged(String),
    /// A print of another layout version.
    #[error("episode print of format version {found}, this analyser reads version {expected}")]
    Version {
        /// The print's version.
        found: u16,
        /// This analyser's.
        expected: u16,
    },
    /// A print made with other peak parameters: its peaks are not the ones this analyser
    /// would compute.
    #[error(
        "episode print made with other peak parameters ({found:016x}, these are {expected:016x})"
    )]
    Params {
        /// The print's parameters' version.
        found: u64,
        /// The caller's.
        expected: u64,
    },
}

/// The version of every [`Params`] value that changes the peaks: a hash of `params` with the
/// fields known not to (pairing, voting, refinement, limits) set aside. A field added to
/// [`Params`] counts until it is listed here, so a new knob can only make prints be
/// recomputed, never trusted wrongly.
pub fn params_version(params: &Params) -> u64 {
    let peaks_only = Params {
        fanout: 0,
        pair_max_dt: 0,
        pair_max_df: 0,
        speed_variants: Vec::new(),
        min_votes: 0,
        peak_hit_min: 0,
        peak_hit_fraction: 0.0,
        peak_hit_bins: 0,
        min_correlation_weak: 0.0,
        weak_votes: 0,
        min_correlation: 0.0,
        judge_piece: 0,
        judge_ratio: 0.0,
        judge_votes: 0,
        min_correlation_one_window: 0.0,
        pre_emphasis: 0.0,
        refine_screen: 0.0,
        screen_window: 0,
        refine_windows: 0,
        refine_window: 0,
        refine_search: 0,
        periodic_search: 0,
        vote_agreement: 0,
        periodic_margin: 0.0,
        periodic_lobe: 0,
        clip_peaks_per_window: 0,
        clip_fanout: 0,
        max_clip_seconds: 0.0,
        cache_bytes: 0,
        ..params.clone()
    };
    let digest = Sha256::digest(format!("{peaks_only:?}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// Random access to the episode's media bytes: a local file ([`FileSource`]), or HTTP
/// `Range` requests on the researcher's side.
pub trait ByteSource: Send {
    /// The media's length in bytes.
    fn len(&self) -> u64;
    /// Whether the media is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `len` bytes from `start` (fewer only at the end of the media). Called once per
    /// stretch a candidate needs; the implementer counts what it fetches.
    fn read_at(&mut self, start: u64, len: usize) -> io::Result<Vec<u8>>;
}

/// A [`ByteSource`] over a local file, counting the bytes read.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
    read: u64,
    requests: u64,
}

impl FileSource {
    /// Opens `path`.
    pub fn open(path: &Path) -> io::Result<FileSource> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(FileSource {
            file,
            len,
            read: 0,
            requests: 0,
        })
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// Reads so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }
}

impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&mut self, start: u64, len: usize) -> io::Result<Vec<u8>> {
        let len = len.min(self.len.saturating_sub(start) as usize);
        let mut buf = vec![0u8; len];
        self.file.seek(SeekFrom::Start(start))?;
        self.file.read_exact(&mut buf)?;
        self.read += len as u64;
        self.requests += 1;
        Ok(buf)
    }
}

/// Where one packet of the audio stream lies in the media, and what it gave when decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PacketEntry {
    /// The first byte of the packet (of its first piece, if it is in several).
    pub pos: u64,
    /// Bytes from `pos` to the end of its last piece.
    pub len: u32,
    /// Frames (samples per channel) it added to the episode in the full decode.
    pub out: u32,
}

/// What few packets need beyond [`PacketEntry`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PacketExtra {
    /// The gapless trimming symphonia's reader set on it.
    pub trim_start: u32,
    pub trim_end: u32,
    /// Frames dropped from the start of its decoded output (an MP4 edit list's delay).
    pub drop: u32,
    /// Its pieces when it is not one run of bytes (an Ogg packet across pages); empty when
    /// it is. `None`: its bytes were not found in the media (it cannot be decoded alone).
    pub pieces: Option<Vec<(u64, u32)>>,
}

/// What the codec decoder needs, from the container's headers (symphonia's
/// `CodecParameters`, the fields a decoder reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CodecSpec {
    /// Index in [`KNOWN_CODECS`] plus one; 0: not one a print can decode.
    pub codec: u16,
    pub sample_rate: u32,
    pub channels: u32,
    pub bits_per_sample: u32,
    pub bits_per_coded_sample: u32,
    pub max_frames_per_packet: u64,
    pub frames_per_block: u64,
    pub delay: u32,
    pub padding: u32,
    pub n_frames: u64,
    pub extra_data: Vec<u8>,
}

/// The codecs a print can decode windows of (the analyser's formats). New ones go at the end:
/// a print names its codec by its place here.
const KNOWN_CODECS: [CodecType; 25] = [
    codecs::CODEC_TYPE_MP3,
    codecs::CODEC_TYPE_MP2,
    codecs::CODEC_TYPE_MP1,
    codecs::CODEC_TYPE_AAC,
    codecs::CODEC_TYPE_VORBIS,
    codecs::CODEC_TYPE_FLAC,
    codecs::CODEC_TYPE_PCM_S16LE,
    codecs::CODEC_TYPE_PCM_S24LE,
    codecs::CODEC_TYPE_PCM_S32LE,
    codecs::CODEC_TYPE_PCM_U8,
    codecs::CODEC_TYPE_PCM_S8,
    codecs::CODEC_TYPE_PCM_F32LE,
    codecs::CODEC_TYPE_PCM_F64LE,
    codecs::CODEC_TYPE_PCM_ALAW,
    codecs::CODEC_TYPE_PCM_MULAW,
    codecs::CODEC_TYPE_PCM_S16BE,
    codecs::CODEC_TYPE_PCM_S24BE,
    codecs::CODEC_TYPE_PCM_S32BE,
    codecs::CODEC_TYPE_PCM_F32BE,
    codecs::CODEC_TYPE_PCM_F64BE,
    codecs::CODEC_TYPE_PCM_U16LE,
    codecs::CODEC_TYPE_PCM_U24LE,
    codecs::CODEC_TYPE_PCM_U32LE,
    codecs::CODEC_TYPE_PCM_U16BE,
    codecs::CODEC_TYPE_OPUS,
];

impl CodecSpec {
    /// The decoder's parameters of a track.
    pub(crate) fn of(params: &CodecParameters) -> CodecSpec {
        let codec = KNOWN_CODECS
            .iter()
            .position(|&c| c == params.codec)
            .map_or(0, |i| i as u16 + 1);
        let channels = params
            .channels
            .or_else(|| params.channel_layout.map(|l| l.into_channels()))
            .map_or(0, |c| c.bits());
        CodecSpec {
            codec,
            sample_rate: params.sample_rate.unwrap_or(0),
            channels,
            bits_per_sample: params.bits_per_sample.unwrap_or(0),
            bits_per_coded_sample: params.bits_per_coded_sample.unwrap_or(0),
            max_frames_per_packet: params.max_frames_per_packet.unwrap_or(0),
            frames_per_block: params.frames_per_block.unwrap_or(0),
            delay: params.delay.unwrap_or(0),
            padding: params.padding.unwrap_or(0),
            n_frames: params.n_frames.unwrap_or(0),
            extra_data: params
                .extra_data
                .as_deref()
                .map(<[u8]>::to_vec)
                .unwrap_or_default(),
        }
    }

    /// Whether the decoder's parameters lie within what a media header may say (see
    /// `decode.rs`): nothing a decoder sizes a buffer from is unbounded.
    fn check(&self) -> Result<(), String> {
        let rate = self.sample_rate;
        if rate != 0 && !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
            return Err(format!(
                "its codec's sample rate {rate} Hz is outside {MIN_SAMPLE_RATE}–{MAX_SAMPLE_RATE} Hz"
            ));
        }
        let channels = self.channels.count_ones() as usize;
        if channels > MAX_CHANNELS {
            return Err(format!(
                "its codec's {channels} channels is outside 1–{MAX_CHANNELS} channels"
            ));
        }
        for (what, bits) in [
            ("bits per sample", self.bits_per_sample),
            ("bits per coded sample", self.bits_per_coded_sample),
        ] {
            if bits > MAX_BITS_PER_SAMPLE {
                return Err(format!(
                    "its codec's {bits} {what} is over {MAX_BITS_PER_SAMPLE}"
                ));
            }
        }
        for (what, frames) in [
            ("frames per packet", self.max_frames_per_packet),
            ("frames per block", self.frames_per_block),
            ("delay", u64::from(self.delay)),
            ("padding", u64::from(self.padding)),
        ] {
            if frames > MAX_FRAMES_PER_PACKET {
                return Err(format!(
                    "its codec's {what} of {frames} frames is over {MAX_FRAMES_PER_PACKET}"
                ));
            }
        }
        if self.n_frames > u64::from(MAX_SAMPLE_RATE) * MAX_SECONDS {
            return Err(format!(
                "its codec's {} frames are over {} hours at any rate",
                self.n_frames,
                MAX_SECONDS / 3_600
            ));
        }
        if self.extra_data.len() > MAX_EXTRA_DATA {
            return Err(format!(
                "its codec's private data of {} bytes is over {MAX_EXTRA_DATA} bytes",
                self.extra_data.len()
            ));
        }
        Ok(())
    }

    /// symphonia's parameters again; `None` for a codec a print cannot decode.
    pub(crate) fn parameters(&self) -> Option<CodecParameters> {
        let codec = *KNOWN_CODECS.get(usize::from(self.codec).checked_sub(1)?)?;
        let mut p = CodecParameters::new();
        p.for_codec(codec);
        let nonzero = |v: u32| (v != 0).then_some(v);
        let nonzero64 = |v: u64| (v != 0).then_some(v);
        p.sample_rate = nonzero(self.sample_rate);
        p.channels = Channels::from_bits(self.channels).filter(|c| !c.is_empty());
        p.bits_per_sample = nonzero(self.bits_per_sample);
        p.bits_per_coded_sample = nonzero(self.bits_per_coded_sample);
        p.max_frames_per_packet = nonzero64(self.max_frames_per_packet);
        p.frames_per_block = nonzero64(self.frames_per_block);
        p.delay = nonzero(self.delay);
        p.padding = nonzero(self.padding);
        p.n_frames = nonzero64(self.n_frames);
        if !self.extra_data.is_empty() {
            p.extra_data = Some(self.extra_data.clone().into_boxed_slice());
        }
        Some(p)
    }
}

/// An episode's print: see the module's documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodePrint {
    pub(crate) params_version: u64,
    pub(crate) duration_ns: u64,
    pub(crate) hash: String,
    pub(crate) identity: String,
    /// The decoded stream's rate (Hz) and its length (frames), as in the full decode.
    pub(crate) rate: u32,
    pub(crate) frames: u64,
    /// The media's length in bytes.
    pub(crate) media_len: u64,
    /// The peaks, `(frame, bin)`, in the order the peak picker gave them.
    pub(crate) peaks: Vec<(u32, u16)>,
    pub(crate) codec: CodecSpec,
    pub(crate) packets: Vec<PacketEntry>,
    pub(crate) extras: BTreeMap<u32, PacketExtra>,
}

impl EpisodePrint {
    /// What identified the media when it was printed (given by whoever printed it).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The episode's duration (nanoseconds), as a full analysis reports it.
    pub fn duration_ns(&self) -> u64 {
        self.duration_ns
    }

    /// The media file's SHA-256 (lower-case hex).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// Peaks kept.
    pub fn peak_count(&self) -> usize {
        self.peaks.len()
    }

    /// Packets indexed.
    pub fn packet_count(&self) -> usize {
        self.packets.len()
    }

    /// The media's length in bytes when it was printed.
    pub fn media_len(&self) -> u64 {
        self.media_len
    }

    /// The print in its binary form (compact; a checksum at the end).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(self.peaks.len() * 2 + self.packets.len() * 3 + 256);
        w.extend_from_slice(MAGIC);
        w.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        w.extend_from_slice(&self.params_version.to_le_bytes());
        put(&mut w, self.duration_ns);
        put_bytes(&mut w, &unhex(&self.hash));
        put_bytes(&mut w, self.identity.as_bytes());
        put(&mut w, u64::from(self.rate));
        put(&mut w, self.frames);
        put(&mut w, self.media_len);
        // Peaks: frame difference from the previous (varint, mostly one byte), then the bin
        // in one byte when every bin fits, else two.
        put(&mut w, self.peaks.len() as u64);
        let wide = self.peaks.iter().any(|p| p.1 > 255);
        w.push(u8::from(wide));
        let mut t = 0u32;
        for &(pt, f) in &self.peaks {
            put(&mut w, u64::from(pt.wrapping_sub(t)));
            t = pt;
            if wide {
                w.extend_from_slice(&f.to_le_bytes());
            } else {
                w.push(f as u8);
            }
        }
        let c = &self.codec;
        put(&mut w, u64::from(c.codec));
        for v in [
            u64::from(c.sample_rate),
            u64::from(c.channels),
            u64::from(c.bits_per_sample),
            u64::from(c.bits_per_coded_sample),
            c.max_frames_per_packet,
            c.frames_per_block,
            u64::from(c.delay),
            u64::from(c.padding),
            c.n_frames,
        ] {
            put(&mut w, v);
        }
        put_bytes(&mut w, &c.extra_data);
        // Packets: its length's difference from the previous one's (zigzag) `<< 3 | code`
        // (see [`CODE_NEW`]), then where it starts when not at the previous one's end, then
        // its output frames when new.
        put(&mut w, self.packets.len() as u64);
        let (mut end, mut outs, mut len) = (0u64, Outs::default(), 0u32);
        for p in &self.packets {
            let moved = p.pos != end;
            let code = outs.code(moved, p.out);
            let delta = zigzag(i64::from(p.len) - i64::from(len));
            put(&mut w, delta << 3 | u64::from(code));
            len = p.len;
            if moved {
                put(&mut w, zigzag(p.pos as i64 - end as i64));
            }
            if code == CODE_NEW || code == CODE_MOVED_NEW {
                put(&mut w, u64::from(p.out));
            }
            outs.set(p.out);
            end = p.pos + u64::from(p.len);
        }
        put(&mut w, self.extras.len() as u64);
        let mut last = 0u32;
        for (&i, x) in &self.extras {
            put(&mut w, u64::from(i - last));
            last = i;
            put(&mut w, u64::from(x.trim_start));
            put(&mut w, u64::from(x.trim_end));
            put(&mut w, u64::from(x.drop));
            match &x.pieces {
                None => put(&mut w, 0),
                Some(pieces) => {
                    // Each piece from where the one before ended (the packet's start first).
                    put(&mut w, pieces.len() as u64 + 1);
                    let mut end = self.packets.get(i as usize).map_or(0, |p| p.pos);
                    for &(pos, len) in pieces {
                        put(&mut w, zigzag(pos as i64 - end as i64));
                        put(&mut w, u64::from(len));
                        end = pos + u64::from(len);
                    }
                }
            }
        }
        let digest = Sha256::digest(&w);
        w.extend_from_slice(&digest);
        w
    }

    /// A print read back: refused if damaged or truncated (checksum), of another format
    /// version, or made with peak parameters other than `params`'.
    pub fn from_bytes(bytes: &[u8], params: &Params) -> Result<EpisodePrint, PrintError> {
        let damaged = |what: &str| PrintError::Damaged(what.to_owned());
        if bytes.len() < MAGIC.len() + 2 + 8 + CHECKSUM_LEN || &bytes[..4] != MAGIC {
            return Err(damaged("not an episode print"));
        }
        let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        if Sha256::digest(body).as_slice() != sum {
            return Err(damaged("checksum mismatch (truncated or altered)"));
        }
        let version = u16::from_le_bytes([body[4], body[5]]);
        if version != FORMAT_VERSION {
            return Err(PrintError::Version {
                found: version,
                expected: FORMAT_VERSION,
            });
        }
        let mut pv = [0u8; 8];
        pv.copy_from_slice(&body[6..14]);
        let found = u64::from_le_bytes(pv);
        let expected = params_version(params);
        if found != expected {
            return Err(PrintError::Params { found, expected });
        }
        let mut r = Reader {
            bytes: &body[14..],
            at: 0,
        };
        let print = r.body(found).ok_or_else(|| damaged("malformed body"))?;
        print.check(params).map_err(PrintError::Damaged)?;
        Ok(print)
    }

    /// Whether every value of the print lies within what an episode's print can hold (see
    /// the bounds above): rates and channels as a media header's, the codec's sizes, every
    /// packet inside the media, the packets' frames adding up to the episode's, every peak
    /// inside the episode and the analysed band. What breaks a bound is named.
    pub(crate) fn check(&self, params: &Params) -> Result<(), String> {
        let rate = self.rate;
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
            return Err(format!(
                "its sample rate {rate} Hz is outside {MIN_SAMPLE_RATE}–{MAX_SAMPLE_RATE} Hz"
            ));
        }
        let longest = u64::from(rate) * MAX_SECONDS;
        if self.frames > longest {
            return Err(format!(
                "its {} frames at {rate} Hz are over {} hours",
                self.frames,
                MAX_SECONDS / 3_600
            ));
        }
        let duration = crate::ns(self.frames, rate);
        if self.duration_ns.abs_diff(duration) > 1_000_000_000 {
            return Err(format!(
                "its duration of {} ns is not its {} frames at {rate} Hz ({duration} ns)",
                self.duration_ns, self.frames
            ));
        }
        if self.hash.len() != 64 {
            return Err(format!(
                "its media hash is {} hex digits, not 64",
                self.hash.len()
            ));
        }
        if self.identity.len() > MAX_IDENTITY {
            return Err(format!(
                "its media identity of {} bytes is over {MAX_IDENTITY}",
                self.identity.len()
            ));
        }
        self.codec.check()?;
        self.check_packets()?;
        self.check_peaks(params)
    }

    fn check_packets(&self) -> Result<(), String> {
        let media = self.media_len;
        let inside = |what: &str, pos: u64, len: u32| {
            if len > MAX_PACKET_BYTES {
                return Err(format!(
                    "its {what} of {len} bytes is over {MAX_PACKET_BYTES} bytes"
                ));
            }
            match pos.checked_add(u64::from(len)) {
                Some(end) if end <= media => Ok(()),
                _ => Err(format!(
                    "its {what} at byte {pos} of {len} bytes ends past the media's {media} bytes"
                )),
            }
        };
        let mut total = 0u64;
        for (i, p) in self.packets.iter().enumerate() {
            inside(&format!("packet {i}"), p.pos, p.len)?;
            if u64::from(p.out) > MAX_FRAMES_PER_PACKET {
                return Err(format!(
                    "its packet {i} of {} frames is over {MAX_FRAMES_PER_PACKET} frames",
                    p.out
                ));
            }
            total += u64::from(p.out);
        }
        // No packet table (a stream printed without one) refines nothing; one that is there
        // gives the episode's frames exactly.
        if !self.packets.is_empty() && total != self.frames {
            return Err(format!(
                "its packets give {total} frames, not its {} frames",
                self.frames
            ));
        }
        for (&i, x) in &self.extras {
            for (what, v) in [
                ("trimming at the start", x.trim_start),
                ("trimming at the end", x.trim_end),
                ("frames dropped", x.drop),
            ] {
                if u64::from(v) > MAX_FRAMES_PER_PACKET {
                    return Err(format!(
                        "its packet {i}'s {what} of {v} frames is over {MAX_FRAMES_PER_PACKET}"
                    ));
                }
            }
            for &(pos, len) in x.pieces.iter().flatten() {
                inside(&format!("packet {i}'s piece"), pos, len)?;
            }
        }
        Ok(())
    }

    fn check_peaks(&self, params: &Params) -> Result<(), String> {
        // The frames of the analysed stream (`spectrum.rs`: a frame starts before its end).
        let analysed = (u128::from(self.frames) * u128::from(params.sample_rate))
            .div_ceil(u128::from(self.rate));
        let last = analysed / params.hop.max(1) as u128 + 1;
        if let Some(&(t, _)) = self.peaks.last() {
            if u128::from(t) > last {
                return Err(format!(
                    "its peak at frame {t} is past its episode's end (frame {last})"
                ));
            }
        }
        let (lo, hi) = (params.min_bin, params.max_bin);
        if let Some(&(t, f)) = self
            .peaks
            .iter()
            .find(|p| !(lo..=hi).contains(&usize::from(p.1)))
        {
            return Err(format!(
                "its peak at frame {t} is in bin {f}, outside the analysed bins {lo}–{hi}"
            ));
        }
        Ok(())
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn var(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn var32(&mut self) -> Option<u32> {
        u32::try_from(self.var()?).ok()
    }

    fn count(&mut self, least_bytes_each: usize) -> Option<usize> {
        let n = usize::try_from(self.var()?).ok()?;
        // A count no remaining bytes could hold is damage, not an allocation to make.
        (n.checked_mul(least_bytes_each)? <= self.bytes.len() - self.at).then_some(n)
    }

    fn slice(&mut self) -> Option<&[u8]> {
        let n = self.count(1)?;
        let s = self.bytes.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }

    fn body(&mut self, params_version: u64) -> Option<EpisodePrint> {
        let duration_ns = self.var()?;
        let hash = hex(self.slice()?);
        let identity = String::from_utf8(self.slice()?.to_vec()).ok()?;
        let rate = self.var32()?;
        let frames = self.var()?;
        let media_len = self.var()?;
        let n = self.count(2)?;
        let wide = self.byte()? != 0;
        let mut peaks = Vec::with_capacity(n);
        let mut t = 0u32;
        for _ in 0..n {
            t = t.checked_add(self.var32()?)?;
            let f = if wide {
                u16::from_le_bytes([self.byte()?, self.byte()?])
            } else {
                u16::from(self.byte()?)
            };
            peaks.push((t, f));
        }
        let codec = CodecSpec {
            codec: u16::try_from(self.var()?).ok()?,
            sample_rate: self.var32()?,
            channels: self.var32()?,
            bits_per_sample: self.var32()?,
            bits_per_coded_sample: self.var32()?,
            max_frames_per_packet: self.var()?,
            frames_per_block: self.var()?,
            delay: self.var32()?,
            padding: self.var32()?,
            n_frames: self.var()?,
            extra_data: self.slice()?.to_vec(),
        };
        let n = self.count(1)?;
        let mut packets = Vec::with_capacity(n);
        let (mut end, mut outs, mut len) = (0u64, Outs::default(), 0u32);
        for _ in 0..n {
            let head = self.var()?;
            len = u32::try_from(i64::from(len).checked_add(unzigzag(head >> 3))?).ok()?;
            let code = (head & 7) as u8;
            let pos = if code >= CODE_MOVED {
                end.checked_add_signed(unzigzag(self.var()?))?
            } else {
                end
            };
            let out = match code {
                0 | CODE_MOVED => outs.current,
                CODE_NEW | CODE_MOVED_NEW => self.var32()?,
                k => *outs.recent.get(usize::from(k) - 1)?,
            };
            outs.set(out);
            end = pos.checked_add(u64::from(len))?;
            packets.push(PacketEntry { pos, len, out });
        }
        let n = self.count(5)?;
        let mut extras = BTreeMap::new();
        let mut last = 0u32;
        for _ in 0..n {
            last = last.checked_add(self.var32()?)?;
            let trim_start = self.var32()?;
            let trim_end = self.var32()?;
            let drop = self.var32()?;
            let pieces = match usize::try_from(self.var()?).ok()? {
                0 => None,
                k => {
                    if (k - 1).checked_mul(2)? > self.bytes.len() - self.at {
                        return None;
                    }
                    let mut v = Vec::with_capacity(k - 1);
                    let mut end = packets.get(last as usize)?.pos;
                    for _ in 1..k {
                        let pos = end.checked_add_signed(unzigzag(self.var()?))?;
                        let len = self.var32()?;
                        end = pos.checked_add(u64::from(len))?;
                        v.push((pos, len));
                    }
                    Some(v)
                }
            };
            extras.insert(
                last,
                PacketExtra {
                    trim_start,
                    trim_end,
                    drop,
                    pieces,
                },
            );
        }
        if self.at != self.bytes.len() || extras.keys().any(|&i| i as usize >= packets.len()) {
            return None;
        }
        Some(EpisodePrint {
            params_version,
            duration_ns,
            hash,
            identity,
            rate,
            frames,
            media_len,
            peaks,
            codec,
            packets,
            extras,
        })
    }
}

/// A packet's code (3 bits): right after the previous packet, giving as many frames as it
/// (0), as one of the last four other counts (1–4: Vorbis switches between two block
/// sizes, MP3 and AAC never change), or a new count (5, written after); or elsewhere (the
/// distance from the previous packet's end written after), giving as many frames (6) or a
/// new count (7, written after the distance).
const CODE_NEW: u8 = 5;
const CODE_MOVED: u8 = 6;
const CODE_MOVED_NEW: u8 = 7;

/// The frames per packet seen last, and the four other counts seen before.
#[derive(Default)]
struct Outs {
    current: u32,
    recent: Vec<u32>,
}

impl Outs {
    fn code(&self, moved: bool, out: u32) -> u8 {
        match (moved, out == self.current) {
            (true, true) => CODE_MOVED,
            (true, false) => CODE_MOVED_NEW,
            (false, true) => 0,
            (false, false) => self
                .recent
                .iter()
                .position(|&v| v == out)
                .map_or(CODE_NEW, |i| i as u8 + 1),
        }
    }

    fn set(&mut self, out: u32) {
        if out != self.current {
            self.recent.retain(|&v| v != out);
            self.recent.insert(0, self.current);
            self.recent.truncate(4);
            self.current = out;
        }
    }
}

/// The peaks as the print keeps them.
pub(crate) fn compact(peaks: &[Peak]) -> Vec<(u32, u16)> {
    peaks.iter().map(|p| (p.t, p.f)).collect()
}

fn put(w: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        w.push((v as u8) | 0x80);
        v >>= 7;
    }
    w.push(v as u8);
}

fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    put(w, b.len() as u64);
    w.extend_from_slice(b);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn sample() -> EpisodePrint {
        let mut extras = BTreeMap::new();
        extras.insert(
            0,
            PacketExtra {
                trim_start: 1105,
                drop: 3,
                pieces: Some(Vec::new()),
                ..PacketExtra::default()
            },
        );
        extras.insert(
            2,
            PacketExtra {
                pieces: Some(vec![(900, 20), (950, 30)]),
                ..PacketExtra::default()
            },
        );
        extras.insert(3, PacketExtra::default());
        EpisodePrint {
            params_version: params_version(&Params::default()),
            duration_ns: 53_310_657,
            hash: "ab".repeat(32),
            identity: r#"{"etag":"x"}"#.into(),
            rate: 44_100,
            frames: 2_351,
            media_len: 123_456,
            peaks: vec![(0, 6), (0, 240), (3, 17), (4, 100)],
            codec: CodecSpec::of(&{
                let mut p = CodecParameters::new();
                p.for_codec(codecs::CODEC_TYPE_MP3)
                    .with_sample_rate(44_100)
                    .with_channels(Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
                p
            }),
            packets: vec![
                PacketEntry {
                    pos: 417,
                    len: 417,
                    out: 47,
                },
                PacketEntry {
                    pos: 834,
                    len: 66,
                    out: 1152,
                },
                PacketEntry {
                    pos: 900,
                    len: 80,
                    out: 1152,
                },
                PacketEntry {
                    pos: 10,
                    len: 5,
                    out: 0,
                },
            ],
            extras,
        }
    }

    #[test]
    fn a_print_reads_back_as_written() {
        let p = sample();
        let bytes = p.to_bytes();
        let back = EpisodePrint::from_bytes(&bytes, &Params::default()).unwrap();
        assert_eq!(back, p);
        assert_eq!(
            back.codec.parameters().unwrap().codec,
            codecs::CODEC_TYPE_MP3
        );
    }

    #[test]
    fn damage_truncation_other_versions_and_other_params_are_refused() {
        let params = Params::default();
        let bytes = sample().to_bytes();
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            assert!(matches!(
                EpisodePrint::from_bytes(&bytes[..cut], &params),
                Err(PrintError::Damaged(_))
            ));
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(matches!(
            EpisodePrint::from_bytes(&flipped, &params),
            Err(PrintError::Damaged(_))
        ));
        let other = Params {
            peaks_per_window: 24,
            ..Params::default()
        };
        assert!(matches!(
            EpisodePrint::from_bytes(&bytes, &other),
            Err(PrintError::Params { .. })
        ));
        // A knob that does not touch the peaks keeps the print valid.
        let refine_only = Params {
            min_correlation: 0.4,
            fanout: 5,
            weak_votes: 3,
            judge_ratio: 0.5,
            periodic_margin: 0.02,
            clip_peaks_per_window: 80,
            ..Params::default()
        };
        assert!(EpisodePrint::from_bytes(&bytes, &refine_only).is_ok());
        let mut v2 = bytes[..bytes.len() - CHECKSUM_LEN].to_vec();
        v2[4] = 3;
        let sum = Sha256::digest(&v2);
        v2.extend_from_slice(&sum);
        assert!(matches!(
            EpisodePrint::from_bytes(&v2, &params),
            Err(PrintError::Version { found: 3, .. })
        ));
    }

    /// Why `sample()` changed by `change` is refused when read (it is written whole, with
    /// its checksum: the checksum has no key, anyone can write one).
    fn refused(change: impl FnOnce(&mut EpisodePrint)) -> String {
        let mut p = sample();
        change(&mut p);
        match EpisodePrint::from_bytes(&p.to_bytes(), &Params::default()) {
            Err(PrintError::Damaged(why)) => why,
            other => panic!("read: {other:?}"),
        }
    }

    fn pcm(p: &mut EpisodePrint, max_frames_per_packet: u64) {
        p.codec = CodecSpec::of(&{
            let mut c = CodecParameters::new();
            c.for_codec(codecs::CODEC_TYPE_PCM_S16LE)
                .with_sample_rate(44_100)
                .with_channels(Channels::FRONT_LEFT)
                .with_max_frames_per_packet(max_frames_per_packet);
            c
        });
    }

    #[test]
    fn the_four_forged_prints_of_issue_46_are_refused_with_the_value_named() {
        // A rate that sized the resampler's tables at 14.7 GB.
        let why = refused(|p| p.rate = u32::MAX);
        assert!(
            why.contains("sample rate 4294967295 Hz is outside 1000–384000 Hz"),
            "{why}"
        );
        // A PCM decoder's buffer sized from the print: 2^40 frames.
        let why = refused(|p| pcm(p, 1 << 40));
        assert!(
            why.contains("frames per packet of 1099511627776 frames is over 65536"),
            "{why}"
        );
        let mut fine = sample();
        pcm(&mut fine, 1_152);
        assert!(EpisodePrint::from_bytes(&fine.to_bytes(), &Params::default()).is_ok());
        // A jump of the peaks' frames that sized the votes at 4 G offsets.
        let why = refused(|p| p.peaks.push((4_000_000_000, 100)));
        assert!(
            why.contains("peak at frame 4000000000 is past its episode's end (frame 4)"),
            "{why}"
        );
        // Anchors where `anchor + max_dt` overflowed.
        let why = refused(|p| p.peaks = vec![(u32::MAX - 3, 100), (u32::MAX, 101)]);
        assert!(why.contains("peak at frame 4294967295 is past"), "{why}");
    }

    type Change = Box<dyn FnOnce(&mut EpisodePrint)>;

    #[test]
    fn every_other_value_out_of_bounds_is_refused_with_the_value_named() {
        let cases: Vec<(&str, Change)> = vec![
            ("sample rate 0 Hz", Box::new(|p| p.rate = 0)),
            (
                "frames at 44100 Hz are over 168 hours",
                Box::new(|p| {
                    p.frames = 44_100 * 7 * 24 * 3_600 + 1;
                    p.duration_ns = crate::ns(p.frames, 44_100);
                }),
            ),
            (
                "its duration of 99000000000 ns",
                Box::new(|p| p.duration_ns = 99_000_000_000),
            ),
            (
                "media hash is 2 hex digits",
                Box::new(|p| p.hash = "ab".into()),
            ),
            (
                "media identity of 70000 bytes",
                Box::new(|p| p.identity = "x".repeat(70_000)),
            ),
            (
                "codec's sample rate 4294967295 Hz",
                Box::new(|p| p.codec.sample_rate = u32::MAX),
            ),
            (
                "codec's 20 channels is outside 1–16",
                Box::new(|p| p.codec.channels = (1 << 20) - 1),
            ),
            (
                "codec's 4096 bits per sample",
                Box::new(|p| p.codec.bits_per_sample = 4_096),
            ),
            (
                "frames per block of 4294967296 frames",
                Box::new(|p| p.codec.frames_per_block = 1 << 32),
            ),
            (
                "codec's delay of 4294967295",
                Box::new(|p| p.codec.delay = u32::MAX),
            ),
            (
                "codec's padding of 100000",
                Box::new(|p| p.codec.padding = 100_000),
            ),
            (
                "codec's 18446744073709551615 frames",
                Box::new(|p| p.codec.n_frames = u64::MAX),
            ),
            (
                "private data of 1048577 bytes",
                Box::new(|p| p.codec.extra_data = vec![0; (1 << 20) + 1]),
            ),
            (
                "packet 1 of 4294967295 bytes is over 4194304 bytes",
                Box::new(|p| p.packets[1].len = u32::MAX),
            ),
            (
                "packet 1 at byte 123400 of 66 bytes ends past the media's 123456 bytes",
                Box::new(|p| p.packets[1].pos = 123_400),
            ),
            (
                "packet 2 of 100000 frames is over 65536",
                Box::new(|p| p.packets[2].out = 100_000),
            ),
            (
                "packets give 2352 frames, not its 2351",
                Box::new(|p| p.packets[3].out = 1),
            ),
            (
                "packet 0's trimming at the start of 4000000000",
                Box::new(|p| {
                    if let Some(x) = p.extras.get_mut(&0) {
                        x.trim_start = 4_000_000_000;
                    }
                }),
            ),
            (
                "packet 2's piece of 4194305 bytes is over 4194304 bytes",
                Box::new(|p| {
                    if let Some(x) = p.extras.get_mut(&2) {
                        x.pieces = Some(vec![(900, 20), (950, (4 << 20) + 1)]);
                    }
                }),
            ),
            (
                "packet 2's piece at byte 123456 of 30 bytes ends past",
                Box::new(|p| {
                    if let Some(x) = p.extras.get_mut(&2) {
                        x.pieces = Some(vec![(900, 20), (123_456, 30)]);
                    }
                }),
            ),
            (
                "in bin 300, outside the analysed bins 6–240",
                Box::new(|p| p.peaks[3].1 = 300),
            ),
            (
                "in bin 2, outside the analysed bins 6–240",
                Box::new(|p| p.peaks[0].1 = 2),
            ),
        ];
        for (words, change) in cases {
            let why = refused(change);
            assert!(why.contains(words), "{words}: {why}");
        }
    }

    #[test]
    fn signed_gaps_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 1 << 40, -(1 << 40)] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
