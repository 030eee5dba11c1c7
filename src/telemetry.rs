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

/// Episodes announced fully researched (`EpisodeResearched`), when announcing is configured.
pub(crate) const ANNOUNCED: &str = "archivist_episodes_announced_total";

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

/// The archivists' names, as the `archivist` label carries them.
pub(crate) const ARCHIVISTS: [&str; 4] = [
    "episodes",
    "clips",
    "pending-research",
    "completed-research",
];

/// Describes every metric the archivists record (the exporter's `# HELP` lines), and
/// registers at 0 every counter series that `archivists` (of `episodes`, `clips`,
/// `pending-research`, `completed-research`; other names are ignored) can increment, so that
/// a series exists, and an alert on its rate has data, before the first event. Call it once the host has installed its recorder.
pub fn describe(archivists: &[&str]) {
    for (name, help) in [
        (RECEIVED, "Messages taken off the archivist's queue."),
        (
            STORED,
            "Messages whose content was stored (duplicates included).",
        ),
        (
            DUPLICATES,
            "Results that were already recorded (redeliveries).",
        ),
        (
            DEAD_LETTERED,
            "Messages set aside in the dead-letter queue, by reason.",
        ),
        (RELEASED, "Messages released for another try."),
        (
            RETRIES,
            "Datastore or bus calls tried again after a passing failure.",
        ),
        (PUBLISHED, "Work items published to researchers."),
        (
            ANNOUNCED,
            "Episodes announced fully researched (EpisodeResearched), when announcing is on.",
        ),
        (
            LEASES,
            "Lease events: created, renewed, revoked (or cancelled), and reclaimed_pairs \
             (pairs taken over from expired leases).",
        ),
    ] {
        metrics::describe_counter!(name, metrics::Unit::Count, help);
    }
    metrics::describe_histogram!(
        DATASTORE_CALL_SECONDS,
        metrics::Unit::Seconds,
        "Latency of each datastore call (each try, failed ones included), by call."
    );
    metrics::describe_histogram!(
        BUS_CALL_SECONDS,
        metrics::Unit::Seconds,
        "Latency of each bus call (receive includes its long-poll wait), by call."
    );
    let mut leases = false;
    for &name in ARCHIVISTS.iter().filter(|n| archivists.contains(n)) {
        let (counters, reasons): (&[&'static str], &[DeadLetterClass]) = match name {
            "episodes" | "clips" => (
                &[RECEIVED, STORED, RELEASED, RETRIES],
                &[DeadLetterClass::Invalid, DeadLetterClass::Rejected],
            ),
            "completed-research" => (
                &[RECEIVED, STORED, DUPLICATES, RELEASED, RETRIES, ANNOUNCED],
                &[
                    DeadLetterClass::Invalid,
                    DeadLetterClass::Rejected,
                    DeadLetterClass::Unknown,
                ],
            ),
            _ => (&[PUBLISHED, RETRIES], &[]),
        };
        for counter in counters {
            count(counter, name, 0);
        }
        for class in reasons {
            metrics::counter!(DEAD_LETTERED, "archivist" => name, "reason" => class.label())
                .increment(0);
        }
        leases |= matches!(name, "pending-research" | "completed-research");
    }
    if leases {
        for event in ["created", "renewed", "revoked", "reclaimed_pairs"] {
            self::leases(event, 0);
        }
    }
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
