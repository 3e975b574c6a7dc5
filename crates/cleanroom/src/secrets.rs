//! Which environment variables look like credentials: the one test behind `run --drop-secrets`
//! and the exec-server's filter of client environments.
//!
//! A name is split into words at `_`, `-`, `.` and case changes are ignored. It is secret when a
//! word is one of [`SECRET_WORDS`] (`GITHUB_PAT`, `CI_JOB_JWT`, `SSH_AUTH_SOCK`, `MYSQL_PWD`),
//! or ends with one of [`SECRET_SUFFIXES`] (`GITHUBTOKEN`, `DBPASSWORD`, `APIKEY`), or is one
//! of [`SECRET_NAMES`]. Words are compared whole, so `KEYBOARD`, `TOKENIZERS_PARALLELISM`,
//! `PATH`, `TERM`, `PWD`, `OLDPWD` and `GIT_AUTHOR_NAME` stay. A value is secret when it holds a
//! URL with userinfo (`postgres://user:pw@host/db`, `https://x-access-token:…@github.com`) or
//! starts with a well-known token prefix ([`TOKEN_PREFIXES`]) or a PEM private key.
//!
//! Invariant: a variable is judged by its name and its value together, and anything cleanroom
//! sets itself (`CLEANROOM_*`) is never a secret.

/// Whole words of a name that make it a credential.
pub const SECRET_WORDS: &[&str] = &[
    "KEY",
    "KEYS",
    "SECRET",
    "SECRETS",
    "TOKEN",
    "TOKENS",
    "PASSWORD",
    "PASSWORDS",
    "PASSWD",
    "PASS",
    "PWD",
    "PASSPHRASE",
    "PAT",
    "JWT",
    "AUTH",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "COOKIE",
    "COOKIES",
    "WEBHOOK",
    "APIKEY",
    "PRIVATE",
];

/// Endings of a word that make it a credential when written without separators.
pub const SECRET_SUFFIXES: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY"];

/// Whole names that are credentials (or point at them) without a telling word.
pub const SECRET_NAMES: &[&str] = &["KRB5CCNAME"];

/// Names that contain a secret word but are not secrets.
const NOT_SECRET: &[&str] = &["PWD", "OLDPWD"];

/// Value prefixes of well-known tokens (GitHub, GitLab, Slack, npm, AWS access keys) and PEM
/// private keys; a value counts only if it is at least [`MIN_TOKEN_LEN`] long.
pub const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxs-",
    "npm_",
    "AKIA",
    "-----BEGIN",
];

/// The shortest value taken for a token by its prefix (`AKIA` + 16 characters).
pub const MIN_TOKEN_LEN: usize = 20;

/// Whether the variable `name=value` looks like a credential.
pub fn looks_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("CLEANROOM_") {
        return false;
    }
    secret_name(&upper) || secret_value(value)
}

fn secret_name(upper: &str) -> bool {
    if NOT_SECRET.contains(&upper) {
        return false;
    }
    SECRET_NAMES.contains(&upper)
        || upper
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| {
                SECRET_WORDS.contains(&word)
                    || SECRET_SUFFIXES
                        .iter()
                        .any(|s| word.len() > s.len() && word.ends_with(s))
            })
}

fn secret_value(value: &str) -> bool {
    let trimmed = value.trim_start();
    (trimmed.len() >= MIN_TOKEN_LEN && TOKEN_PREFIXES.iter().any(|p| trimmed.starts_with(p)))
        || has_url_userinfo(value)
}

/// Whether `value` holds `scheme://userinfo@host` anywhere (a comma-separated list of URLs
/// included).
fn has_url_userinfo(value: &str) -> bool {
    value.match_indices("://").any(|(at, sep)| {
        let scheme = value[..at]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
            .next()
            .unwrap_or("");
        let authority = value[at + sep.len()..]
            .split(|c: char| "/?#".contains(c) || c.is_whitespace() || c == ',')
            .next()
            .unwrap_or("");
        !scheme.is_empty() && authority.rfind('@').is_some_and(|i| i > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::looks_secret;

    #[test]
    fn credential_names_are_secret_whatever_their_value() {
        for name in [
            "MYSQL_PWD",
            "PASSWD",
            "GITHUB_PAT",
            "CI_JOB_JWT",
            "CI_JOB_JWT_V2",
            "DOCKER_AUTH_CONFIG",
            "SSH_AUTH_SOCK",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "TOKEN_FOR_X",
            "OPENAI_API_KEY",
            "GITHUBTOKEN",
            "NPM_TOKEN",
            "PGPASSWORD",
            "DB_PASS",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "SLACK_WEBHOOK_URL",
            "KRB5CCNAME",
            "api-key",
            "private.key",
        ] {
            assert!(looks_secret(name, "x"), "{name} should be secret");
        }
    }

    #[test]
    fn harmless_names_stay() {
        for name in [
            "PATH",
            "TERM",
            "KEYBOARD",
            "XKB_KEYMAP",
            "TOKENIZERS_PARALLELISM",
            "PWD",
            "OLDPWD",
            "HOME",
            "GIT_AUTHOR_NAME",
            "GIT_ASKPASS",
            "LANG",
            "SSH_TTY",
            "PASSTHROUGH_MODE",
            "CLEANROOM_RUN_ID",
            "CLEANROOM_LOCK_TOKENS",
        ] {
            assert!(!looks_secret(name, "/usr/bin:/bin"), "{name} should stay");
        }
    }

    #[test]
    fn urls_with_userinfo_and_known_tokens_are_secret_by_value() {
        for value in [
            "postgres://app:hunter2@db.internal:5432/app",
            "redis://:pw@cache:6379",
            "https://x-access-token:ghs_abc@github.com/o/r.git",
            "http://proxy-user@proxy:3128",
            "mysql://a:b@h1,mysql://c:d@h2",
            "ghp_0123456789abcdef0123456789abcdef0123",
            "AKIAIOSFODNN7EXAMPLE",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=",
        ] {
            assert!(looks_secret("DATABASE_URL_OR_OTHER", value), "{value}");
            assert!(looks_secret("SOME_SETTING", value), "{value}");
        }
        for value in [
            "postgres://db.internal:5432/app",
            "https://github.com/o/r.git",
            "user@example.com",
            "mailto:someone@example.com",
            "/home/u/.local/bin:/usr/bin",
            "npm_test",
        ] {
            assert!(!looks_secret("SOME_SETTING", value), "{value}");
        }
    }
}
