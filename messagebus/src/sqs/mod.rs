//! TODO: SQS adapter.
