//! The child's environment: what is pinned inside the root, what is passed through from the host,
//! and which toolchain homes keep pointing at the user's real ones.
//!
//! Invariants:
//! - HOME, TMPDIR/TMP/TEMP and XDG_{CONFIG,CACHE,DATA,STATE}_HOME/XDG_RUNTIME_DIR always point
//!   inside the root, whatever the host says;
//! - a tool-home variable ([`TOOL_HOMES`], and every `--pin VAR`) never keeps its host value: it
//!   is re-pointed to `homes/<VAR>` inside the root;
//! - toolchain homes ([`TOOLCHAIN_HOMES`]) are resolved against the *real* HOME before HOME moves,
//!   so `cargo test --offline`, `go test`, `npm test` keep their toolchains and caches;
//! - every process of the run carries `CLEANROOM_RUN_ID`, which is how gc finds what a killed
//!   runner left behind.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::root::Layout;
use crate::{Error, Result};

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
/// and whether the run must be able to write it (a cache) when the real home is protected.
pub struct ToolchainDefault {
    /// The variable.
    pub var: &'static str,
    /// Where it lives by default, relative to the real home.
    pub default: &'static str,
    /// Whether runs write it (registry or module caches).
    pub cache: bool,
}

/// Toolchain homes resolved before HOME moves (only those that exist are passed on).
pub const TOOLCHAIN_HOMES: &[ToolchainDefault] = &[
    ToolchainDefault {
        var: "CARGO_HOME",
        default: ".cargo",
        cache: true,
    },
    ToolchainDefault {
        var: "RUSTUP_HOME",
        default: ".rustup",
        cache: false,
    },
    ToolchainDefault {
        var: "GOPATH",
        default: "go",
        cache: true,
    },
    ToolchainDefault {
        var: "GOCACHE",
        default: ".cache/go-build",
        cache: true,
    },
    ToolchainDefault {
        var: "npm_config_cache",
        default: ".npm",
        cache: true,
    },
    ToolchainDefault {
        var: "BUN_INSTALL",
        default: ".bun",
        cache: true,
    },
    ToolchainDefault {
        var: "PIP_CACHE_DIR",
        default: ".cache/pip",
        cache: true,
    },
    ToolchainDefault {
        var: "YARN_CACHE_FOLDER",
        default: ".cache/yarn",
        cache: true,
    },
    ToolchainDefault {
        var: "UV_CACHE_DIR",
        default: ".cache/uv",
        cache: true,
    },
    ToolchainDefault {
        var: "PYENV_ROOT",
        default: ".pyenv",
        cache: false,
    },
    ToolchainDefault {
        var: "NVM_DIR",
        default: ".nvm",
        cache: false,
    },
    ToolchainDefault {
        var: "DENO_DIR",
        default: ".cache/deno",
        cache: true,
    },
    ToolchainDefault {
        var: "GRADLE_USER_HOME",
        default: ".gradle",
        cache: true,
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
}

/// A toolchain home passed on at its real location.
#[derive(Clone, Debug, Serialize)]
pub struct ToolchainHome {
    /// The variable.
    pub var: String,
    /// Its real location.
    pub path: PathBuf,
    /// Whether the run writes it (a cache).
    pub cache: bool,
}

/// The environment of a run's child.
#[derive(Clone, Debug)]
pub struct ChildEnv {
    /// Every variable the child gets.
    pub vars: BTreeMap<OsString, OsString>,
    /// Toolchain homes kept at their real locations.
    pub toolchain: Vec<ToolchainHome>,
    /// The user's real home (from the host's HOME), for protection.
    pub real_home: Option<PathBuf>,
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

/// Builds the child's environment from the host's.
pub fn build(
    host: &BTreeMap<OsString, OsString>,
    layout: &Layout,
    root: &Path,
    run_id: &str,
    options: &EnvOptions,
) -> ChildEnv {
    let mut vars = host.clone();
    let real_home = host
        .get(OsStr::new("HOME"))
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let mut toolchain = Vec::new();
    for tool in TOOLCHAIN_HOMES {
        if options.pins.iter().any(|p| p == tool.var) {
            continue;
        }
        let path = match host.get(OsStr::new(tool.var)) {
            Some(value) => Some(PathBuf::from(value)),
            None => real_home
                .as_ref()
                .map(|h| h.join(tool.default))
                .filter(|p| p.exists()),
        };
        if let Some(path) = path.filter(|p| p.is_absolute()) {
            vars.insert(tool.var.into(), path.clone().into());
            toolchain.push(ToolchainHome {
                var: tool.var.into(),
                path,
                cache: tool.cache,
            });
        }
    }
    if !host.contains_key(OsStr::new("GIT_CONFIG_GLOBAL")) {
        let candidates = real_home
            .iter()
            .flat_map(|h| [h.join(".gitconfig"), h.join(".config/git/config")]);
        if let Some(config) = candidates.into_iter().find(|p| p.is_file()) {
            vars.insert("GIT_CONFIG_GLOBAL".into(), config.clone().into());
            toolchain.push(ToolchainHome {
                var: "GIT_CONFIG_GLOBAL".into(),
                path: config,
                cache: false,
            });
        }
    }
    let pinned: [(&str, &Path); 9] = [
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
    for (var, path) in pinned {
        vars.insert(var.into(), path.into());
    }
    for (var, path) in &layout.homes {
        vars.insert(var.into(), path.into());
    }
    vars.insert(ROOT_VAR.into(), root.into());
    vars.insert(RUN_ID_VAR.into(), run_id.into());
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
        toolchain,
        real_home,
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
        assert_eq!(env.real_home.as_deref(), Some(real_home.path()));
    }

    #[test]
    fn pins_must_be_variable_names() {
        assert!(validate_pin("CODEX_HOME").is_ok());
        for bad in ["", "1X", "A/B", "..", "A B"] {
            assert!(validate_pin(bad).is_err(), "{bad}");
        }
    }
}
