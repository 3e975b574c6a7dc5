//! Text from others shown to the user: names and records that a command or another user chose.
//! Invariant: what is shown can neither forge a line nor move the cursor (control characters
//! are escaped, the rest is kept as it is).

use std::borrow::Cow;

/// `text` with every control character escaped (`\n`, `\u{1b}`); borrowed when there is none.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c.is_control() {
            true => escaped.extend(c.escape_default()),
            false => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::escape_controls;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert_eq!(escape_controls("a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\n");
        assert_eq!(escape_controls("plain ü"), "plain ü");
        assert!(matches!(
            escape_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
