//! The environment a started process gets (spec §5 "Environment").
//!
//! Owns: applying a client's `envPolicy` and `env` on top of the server's cleanroom environment.
//!
//! Invariants: the base is always the cleanroom environment of the server (HOME and temp dirs
//! inside the root, host secrets already dropped), never the server's raw environment; without
//! an `envPolicy` it is only the pinned part of it ([`BaseEnv::pinned`]: as the reference, the
//! child gets the client's `env` and nothing else of the server's environment); the final
//! filter (credential-looking names, invalid names, NUL values) runs last, after the client's
//! overlay; the containment marks `CLEANROOM_EXEC_ID` and `CLEANROOM_RUN_ID` are always present.

use std::collections::BTreeMap;

use crate::protocol::{self, Params, RpcError};

/// Names the `core` inheritance keeps.
const CORE_NAMES: &[&str] = &[
    "PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME",
    "USER",
];
/// Dropped unless `ignoreDefaultExcludes`.
const DEFAULT_EXCLUDES: &[&str] = &["*KEY*", "*SECRET*", "*TOKEN*"];
/// Dropped from the final environment unless the server allows secrets.
const CREDENTIAL_NAMES: &[&str] = &[
    "*_API_KEY",
    "*_TOKEN",
    "*PASSWORD*",
    "*SECRET*",
    "*PRIVATE_KEY*",
];
/// Variable carrying a process's exec id; membership of escaped descendants is found by it.
pub const EXEC_ID_VAR: &str = "CLEANROOM_EXEC_ID";

/// What a process's environment starts from.
#[derive(Clone, Debug, Default)]
pub struct BaseEnv {
    /// The server's cleanroom environment (`inherit: all`).
    pub all: BTreeMap<String, String>,
    /// Its pinned part, what a process gets without an `envPolicy`: HOME, the temp and XDG
    /// dirs, the tool homes inside the root and the `CLEANROOM_*` variables.
    pub pinned: BTreeMap<String, String>,
}

/// Which base variables a process inherits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inherit {
    All,
    Core,
    None,
    /// No `envPolicy`: the pinned base only.
    Pinned,
}

/// A parsed `envPolicy`.
#[derive(Clone, Debug)]
pub struct EnvPolicy {
    inherit: Inherit,
    ignore_default_excludes: bool,
    exclude: Vec<String>,
    set: Vec<(String, String)>,
    include_only: Vec<String>,
}

impl Default for EnvPolicy {
    /// Absent `envPolicy`: the pinned base, then the client's `env`.
    fn default() -> EnvPolicy {
        EnvPolicy {
            inherit: Inherit::Pinned,
            ignore_default_excludes: false,
            exclude: Vec::new(),
            set: Vec::new(),
            include_only: Vec::new(),
        }
    }
}

impl EnvPolicy {
    /// Parses `envPolicy` (absent or null: the default).
    pub fn parse(value: Option<&serde_json::Value>) -> Result<EnvPolicy, RpcError> {
        let Some(value) = value else {
            return Ok(EnvPolicy::default());
        };
        if !value.is_object() {
            return Err(RpcError::invalid_params("envPolicy must be an object"));
        }
        let p = Params::new(value)?;
        let inherit = match p.opt_string("inherit").map_err(prefix)? {
            None | Some("all") => Inherit::All,
            Some("core") => Inherit::Core,
            Some("none") => Inherit::None,
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "envPolicy.inherit must be \"all\", \"core\" or \"none\", not {other:?}"
                )))
            }
        };
        Ok(EnvPolicy {
            inherit,
            ignore_default_excludes: p.bool_or("ignoreDefaultExcludes", false).map_err(prefix)?,
            exclude: p
                .opt_strings("exclude")
                .map_err(prefix)?
                .unwrap_or_default(),
            set: p.opt_string_map("set").map_err(prefix)?.unwrap_or_default(),
            include_only: p
                .opt_strings("includeOnly")
                .map_err(prefix)?
                .unwrap_or_default(),
        })
    }

    /// The final environment: policy over `base`, then `overlay`, then the final filter, then
    /// the containment marks.
    pub fn apply(
        &self,
        base: &BaseEnv,
        overlay: &[(String, String)],
        allow_secret_env: bool,
        marks: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        let mut vars: BTreeMap<String, String> = match self.inherit {
            Inherit::All => base.all.clone(),
            Inherit::Pinned => base.pinned.clone(),
            Inherit::Core => base
                .all
                .iter()
                .filter(|(k, _)| CORE_NAMES.iter().any(|c| c.eq_ignore_ascii_case(k)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Inherit::None => BTreeMap::new(),
        };
        if !self.ignore_default_excludes {
            vars.retain(|k, _| !matches_any(DEFAULT_EXCLUDES, k));
        }
        vars.retain(|k, _| !self.exclude.iter().any(|g| glob_match(g, k)));
        for (k, v) in &self.set {
            vars.insert(k.clone(), v.clone());
        }
        if !self.include_only.is_empty() {
            vars.retain(|k, _| self.include_only.iter().any(|g| glob_match(g, k)));
        }
        for (k, v) in overlay {
            vars.insert(k.clone(), v.clone());
        }
        vars.retain(|k, v| {
            is_valid_name(k)
                && !v.contains('\0')
                && (allow_secret_env || !matches_any(CREDENTIAL_NAMES, k))
        });
        for (k, v) in marks {
            vars.insert((*k).to_string(), (*v).to_string());
        }
        vars
    }
}

fn prefix(e: RpcError) -> RpcError {
    RpcError::invalid_params(format!("envPolicy.{}", e.message))
}

fn matches_any(globs: &[&str], name: &str) -> bool {
    globs.iter().any(|g| glob_match(g, name))
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Case-insensitive glob with `*` (any run) and `?` (one character).
pub fn glob_match(glob: &str, name: &str) -> bool {
    if glob.is_ascii() && name.is_ascii() {
        // Bytes are characters here: no allocation for the usual case (every start checks each
        // variable against the default excludes).
        return wildcard(glob.as_bytes(), name.as_bytes(), b'*', b'?', |a, b| {
            a.eq_ignore_ascii_case(&b)
        });
    }
    let g: Vec<char> = glob.chars().collect();
    let n: Vec<char> = name.chars().collect();
    wildcard(&g, &n, '*', '?', |a, b| a.eq_ignore_ascii_case(&b))
}

/// `glob` against `name` with `star` (any run) and `any` (one item), items compared by `eq`.
fn wildcard<T: Copy + PartialEq>(
    glob: &[T],
    name: &[T],
    star: T,
    any: T,
    eq: impl Fn(T, T) -> bool,
) -> bool {
    let (mut gi, mut ni) = (0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while ni < name.len() {
        if gi < glob.len() && (glob[gi] == any || eq(glob[gi], name[ni])) {
            gi += 1;
            ni += 1;
        } else if gi < glob.len() && glob[gi] == star {
            last_star = Some((gi, ni));
            gi += 1;
        } else if let Some((sg, sn)) = last_star {
            gi = sg + 1;
            ni = sn + 1;
            last_star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    glob[gi..].iter().all(|&c| c == star)
}

/// Parses the client's `env` overlay.
pub fn parse_overlay(p: &Params<'_>) -> Result<Vec<(String, String)>, RpcError> {
    match p.get("env") {
        None => Ok(Vec::new()),
        Some(v) => protocol::string_map(v, "env"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> BaseEnv {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        BaseEnv {
            all: vars(&[
                ("PATH", "/usr/bin"),
                ("HOME", "/root/run/home"),
                ("MY_KEY", "k"),
                ("EDITOR", "vi"),
            ]),
            pinned: vars(&[("HOME", "/root/run/home")]),
        }
    }

    fn keys(m: &BTreeMap<String, String>) -> Vec<&str> {
        m.keys().map(String::as_str).collect()
    }

    #[test]
    fn globs_are_case_insensitive() {
        assert!(glob_match("*key*", "MY_KEY_FILE"));
        assert!(glob_match("A?C", "abc"));
        assert!(!glob_match("*_TOKEN", "TOKENS"));
        assert!(glob_match("*", ""));
        // Not ASCII: `?` is one character, not one byte.
        assert!(glob_match("?É*", "aÉb"));
        assert!(!glob_match("?", "É_"));
    }

    #[test]
    fn policy_order_is_inherit_excludes_set_include_only_overlay_then_filter() {
        let policy = EnvPolicy::parse(Some(&json!({
            "inherit": "core", "ignoreDefaultExcludes": false, "exclude": [],
            "set": {"POLICY_SET": "policy", "POLICY_ONLY": "1", "CODEX_ACCESS_TOKEN": "t"},
            "includeOnly": []
        })))
        .unwrap();
        let overlay = vec![
            ("POLICY_SET".to_string(), "env-wins".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk".to_string()),
            ("BAD-NAME".to_string(), "x".to_string()),
            ("NUL".to_string(), "a\0b".to_string()),
        ];
        let env = policy.apply(&base(), &overlay, false, &[(EXEC_ID_VAR, "u")]);
        assert_eq!(
            keys(&env),
            [
                "CLEANROOM_EXEC_ID",
                "HOME",
                "PATH",
                "POLICY_ONLY",
                "POLICY_SET"
            ]
        );
        assert_eq!(env["POLICY_SET"], "env-wins");
    }

    #[test]
    fn default_excludes_and_include_only() {
        let all = EnvPolicy::parse(Some(&json!({}))).unwrap();
        assert_eq!(
            keys(&all.apply(&base(), &[], false, &[])),
            ["EDITOR", "HOME", "PATH"]
        );
        let only = EnvPolicy::parse(Some(&json!({"includeOnly": ["p*"]}))).unwrap();
        assert_eq!(keys(&only.apply(&base(), &[], false, &[])), ["PATH"]);
        let none = EnvPolicy::parse(Some(&json!({"inherit": "none"}))).unwrap();
        assert!(none.apply(&base(), &[], false, &[]).is_empty());
        assert!(EnvPolicy::parse(Some(&json!({"inherit": 3}))).is_err());
    }

    #[test]
    fn without_a_policy_the_client_env_lands_on_the_pinned_base_only() {
        let overlay = vec![("CLIENT".to_string(), "1".to_string())];
        let env =
            EnvPolicy::parse(None)
                .unwrap()
                .apply(&base(), &overlay, false, &[(EXEC_ID_VAR, "u")]);
        assert_eq!(keys(&env), ["CLEANROOM_EXEC_ID", "CLIENT", "HOME"]);
    }
}
