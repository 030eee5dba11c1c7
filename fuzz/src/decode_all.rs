//! What the fuzz target does with one input, shared with the test that replays the corpus and
//! every saved crash (`tests/suite/fuzz_replay.rs`): decode it as each message type the archivists
//! take off a bus. Decoding must never panic; a rejection must say why.

use archivist::messages::{
    decode, ClipInfo, CompletedResearchItem, EpisodeInfo, InvalidMessage, Message,
    PendingResearchItem,
};

fn one<M: Message>(data: &[u8]) {
    if let Err(e) = decode::<M>(data) {
        let reason = e.to_string();
        assert!(!reason.is_empty(), "a rejection says why");
        if let InvalidMessage::TooLarge(n) = e {
            assert_eq!(n, data.len());
        }
    }
}

/// Decodes `data` as every message type.
pub(crate) fn decode_all(data: &[u8]) {
    one::<EpisodeInfo>(data);
    one::<ClipInfo>(data);
    one::<PendingResearchItem>(data);
    one::<CompletedResearchItem>(data);
}
