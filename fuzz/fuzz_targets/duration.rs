//! A duration of `run`'s options and `cleanroom.toml`: never a panic, never past the bound.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = cleanroom::parse_duration(text);
    if let Ok(duration) = &parsed {
        assert!(duration.as_secs_f64() <= 1.0e9, "{text:?}: {duration:?}");
    }
    let limit = cleanroom::duration::parse_limit(text);
    assert_eq!(limit.is_ok(), parsed.is_ok(), "{text:?}");
});
