//! An Ogg Vorbis file's comment header, checked before symphonia reads it.
//!
//! Symphonia allocates each comment at the length the header says (`vec![0; length]`, up to
//! 4 GB) before reading it; a crafted length aborts the process where the allocation cannot
//! be had (an address-space limit, a small machine). Packets are reassembled from their pages
//! here, and every length in a comment header must fit in its packet.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// The longest packet reassembled (cover art makes a comment header large); beyond, the rest
/// of that packet is not checked.
const MAX_PACKET: usize = 64 << 20;

/// The problem with a Vorbis comment header of the file, if it is Ogg and has one whose
/// lengths do not fit; `Ok` otherwise (the probe says what else it finds). Every packet is
/// looked at, of every logical stream: symphonia reads any packet that starts like a comment
/// header as one, wherever it comes.
pub(crate) fn check_comment(path: &Path) -> Result<(), String> {
    let Ok(file) = File::open(path) else {
        return Ok(());
    };
    let mut file = BufReader::new(file);
    let mut packets: HashMap<u32, Vec<u8>> = HashMap::new();
    loop {
        let mut header = [0u8; 27];
        if file.read_exact(&mut header).is_err() || &header[0..4] != b"OggS" {
            return Ok(());
        }
        let serial = u32::from_le_bytes([header[14], header[15], header[16], header[17]]);
        let mut lacing = vec![0u8; usize::from(header[26])];
        let body_len: usize = match file.read_exact(&mut lacing) {
            Ok(()) => lacing.iter().map(|&l| usize::from(l)).sum(),
            Err(_) => return Ok(()),
        };
        let mut body = vec![0u8; body_len];
        if file.read_exact(&mut body).is_err() {
            return Ok(());
        }
        let packet = packets.entry(serial).or_default();
        let mut at = 0;
        for &l in &lacing {
            let l = usize::from(l);
            if packet.len() < MAX_PACKET {
                packet.extend_from_slice(&body[at..at + l]);
            }
            at += l;
            if l < 255 {
                if packet.starts_with(b"\x03vorbis") {
                    check_packet(packet)?;
                }
                packet.clear();
            }
        }
    }
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
