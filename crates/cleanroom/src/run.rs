//! run (being written).
