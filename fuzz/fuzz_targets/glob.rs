//! A sandbox glob component and a file name (split at the first NUL).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cleanroom_exec_server::fuzzing::glob(data));
