//! The nested-run capability: a 128-bit random [`Token`] per held lock, passed to the holder's
//! children in [`TOKENS_ENV`](super::TOKENS_ENV) as [`Capabilities`], and its [`TokenHash`], the
//! only form of it that is ever written to a file.
//!
//! Invariants: a token exists only in the holder's memory and in its children's environment:
//! never in a file (the token file holds its SHA-256, which a reader cannot turn back into a
//! token), never in `Debug` output. Hashes are compared in constant time. A malformed capability
//! or token file is dropped, never trusted, and so is a token file of another format (the bare
//! token that cleanroom wrote before 0.x: a run that meets one waits like anyone else).

use super::{valid_name, LockScope};
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// A nested-run capability: 128 random bits. Its `Debug` never shows the secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Token([u8; 16]);

impl Token {
    pub(super) fn random() -> Result<Token> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::sys("read random bytes", std::io::Error::other(e.to_string())))?;
        Ok(Token(bytes))
    }

    /// Parses exactly 32 lowercase hex digits.
    pub(super) fn parse(text: &str) -> Option<Token> {
        parse_hex(text).map(Token)
    }

    /// The token's SHA-256, which is what the token file holds.
    pub(super) fn hash(&self) -> TokenHash {
        TokenHash(Sha256::digest(self.0).into())
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// The SHA-256 of a [`Token`]: the content of a holder's token file. Knowing it does not let a
/// run join; presenting the token it was made from does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct TokenHash([u8; 32]);

impl TokenHash {
    /// What starts the one line of a token file; it names the format, so a file of any other
    /// (an older cleanroom's bare token) is refused rather than misread.
    const FILE_PREFIX: &'static str = "sha256:";

    /// The content of a token file: `sha256:` and 64 lowercase hex digits, then a newline.
    pub(super) fn file_text(&self) -> String {
        format!("{}{self}\n", TokenHash::FILE_PREFIX)
    }

    /// Parses the content of a token file (see [`TokenHash::file_text`]); anything else is `None`.
    pub(super) fn parse_file(text: &str) -> Option<TokenHash> {
        let line = text.strip_suffix('\n')?;
        parse_hex(line.strip_prefix(TokenHash::FILE_PREFIX)?).map(TokenHash)
    }

    /// Whether `token` is the one this hash was made from. The comparison has no early exit, so
    /// timing does not tell how much of a guess was right.
    pub(super) fn admits(&self, token: &Token) -> bool {
        let presented = token.hash();
        let diff = self
            .0
            .iter()
            .zip(presented.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Display for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

/// Exactly `2 * N` lowercase hex digits as `N` bytes.
fn parse_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bytes)
}

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Capabilities a run inherited from the runs it is nested in (the value of [`TOKENS_ENV`](super::TOKENS_ENV)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub(super) tokens: BTreeMap<(LockScope, String), Token>,
}

impl Capabilities {
    /// Parses `SCOPE:NAME:TOKEN[,...]`; malformed entries are dropped, never trusted.
    pub fn parse(text: &str) -> Capabilities {
        let tokens = text
            .split(',')
            .filter_map(|entry| {
                let mut parts = entry.splitn(3, ':');
                let scope = parts.next()?.parse::<LockScope>().ok()?;
                let name = parts.next().filter(|n| valid_name(n))?;
                let token = Token::parse(parts.next()?)?;
                Some(((scope, name.to_string()), token))
            })
            .collect();
        Capabilities { tokens }
    }

    pub(super) fn get(&self, scope: LockScope, name: &str) -> Option<&Token> {
        self.tokens.get(&(scope, name.to_string()))
    }
}

impl fmt::Display for Capabilities {
    /// Formats as the value of [`TOKENS_ENV`](super::TOKENS_ENV).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, ((scope, name), token)) in self.tokens.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{scope}:{name}:{token}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_round_trip_and_malformed_entries_are_dropped() {
        let good = "user:db:00112233445566778899aabbccddeeff,\
                    machine:port-8080:ffeeddccbbaa99887766554433221100";
        let caps = Capabilities::parse(good);
        assert!(caps.get(LockScope::User, "db").is_some());
        assert!(caps.get(LockScope::Machine, "port-8080").is_some());
        assert!(caps.get(LockScope::User, "port-8080").is_none());
        assert_eq!(caps.to_string(), good);
        let bad = [
            "",
            "db:00112233445566778899aabbccddeeff",
            "user:db:00112233445566778899AABBCCDDEEFF",
            "user:db:00112233445566778899aabbccddee",
            "user:db:00112233445566778899aabbccddeeff00",
            "user:.db:00112233445566778899aabbccddeeff",
            "user:d/b:00112233445566778899aabbccddeeff",
            "group:db:00112233445566778899aabbccddeeff",
            "user:db:0011223344556677889zaabbccddeeff",
            "user:db:",
        ];
        for entry in bad {
            assert_eq!(
                Capabilities::parse(entry),
                Capabilities::default(),
                "{entry}"
            );
        }
        let mixed = Capabilities::parse(&format!("garbage,{good},user:x:zz"));
        assert_eq!(mixed.to_string(), good);
    }

    #[test]
    fn tokens_compare_exactly_and_never_show_in_debug() {
        let a = Token::parse("00112233445566778899aabbccddeeff").unwrap();
        let b = Token::parse("00112233445566778899aabbccddeefe").unwrap();
        assert!(a.hash().admits(&a));
        assert!(!a.hash().admits(&b));
        let c = Token::parse("01102233445566778899aabbccddeeff").unwrap();
        assert!(!a.hash().admits(&c) && !c.hash().admits(&a));
        assert_eq!(format!("{a:?}"), "Token(..)");
        assert_eq!(format!("{:?}", a.hash()), "TokenHash(..)");
        assert!(!format!(
            "{:?}",
            Capabilities::parse("user:db:00112233445566778899aabbccddeeff")
        )
        .contains("0011"));
    }

    #[test]
    fn token_files_hold_only_a_versioned_hash() {
        let token = Token::parse("00112233445566778899aabbccddeeff").unwrap();
        let text = token.hash().file_text();
        // SHA-256 of the 16 bytes 00 11 .. ff (checked with `xxd -r -p | sha256sum`).
        assert_eq!(text, format!("sha256:{}\n", SHA256_OF_TOKEN));
        assert!(!text.contains(&token.to_string()));
        assert!(TokenHash::parse_file(&text).unwrap().admits(&token));
        // An older cleanroom's file held the bare token: never taken for a hash, nor the reverse.
        for old_or_bad in [
            format!("{token}\n"),
            format!("{token}"),
            format!("sha256:{SHA256_OF_TOKEN}"),
            format!("sha256:{}\n", SHA256_OF_TOKEN.to_uppercase()),
            format!("sha512:{SHA256_OF_TOKEN}\n"),
            format!("sha256:{SHA256_OF_TOKEN}00\n"),
        ] {
            assert!(
                TokenHash::parse_file(&old_or_bad).is_none(),
                "{old_or_bad:?}"
            );
        }
        assert!(Token::parse(text.trim_end()).is_none());
    }

    const SHA256_OF_TOKEN: &str =
        "a8faed6abbf35c12a4b26e40f6feb19d736d90045c83b9f9a31f638d323e6811";
}
