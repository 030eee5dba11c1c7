//! What a message carries on SQS, shared by the sender, the receiver and the redrive: the
//! attributes the archivist adds, the reason a dead letter moved by the redrive policy is
//! given, and the characters SQS accepts.

/// The message attribute carrying the reason of a message set aside with
/// [`Delivery::dead_letter`](crate::Delivery::dead_letter).
pub const DEAD_LETTER_REASON_ATTRIBUTE: &str = "archivist-dead-letter-reason";
/// The message attribute carrying the SQS message id a dead letter had on its own queue.
pub const ORIGINAL_MESSAGE_ID_ATTRIBUTE: &str = "archivist-original-message-id";

/// The reason given to messages the redrive policy moved to a dead-letter queue (they carry
/// no reason attribute of ours).
pub(crate) fn redrive_reason(max_receives: u32, source_arn: Option<&str>) -> String {
    let source = source_arn.map_or_else(String::new, |arn| format!(" from {arn}"));
    format!(
        "moved{source} by the redrive policy: received more than the maximum receive count \
         ({max_receives}) without being handled"
    )
}

/// What SQS counts for a string message attribute: name, type and value.
pub(crate) fn attribute_size(name: &str, value: &str) -> usize {
    name.len() + "String".len() + value.len()
}

/// The characters SQS accepts in a message: `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
/// #x10000-#x10FFFF`.
pub(crate) fn sqs_allows(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}
