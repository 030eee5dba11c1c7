//! Structured mutation of audio files: the header fields of each container the analyser reads
//! (WAV, MP3, AAC/ADTS, MP4/M4A, Ogg Vorbis, FLAC) found in a valid seed and set to values
//! that headers should not hold (0, all ones, one past a bound…), plus byte-level damage
//! (flips, overwrites, truncation, splices). Ogg pages get their CRC recomputed after a
//! mutation, so the damage reaches the Vorbis headers instead of stopping at the page check.

/// The containers, by file extension (the decoder's first hint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Wav,
    Mp3,
    Adts,
    Mp4,
    Ogg,
    Flac,
}

impl Kind {
    /// The kind of a file named `name`, by its extension.
    pub fn of(name: &str) -> Option<Kind> {
        let ext = name.rsplit('.').next()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "wav" => Kind::Wav,
            "mp3" => Kind::Mp3,
            "aac" => Kind::Adts,
            "m4a" | "mp4" => Kind::Mp4,
            "ogg" => Kind::Ogg,
            "flac" => Kind::Flac,
            _ => return None,
        })
    }
}

/// A header field: `width` bits at bit `at` (big-endian bit order), or a little-endian integer
/// of `width / 8` bytes at byte `at / 8`.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub at: usize,
    pub width: u32,
    pub little: bool,
}

const fn be(name: &'static str, byte: usize, bit: usize, width: u32) -> Field {
    Field {
        name,
        at: byte * 8 + bit,
        width,
        little: false,
    }
}

const fn le(name: &'static str, byte: usize, width: u32) -> Field {
    Field {
        name,
        at: byte * 8,
        width,
        little: true,
    }
}

/// Reads a field (0 if it runs past the end).
pub fn get(data: &[u8], f: Field) -> u64 {
    if (f.at + f.width as usize).div_ceil(8) > data.len() {
        return 0;
    }
    if f.little {
        (0..f.width as usize / 8).fold(0u64, |v, i| v | u64::from(data[f.at / 8 + i]) << (8 * i))
    } else {
        (0..f.width as usize).fold(0u64, |v, i| {
            let bit = f.at + i;
            v << 1 | u64::from(data[bit / 8] >> (7 - bit % 8) & 1)
        })
    }
}

/// Sets a field (nothing if it runs past the end).
pub fn set(data: &mut [u8], f: Field, value: u64) {
    if (f.at + f.width as usize).div_ceil(8) > data.len() {
        return;
    }
    if f.little {
        for i in 0..f.width as usize / 8 {
            data[f.at / 8 + i] = (value >> (8 * i)) as u8;
        }
    } else {
        for i in 0..f.width as usize {
            let bit = f.at + i;
            let v = (value >> (f.width as usize - 1 - i)) & 1;
            let mask = 1u8 << (7 - bit % 8);
            data[bit / 8] = (data[bit / 8] & !mask) | if v == 1 { mask } else { 0 };
        }
    }
}

fn find_all(data: &[u8], pat: &[u8]) -> Vec<usize> {
    data.windows(pat.len())
        .enumerate()
        .filter(|(_, w)| *w == pat)
        .map(|(i, _)| i)
        .collect()
}

fn find(data: &[u8], pat: &[u8]) -> Option<usize> {
    data.windows(pat.len()).position(|w| w == pat)
}

fn shift(fields: &[Field], byte: usize) -> impl Iterator<Item = Field> + '_ {
    fields.iter().map(move |f| Field {
        at: f.at + byte * 8,
        ..*f
    })
}

/// Up to `n` frame starts: a sync pattern (`mask` over the second byte equal to `want`).
fn syncs(data: &[u8], from: usize, mask: u8, want: u8, n: usize) -> Vec<usize> {
    (from..data.len().saturating_sub(4))
        .filter(|&i| data[i] == 0xFF && data[i + 1] & mask == want)
        .take(n)
        .collect()
}

/// Every header field of interest in `data`, a file of `kind`.
pub fn fields(kind: Kind, data: &[u8]) -> Vec<Field> {
    let mut out = Vec::new();
    match kind {
        Kind::Wav => {
            out.push(le("riff size", 4, 32));
            if let Some(p) = find(data, b"fmt ") {
                out.extend(shift(
                    &[
                        le("fmt size", 4, 32),
                        le("format tag", 8, 16),
                        le("channels", 10, 16),
                        le("sample rate", 12, 32),
                        le("byte rate", 16, 32),
                        le("block align", 20, 16),
                        le("bits per sample", 22, 16),
                        le("extension size", 24, 16),
                        le("valid bits", 26, 16),
                        le("channel mask", 28, 32),
                        le("sub-format", 32, 16),
                    ],
                    p,
                ));
            }
            if let Some(p) = find(data, b"data") {
                out.push(le("data size", p + 4, 32));
            }
        }
        Kind::Flac => {
            out.extend([
                be("block type", 4, 1, 7),
                be("block length", 5, 0, 24),
                be("min block size", 8, 0, 16),
                be("max block size", 10, 0, 16),
                be("min frame size", 12, 0, 24),
                be("max frame size", 15, 0, 24),
                be("sample rate", 18, 0, 20),
                be("channels - 1", 20, 4, 3),
                be("bits per sample - 1", 20, 7, 5),
                be("total samples", 21, 4, 36),
            ]);
            for f in syncs(data, 42, 0xFE, 0xF8, 2) {
                out.extend(shift(
                    &[
                        be("frame block size code", 2, 0, 4),
                        be("frame rate code", 2, 4, 4),
                        be("frame channels", 3, 0, 4),
                        be("frame sample size", 3, 4, 3),
                    ],
                    f,
                ));
            }
        }
        Kind::Mp3 => {
            let id3 = if data.starts_with(b"ID3") { 10 } else { 0 };
            if id3 > 0 {
                out.push(be("id3 size", 6, 0, 32));
            }
            for f in syncs(data, id3, 0xE0, 0xE0, 3) {
                out.extend(shift(
                    &[
                        be("version", 1, 3, 2),
                        be("layer", 1, 5, 2),
                        be("bitrate", 2, 0, 4),
                        be("rate index", 2, 4, 2),
                        be("padding", 2, 6, 1),
                        be("channel mode", 3, 0, 2),
                        be("mode extension", 3, 2, 2),
                    ],
                    f,
                ));
            }
            for tag in [&b"Xing"[..], b"Info"] {
                if let Some(x) = find(data, tag) {
                    out.extend(shift(
                        &[
                            be("xing flags", 4, 0, 32),
                            be("xing frames", 8, 0, 32),
                            be("xing bytes", 12, 0, 32),
                        ],
                        x,
                    ));
                }
            }
            if let Some(l) = find(data, b"LAME") {
                out.extend(shift(
                    &[be("encoder delay", 21, 0, 12), be("padding", 22, 4, 12)],
                    l,
                ));
            }
        }
        Kind::Adts => {
            for f in syncs(data, 0, 0xF6, 0xF0, 3) {
                out.extend(shift(
                    &[
                        be("mpeg id", 1, 4, 1),
                        be("protection absent", 1, 7, 1),
                        be("profile", 2, 0, 2),
                        be("rate index", 2, 2, 4),
                        be("channel config", 2, 7, 3),
                        be("frame length", 3, 6, 13),
                        be("buffer fullness", 5, 3, 11),
                        be("raw blocks", 6, 6, 2),
                    ],
                    f,
                ));
            }
        }
        Kind::Mp4 => {
            for (name, rel) in [
                (
                    &b"mvhd"[..],
                    &[
                        be("mvhd timescale", 20, 0, 32),
                        be("mvhd duration", 24, 0, 32),
                    ][..],
                ),
                (
                    b"mdhd",
                    &[
                        be("mdhd timescale", 20, 0, 32),
                        be("mdhd duration", 24, 0, 32),
                    ],
                ),
                (
                    b"mp4a",
                    &[
                        be("mp4a channels", 24, 0, 16),
                        be("mp4a sample size", 26, 0, 16),
                        be("mp4a sample rate", 32, 0, 32),
                    ],
                ),
                (
                    b"stts",
                    &[
                        be("stts entries", 12, 0, 32),
                        be("stts count", 16, 0, 32),
                        be("stts delta", 20, 0, 32),
                    ],
                ),
                (
                    b"stsc",
                    &[
                        be("stsc entries", 12, 0, 32),
                        be("stsc samples per chunk", 20, 0, 32),
                    ],
                ),
                (
                    b"stsz",
                    &[
                        be("stsz sample size", 12, 0, 32),
                        be("stsz count", 16, 0, 32),
                        be("stsz first", 20, 0, 32),
                    ],
                ),
                (
                    b"stco",
                    &[be("stco entries", 12, 0, 32), be("stco first", 16, 0, 32)],
                ),
                (
                    b"elst",
                    &[
                        be("elst entries", 12, 0, 32),
                        be("elst duration", 16, 0, 32),
                        be("elst media time", 20, 0, 32),
                    ],
                ),
                (b"esds", &[be("esds size", 0, 0, 32)]),
                (b"trak", &[be("trak size", 0, 0, 32)]),
                (b"moov", &[be("moov size", 0, 0, 32)]),
                (b"mdat", &[be("mdat size", 0, 0, 32)]),
            ] {
                for p in find_all(data, name) {
                    // Offsets above are from the box's start (its size), 4 bytes before the name;
                    // the payload starts at 8 (full boxes: version and flags, then their fields).
                    out.extend(shift(rel, p.saturating_sub(4)));
                }
            }
            // The AudioSpecificConfig: a DecoderSpecificInfo descriptor (tag 5) in the esds.
            if let Some(e) = find(data, b"esds") {
                if let Some(d) = (e..data.len().saturating_sub(3).min(e + 64))
                    .find(|&i| data[i] == 0x05 && (2..=5).contains(&data[i + 1]))
                {
                    out.extend(shift(
                        &[
                            be("asc object type", 2, 0, 5),
                            be("asc rate index", 2, 5, 4),
                            be("asc channels", 3, 1, 4),
                        ],
                        d,
                    ));
                }
            }
        }
        Kind::Ogg => {
            for p in find_all(data, b"OggS").into_iter().take(4) {
                out.extend(shift(
                    &[
                        le("page version", 4, 8),
                        le("page type", 5, 8),
                        le("granule", 6, 64),
                        le("serial", 14, 32),
                        le("page sequence", 18, 32),
                        le("segments", 26, 8),
                        le("first lacing", 27, 8),
                    ],
                    p,
                ));
            }
            if let Some(v) = find(data, b"\x01vorbis") {
                out.extend(shift(
                    &[
                        le("vorbis version", 7, 32),
                        le("vorbis channels", 11, 8),
                        le("vorbis rate", 12, 32),
                        le("vorbis bitrate max", 16, 32),
                        le("vorbis bitrate nominal", 20, 32),
                        be("vorbis blocksize 1", 28, 0, 4),
                        be("vorbis blocksize 0", 28, 4, 4),
                        le("vorbis framing", 29, 8),
                    ],
                    v,
                ));
            }
            if let Some(v) = find(data, b"\x05vorbis") {
                out.extend(shift(
                    &[
                        le("vorbis codebooks", 7, 8),
                        le("codebook dimensions", 11, 16),
                        le("codebook entries", 13, 24),
                    ],
                    v,
                ));
            }
        }
    }
    out
}

/// The values a field is set to: its bounds, one past common bounds, the usual rates.
fn interesting(width: u32, original: u64, rng: &mut Rng) -> u64 {
    let max = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let values = [
        0,
        1,
        2,
        3,
        7,
        8,
        9,
        16,
        17,
        32,
        33,
        255,
        256,
        999,
        1_000,
        8_000,
        44_100,
        48_000,
        65_535,
        65_536,
        384_000,
        384_001,
        0x7FFF_FFFF,
        0x8000_0000,
        u64::from(u32::MAX),
        max,
        max - 1,
        max / 2,
        max / 2 + 1,
        original.wrapping_add(1),
        original.wrapping_sub(1),
        original.wrapping_mul(2),
        original / 2,
        rng.next(),
    ];
    values[rng.below(values.len())] & max
}

/// One deterministic generator (xorshift64*), seeded per run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Mutates `data` (a file of `kind`) in place, 1–3 times; says what it did.
pub fn mutate(kind: Kind, data: &mut Vec<u8>, rng: &mut Rng) -> Vec<String> {
    let mut done = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let fields = fields(kind, data);
        let head = data.len().min(4096);
        match rng.below(10) {
            // Header fields most of the time: that is where the trust is.
            0..=5 if !fields.is_empty() => {
                let f = fields[rng.below(fields.len())];
                let v = interesting(f.width, get(data, f), rng);
                set(data, f, v);
                done.push(format!("{}={v}", f.name));
            }
            6 if head > 0 => {
                let i = rng.below(head);
                data[i] ^= 1 << rng.below(8);
                done.push(format!("flip@{i}"));
            }
            7 if head > 0 => {
                let i = rng.below(head);
                data[i] = rng.next() as u8;
                done.push(format!("byte@{i}"));
            }
            8 if data.len() > 1 => {
                let n = 1 + rng.below(data.len() - 1);
                data.truncate(n);
                done.push(format!("truncate@{n}"));
            }
            _ if data.len() > 16 => {
                // A run of bytes copied over another place (a splice of the file into itself).
                let len = 1 + rng.below(64.min(data.len() / 2));
                let from = rng.below(data.len() - len);
                let to = rng.below(head.saturating_sub(len).max(1));
                let run = data[from..from + len].to_vec();
                data[to..to + len].copy_from_slice(&run);
                done.push(format!("splice {from}->{to}+{len}"));
            }
            _ => {}
        }
    }
    if kind == Kind::Ogg {
        fix_ogg_crcs(data);
    }
    done
}

/// Recomputes the CRC of every whole Ogg page (a mutated page would otherwise be dropped
/// by the reader before its contents are looked at).
pub fn fix_ogg_crcs(data: &mut [u8]) {
    let mut p = 0;
    while p + 27 <= data.len() {
        if &data[p..p + 4] != b"OggS" {
            match find(&data[p + 1..], b"OggS") {
                Some(next) => {
                    p += 1 + next;
                    continue;
                }
                None => return,
            }
        }
        let segments = usize::from(data[p + 26]);
        if p + 27 + segments > data.len() {
            return;
        }
        let body: usize = data[p + 27..p + 27 + segments]
            .iter()
            .map(|&b| usize::from(b))
            .sum();
        let end = p + 27 + segments + body;
        if end > data.len() {
            return;
        }
        data[p + 22..p + 26].fill(0);
        let crc = ogg_crc(&data[p..end]);
        data[p + 22..p + 26].copy_from_slice(&crc.to_le_bytes());
        p = end;
    }
}

fn ogg_crc(bytes: &[u8]) -> u32 {
    let mut crc = 0u32;
    for &b in bytes {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
        }
    }
    crc
}
