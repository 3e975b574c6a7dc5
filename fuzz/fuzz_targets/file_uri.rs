//! A `file:` URI (cwd, fs paths, sandbox paths) and the URI of any path.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cleanroom_exec_server::fuzzing::file_uri(data));
