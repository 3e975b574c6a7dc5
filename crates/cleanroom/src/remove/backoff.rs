//! The retry schedule of removals, one for every platform: the pause before each retry after
//! a failed walk (Unix stops after the last; Windows repeats it until its budget is spent).

use std::time::Duration;

/// Pauses before successive retries.
pub(super) const BACKOFF: [Duration; 5] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(150),
    Duration::from_millis(400),
    Duration::from_millis(1000),
];
