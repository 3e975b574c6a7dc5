//! Which environment variables look like credentials: the one list behind `run --drop-secrets`
//! and the exec-server's filter of client environments.
//!
//! Invariant: a variable is judged by its name and its value together, and anything cleanroom
//! sets itself (`CLEANROOM_*`) is never a secret.

/// Secret-looking name fragments (case-insensitive).
pub const SECRET_NAME_FRAGMENTS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD"];

/// Whether the variable `name=value` looks like a credential.
pub fn looks_secret(name: &str, _value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !upper.starts_with("CLEANROOM_") && SECRET_NAME_FRAGMENTS.iter().any(|p| upper.contains(p))
}
