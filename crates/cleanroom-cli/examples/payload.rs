//! The program the Wine tests (tests/wine.rs) run under `cleanroom run` on Windows: test
//! scaffolding, never installed. Elsewhere it only says so (the Linux workspace builds every
//! example).
//!
//! - `mess N`: creates N temp dirs through `GetTempPathW`, writes files (one read-only) into
//!   USERPROFILE, APPDATA and LOCALAPPDATA, prints `VAR=value` for every variable it used;
//! - `daemon`: starts `payload sleep 300` detached (`DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP`,
//!   so it is in no console and no process group of ours), prints `daemon=<pid>`, exits 0;
//! - `exit N`: exits with N;
//! - `sleep SECS`: prints `pid=<its pid>`, then sleeps.

#[cfg(windows)]
fn main() {
    windows::main()
}

#[cfg(not(windows))]
fn main() {
    eprintln!("payload: the Wine tests' payload (tests/wine.rs) runs on Windows only");
    std::process::exit(2);
}

#[cfg(windows)]
mod windows {
    use std::os::windows::process::CommandExt;
    use std::path::PathBuf;

    use windows_sys::Win32::Storage::FileSystem::GetTempPathW;
    use windows_sys::Win32::System::Threading::{CREATE_NEW_PROCESS_GROUP, DETACHED_PROCESS};

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
        match arg(0) {
            "mess" => mess(arg(1).parse().expect("mess N")),
            "daemon" => {
                let me = std::env::current_exe().expect("own path");
                let child = std::process::Command::new(me)
                    .args(["sleep", "300"])
                    // Holds none of our pipes: only the run's containment can end it early.
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP)
                    .spawn()
                    .expect("spawn the daemon");
                println!("daemon={}", child.id());
            }
            "exit" => std::process::exit(arg(1).parse().expect("exit N")),
            "sleep" => {
                println!("pid={}", std::process::id());
                std::thread::sleep(std::time::Duration::from_secs(
                    arg(1).parse().expect("sleep SECS"),
                ));
            }
            other => panic!("unknown payload command {other:?}"),
        }
    }

    fn temp_path() -> PathBuf {
        let mut buf = vec![0u16; 1024];
        // SAFETY: `buf` is writable for the length given.
        let len = unsafe { GetTempPathW(buf.len() as u32, buf.as_mut_ptr()) } as usize;
        assert!(len > 0 && len < buf.len(), "GetTempPathW failed");
        PathBuf::from(String::from_utf16_lossy(&buf[..len]))
    }

    fn mess(count: usize) {
        let temp = temp_path();
        println!("GetTempPath={}", temp.display());
        for i in 0..count {
            let dir = temp.join(format!("leak-{i}"));
            std::fs::create_dir(&dir).expect("create a temp dir");
            std::fs::write(dir.join("data.txt"), "x").expect("write into a temp dir");
        }
        for var in [
            "USERPROFILE",
            "APPDATA",
            "LOCALAPPDATA",
            "TEMP",
            "TMP",
            "HOMEDRIVE",
            "HOMEPATH",
            "CLEANROOM_ROOT",
        ] {
            let value = std::env::var(var).unwrap_or_default();
            println!("{var}={value}");
            if ["USERPROFILE", "APPDATA", "LOCALAPPDATA"].contains(&var) {
                let dir = PathBuf::from(&value).join("Payload");
                std::fs::create_dir_all(&dir).expect("create a profile dir");
                let file = dir.join("settings.ini");
                std::fs::write(&file, "written").expect("write into the profile");
                let mut perms = std::fs::metadata(&file).unwrap().permissions();
                perms.set_readonly(true);
                std::fs::set_permissions(&file, perms).expect("make it read-only");
            }
        }
    }
}
