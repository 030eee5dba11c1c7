//! The envelope every store keeps a print in, so that a damaged or truncated object is
//! reported as such rather than handed to the analyser.
//!
//! Layout (60 bytes, then the payload):
//!
//! | bytes | what |
//! | --- | --- |
//! | 16 | the magic `ARCHIVIST-PRINT\n` |
//! | 4 | the envelope's version, little-endian (1) |
//! | 8 | the payload's length in bytes, little-endian |
//! | 32 | the payload's SHA-256 |
//! | … | the payload |
//!
//! The payload's own format (and its version, tied to the analyser's parameters) is crate
//! `analysis`'s; this envelope only says whether the bytes are the ones that were put.

use sha2::{Digest, Sha256};

/// The first bytes of every envelope.
pub const MAGIC: &[u8; 16] = b"ARCHIVIST-PRINT\n";
/// The envelope's version.
pub const VERSION: u32 = 1;
/// The envelope's size before the payload.
pub const HEADER: usize = 16 + 4 + 8 + 32;

/// `payload` in its envelope.
pub fn wrap(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(payload);
    out
}

/// The payload of `stored`, or what is wrong with it: not an envelope, another envelope
/// version, cut short or with bytes after it, a checksum that does not match.
pub fn unwrap(stored: &[u8]) -> Result<&[u8], String> {
    if stored.len() < HEADER {
        return Err(format!(
            "{} bytes: shorter than the envelope's {HEADER}-byte header",
            stored.len()
        ));
    }
    let (header, payload) = stored.split_at(HEADER);
    if &header[..16] != MAGIC {
        return Err("not a print envelope (wrong magic)".into());
    }
    let version = u32::from_le_bytes(four(&header[16..20]));
    if version != VERSION {
        return Err(format!(
            "envelope version {version}, this archivist reads {VERSION}"
        ));
    }
    let length = u64::from_le_bytes(eight(&header[20..28]));
    if length != payload.len() as u64 {
        return Err(format!(
            "truncated or padded: the envelope says {length} bytes, {} are there",
            payload.len()
        ));
    }
    if Sha256::digest(payload).as_slice() != &header[28..60] {
        return Err("the checksum (SHA-256) does not match".into());
    }
    Ok(payload)
}

fn four(b: &[u8]) -> [u8; 4] {
    let mut out = [0; 4];
    out.copy_from_slice(&b[..4]);
    out
}

fn eight(b: &[u8]) -> [u8; 8] {
    let mut out = [0; 8];
    out.copy_from_slice(&b[..8]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_and_every_damage_named() {
        let payload = b"peaks and landmarks".to_vec();
        let stored = wrap(&payload);
        assert_eq!(stored.len(), HEADER + payload.len());
        assert_eq!(unwrap(&stored).unwrap(), payload);
        assert_eq!(unwrap(&wrap(b"")).unwrap(), b"");

        let cut = &stored[..stored.len() - 1];
        assert!(unwrap(cut).unwrap_err().contains("truncated"));
        assert!(unwrap(&stored[..10]).unwrap_err().contains("shorter"));
        let mut flipped = stored.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(unwrap(&flipped).unwrap_err().contains("checksum"));
        let mut other = stored.clone();
        other[0] = b'X';
        assert!(unwrap(&other).unwrap_err().contains("magic"));
        let mut later = stored.clone();
        later[16] = 2;
        assert!(unwrap(&later).unwrap_err().contains("version 2"));
        let mut longer = stored;
        longer.push(0);
        assert!(unwrap(&longer).unwrap_err().contains("padded"));
    }
}
