//! TODO: conformance suite.
