//! One WebSocket frame as the exec-server decodes it: JSON-RPC and its value budget.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cleanroom_exec_server::fuzzing::jsonrpc(data));
