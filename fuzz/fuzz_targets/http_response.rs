//! The bytes a server sends back to `http/request`: the response head and body framing.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cleanroom_exec_server::fuzzing::http_response(data));
