//! [`SqsConfig`]: the SQS adapter's settings, their defaults and their limits.

use std::time::Duration;

use crate::BusError;

/// SQS's longest long poll (`WaitTimeSeconds`).
pub const MAX_WAIT_TIME: Duration = Duration::from_secs(20);
/// SQS's longest visibility timeout (12 hours), also the longest a message can be held in total.
pub const MAX_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(12 * 60 * 60);
/// SQS's longest message retention (14 days).
pub const MAX_RETENTION: Duration = Duration::from_secs(14 * 24 * 60 * 60);

/// Settings of an [`SqsBus`](super::SqsBus). Where the AWS SDK is configured (region,
/// credentials, `AWS_ENDPOINT_URL`) is not here: that comes from the SDK's usual chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsConfig {
    /// The longest long poll of one `ReceiveMessage` call; a `receive(max, wait)` waits
    /// `min(wait, wait_time)`, rounded up to whole seconds (SQS counts seconds). At most 20 s.
    /// Long polls are what keep an idle consumer cheap: 3 requests a minute at 20 s.
    pub wait_time: Duration,
    /// How long a received message stays invisible to other consumers. Set on every receive and
    /// on queues [`create_queue`](crate::Bus::create_queue) creates. Whole seconds, at most 12 h.
    pub visibility_timeout: Duration,
    /// The redrive policy's `maxReceiveCount` on queues `create_queue` creates: a message
    /// received this many times without being deleted goes to the dead-letter queue.
    pub max_receives: u32,
    /// How often the heartbeat looks at messages still held (received, not yet settled) and
    /// extends those whose visibility ends within two intervals. `None`: a third of
    /// `visibility_timeout`. Must be under half of `visibility_timeout`.
    pub heartbeat: Option<Duration>,
    /// How long an acknowledgement (or release) waits for others to share its
    /// `DeleteMessageBatch` (or `ChangeMessageVisibilityBatch`) request. A batch goes as soon
    /// as it has 10 entries or every delivery of the receiver has been settled.
    pub ack_linger: Duration,
    /// Attempt timeout of every request but long polls (which get their wait plus this).
    pub request_timeout: Duration,
    /// `MessageRetentionPeriod` of queues `create_queue` creates. Their dead-letter queues
    /// always keep messages for the longest SQS allows, 14 days, since a message moved there by
    /// the redrive policy keeps its first enqueue time.
    pub message_retention: Duration,
    /// How long one call (a receive past its wait, a send, a settlement, a redrive) may take
    /// in all, the SDK's retries included, before it returns [`BusError::Timeout`].
    pub call_deadline: Duration,
}

impl Default for SqsConfig {
    fn default() -> Self {
        SqsConfig {
            wait_time: MAX_WAIT_TIME,
            visibility_timeout: Duration::from_secs(30),
            max_receives: 5,
            heartbeat: None,
            ack_linger: Duration::from_millis(20),
            request_timeout: Duration::from_secs(10),
            // The longest SQS allows: results wait out a long outage of the archivists.
            message_retention: MAX_RETENTION,
            call_deadline: crate::DEFAULT_CALL_DEADLINE,
        }
    }
}

impl SqsConfig {
    /// Checks every value against what SQS accepts; the error names the field.
    pub fn validate(&self) -> Result<(), BusError> {
        let bad = |what: String| {
            Err(BusError::Rejected {
                message: format!("invalid SQS configuration: {what}"),
                source: None,
            })
        };
        if self.wait_time > MAX_WAIT_TIME {
            return bad(format!("wait_time {:?} exceeds SQS's 20 s", self.wait_time));
        }
        if self.visibility_timeout < Duration::from_secs(1)
            || self.visibility_timeout > MAX_VISIBILITY_TIMEOUT
        {
            return bad(format!(
                "visibility_timeout {:?} is not between 1 s and 12 h",
                self.visibility_timeout
            ));
        }
        if !(1..=1000).contains(&self.max_receives) {
            return bad(format!(
                "max_receives {} is not between 1 and 1000",
                self.max_receives
            ));
        }
        let heartbeat = self.heartbeat_interval();
        if heartbeat.is_zero() || heartbeat * 2 >= self.visibility_timeout {
            return bad(format!(
                "heartbeat {heartbeat:?} must be above zero and under half the visibility timeout {:?}",
                self.visibility_timeout
            ));
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout is zero".to_owned());
        }
        if self.call_deadline.is_zero() {
            return bad("call_deadline is zero".to_owned());
        }
        if self.message_retention < Duration::from_secs(60)
            || self.message_retention > MAX_RETENTION
        {
            return bad(format!(
                "message_retention {:?} is not between 60 s and 14 days",
                self.message_retention
            ));
        }
        Ok(())
    }

    /// The heartbeat's interval, defaulted.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat.unwrap_or(self.visibility_timeout / 3)
    }

    /// The visibility timeout in whole seconds, as SQS takes it.
    pub(crate) fn visibility_secs(&self) -> i32 {
        secs_ceil(self.visibility_timeout)
    }
}

/// `d` rounded up to whole seconds, saturating at `i32::MAX`.
pub(crate) fn secs_ceil(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn defaults_are_valid() {
        SqsConfig::default().validate().unwrap();
        assert_eq!(
            SqsConfig::default().heartbeat_interval(),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn limits_are_checked() {
        let long_poll = SqsConfig {
            wait_time: Duration::from_secs(21),
            ..SqsConfig::default()
        };
        assert!(long_poll.validate().is_err());
        let slow_heartbeat = SqsConfig {
            heartbeat: Some(Duration::from_secs(15)),
            ..SqsConfig::default()
        };
        assert!(slow_heartbeat.validate().is_err());
        let no_receives = SqsConfig {
            max_receives: 0,
            ..SqsConfig::default()
        };
        assert!(no_receives.validate().is_err());
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(secs_ceil(Duration::from_millis(1)), 1);
        assert_eq!(secs_ceil(Duration::from_secs(2)), 2);
        assert_eq!(secs_ceil(Duration::ZERO), 0);
    }
}
