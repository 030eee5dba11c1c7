//! The conformance suite every archive adapter passes (being written).
