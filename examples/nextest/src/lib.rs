//! A crate whose tests run under nextest, each test process in its own cleanroom run.

/// Adds two numbers.
pub fn add(a: u32, b: u32) -> u32 {
    a + b
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn adds() {
        assert_eq!(super::add(2, 2), 4);
    }

    #[test]
    fn each_test_gets_a_fresh_home_and_temp_dir() {
        let root = std::env::var("CLEANROOM_ROOT").expect("run under cleanroom");
        let home = std::env::var("HOME").unwrap();
        assert!(Path::new(&home).starts_with(&root), "HOME={home}");
        assert!(std::env::temp_dir().starts_with(&root));
        // Nothing another test wrote is here, and what this one writes goes with its run.
        let config = Path::new(&home).join(".config/recipe.toml");
        assert!(!config.exists());
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, "written = true\n").unwrap();
    }

    /// Passes by itself, but leaves a daemon behind with no stdout/stderr attached, which
    /// nextest's own leak detection cannot see; cleanroom kills it and, with `on-leak = "fail"`,
    /// fails the test.
    #[test]
    fn leaves_a_daemon_behind() {
        std::process::Command::new("sleep")
            .arg("300")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    }
}
