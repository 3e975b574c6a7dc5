//! Glob entries of a sandbox (`{"type":"glob_pattern","pattern":"**/*.env"}`) expanded to the
//! paths that exist when the policy is built: Landlock and mounts bind inodes and paths, not
//! patterns.
//!
//! Invariant: the walk is bounded ([`MAX_VISITED`] entries, [`MAX_MATCHES`] matches) and does
//! not follow symbolic links; a pattern that exceeds a bound is an error (the caller refuses the policy), never a
//! silently partial expansion. Files created later that match are not covered (as in Codex's
//! own Linux sandbox, which expands globs at launch too).

use std::path::{Component, Path, PathBuf};

/// Directory entries a pattern's walk may visit.
const MAX_VISITED: usize = 50_000;
/// Paths a pattern may match (each becomes a rule, and for `none` a mount).
const MAX_MATCHES: usize = 1_000;

/// The existing paths matching `pattern` (absolute, or relative to `cwd`).
pub fn expand(pattern: &str, cwd: &Path) -> Result<Vec<PathBuf>, String> {
    let full = cwd.join(pattern);
    let mut base = PathBuf::new();
    let mut rest: Vec<String> = Vec::new();
    for component in full.components() {
        match component {
            Component::Normal(part) => {
                let part = part.to_string_lossy().into_owned();
                if rest.is_empty() && !has_wildcard(&part) {
                    base.push(part);
                } else {
                    rest.push(part);
                }
            }
            Component::RootDir => base.push("/"),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("glob pattern {pattern:?} must not contain `..`"))
            }
        }
    }
    if rest.is_empty() {
        return Ok(vec![base]);
    }
    let mut found = Vec::new();
    let mut visited = 0;
    walk(&base, &rest, &mut found, &mut visited).map_err(|()| {
        format!(
            "glob pattern {pattern:?} visits more than {MAX_VISITED} entries or matches more \
             than {MAX_MATCHES}"
        )
    })?;
    Ok(found)
}

fn has_wildcard(part: &str) -> bool {
    part.contains(['*', '?', '['])
}

/// Matches `parts` below `dir`; `Err` when the bound is exceeded.
fn walk(
    dir: &Path,
    parts: &[String],
    found: &mut Vec<PathBuf>,
    visited: &mut usize,
) -> Result<(), ()> {
    if found.len() > MAX_MATCHES {
        return Err(());
    }
    let Some((first, tail)) = parts.split_first() else {
        found.push(dir.to_path_buf());
        return Ok(());
    };
    if first == "**" {
        walk(dir, tail, found, visited)?;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        *visited += 1;
        if *visited > MAX_VISITED {
            return Err(());
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if first == "**" {
            if is_dir {
                walk(&path, parts, found, visited)?;
            }
        } else if component_match(first, &name) {
            if tail.is_empty() {
                found.push(path);
                if found.len() > MAX_MATCHES {
                    return Err(());
                }
            } else if is_dir {
                walk(&path, tail, found, visited)?;
            }
        }
    }
    Ok(())
}

/// `*` (any run), `?` (one character), `[abc]` / `[a-z]` / `[!x]` (one of) within a name.
fn component_match(glob: &str, name: &str) -> bool {
    let g: Vec<char> = glob.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches_at(&g, &n)
}

fn matches_at(g: &[char], n: &[char]) -> bool {
    match g.first() {
        None => n.is_empty(),
        Some('*') => (0..=n.len()).any(|i| matches_at(&g[1..], &n[i..])),
        Some('?') => !n.is_empty() && matches_at(&g[1..], &n[1..]),
        Some('[') => match (g.iter().position(|&c| c == ']'), n.first()) {
            (Some(end), Some(&c)) if end > 1 => {
                let class = &g[1..end];
                let (negate, class) = match class.first() {
                    Some('!') | Some('^') => (true, &class[1..]),
                    _ => (false, class),
                };
                in_class(class, c) != negate && matches_at(&g[end + 1..], &n[1..])
            }
            _ => n.first() == Some(&'[') && matches_at(&g[1..], &n[1..]),
        },
        Some(&c) => n.first() == Some(&c) && matches_at(&g[1..], &n[1..]),
    }
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

    #[test]
    fn names_match_stars_questions_and_classes() {
        assert!(component_match("*.env", ".env"));
        assert!(component_match("*.env", "prod.env"));
        assert!(!component_match("*.env", "env"));
        assert!(component_match("a?c", "abc"));
        assert!(component_match("[a-c]x", "bx"));
        assert!(!component_match("[!a-c]x", "bx"));
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
