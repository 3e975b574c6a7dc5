//! Containment (being written).
