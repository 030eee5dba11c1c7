//! AFL++ target: every message type decoded from the input (`scripts/fuzz.sh` runs it).

#[path = "../decode_all.rs"]
mod decode_all;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        decode_all::decode_all(data);
    });
}
