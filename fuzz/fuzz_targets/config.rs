//! `cleanroom.toml`, read by the CLI's own code: its `config.rs` and `options.rs`, compiled
//! here as they are; the target calls `config::parse`, the one function kept stable for it.
#![no_main]

// `config` is reached through a module of the CLI's `src/` directory, so it is found as the
// binary finds it (`config.rs` or `config/mod.rs`) and so are modules of its own
// (`src/config/*.rs`); `options` stays at the root, where `config` names it (`crate::options`).
#[allow(dead_code)]
#[path = "../../crates/cleanroom-cli/src/options.rs"]
mod options;
#[path = "../../crates/cleanroom-cli/src"]
mod cli {
    #[allow(dead_code)]
    pub mod config;
}
use cli::config;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(message) = config::parse(text) {
        assert!(!message.contains('\n'), "one line: {message:?}");
        // `LINE: …`, the line within the text, or ` KEY: …` / ` MESSAGE` where toml names none.
        let line = message.split(':').next().unwrap_or_default();
        match line.parse::<usize>() {
            Ok(line) => assert!(
                (1..=text.lines().count() + 1).contains(&line),
                "line {line} of {} lines: {message:?}",
                text.lines().count()
            ),
            Err(_) => assert!(message.starts_with(' '), "{message:?}"),
        }
    }
});
