//! reclaim (being written).
