//! TODO: bus conformance suite.
