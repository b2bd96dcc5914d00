//! Shared helpers for idem's integration tests.
