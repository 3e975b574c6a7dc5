//! `http/request` params (JSON) and redirects: the request head the server would send.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cleanroom_exec_server::fuzzing::http_request(data));
