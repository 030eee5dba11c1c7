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

/// Latency of the archivists' datastore calls, by call (`lease`, `store`, `update lease`, …).
pub(crate) const DATASTORE_CALL_SECONDS: &str = "archivist_datastore_call_duration_seconds";
/// Latency of the archivists' bus calls, by call (`receive` includes its long-poll wait).
pub(crate) const BUS_CALL_SECONDS: &str = "archivist_bus_call_duration_seconds";

/// The system an error type comes from: its calls' latencies go to that system's histogram.
pub(crate) trait CallSystem {
    /// The histogram's name.
    const HISTOGRAM: &'static str;
}

impl CallSystem for datastore::DataStoreError {
    const HISTOGRAM: &'static str = DATASTORE_CALL_SECONDS;
}

impl CallSystem for messagebus::BusError {
    const HISTOGRAM: &'static str = BUS_CALL_SECONDS;
}

/// One call of `call` to the system of `E` took `took`, whether it succeeded or not.
pub(crate) fn call_took<E: CallSystem>(call: &'static str, took: std::time::Duration) {
    metrics::histogram!(E::HISTOGRAM, "call" => call).record(took.as_secs_f64());
}

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
