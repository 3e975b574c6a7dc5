//! The Unix side of the environment: the account's home, and the variables set as they are
//! named (Unix names are case-sensitive).
//!
//! The home is read from `/etc/passwd` where that file answers (on Linux), parsed here in safe
//! code by [`home_in_passwd`]; otherwise it comes from the password database through
//! `getpwuid_r` ([`crate::sys::unix::passwd_home`]), which loads the NSS modules that
//! `/etc/nsswitch.conf` names (LDAP, sssd, systemd's dynamic users, …).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::root::Layout;

/// The variable that names the home directory.
pub const HOME_VAR: &str = "HOME";

/// The local password file.
const PASSWD_FILE: &str = "/etc/passwd";

/// The largest password file read; a larger one is left to `getpwuid_r`.
const PASSWD_FILE_MAX: u64 = 16 << 20;

/// The real uid (as `uid N`, for messages) and its home in the password database.
pub fn account_home() -> (String, std::io::Result<PathBuf>) {
    let uid = rustix::process::getuid().as_raw();
    (format!("uid {uid}"), home_of(uid))
}

/// The home of `uid`: from `/etc/passwd` when the file answers for it, else from `getpwuid_r`
/// (`NotFound` when there is no entry or it has no home).
///
/// Reading the file spares the ~46 µs glibc spends per lookup parsing `/etc/nsswitch.conf` and
/// setting up its `files` module before it reads the same file. The file answers only on Linux
/// (macOS consults `/etc/passwd` in single-user mode alone), only when it is a regular file of at
/// most 16 MiB, and only as [`home_in_passwd`] says: its first well-formed entry for `uid`, with a
/// non-empty home, in a file without NIS compat (`+`/`-`) lines. Every other case, including a
/// uid the file does not list (LDAP, sssd, systemd's dynamic users), goes to `getpwuid_r` exactly
/// as before.
///
/// The file wins over NSS: where `/etc/nsswitch.conf` lists another source before `files` (or
/// leaves `files` out) and that source gives a uid also in `/etc/passwd` a different home, the
/// home in `/etc/passwd` is taken. The local file is what an administrator edits and what the
/// usual `passwd: files …` order answers first; a directory that shadows a local account with
/// another home is taken to be rarer than the cost of asking NSS on every run.
fn home_of(uid: u32) -> std::io::Result<PathBuf> {
    match passwd_file_home(uid) {
        Some(home) => Ok(home),
        None => crate::sys::unix::passwd_home(uid),
    }
}

/// The home of `uid` in `/etc/passwd`, where the file answers (see [`home_of`]).
fn passwd_file_home(uid: u32) -> Option<PathBuf> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let file = std::fs::File::open(PASSWD_FILE).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > PASSWD_FILE_MAX {
        return None;
    }
    // One byte beyond the size seen, so a file that grew past it is still read to its end.
    let mut text = Vec::with_capacity(usize::try_from(meta.len()).ok()? + 1);
    file.take(PASSWD_FILE_MAX + 1).read_to_end(&mut text).ok()?;
    if text.len() as u64 > PASSWD_FILE_MAX {
        return None;
    }
    match home_in_passwd(&text, uid) {
        Lookup::Home(home) => Some(PathBuf::from(home)),
        Lookup::NoHome | Lookup::NotAuthoritative => None,
    }
}

/// What the text of a password file says about a uid's home.
#[derive(Debug, PartialEq, Eq)]
enum Lookup<'a> {
    /// The first entry for the uid, and its home (bytes as they are; not necessarily UTF-8).
    Home(&'a OsStr),
    /// No entry for the uid, or its first entry has an empty home.
    NoHome,
    /// The file does not decide alone: it has NIS compat lines (`+`/`-`), a NUL byte, or a line
    /// that glibc may read as the uid's where this parser does not (see [`home_in_passwd`]).
    NotAuthoritative,
}

/// The home of `uid` in `text`, the contents of a password file (`name:passwd:uid:gid:gecos:
/// home:shell` a line), read as glibc's `files` module reads it wherever the two can differ.
///
/// Lines are split at `\n`; leading blanks are skipped, and empty lines and `#` comments ignored.
/// The first line whose uid field is exactly `uid` in decimal (digits only, no leading zero, no
/// sign or blank) is the entry; its sixth field is the home. Lines before it that cannot be the
/// uid's (another uid, or fewer than three fields) are skipped. The file is
/// [`Lookup::NotAuthoritative`] when glibc might answer otherwise:
/// - any line starts with `+` or `-` (NIS compat: the entries it names live elsewhere);
/// - the text holds a NUL byte (glibc's C strings end there);
/// - a line before the entry has a uid field that is not plain decimal (`00`, ` 0`, `+0`, too
///   large): glibc's `strtoul` may read it as `uid`;
/// - the entry has fewer than seven fields, or a gid that is not plain digits: glibc reads four to
///   six fields as an entry with an empty or sixth-field home, and skips a line whose gid does not
///   parse, so the lines after it could answer there.
fn home_in_passwd(text: &[u8], uid: u32) -> Lookup<'_> {
    if text.contains(&0) {
        return Lookup::NotAuthoritative;
    }
    let mut entry = None;
    for line in text.split(|&b| b == b'\n') {
        // C's isspace: ASCII whitespace and the vertical tab.
        let blanks = line
            .iter()
            .take_while(|&&b| b.is_ascii_whitespace() || b == 0x0b)
            .count();
        let line = &line[blanks..];
        match line.first() {
            None | Some(b'#') => continue,
            Some(b'+' | b'-') => return Lookup::NotAuthoritative,
            Some(_) if entry.is_some() => continue,
            Some(_) => {}
        }
        let mut fields = line.split(|&b| b == b':');
        let Some(uid_field) = fields.nth(2) else {
            continue;
        };
        match plain_decimal(uid_field) {
            Some(n) if n == uid => {}
            Some(_) => continue,
            None => return Lookup::NotAuthoritative,
        }
        let (gid, _gecos, home, shell) =
            (fields.next(), fields.next(), fields.next(), fields.next());
        let gid_parses = gid.is_some_and(|g| !g.is_empty() && g.iter().all(u8::is_ascii_digit));
        match home {
            Some(home) if shell.is_some() && gid_parses => entry = Some(home),
            _ => return Lookup::NotAuthoritative,
        }
    }
    match entry {
        Some(home) if !home.is_empty() => Lookup::Home(OsStr::from_bytes(home)),
        _ => Lookup::NoHome,
    }
}

/// `field` as a u32 when it is written plainly: ASCII digits, no leading zero but in `0` itself.
fn plain_decimal(field: &[u8]) -> Option<u32> {
    if field.len() > 1 && field[0] == b'0' {
        return None;
    }
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Variables of the platform's user profile: none on Unix beyond HOME and XDG.
pub fn profile_vars(_layout: &Layout) -> Vec<(&'static str, OsString)> {
    Vec::new()
}

/// Sets `var` in `vars`.
pub fn set(vars: &mut BTreeMap<OsString, OsString>, var: &str, value: OsString) {
    vars.insert(var.into(), value);
}

/// Makes `link` a symlink to `real`.
pub fn link_file(real: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(real, link)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(text: &[u8], uid: u32) -> Lookup<'_> {
        home_in_passwd(text, uid)
    }

    fn found(home: &str) -> Lookup<'_> {
        Lookup::Home(OsStr::new(home))
    }

    #[test]
    fn the_first_entry_for_the_uid_gives_the_home() {
        let text = b"root:x:0:0:root:/root:/bin/bash\n\
                     alice:x:1000:1000:Alice,,,:/home/alice:/bin/sh\n\
                     alias:x:1000:1000::/home/alias:/bin/sh\n";
        assert_eq!(home(text, 0), found("/root"));
        assert_eq!(home(text, 1000), found("/home/alice"));
        assert_eq!(home(text, 1001), Lookup::NoHome);
    }

    #[test]
    fn a_uid_is_matched_whole_not_by_prefix_or_by_value() {
        let text = b"one:x:1:1::/one:/bin/sh\n\
                     ten:x:10:10::/ten:/bin/sh\n\
                     hundred:x:100:100::/hundred:/bin/sh\n";
        assert_eq!(home(text, 1), found("/one"));
        assert_eq!(home(text, 10), found("/ten"));
        assert_eq!(home(text, 100), found("/hundred"));
        // `00` is not uid 0's entry; glibc reads it as 0, so the file does not decide.
        let zeros = b"zeros:x:00:0::/zeros:/bin/sh\nroot:x:0:0::/root:/bin/sh\n";
        assert_eq!(home(zeros, 0), Lookup::NotAuthoritative);
        // After the entry, an odd uid field changes nothing: glibc stops at the first match.
        let after = b"root:x:0:0::/root:/bin/sh\nzeros:x:00:0::/zeros:/bin/sh\n";
        assert_eq!(home(after, 0), found("/root"));
        for odd in [&b"+0"[..], b" 0", b"0 ", b"", b"4294967296", b"0x0"] {
            let mut text = b"odd:x:".to_vec();
            text.extend_from_slice(odd);
            text.extend_from_slice(b":0::/odd:/bin/sh\nroot:x:0:0::/root:/bin/sh\n");
            assert_eq!(home(&text, 0), Lookup::NotAuthoritative, "{odd:?}");
        }
        assert_eq!(
            home(b"max:x:4294967295:0::/max:/bin/sh", u32::MAX),
            found("/max")
        );
    }

    #[test]
    fn short_lines_are_not_an_answer() {
        // Lines with no uid field, or another uid's short line, are skipped.
        let text = b"garbage\nshort:x\nother:x:7:7::/other\nfull:x:7:7::/full:/bin/sh\n";
        assert_eq!(home(text, 7), Lookup::NotAuthoritative);
        let text = b"garbage\nshort:x\nother:x:8:8::/other\nfull:x:7:7::/full:/bin/sh\n";
        assert_eq!(home(text, 7), found("/full"));
        // The uid's own line with fewer than seven fields: glibc would take it, so the file
        // does not decide (and a later full line is not taken in its place).
        for short in [&b"u:x:7:7"[..], b"u:x:7:7:", b"u:x:7:7::/six"] {
            let mut text = short.to_vec();
            text.extend_from_slice(b"\nfull:x:7:7::/full:/bin/sh\n");
            assert_eq!(home(&text, 7), Lookup::NotAuthoritative, "{short:?}");
        }
        // A gid glibc may not parse: it might skip the line and answer from a later one.
        let text = b"u:x:7:seven::/u:/bin/sh\nfull:x:7:7::/full:/bin/sh\n";
        assert_eq!(home(text, 7), Lookup::NotAuthoritative);
        // More than seven fields: the home is still the sixth.
        assert_eq!(home(b"u:x:7:7::/u:/bin/sh:extra", 7), found("/u"));
    }

    #[test]
    fn nis_compat_lines_make_the_file_not_authoritative() {
        for compat in [
            &b"+"[..],
            b"+@netgroup",
            b"-bob",
            b"+::::::",
            b"  +alice",
            b"\x0b-x",
        ] {
            let mut before = compat.to_vec();
            before.extend_from_slice(b"\nroot:x:0:0::/root:/bin/sh\n");
            assert_eq!(home(&before, 0), Lookup::NotAuthoritative, "{compat:?}");
            let mut after = b"root:x:0:0::/root:/bin/sh\n".to_vec();
            after.extend_from_slice(compat);
            assert_eq!(home(&after, 0), Lookup::NotAuthoritative, "{compat:?}");
        }
    }

    #[test]
    fn comments_blank_lines_and_leading_blanks_are_read_as_glibc_reads_them() {
        let text =
            b"# root:x:0:0::/commented:/bin/sh\n\n   \n\x0b#\n\t root:x:0:0::/root:/bin/sh\r\n";
        assert_eq!(home(text, 0), found("/root"));
        assert_eq!(
            home(b"root:x:0:0::/ro\0ot:/bin/sh\n", 0),
            Lookup::NotAuthoritative
        );
    }

    #[test]
    fn a_non_utf8_home_is_kept_as_bytes() {
        let text = b"u:x:5:5::/home/caf\xe9:/bin/sh\n";
        assert_eq!(
            home(text, 5),
            Lookup::Home(OsStr::from_bytes(b"/home/caf\xe9"))
        );
    }

    #[test]
    fn an_empty_home_is_no_home() {
        assert_eq!(home(b"u:x:5:5:::/bin/sh\n", 5), Lookup::NoHome);
    }

    #[test]
    fn the_last_line_needs_no_newline() {
        assert_eq!(home(b"a:x:1:1::/a:/bin/sh\nb:x:2:2::/b:", 2), found("/b"));
    }

    /// For every uid this machine's /etc/passwd lists, the home taken equals `getpwuid_r`'s.
    #[cfg(target_os = "linux")]
    #[test]
    fn every_uid_in_this_machines_passwd_file_gets_the_home_getpwuid_r_gives() {
        let text = std::fs::read(PASSWD_FILE).unwrap();
        let uids: Vec<u32> = text
            .split(|&b| b == b'\n')
            .filter_map(|line| line.split(|&b| b == b':').nth(2))
            .filter_map(plain_decimal)
            .collect();
        assert!(!uids.is_empty(), "{PASSWD_FILE} lists no uid");
        for uid in uids {
            let libc = crate::sys::unix::passwd_home(uid);
            if let Lookup::Home(from_file) = home_in_passwd(&text, uid) {
                assert_eq!(
                    libc.as_deref().ok(),
                    Some(Path::new(from_file)),
                    "uid {uid}"
                );
            }
            match (home_of(uid), libc) {
                (Ok(taken), Ok(libc)) => assert_eq!(taken, libc, "uid {uid}"),
                (Err(taken), Err(libc)) => assert_eq!(taken.kind(), libc.kind(), "uid {uid}"),
                (taken, libc) => panic!("uid {uid}: {taken:?} against getpwuid_r's {libc:?}"),
            }
        }
    }
}
