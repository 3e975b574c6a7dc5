//! The child's environment: what is pinned inside the root, what is passed through from the host,
//! which toolchain homes and configuration files keep pointing at the user's real ones, and what
//! the user's real homes are.
//!
//! Invariants:
//! - HOME, TMPDIR/TMP/TEMP and XDG_{CONFIG,CACHE,DATA,STATE}_HOME/XDG_RUNTIME_DIR always point
//!   inside the root, whatever the host says;
//! - a tool-home variable ([`TOOL_HOMES`], and every `--pin VAR`) never keeps its host value: it
//!   is re-pointed to `homes/<VAR>` inside the root;
//! - the real homes come from the password database (the real uid's entry), plus `$HOME` when it
//!   is another absolute, existing directory; never from `$HOME` alone ([`real_homes`]);
//! - toolchain homes ([`TOOLCHAIN_HOMES`]) and host configuration ([`CONFIG_PASS_THROUGH`]) are
//!   resolved against the real homes before HOME moves, so `cargo test --offline`, `go test`,
//!   `npm test` keep their toolchains, caches and registries (protection keeps them read-only
//!   but for their caches);
//! - every process of the run carries `CLEANROOM_RUN_ID`, which is how gc finds what a killed
//!   runner left behind.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde::Serialize;

#[cfg(unix)]
#[path = "env/unix.rs"]
mod os;
#[cfg(windows)]
#[path = "env/windows.rs"]
mod os;

use crate::error::{Error, Result};
use crate::root::Layout;

/// Variable naming the run's root directory in the child.
pub const ROOT_VAR: &str = "CLEANROOM_ROOT";
/// Variable naming the run id in the child; gc finds orphans by it.
pub const RUN_ID_VAR: &str = "CLEANROOM_RUN_ID";

/// Tool homes that are never inherited: when set on the host they are re-pointed inside the root.
pub const TOOL_HOMES: &[&str] = &[
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
    "GROK_HOME",
    "OPENCODEX_HOME",
    "GEMINI_CLI_HOME",
    "OPENCODE_CONFIG_DIR",
    "AIDER_HOME",
    "GH_CONFIG_DIR",
    "GNUPGHOME",
    "DOCKER_CONFIG",
    "AZURE_CONFIG_DIR",
    "CLOUDSDK_CONFIG",
];

/// A toolchain home kept at its real location: the variable, its default under the real home,
/// and the parts of it the run may write when protection is on (its caches).
pub struct ToolchainDefault {
    /// The variable.
    pub var: &'static str,
    /// Where it lives by default, relative to the real home (`""`: only when set on the host).
    pub default: &'static str,
    /// The parts runs write (registry, module and build caches), relative to the toolchain home;
    /// `""` is the whole home. Everything else (binaries, env scripts, configuration) is
    /// read-only under `--protect home`.
    pub writable: &'static [&'static str],
}

/// Toolchain homes resolved before HOME moves (only those that exist are passed on).
pub const TOOLCHAIN_HOMES: &[ToolchainDefault] = &[
    ToolchainDefault {
        var: "CARGO_HOME",
        default: ".cargo",
        writable: &[
            "registry",
            "git",
            ".package-cache",
            ".package-cache-mutate",
            ".global-cache",
        ],
    },
    ToolchainDefault {
        var: "RUSTUP_HOME",
        default: ".rustup",
        writable: &[],
    },
    ToolchainDefault {
        var: "GOPATH",
        default: "go",
        writable: &["pkg/mod", "pkg/sumdb"],
    },
    ToolchainDefault {
        var: "GOMODCACHE",
        default: "",
        writable: &[""],
    },
    ToolchainDefault {
        var: "GOCACHE",
        default: ".cache/go-build",
        writable: &[""],
    },
    ToolchainDefault {
        var: "npm_config_cache",
        default: ".npm",
        writable: &[""],
    },
    ToolchainDefault {
        var: "BUN_INSTALL",
        default: ".bun",
        writable: &["install/cache"],
    },
    ToolchainDefault {
        var: "PIP_CACHE_DIR",
        default: ".cache/pip",
        writable: &[""],
    },
    ToolchainDefault {
        var: "YARN_CACHE_FOLDER",
        default: ".cache/yarn",
        writable: &[""],
    },
    ToolchainDefault {
        var: "UV_CACHE_DIR",
        default: ".cache/uv",
        writable: &[""],
    },
    ToolchainDefault {
        var: "PYENV_ROOT",
        default: ".pyenv",
        writable: &[],
    },
    ToolchainDefault {
        var: "NVM_DIR",
        default: ".nvm",
        writable: &[],
    },
    ToolchainDefault {
        var: "DENO_DIR",
        default: ".cache/deno",
        writable: &[""],
    },
    ToolchainDefault {
        var: "GRADLE_USER_HOME",
        default: ".gradle",
        writable: &[
            "caches",
            "daemon",
            "native",
            "wrapper/dists",
            "jdks",
            ".tmp",
            "notifications",
        ],
    },
];

/// Caches without a variable of their own, relative to the real homes, kept writable when they
/// exist: Java takes `user.home` from the password database whatever HOME says, so Maven keeps
/// using the real `~/.m2` (and reads its real `settings.xml`, read-only under protection).
pub const HOME_CACHES: &[&str] = &[".m2/repository"];

/// A host configuration file the run reads through the tool's own variable (never writes).
pub struct ConfigDefault {
    /// The variable that names the file (npm's variables are case-insensitive: any spelling
    /// set on the host counts as set).
    pub var: &'static str,
    /// Candidates relative to the real home, first existing wins.
    pub candidates: &'static [&'static str],
    /// Passed only with `--pass-netrc` (it holds credentials).
    pub needs_netrc_flag: bool,
}

/// Configuration passed through unless `--pure-home`: pointed at the real files, which
/// protection keeps read-only.
pub const CONFIG_PASS_THROUGH: &[ConfigDefault] = &[
    ConfigDefault {
        var: "GIT_CONFIG_GLOBAL",
        candidates: &[".gitconfig", ".config/git/config"],
        needs_netrc_flag: false,
    },
    ConfigDefault {
        var: "NPM_CONFIG_USERCONFIG",
        candidates: &[".npmrc"],
        needs_netrc_flag: false,
    },
    ConfigDefault {
        var: "PIP_CONFIG_FILE",
        candidates: &[".config/pip/pip.conf", ".pip/pip.conf"],
        needs_netrc_flag: false,
    },
    ConfigDefault {
        var: "NETRC",
        candidates: &[".netrc"],
        needs_netrc_flag: true,
    },
];

/// Options for building the environment.
#[derive(Clone, Debug, Default)]
pub struct EnvOptions {
    /// `--pin VAR`: variables that get their own directory inside the root.
    pub pins: Vec<String>,
    /// `--drop-secrets`.
    pub drop_secrets: bool,
    /// `--keep-env NAME`: exempt from `--drop-secrets`.
    pub keep: Vec<String>,
    /// `--pure-home`: pass no host configuration through ([`CONFIG_PASS_THROUGH`]).
    pub pure_home: bool,
    /// `--pass-netrc`: also pass the real `~/.netrc` (credentials) through, read-only.
    pub pass_netrc: bool,
}

/// Where a real home was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeSource {
    /// The password database entry of the real uid (`getpwuid_r`).
    Passwd,
    /// The host's `$HOME`, absolute, existing, and not the passwd home.
    HomeVar,
}

/// A home of the user's, found before HOME moved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RealHome {
    /// Canonical path.
    pub path: PathBuf,
    /// Where it was found.
    pub source: HomeSource,
}

/// A toolchain home passed on at its real location.
#[derive(Clone, Debug, Serialize)]
pub struct ToolchainHome {
    /// The variable.
    pub var: String,
    /// Its real location.
    pub path: PathBuf,
    /// Whether the run writes part of it (a cache).
    pub cache: bool,
    /// The existing parts the run may write (see [`ToolchainDefault::writable`]).
    pub writable: Vec<PathBuf>,
}

/// A host configuration file passed through by its variable.
#[derive(Clone, Debug, Serialize)]
pub struct PassedConfig {
    /// The variable.
    pub var: String,
    /// The real file.
    pub path: PathBuf,
}

/// What the host's environment and password database say about the user, resolved before HOME
/// moves.
#[derive(Clone, Debug, Default)]
pub struct HostFacts {
    /// The user's real homes: the passwd home, and `$HOME` when it is another real directory.
    pub homes: Vec<RealHome>,
    /// Why a candidate home was not taken (for the warning when none was).
    pub home_notes: Vec<String>,
    /// Toolchain homes kept at their real locations.
    pub toolchain: Vec<ToolchainHome>,
    /// Variable-less caches under the real homes ([`HOME_CACHES`]) that exist.
    pub home_caches: Vec<PathBuf>,
    /// Configuration files passed through.
    pub config: Vec<PassedConfig>,
}

/// The environment of a run's child.
#[derive(Clone, Debug)]
pub struct ChildEnv {
    /// Every variable the child gets.
    pub vars: BTreeMap<OsString, OsString>,
    /// What was resolved from the host.
    pub facts: HostFacts,
    /// Names removed by `--drop-secrets`.
    pub dropped: Vec<String>,
}

/// Checks that `var` is a usable variable name for `--pin` (it becomes a directory name).
pub fn validate_pin(var: &str) -> Result<()> {
    let mut chars = var.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && var.len() <= 128;
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid --pin {var:?}: expected a variable name like CODEX_HOME"
        )))
    }
}

/// The variables that get a `homes/<VAR>` directory: every pin, and every tool home set on the host.
pub fn homes_needed(host: &BTreeMap<OsString, OsString>, pins: &[String]) -> Vec<String> {
    let mut homes: Vec<String> = pins.to_vec();
    for var in TOOL_HOMES {
        if host.contains_key(OsStr::new(var)) && !homes.iter().any(|h| h == var) {
            homes.push((*var).to_string());
        }
    }
    homes.sort();
    homes.dedup();
    homes
}

impl HostFacts {
    /// Resolves the real homes, toolchain homes and configuration files from `host` (the
    /// runner's environment) and the password database.
    pub fn resolve(host: &BTreeMap<OsString, OsString>, options: &EnvOptions) -> HostFacts {
        let (homes, home_notes) = real_homes(host.get(OsStr::new(os::HOME_VAR)).map(Path::new));
        let mut facts = HostFacts {
            homes,
            home_notes,
            ..HostFacts::default()
        };
        for tool in TOOLCHAIN_HOMES {
            if options.pins.iter().any(|p| p == tool.var) {
                continue;
            }
            let path = match host.get(OsStr::new(tool.var)) {
                Some(value) => Some(PathBuf::from(value)),
                None if tool.default.is_empty() => None,
                None => facts.first_under_homes(&[tool.default]),
            };
            if let Some(path) = path.filter(|p| p.is_absolute()) {
                let writable: Vec<PathBuf> = tool
                    .writable
                    .iter()
                    .map(|part| path.join(part))
                    .filter(|p| p.exists())
                    .collect();
                facts.toolchain.push(ToolchainHome {
                    var: tool.var.into(),
                    cache: !tool.writable.is_empty(),
                    writable,
                    path,
                });
            }
        }
        facts.home_caches = facts
            .homes
            .iter()
            .flat_map(|h| HOME_CACHES.iter().map(move |c| h.path.join(c)))
            .filter(|p| p.is_dir())
            .collect();
        if !options.pure_home {
            for config in CONFIG_PASS_THROUGH {
                if (config.needs_netrc_flag && !options.pass_netrc) || host_sets(host, config.var) {
                    continue;
                }
                if let Some(path) = facts.first_under_homes(config.candidates) {
                    facts.config.push(PassedConfig {
                        var: config.var.into(),
                        path,
                    });
                }
            }
        }
        facts
    }

    /// The first of `candidates` (relative paths) that exists under a real home, `$HOME` first.
    fn first_under_homes(&self, candidates: &[&str]) -> Option<PathBuf> {
        let mut homes: Vec<&RealHome> = self.homes.iter().collect();
        homes.sort_by_key(|h| h.source != HomeSource::HomeVar);
        homes
            .iter()
            .flat_map(|h| candidates.iter().map(move |c| h.path.join(c)))
            .find(|p| p.exists())
    }
}

/// Whether the host sets `var` (case-insensitively for npm's `npm_config_*` variables).
fn host_sets(host: &BTreeMap<OsString, OsString>, var: &str) -> bool {
    if var.to_ascii_lowercase().starts_with("npm_config_") {
        host.keys()
            .any(|k| k.to_str().is_some_and(|k| k.eq_ignore_ascii_case(var)))
    } else {
        host.contains_key(OsStr::new(var))
    }
}

/// The user's real homes: the home of the real uid in the password database, and `host_home`
/// (the host's `$HOME`) when it is absolute, exists, and is another directory. A candidate that
/// is not taken is explained in the second list. `/` is never a home to protect.
pub fn real_homes(host_home: Option<&Path>) -> (Vec<RealHome>, Vec<String>) {
    let mut homes: Vec<RealHome> = Vec::new();
    let mut notes = Vec::new();
    let (account, passwd) = os::account_home();
    let candidates = [
        (passwd.as_ref().ok().cloned(), HomeSource::Passwd),
        (host_home.map(Path::to_path_buf), HomeSource::HomeVar),
    ];
    if let Err(e) = &passwd {
        notes.push(format!(
            "the account database has no home for {account}: {e}"
        ));
    }
    for (candidate, source) in candidates {
        let Some(path) = candidate else {
            if source == HomeSource::HomeVar {
                notes.push(format!("{} is unset", os::HOME_VAR));
            }
            continue;
        };
        let what = match source {
            HomeSource::Passwd => format!("the passwd home {} of {account}", path.display()),
            HomeSource::HomeVar => format!("{}={}", os::HOME_VAR, path.display()),
        };
        if !path.is_absolute() {
            notes.push(format!("{what} is not an absolute path"));
            continue;
        }
        match std::fs::canonicalize(&path) {
            Ok(real) if real == Path::new("/") => notes.push(format!("{what} is `/`")),
            Ok(real) if !real.is_dir() => notes.push(format!("{what} is not a directory")),
            Ok(real) if homes.iter().any(|h| h.path == real) => {}
            Ok(real) => homes.push(RealHome { path: real, source }),
            Err(e) => notes.push(format!("{what} cannot be resolved: {e}")),
        }
    }
    (homes, notes)
}

/// The variables pinned inside the root, whatever the host says: HOME, the temp and XDG dirs,
/// and every tool home of `layout` (`homes/<VAR>`). With [`ROOT_VAR`] and [`RUN_ID_VAR`] they
/// are the part of a child's environment that is cleanroom's own rather than the host's.
pub fn pinned(layout: &Layout) -> Vec<(&str, &Path)> {
    let mut vars: Vec<(&str, &Path)> = vec![
        ("HOME", &layout.home),
        ("TMPDIR", &layout.tmp),
        ("TMP", &layout.tmp),
        ("TEMP", &layout.tmp),
        ("XDG_CONFIG_HOME", &layout.xdg_config),
        ("XDG_CACHE_HOME", &layout.xdg_cache),
        ("XDG_DATA_HOME", &layout.xdg_data),
        ("XDG_STATE_HOME", &layout.xdg_state),
        ("XDG_RUNTIME_DIR", &layout.xdg_runtime),
    ];
    vars.extend(
        layout
            .homes
            .iter()
            .map(|(var, path)| (var.as_str(), path.as_path())),
    );
    vars
}

/// Builds the child's environment from the host's.
pub fn build(
    host: &BTreeMap<OsString, OsString>,
    layout: &Layout,
    root: &Path,
    run_id: &str,
    options: &EnvOptions,
) -> ChildEnv {
    let facts = HostFacts::resolve(host, options);
    let mut vars = host.clone();
    for tool in &facts.toolchain {
        vars.insert(tool.var.clone().into(), tool.path.clone().into());
    }
    for config in &facts.config {
        vars.insert(config.var.clone().into(), config.path.clone().into());
        if config.var == "NETRC" {
            let link = layout.home.join(".netrc");
            if let Err(e) = os::link_file(&config.path, &link) {
                tracing::warn!(
                    "cannot link {} to {}: {e}",
                    link.display(),
                    config.path.display()
                );
            }
        }
    }
    for (var, path) in pinned(layout) {
        os::set(&mut vars, var, path.into());
    }
    for (var, value) in os::profile_vars(layout) {
        os::set(&mut vars, var, value);
    }
    os::set(&mut vars, ROOT_VAR, root.into());
    os::set(&mut vars, RUN_ID_VAR, run_id.into());
    let mut dropped = Vec::new();
    if options.drop_secrets {
        vars.retain(|name, value| {
            let name = name.to_string_lossy();
            let drop = crate::secrets::looks_secret(&name, &value.to_string_lossy())
                && !options.keep.iter().any(|k| k == &*name);
            if drop {
                dropped.push(name.into_owned());
            }
            !drop
        });
    }
    ChildEnv {
        vars,
        facts,
        dropped,
    }
}

/// The current process's environment as a map.
pub fn host_env() -> BTreeMap<OsString, OsString> {
    std::env::vars_os().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(root: &Path) -> Layout {
        Layout {
            home: root.join("home"),
            tmp: root.join("tmp"),
            xdg_config: root.join("xdg/config"),
            xdg_cache: root.join("xdg/cache"),
            xdg_data: root.join("xdg/data"),
            xdg_state: root.join("xdg/state"),
            xdg_runtime: root.join("xdg/runtime"),
            homes: [("CODEX_HOME".to_string(), root.join("homes/CODEX_HOME"))].into(),
        }
    }

    #[test]
    fn pins_everything_and_repoints_tool_homes() {
        let real_home = tempfile::tempdir().unwrap();
        std::fs::create_dir(real_home.path().join(".cargo")).unwrap();
        let host: BTreeMap<OsString, OsString> = [
            ("HOME", real_home.path().to_str().unwrap()),
            ("TMPDIR", "/tmp"),
            ("CODEX_HOME", "/real/codex"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("PATH", "/usr/bin"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        assert_eq!(homes_needed(&host, &[]), vec!["CODEX_HOME".to_string()]);
        let root = Path::new("/ns/run-x");
        let options = EnvOptions {
            drop_secrets: true,
            ..Default::default()
        };
        let env = build(&host, &layout(root), root, "id", &options);
        let get = |k: &str| env.vars.get(OsStr::new(k)).map(PathBuf::from);
        assert_eq!(get("HOME").unwrap(), root.join("home"));
        assert_eq!(get("TMPDIR").unwrap(), root.join("tmp"));
        assert_eq!(get("CODEX_HOME").unwrap(), root.join("homes/CODEX_HOME"));
        assert_eq!(get("CARGO_HOME").unwrap(), real_home.path().join(".cargo"));
        assert_eq!(get("PATH").unwrap(), PathBuf::from("/usr/bin"));
        assert!(get("OPENAI_API_KEY").is_none());
        assert_eq!(env.dropped, vec!["OPENAI_API_KEY".to_string()]);
        let taken = RealHome {
            path: real_home.path().canonicalize().unwrap(),
            source: HomeSource::HomeVar,
        };
        assert!(env.facts.homes.contains(&taken), "{:?}", env.facts.homes);
    }

    /// The home of the current uid as /etc/passwd says, read without libc.
    fn passwd_file_home() -> Option<PathBuf> {
        let uid = rustix::process::getuid().as_raw().to_string();
        std::fs::read_to_string("/etc/passwd")
            .ok()?
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() > 5 && f[2] == uid)
            .map(|f| PathBuf::from(f[5]))
    }

    #[test]
    fn the_passwd_home_is_found_whatever_home_says() {
        let expected = passwd_file_home().expect("this uid is in /etc/passwd");
        let relative = Path::new("relative/home");
        let foreign = tempfile::tempdir().unwrap();
        for host_home in [
            None,
            Some(relative),
            Some(Path::new("/")),
            Some(foreign.path()),
        ] {
            let (homes, notes) = real_homes(host_home);
            let passwd: Vec<_> = homes
                .iter()
                .filter(|h| h.source == HomeSource::Passwd)
                .collect();
            match expected.canonicalize() {
                Ok(real) if real != Path::new("/") => {
                    assert_eq!(passwd.len(), 1, "{homes:?} {notes:?}");
                    assert_eq!(passwd[0].path, real);
                }
                _ => assert!(passwd.is_empty() && !notes.is_empty(), "{homes:?}"),
            }
            let var: Vec<_> = homes
                .iter()
                .filter(|h| h.source == HomeSource::HomeVar)
                .collect();
            if host_home == Some(foreign.path()) {
                assert_eq!(var[0].path, foreign.path().canonicalize().unwrap());
            } else {
                assert!(var.is_empty(), "{host_home:?}: {homes:?}");
                assert!(!notes.is_empty(), "{host_home:?}: no note");
            }
        }
    }

    #[test]
    fn pins_must_be_variable_names() {
        assert!(validate_pin("CODEX_HOME").is_ok());
        for bad in ["", "1X", "A/B", "..", "A B"] {
            assert!(validate_pin(bad).is_err(), "{bad}");
        }
    }
}
