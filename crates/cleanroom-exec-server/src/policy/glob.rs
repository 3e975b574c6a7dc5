//! Glob entries of a sandbox (`{"type":"glob_pattern","pattern":"**/*.env"}`) expanded to the
//! paths that exist when the policy is built: Landlock and mounts bind inodes and paths, not
//! patterns.
//!
//! Invariant: the walks are bounded, and the bounds are shared by every glob entry of one
//! sandbox (one [`Globs`]): at most [`MAX_VISITED`] directory entries visited, [`MAX_MATCHES`]
//! paths matched and [`MAX_STEPS`] steps of work (a pattern is read once, one step a byte; a
//! name tried against a pattern's tokens, one step a comparison, at most its length times the
//! pattern's); a pattern is at most [`MAX_PATTERN`] bytes. The walk does not follow symbolic
//! links. A walk that exceeds a bound is an error (the caller refuses the policy), never a
//! silently partial expansion. Files created later that match are not covered (as in Codex's
//! own Linux sandbox, which expands globs at launch too).

use std::path::{Component, Path, PathBuf};

/// Directory entries the walks of one sandbox may visit.
const MAX_VISITED: usize = 50_000;
/// Paths the patterns of one sandbox may match (each becomes a rule, and for `none` a mount).
const MAX_MATCHES: usize = 1_000;
/// Steps of work the patterns of one sandbox may take: reading them, and matching names.
const MAX_STEPS: u64 = 10_000_000;
/// Longest pattern, in bytes (`PATH_MAX`).
const MAX_PATTERN: usize = 4096;

/// The glob entries of one sandbox, expanded against one budget ([`MAX_VISITED`],
/// [`MAX_MATCHES`], [`MAX_STEPS`]): a sandbox cannot multiply the work by its number of entries.
#[derive(Debug, Default)]
pub struct Globs {
    visited: usize,
    matched: usize,
    steps: u64,
}

/// A bound of [`Globs`] was exceeded.
struct Exceeded;

/// One component of a pattern, read once.
enum Part {
    /// `**`: this directory and every one below it.
    AnyDepth,
    /// A name pattern.
    Name(Vec<Token>),
}

impl Globs {
    /// The existing paths matching `pattern` (absolute, or relative to `cwd`), within what is
    /// left of the budget.
    pub fn expand(&mut self, pattern: &str, cwd: &Path) -> Result<Vec<PathBuf>, String> {
        if pattern.len() > MAX_PATTERN {
            return Err(format!(
                "glob pattern is longer than {MAX_PATTERN} bytes ({})",
                pattern.len()
            ));
        }
        let exceeded = |Exceeded| {
            format!(
                "glob pattern {pattern:?} exceeds what the glob patterns of one sandbox may \
                 cost together: {MAX_VISITED} directory entries visited, {MAX_MATCHES} paths \
                 matched, {MAX_STEPS} steps of matching"
            )
        };
        self.spend(pattern.len() as u64).map_err(exceeded)?;
        let (base, parts) = split(pattern, cwd)?;
        if parts.is_empty() {
            return Ok(vec![base]);
        }
        let mut found = Vec::new();
        self.walk(&base, &parts, &mut found).map_err(exceeded)?;
        Ok(found)
    }

    fn spend(&mut self, steps: u64) -> Result<(), Exceeded> {
        self.steps += steps;
        match self.steps > MAX_STEPS {
            true => Err(Exceeded),
            false => Ok(()),
        }
    }

    fn found(&mut self, path: PathBuf, found: &mut Vec<PathBuf>) -> Result<(), Exceeded> {
        self.matched += 1;
        found.push(path);
        match self.matched > MAX_MATCHES {
            true => Err(Exceeded),
            false => Ok(()),
        }
    }

    /// Matches `parts` below `dir`.
    fn walk(
        &mut self,
        dir: &Path,
        parts: &[Part],
        found: &mut Vec<PathBuf>,
    ) -> Result<(), Exceeded> {
        let Some((first, tail)) = parts.split_first() else {
            return self.found(dir.to_path_buf(), found);
        };
        if let Part::AnyDepth = first {
            self.walk(dir, tail, found)?;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            self.visited += 1;
            if self.visited > MAX_VISITED {
                return Err(Exceeded);
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            match first {
                Part::AnyDepth if is_dir => self.walk(&entry.path(), parts, found)?,
                Part::AnyDepth => {}
                Part::Name(tokens) => {
                    let name = entry.file_name();
                    let (matched, steps) = matches(tokens, &name.to_string_lossy());
                    self.spend(steps)?;
                    if !matched {
                        continue;
                    }
                    if tail.is_empty() {
                        self.found(entry.path(), found)?;
                    } else if is_dir {
                        self.walk(&entry.path(), tail, found)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The directory where the walk starts (the components before the first wildcard) and the
/// components from there, each read once.
fn split(pattern: &str, cwd: &Path) -> Result<(PathBuf, Vec<Part>), String> {
    let full = cwd.join(pattern);
    let mut base = PathBuf::new();
    let mut parts = Vec::new();
    for component in full.components() {
        match component {
            Component::Normal(part) => {
                let part = part.to_string_lossy();
                if parts.is_empty() && !has_wildcard(&part) {
                    base.push(&*part);
                } else if part == "**" {
                    parts.push(Part::AnyDepth);
                } else {
                    parts.push(Part::Name(tokens(&part)));
                }
            }
            Component::RootDir => base.push("/"),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("glob pattern {pattern:?} must not contain `..`"))
            }
        }
    }
    Ok((base, parts))
}

fn has_wildcard(part: &str) -> bool {
    part.contains(['*', '?', '['])
}

/// One element of a pattern component.
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: one character.
    Any,
    /// `[abc]`, `[a-z]`, `[!x]` (or `[^x]`): one character of (or not of) the class.
    Class { negate: bool, class: Vec<char> },
    /// Itself (`[` too, where no class follows).
    Literal(char),
}

impl Token {
    /// Whether this token, unless it is `*`, matches the one character `c`.
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Star => false,
            Token::Any => true,
            Token::Class { negate, class } => in_class(class, c) != *negate,
            Token::Literal(l) => *l == c,
        }
    }
}

/// The tokens of a pattern component.
fn tokens(glob: &str) -> Vec<Token> {
    let g: Vec<char> = glob.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < g.len() {
        let (token, len) = match g[i] {
            '*' => (Token::Star, 1),
            '?' => (Token::Any, 1),
            '[' => match g[i..].iter().position(|&c| c == ']') {
                Some(end) if end > 1 => {
                    let class = &g[i + 1..i + end];
                    let (negate, class) = match class.first() {
                        Some('!') | Some('^') => (true, &class[1..]),
                        _ => (false, class),
                    };
                    let class = class.to_vec();
                    (Token::Class { negate, class }, end + 1)
                }
                _ => (Token::Literal('['), 1),
            },
            c => (Token::Literal(c), 1),
        };
        tokens.push(token);
        i += len;
    }
    tokens
}

/// Whether `glob` (one component: `*` any run, `?` one character, `[abc]` / `[a-z]` / `[!x]`
/// one of) matches all of `name`.
pub(crate) fn component_match(glob: &str, name: &str) -> bool {
    matches(&tokens(glob), name).0
}

/// Whether `tokens` match all of `name`, and the steps it took (comparisons, and the tokens
/// checked at the end).
///
/// In time proportional to the name's length times the pattern's: after a mismatch only the
/// last `*` is retried, one character further (every other token matches exactly one
/// character, so an earlier `*` never needs to take more), never every way of splitting the
/// name between the stars (exponential: `*a*a*a…b` against a long run of `a`).
fn matches(tokens: &[Token], name: &str) -> (bool, u64) {
    let name: Vec<char> = name.chars().collect();
    let (mut t, mut n) = (0, 0);
    let mut steps = 0;
    // The token after the last `*` seen, and where in the name that `*`'s run ends.
    let mut retry: Option<(usize, usize)> = None;
    while n < name.len() {
        steps += 1;
        match tokens.get(t) {
            Some(Token::Star) => {
                retry = Some((t + 1, n));
                t += 1;
                continue;
            }
            Some(token) if token.matches(name[n]) => {
                t += 1;
                n += 1;
                continue;
            }
            _ => {}
        }
        let Some((after_star, run_end)) = retry else {
            return (false, steps);
        };
        retry = Some((after_star, run_end + 1));
        (t, n) = (after_star, run_end + 1);
    }
    let rest = &tokens[t..];
    let stars = rest.iter().take_while(|t| matches!(t, Token::Star)).count();
    (stars == rest.len(), steps + stars as u64 + 1)
}

fn in_class(class: &[char], c: char) -> bool {
    let mut i = 0;
    while i < class.len() {
        if i + 2 < class.len() && class[i + 1] == '-' {
            if class[i] <= c && c <= class[i + 2] {
                return true;
            }
            i += 3;
        } else {
            if class[i] == c {
                return true;
            }
            i += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One pattern expanded with a budget of its own.
    fn expand(pattern: &str, cwd: &Path) -> Result<Vec<PathBuf>, String> {
        Globs::default().expand(pattern, cwd)
    }

    #[test]
    fn names_match_stars_questions_and_classes() {
        assert!(component_match("*.env", ".env"));
        assert!(component_match("*.env", "prod.env"));
        assert!(!component_match("*.env", "env"));
        assert!(component_match("a?c", "abc"));
        assert!(component_match("[a-c]x", "bx"));
        assert!(!component_match("[!a-c]x", "bx"));
        assert!(component_match("[]", "[]"), "no class: a literal [");
        assert!(component_match("a*b*c", "aXbYbZc"));
        assert!(!component_match("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn stars_cost_no_backtracking_over_every_split() {
        // Splitting 250 characters among 40 stars every way is about 10^47 tries.
        let pattern = format!("{}b", "*a".repeat(40));
        assert!(!component_match(&pattern, &"a".repeat(250)));
        assert!(component_match(&pattern, &format!("{}b", "a".repeat(250))));
        assert!(expand(&"*".repeat(MAX_PATTERN + 1), Path::new("/")).is_err());
    }

    /// A dir of `count` files named by `name(i)`.
    fn files(count: usize, name: impl Fn(usize) -> String) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..count {
            std::fs::write(dir.path().join(name(i)), "").unwrap();
        }
        dir
    }

    #[test]
    fn the_glob_entries_of_one_sandbox_share_one_budget() {
        // 29 `**` read the dir 30 times: 30,000 entries visited, within the bound alone.
        let dir = files(1000, |i| format!("f{i}"));
        let pattern = format!("{}x", "**/".repeat(29));
        assert_eq!(expand(&pattern, dir.path()), Ok(Vec::new()));
        assert_eq!(expand(&pattern, dir.path()), Ok(Vec::new()));
        let mut sandbox = Globs::default();
        assert_eq!(sandbox.expand(&pattern, dir.path()), Ok(Vec::new()));
        let err = sandbox.expand(&pattern, dir.path()).unwrap_err();
        assert!(err.contains("50000 directory entries"), "{err}");
    }

    #[test]
    fn a_pattern_is_read_once_however_many_names_it_is_tried_against() {
        let dir = files(2000, |i| format!("b{i}"));
        let pattern = format!("**/{}", "*a".repeat(2000));
        let mut globs = Globs::default();
        assert_eq!(globs.expand(&pattern, dir.path()), Ok(Vec::new()));
        assert_eq!(
            globs.visited, 4000,
            "the dir is read twice, for `**` and below it"
        );
        // Reading the pattern, then a few comparisons a name ("b1234" fails at its first
        // character after the star).
        let most = pattern.len() as u64 + 2000 * 16;
        assert!(globs.steps <= most, "{} steps", globs.steps);
    }

    #[test]
    fn matching_too_much_is_refused() {
        // `*`, 120 `a`, `b` against 240 `a` and 3 digits: about 120 tries of up to 121
        // comparisons, then shorter ones: over 20,000 steps a name, 10 million in 500 names.
        let pattern = format!("*{}b", "a".repeat(120));
        let name = |i| format!("{}{i:03}", "a".repeat(240));
        let (matched, steps) = matches(&tokens(&pattern), &name(0));
        assert!(!matched);
        assert!((20_000..=243 * 122).contains(&steps), "{steps} steps");
        let dir = files(500, name);
        let err = expand(&pattern, dir.path()).unwrap_err();
        assert!(err.contains("steps of matching"), "{err}");
    }

    #[test]
    fn double_star_finds_existing_matches_at_any_depth() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("top.env"), "").unwrap();
        std::fs::write(dir.path().join("a/b/deep.env"), "").unwrap();
        std::fs::write(dir.path().join("a/b/other.txt"), "").unwrap();
        let mut found = expand("**/*.env", dir.path()).unwrap();
        found.sort();
        assert_eq!(
            found,
            [dir.path().join("a/b/deep.env"), dir.path().join("top.env")]
        );
        assert!(expand("../x/*", dir.path()).is_err());
    }
}
