//! An Ogg Vorbis file's comment header, checked before symphonia reads it.
//!
//! Symphonia allocates each comment at the length the header says (`vec![0; length]`, up to
//! 4 GB) before reading it; a crafted length aborts the process where the allocation cannot
//! be had (an address-space limit, a small machine). The comment packet of the first logical
//! stream is reassembled from its pages here, and every length in it must fit in the packet.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Pages read to find the comment packet (it is normally on the first two or three).
const MAX_PAGES: usize = 512;
/// The longest comment packet reassembled (cover art makes it large); beyond, no check.
const MAX_PACKET: usize = 64 << 20;

/// The problem with the first Vorbis comment header of the file, if it is Ogg and has one
/// whose lengths do not fit; `Ok` otherwise (the probe says what else it finds).
pub(crate) fn check_comment(path: &Path) -> Result<(), String> {
    match comment_packet(path) {
        Some(packet) => check_packet(&packet),
        None => Ok(()),
    }
}

/// The second packet of the first logical stream, if the file is Ogg and it starts with the
/// Vorbis comment signature.
fn comment_packet(path: &Path) -> Option<Vec<u8>> {
    let mut file = BufReader::new(File::open(path).ok()?);
    let mut serial = None;
    let mut packets = 0usize;
    let mut packet = Vec::new();
    for _ in 0..MAX_PAGES {
        let mut header = [0u8; 27];
        file.read_exact(&mut header).ok()?;
        if &header[0..4] != b"OggS" {
            return None;
        }
        let page_serial = u32::from_le_bytes([header[14], header[15], header[16], header[17]]);
        let mut lacing = vec![0u8; usize::from(header[26])];
        file.read_exact(&mut lacing).ok()?;
        let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let mut body = vec![0u8; body_len];
        file.read_exact(&mut body).ok()?;
        if *serial.get_or_insert(page_serial) != page_serial {
            continue;
        }
        let mut at = 0;
        for &l in &lacing {
            let l = usize::from(l);
            if packets == 1 {
                packet.extend_from_slice(&body[at..at + l]);
                if packet.len() > MAX_PACKET {
                    return None;
                }
            }
            at += l;
            if l < 255 {
                packets += 1;
                if packets == 2 {
                    return packet.starts_with(b"\x03vorbis").then_some(packet);
                }
            }
        }
    }
    None
}

fn check_packet(packet: &[u8]) -> Result<(), String> {
    let len = packet.len() as u64;
    let u32_at = |at: u64| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let b = packet.get(at..at + 4)?;
        Some(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    let too_long = |what: &str, n: u64, left: u64| {
        Err(format!(
            "its Vorbis {what} says {n} bytes, more than the {left} left in its header"
        ))
    };
    let Some(vendor) = u32_at(7) else {
        return Ok(());
    };
    let mut at = 11;
    if vendor > len - at {
        return too_long("vendor string", vendor, len - at);
    }
    at += vendor;
    let Some(count) = u32_at(at) else {
        return Ok(());
    };
    at += 4;
    for _ in 0..count {
        let Some(n) = u32_at(at) else {
            return Ok(());
        };
        at += 4;
        if n > len - at {
            return too_long("comment", n, len - at);
        }
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn comment(lengths: &[(u32, usize)]) -> Vec<u8> {
        let mut p = b"\x03vorbis".to_vec();
        p.extend_from_slice(&4u32.to_le_bytes());
        p.extend_from_slice(b"test");
        p.extend_from_slice(&(lengths.len() as u32).to_le_bytes());
        for &(said, real) in lengths {
            p.extend_from_slice(&said.to_le_bytes());
            p.extend(std::iter::repeat_n(b'a', real));
        }
        p.push(1);
        p
    }

    #[test]
    fn every_length_must_fit_in_the_header() {
        assert_eq!(check_packet(&comment(&[(5, 5), (0, 0)])), Ok(()));
        let e = check_packet(&comment(&[(5, 5), (3_834_530_019, 3)])).unwrap_err();
        assert!(e.contains("comment says 3834530019 bytes"), "{e}");
    }
}
