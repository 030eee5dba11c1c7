//! The in-memory bus. TODO(memory-bus helper).
use std::time::Duration;

/// Settings of a [`MemoryBus`].
#[derive(Debug, Clone)]
pub struct MemoryBusConfig {
    /// How long a received message stays invisible before it comes back.
    pub visibility_timeout: Duration,
    /// Receives after which a message that keeps coming back goes to the dead-letter queue.
    pub max_receives: u32,
    /// For tests: the chance (0.0 to 1.0) that a receive also hands out a duplicate of a
    /// message, and that fresh messages come out of order, as SQS standard queues do.
    pub misbehave: f64,
}

impl Default for MemoryBusConfig {
    fn default() -> Self {
        MemoryBusConfig {
            visibility_timeout: Duration::from_secs(30),
            max_receives: 5,
            misbehave: 0.0,
        }
    }
}

/// An in-process bus. TODO.
#[derive(Debug, Clone, Default)]
pub struct MemoryBus {}
