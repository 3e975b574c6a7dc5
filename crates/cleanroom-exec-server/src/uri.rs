//! `file:` URIs, the protocol's only way to name a path (spec §4, §5 cwd rules).
//!
//! Invariant: [`parse_file_uri`] yields an absolute POSIX path or an error that starts with the
//! caller's label; nothing relative, remote, Windows-shaped or NUL-bearing gets through.
//! [`file_uri`] percent-encodes everything but unreserved characters and `/`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use percent_encoding::{percent_decode_str, AsciiSet, NON_ALPHANUMERIC};

/// Bytes kept literally in a path: RFC 3986 unreserved characters and the separator.
const PATH_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The `file:` URI of an absolute path.
pub fn file_uri(path: &Path) -> String {
    let bytes = path.as_os_str().as_bytes();
    let encoded: String = percent_encoding::percent_encode(bytes, PATH_KEEP).collect();
    format!("file://{encoded}")
}

/// Parses a `file:` URI into an absolute path; errors start with `label` (e.g. `process cwd`).
pub fn parse_file_uri(uri: &str, label: &str) -> Result<PathBuf, String> {
    let bad = |why: &str| format!("{label} {uri:?} {why}");
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Err(bad("must be a file: URI (a native path is not accepted)"));
    };
    if !scheme.eq_ignore_ascii_case("file") {
        return Err(bad("must use the file: scheme"));
    }
    if rest.contains('?') {
        return Err(bad("must not have a query"));
    }
    if rest.contains('#') {
        return Err(bad("must not have a fragment"));
    }
    let Some(after_slashes) = rest.strip_prefix("//") else {
        return Err(bad("must have the form file:///absolute/path"));
    };
    let (authority, path) = match after_slashes.find('/') {
        Some(i) => after_slashes.split_at(i),
        None => (after_slashes, ""),
    };
    if !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
        return Err(bad(
            "names a remote host; only an empty or localhost authority is allowed",
        ));
    }
    if path.is_empty() {
        return Err(bad("has no path"));
    }
    let decoded: Vec<u8> = percent_decode_str(path).collect();
    if decoded.contains(&0) {
        return Err(bad("contains an encoded NUL"));
    }
    if is_drive_path(&decoded) {
        return Err(bad(
            "is a Windows drive path, which is not valid on this platform",
        ));
    }
    let path = PathBuf::from(OsStr::from_bytes(&decoded));
    if !path.is_absolute() {
        return Err(bad("must be absolute"));
    }
    Ok(path)
}

/// `/C:` or `/c:/...` after decoding (which also covers `%43:` and `C%3A`).
fn is_drive_path(decoded: &[u8]) -> bool {
    matches!(decoded, [b'/', letter, b':', ..] if letter.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_spaces_and_hashes_are_encoded() {
        assert_eq!(
            file_uri(Path::new("/workspace/space #project")),
            "file:///workspace/space%20%23project"
        );
    }

    #[test]
    fn good_uris_round_trip() {
        for path in ["/", "/tmp/x y", "/a/%/ü#?"] {
            let uri = file_uri(Path::new(path));
            assert_eq!(
                parse_file_uri(&uri, "cwd").unwrap(),
                PathBuf::from(path),
                "{uri}"
            );
        }
        assert_eq!(
            parse_file_uri("file://localhost/tmp", "cwd").unwrap(),
            PathBuf::from("/tmp")
        );
    }

    #[test]
    fn bad_uris_are_refused_with_the_label() {
        for bad in [
            "/tmp",
            "tmp",
            "http:///tmp",
            "file://host/tmp",
            "file:///tmp?x=1",
            "file:///tmp#frag",
            "file:///tmp/%00x",
            "file:///C:/Windows",
            "file:///%43:/Windows",
            "file:///c%3A/x",
            "file:relative",
            "file://",
        ] {
            let err = parse_file_uri(bad, "process cwd").unwrap_err();
            assert!(err.starts_with("process cwd"), "{bad}: {err}");
        }
    }
}
