//! Queue depths as `status`, `queues` and the status page show them: one queue's depth, the
//! note on work items no researcher consumes, and the table of queues.

use std::io::Write;

use messagebus::{dead_letter_queue_name, QueueStats};
use serde::Serialize;

/// One queue's depth, as `status --json` and `queues --json` print it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct QueueDepth {
    pub(crate) queue: String,
    pub(crate) dead_letter_queue: String,
    pub(crate) waiting: u64,
    pub(crate) in_flight: u64,
    pub(crate) dead_letters: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) consumers: Option<u64>,
}

impl QueueDepth {
    /// `queue`'s depth from the bus's statistics.
    pub(crate) fn new(queue: &str, s: QueueStats) -> Self {
        QueueDepth {
            queue: queue.to_string(),
            dead_letter_queue: dead_letter_queue_name(queue),
            waiting: s.waiting,
            in_flight: s.in_flight,
            dead_letters: s.dead_letters,
            consumers: s.consumers,
        }
    }
}

/// Work items waiting with no researcher consuming them, said so that they are not taken for
/// a leak. They come from work assignment (which publishes one even with no researcher, the
/// contract's rule for neither researchers nor waiting items, and more for researchers it
/// was told of) or from a researcher that stopped and gave its item back: the note names
/// neither as the cause, only what happens next. `None` on a bus that cannot count its
/// consumers (SQS).
pub(crate) fn no_researcher_note(pending: &QueueDepth) -> Option<String> {
    if pending.consumers != Some(0) || pending.waiting == 0 {
        return None;
    }
    let (items, wait, lease) = if pending.waiting == 1 {
        ("work item waits", "it", "its lease expires")
    } else {
        ("work items wait", "them", "their leases expire")
    };
    Some(format!(
        "{} {items} on {} with no researcher consuming {wait}: the first researcher to start \
         takes {wait}, and {lease} if none comes in time (work assignment publishes one item \
         even with no researcher, and a researcher that stops gives back the item it held)",
        pending.waiting, pending.queue
    ))
}

/// The queue table of `status` and `queues`.
pub(crate) fn write_queue_table(
    out: &mut impl Write,
    queues: &[&QueueDepth],
) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<32} {:>10} {:>10} {:>12}",
        "queue", "waiting", "in flight", "dead letters"
    )?;
    for q in queues {
        writeln!(
            out,
            "{:<32} {:>10} {:>10} {:>12}",
            q.queue, q.waiting, q.in_flight, q.dead_letters
        )?;
    }
    Ok(())
}
