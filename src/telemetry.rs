//! Metrics through the `metrics` facade: the library only records, the host (the `archivist`
//! binary) decides whether and where they are exported. Without an installed recorder every
//! call here is a no-op.
//!
//! Names follow Prometheus conventions (`archivist_…_total` counters); the `archivist` label is
//! the archivist's name, which stands for its input queue (episodes: curated_episodes, clips:
//! curated_clips, completed-research: completed_research).

/// Messages taken off the bus.
pub(crate) const RECEIVED: &str = "archivist_messages_received_total";
/// Messages whose content was stored (duplicates included).
pub(crate) const STORED: &str = "archivist_messages_stored_total";
/// Results that were already recorded.
pub(crate) const DUPLICATES: &str = "archivist_duplicates_total";
/// Messages set aside in the dead-letter queue, by reason class.
pub(crate) const DEAD_LETTERED: &str = "archivist_messages_dead_lettered_total";
/// Messages released for another try.
pub(crate) const RELEASED: &str = "archivist_messages_released_total";
/// Operations tried again after a passing failure.
pub(crate) const RETRIES: &str = "archivist_retries_total";
/// Work items published to researchers.
pub(crate) const PUBLISHED: &str = "archivist_work_items_published_total";
/// Leases by what happened to them: created, renewed, revoked, reclaimed (pairs taken over
/// from expired leases).
pub(crate) const LEASES: &str = "archivist_leases_total";

/// Why a message was dead-lettered, as a label value of few distinct values.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DeadLetterClass {
    /// Not a valid message (JSON or fields).
    Invalid,
    /// The datastore refused its content.
    Rejected,
    /// A result for an episode or clip the datastore does not have.
    Unknown,
}

impl DeadLetterClass {
    fn label(self) -> &'static str {
        match self {
            DeadLetterClass::Invalid => "invalid_message",
            DeadLetterClass::Rejected => "rejected_by_datastore",
            DeadLetterClass::Unknown => "unknown_episode_or_clip",
        }
    }
}

/// Adds `n` to the counter `name` of the archivist `archivist`.
pub(crate) fn count(name: &'static str, archivist: &'static str, n: u64) {
    metrics::counter!(name, "archivist" => archivist).increment(n);
}

/// One dead-lettered message.
pub(crate) fn dead_lettered(archivist: &'static str, class: DeadLetterClass) {
    metrics::counter!(DEAD_LETTERED, "archivist" => archivist, "reason" => class.label())
        .increment(1);
}

/// `n` leases (or reclaimed pairs) that went through `event`.
pub(crate) fn leases(event: &'static str, n: u64) {
    metrics::counter!(LEASES, "event" => event).increment(n);
}
