//! From a policy's rules to what the kernel is given: Landlock grants (an allowlist), mounts for
//! rules narrower than the rule around them, or the cover that expresses them in Landlock alone.
//!
//! Invariant: paths are canonical before they are compared, so a rule holds whatever spelling
//! the child uses; when in doubt (a directory that cannot be listed, an entry that vanished)
//! nothing is granted, which is stricter, never weaker.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use super::rule::{Access, AppliedRule, EnforcedBy, Rule};
use super::view::View;
use super::DEVICE_FILES;
use crate::error::{Error, Result};

/// A rule after canonicalization.
#[derive(Clone, Debug)]
pub(super) struct CanonicalRule {
    pub path: PathBuf,
    pub access: Access,
    pub reason: String,
    /// `None` when the path does not exist; else whether it is a directory.
    pub dir: Option<bool>,
    /// For a rule at another place of a rule's object: that rule's path (see
    /// [`AppliedRule::alias_of`]).
    pub alias_of: Option<PathBuf>,
}

impl CanonicalRule {
    pub fn applied(self, by: EnforcedBy) -> AppliedRule {
        AppliedRule {
            path: self.path,
            access: self.access,
            reason: self.reason,
            enforced_by: if self.dir.is_none() {
                EnforcedBy::Absent
            } else {
                by
            },
            alias_of: self.alias_of,
        }
    }
}

/// Canonicalizes (in `view`) and sorts the rules (parents before children); rules on the same
/// path merge to the weaker access. Paths that do not exist, or that this user cannot resolve,
/// are kept (reported as absent) but never compiled.
pub(super) fn canonical_rules(rules: &[Rule], view: &View) -> Result<Vec<CanonicalRule>> {
    let mut out: Vec<CanonicalRule> = Vec::with_capacity(rules.len());
    for rule in rules {
        if !rule.path.is_absolute() {
            return Err(Error::Invalid(format!(
                "policy rule {}: the path must be absolute",
                rule.path.display()
            )));
        }
        let (path, dir) = match view.canonicalize(&rule.path) {
            Ok((path, dir)) => (path, Some(dir)),
            Err(e) => {
                // Missing, or not reachable by this user (nor, then, by the child it starts):
                // nothing to mount over or grant.
                tracing::debug!(path = %rule.path.display(), "policy path not resolved: {e}");
                (rule.path.clone(), None)
            }
        };
        insert(&mut out, path, rule.access, &rule.reason, dir);
    }
    Ok(out)
}

/// Adds a rule, or merges it into the rule on the same path (the weaker access wins).
fn insert(
    rules: &mut Vec<CanonicalRule>,
    path: PathBuf,
    access: Access,
    reason: &str,
    dir: Option<bool>,
) {
    let rule = CanonicalRule {
        path,
        access,
        reason: reason.to_string(),
        dir,
        alias_of: None,
    };
    insert_rule(rules, rule);
}

/// Adds `rule`, or merges it into the rule on the same path (the weaker access wins; a rule of
/// the policy stays one).
pub(super) fn insert_rule(rules: &mut Vec<CanonicalRule>, rule: CanonicalRule) {
    match rules.binary_search_by(|r| r.path.cmp(&rule.path)) {
        Ok(i) => {
            let existing = &mut rules[i];
            existing.access = existing.access.min(rule.access);
            if !existing.reason.contains(&rule.reason) {
                existing.reason = format!("{}; {}", existing.reason, rule.reason);
            }
        }
        Err(i) => rules.insert(i, rule),
    }
}

/// The access the rules give `path`: the rule with the longest ancestor-or-self path wins.
pub(super) fn effective_access<'a>(
    rules: impl IntoIterator<Item = (&'a Path, Access)>,
    path: &Path,
) -> Access {
    let mut best: Option<(usize, Access)> = None;
    for (rule_path, access) in rules {
        if path.starts_with(rule_path) {
            let depth = rule_path.components().count();
            best = match best {
                Some((d, a)) if d > depth => Some((d, a)),
                Some((d, a)) if d == depth => Some((d, a.min(access))),
                _ => Some((depth, access)),
            };
        }
    }
    best.map_or(Access::None, |(_, a)| a)
}

fn existing(rules: &[CanonicalRule]) -> impl Iterator<Item = &CanonicalRule> {
    rules.iter().filter(|r| r.dir.is_some())
}

/// The access of the nearest existing rule strictly above `path` (`None` at the top).
fn parent_access(rules: &[CanonicalRule], path: &Path) -> Access {
    match path.parent() {
        Some(parent) => effective_access(
            existing(rules).map(|r| (r.path.as_path(), r.access)),
            parent,
        ),
        None => Access::None,
    }
}

/// Whether some rule is narrower than the rule around it.
pub(super) fn has_narrowing(rules: &[CanonicalRule]) -> bool {
    existing(rules).any(|r| r.access < parent_access(rules, &r.path))
}

/// Whether reads must be handled: some existing path ends up `none` (no readable `/`, or a
/// `none` rule).
pub(super) fn handles_reads(rules: &[CanonicalRule]) -> bool {
    let root = existing(rules).find(|r| r.path == Path::new("/"));
    root.is_none_or(|r| r.access == Access::None)
        || existing(rules).any(|r| r.access == Access::None)
}

/// Whether the rules restrict anything (else no Landlock ruleset is needed): some existing
/// path gets less than write.
pub(super) fn restricts_anything(rules: &[CanonicalRule]) -> bool {
    let root_writable =
        existing(rules).any(|r| r.path == Path::new("/") && r.access == Access::Write);
    !root_writable || existing(rules).any(|r| r.access < Access::Write)
}

/// Adds the always-writable device files where the rules give them less than write (not
/// beneath an explicit `none` rule, which hides them), and a rule for each fresh private mount
/// (`fresh`: `/dev/shm`, `/tmp`, ... with the reason).
pub(super) fn add_default_rules(
    rules: &mut Vec<CanonicalRule>,
    fresh: &[(&Path, &str)],
    view: &View,
) -> Result<()> {
    let mut defaults: Vec<(&Path, &str)> = DEVICE_FILES
        .iter()
        .map(|d| (Path::new(*d), "device file"))
        .collect();
    defaults.extend_from_slice(fresh);
    for (path, reason) in defaults {
        if rules.iter().any(|r| r.path == path) {
            continue;
        }
        let hidden = existing(rules).any(|r| r.access == Access::None && path.starts_with(&r.path));
        let access = effective_access(existing(rules).map(|r| (r.path.as_path(), r.access)), path);
        // A fresh private mount always gets its own rule: the child grants it on the new mount.
        let needed = access < Access::Write || fresh.iter().any(|(f, _)| *f == path);
        if hidden || !needed {
            continue;
        }
        match view.lstat(path) {
            Ok(stat) if stat.st_mode & libc::S_IFMT != libc::S_IFLNK => {
                let dir = stat.st_mode & libc::S_IFMT == libc::S_IFDIR;
                insert(rules, path.to_path_buf(), Access::Write, reason, Some(dir));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("inspect a device file", path, e)),
        }
    }
    Ok(())
}

/// The access the existing rules of `rules` give `path`.
pub(super) fn access_in(rules: &[CanonicalRule], path: &Path) -> Access {
    effective_access(existing(rules).map(|r| (r.path.as_path(), r.access)), path)
}

/// Adds a rule on the existing, canonical `path` unless a rule names it already.
pub(super) fn add_absent(
    rules: &mut Vec<CanonicalRule>,
    path: &Path,
    access: Access,
    reason: &str,
) {
    if !rules.iter().any(|r| r.path == path) {
        let dir = path.is_dir();
        insert(rules, path.to_path_buf(), access, reason, Some(dir));
    }
}

/// The existing paths of `rules` (sorted) that are not beneath another one of them.
pub(super) fn maximal_existing(rules: &[CanonicalRule]) -> Vec<PathBuf> {
    let mut top: Vec<PathBuf> = Vec::new();
    for rule in existing(rules) {
        if !top.last().is_some_and(|t| rule.path.starts_with(t)) {
            top.push(rule.path.clone());
        }
    }
    top
}

/// The entries of `dir` that hold (or are) one of `beneath`'s existing paths, each as a rule
/// with the access `outer` gives it (unless a rule names it already), merged into `beneath`.
/// Returns the entries with whether each is a directory.
pub(super) fn add_shared_entries(
    beneath: &mut Vec<CanonicalRule>,
    outer: &[CanonicalRule],
    dir: &Path,
) -> Vec<(PathBuf, bool)> {
    let mut entries: Vec<PathBuf> = existing(beneath)
        .filter_map(|r| {
            let first = r.path.strip_prefix(dir).ok()?.components().next()?;
            Some(dir.join(first))
        })
        .collect();
    entries.sort();
    entries.dedup();
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let is_dir = entry.is_dir();
        if !beneath.iter().any(|r| r.path == entry) {
            let access = effective_access(
                existing(outer).map(|r| (r.path.as_path(), r.access)),
                &entry,
            );
            insert(
                beneath,
                entry.clone(),
                access,
                "shared with the host's /dev/shm: it holds a path of the policy",
                Some(is_dir),
            );
        }
        out.push((entry, is_dir));
    }
    out
}

/// What a mount in the child does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MountKind {
    ReadOnly,
    HideDir,
    HideFile,
    Expose,
}

/// One mount of the child, in order.
#[derive(Clone, Debug)]
pub(super) struct Mount {
    pub path: PathBuf,
    pub kind: MountKind,
}

/// The compiled form of a set of rules.
#[derive(Debug, Default)]
pub(super) struct Compiled {
    /// Landlock grants: a path and the access allowed beneath it.
    pub grants: Vec<(PathBuf, Access)>,
    /// Mounts, parents before children.
    pub mounts: Vec<Mount>,
    /// Directories whose wide rule was granted entry by entry (the cover).
    pub no_new_entries_in: Vec<PathBuf>,
    /// Rules enforced by the cover.
    covered: Vec<PathBuf>,
}

impl Compiled {
    /// How `rule` is enforced.
    pub fn enforced_by(&self, rule: &CanonicalRule) -> EnforcedBy {
        match self.mounts.iter().find(|m| m.path == rule.path) {
            Some(m) => match m.kind {
                MountKind::ReadOnly => EnforcedBy::ReadOnlyMount,
                MountKind::HideDir | MountKind::HideFile => EnforcedBy::HiddenByMount,
                MountKind::Expose => EnforcedBy::ExposedByMount,
            },
            None if self.covered.contains(&rule.path) => EnforcedBy::Cover,
            None => EnforcedBy::Landlock,
        }
    }
}

/// Compiles `rules` (canonical, sorted, looked up in `view`): with `mounts`, narrower rules
/// become mounts and Landlock gets one grant per widening rule; without, narrower rules are
/// expressed by the cover. `fresh` are the mount points of fresh private mounts (their rules name
/// what the child mounts there, not the host's object).
pub(super) fn compile(
    all: &[CanonicalRule],
    mounts: bool,
    view: &View,
    fresh: &[&Path],
) -> Result<Compiled> {
    let rules: Vec<&CanonicalRule> = existing(all).collect();
    let mut out = Compiled::default();
    if mounts {
        let top = Frame {
            path: Path::new("/"),
            granted: Access::None,
            cap: Access::Write,
        };
        compile_with_mounts(&rules, top, &mut out)?;
    } else {
        let root = rules.iter().find(|r| r.path == Path::new("/"));
        let inside: Vec<&CanonicalRule> = rules
            .iter()
            .copied()
            .filter(|r| r.path != Path::new("/"))
            .collect();
        let ids = Identities::of(&rules, view, fresh);
        let mut cover = Cover {
            view,
            ids: &ids,
            fresh,
            out: &mut out,
        };
        cover.node(
            Path::new("/"),
            root.map_or(Access::None, |r| r.access),
            &inside,
            None,
        );
        out.grants.sort();
        out.grants.dedup();
    }
    if !handles_reads(all) {
        // Reads are not restricted: a read grant would allow nothing more.
        out.grants.retain(|(_, access)| *access == Access::Write);
    }
    Ok(out)
}

/// What the enclosing rules allow at a point of the walk: Landlock's grant, and the cap the
/// mounts above put on it.
#[derive(Clone, Copy)]
struct Frame<'a> {
    path: &'a Path,
    granted: Access,
    cap: Access,
}

/// Compiles the rules beneath `dir`, a private tmpfs whose root the child grants `write`:
/// narrower rules become mounts whatever the strategy (Landlock rights reach into everything
/// beneath the tmpfs root, so only mounts can narrow there).
pub(super) fn compile_private(rules: &[CanonicalRule], dir: &Path) -> Result<Compiled> {
    let rules: Vec<&CanonicalRule> = existing(rules).collect();
    let mut out = Compiled::default();
    let top = Frame {
        path: dir,
        granted: Access::Write,
        cap: Access::Write,
    };
    compile_with_mounts(&rules, top, &mut out)?;
    out.grants.clear();
    Ok(out)
}

/// Moves the rules strictly beneath `dir` out of `rules`.
pub(super) fn split_beneath(rules: &mut Vec<CanonicalRule>, dir: &Path) -> Vec<CanonicalRule> {
    let (beneath, rest): (Vec<_>, Vec<_>) = std::mem::take(rules)
        .into_iter()
        .partition(|r| r.path.starts_with(dir) && r.path != dir);
    *rules = rest;
    beneath
}

fn compile_with_mounts(rules: &[&CanonicalRule], top: Frame, out: &mut Compiled) -> Result<()> {
    let mut stack: Vec<Frame> = Vec::new();
    for rule in rules {
        while stack.last().is_some_and(|f| !rule.path.starts_with(f.path)) {
            stack.pop();
        }
        let parent = stack.last().copied().unwrap_or(top);
        let mut frame = Frame {
            path: &rule.path,
            granted: parent.granted.max(rule.access),
            cap: parent.cap,
        };
        if rule.access > parent.granted {
            out.grants.push((rule.path.clone(), rule.access));
        }
        if rule.access < parent.granted.min(parent.cap) {
            let kind = match (rule.access, rule.dir) {
                (Access::Read, _) => MountKind::ReadOnly,
                (_, Some(true)) => MountKind::HideDir,
                _ => MountKind::HideFile,
            };
            out.mounts.push(Mount {
                path: rule.path.clone(),
                kind,
            });
            frame.cap = rule.access;
        } else if rule.access > parent.cap {
            if parent.cap == Access::None {
                return Err(Error::Unsupported {
                    what: "this filesystem policy",
                    reason: format!(
                        "{} ({:?}) lies inside a path hidden by a `none` rule; a hidden path \
                         cannot be partly re-exposed",
                        rule.path.display(),
                        rule.access
                    ),
                });
            }
            out.mounts.push(Mount {
                path: rule.path.clone(),
                kind: MountKind::Expose,
            });
            frame.cap = Access::Write;
        }
        stack.push(frame);
    }
    Ok(())
}

/// The walk that expresses narrower rules in Landlock alone.
struct Cover<'a> {
    view: &'a View,
    /// Every place is checked against the objects of the rules and of their ancestors, so an
    /// object that shows at several places (bind mounts) gets one grant, never a wider one where
    /// a place of it holds no rule.
    ids: &'a Identities,
    fresh: &'a [&'a Path],
    out: &'a mut Compiled,
}

impl Cover<'_> {
    /// Grants `access` beneath `node` except where a rule inside says less, or where the object
    /// `node` shows is narrowed at another place: then `node` gets only what every path beneath
    /// it may have, and its entries are granted one by one, each checked the same way (symlinks
    /// are skipped: their targets are reached by their own canonical path). `inside` are the
    /// rules strictly beneath `node`. A place that shows a rule's object gets that object's
    /// access, whatever the rules above the place say.
    /// `id`: the object at `node`, when its directory's listing said.
    fn node(&mut self, node: &Path, access: Access, inside: &[&CanonicalRule], id: Option<Id>) {
        let (access, cap) = match (self.fresh.contains(&node), id) {
            (true, _) => (access, Access::Write),
            (false, Some(id)) => self.ids.at(id, access),
            (false, None) => match id_of(self.view, node) {
                Some(id) => self.ids.at(id, access),
                // Gone since it was listed: nothing is granted, stricter, never weaker.
                None => return,
            },
        };
        let floor = inside
            .iter()
            .map(|r| r.access)
            .fold(access, Access::min)
            .min(cap);
        if floor > Access::None {
            self.out.grants.push((node.to_path_buf(), floor));
        }
        if floor == access {
            return self.descend(inside);
        }
        self.out.no_new_entries_in.push(node.to_path_buf());
        let entries = match self.view.list(node) {
            Ok(entries) if node.as_os_str().len() < PATH_MAX => entries,
            Ok(_) => return,
            Err(e) => {
                // None of its entries is granted (stricter, never weaker) but the paths rules
                // name beneath it, each reached by its own path: a state dir in a directory its
                // user may not list keeps its writable root and lock directory.
                tracing::debug!(path = %node.display(), "cannot list a directory of the cover: {e}");
                self.descend(inside);
                Vec::new()
            }
        };
        let groups = by_entry(node, inside);
        for (name, stat) in entries {
            if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
                continue;
            }
            let (own, beneath) = match groups.iter().find(|g| g.name == name.as_os_str()) {
                Some(group) => (group.own, group.beneath.as_slice()),
                None => (None, &[][..]),
            };
            let access = own.map_or(access, |rule| rule.access);
            self.node(&node.join(name), access, beneath, Some(Id::of(&stat)));
        }
        for rule in inside.iter().filter(|r| r.access < access) {
            if !self.out.covered.contains(&rule.path) {
                self.out.covered.push(rule.path.clone());
            }
        }
    }
}

impl Cover<'_> {
    /// Covers each rule of `inside` not beneath another one, at its own access.
    fn descend(&mut self, inside: &[&CanonicalRule]) {
        for (child, beneath) in maximal(inside) {
            self.node(&child.path, child.access, &beneath, None);
        }
    }
}

/// The rules beneath one entry of a directory of the cover.
struct Entry<'a> {
    name: &'a OsStr,
    /// The rule on the entry itself.
    own: Option<&'a CanonicalRule>,
    /// The rules strictly beneath the entry, in their order.
    beneath: Vec<&'a CanonicalRule>,
}

/// The rules of `inside` grouped by the entry of `node` they lie in (one parse of each rule's
/// path, instead of comparing every entry with every rule).
fn by_entry<'a>(node: &Path, inside: &[&'a CanonicalRule]) -> Vec<Entry<'a>> {
    let mut groups: Vec<Entry> = Vec::new();
    for &rule in inside {
        let Ok(rest) = rule.path.strip_prefix(node) else {
            continue;
        };
        let mut components = rest.components();
        let Some(Component::Normal(name)) = components.next() else {
            continue;
        };
        let i = match groups.iter().position(|g| g.name == name) {
            Some(i) => i,
            None => {
                groups.push(Entry {
                    name,
                    own: None,
                    beneath: Vec::new(),
                });
                groups.len() - 1
            }
        };
        match components.next() {
            None => {
                groups[i].own.get_or_insert(rule);
            }
            Some(_) => groups[i].beneath.push(rule),
        }
    }
    groups
}

/// The longest path the cover descends into (`PATH_MAX`): deeper places get nothing.
const PATH_MAX: usize = 4096;

/// The rules of `rules` not beneath another one of them, each with the rules beneath it.
fn maximal<'a>(rules: &[&'a CanonicalRule]) -> Vec<(&'a CanonicalRule, Vec<&'a CanonicalRule>)> {
    let mut out: Vec<(&CanonicalRule, Vec<&CanonicalRule>)> = Vec::new();
    for rule in rules {
        match out.last_mut() {
            Some((top, beneath)) if rule.path.starts_with(&top.path) => beneath.push(rule),
            _ => out.push((rule, Vec::new())),
        }
    }
    out
}

/// A file's identity: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Id {
    dev: u64,
    ino: u64,
}

impl Id {
    /// The identity in `stat`.
    pub fn of(stat: &rustix::fs::Stat) -> Id {
        Id {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }
}

/// The identity of the object at `path` (a final symlink not followed), if it is there.
pub(super) fn id_of(view: &View, path: &Path) -> Option<Id> {
    view.lstat(path).ok().map(|stat| Id::of(&stat))
}

/// What the cover checks every place against: the objects of the rules, and the objects of
/// their ancestors (whatever place shows them).
#[derive(Debug, Default)]
pub(super) struct Identities {
    /// The access of each rule's object (the weaker where several rules show it).
    rules: HashMap<Id, Access>,
    /// For the object of each ancestor of a rule: the narrowest access beneath it at any of its
    /// places (its own included), which is the most it may be granted.
    floors: HashMap<Id, Access>,
}

impl Identities {
    /// The identities of `rules` (existing, canonical) and of their ancestors; `skip` as in
    /// `aliases::add_aliases`.
    pub fn of(rules: &[&CanonicalRule], view: &View, skip: &[&Path]) -> Identities {
        let mut ids = Identities::default();
        // Each ancestor of a rule with the narrowest access of the rules strictly beneath it.
        let mut ancestors: Vec<(&Path, Access)> = Vec::new();
        for rule in rules {
            if !skip.contains(&rule.path.as_path()) {
                if let Some(id) = id_of(view, &rule.path) {
                    let access = ids.rules.entry(id).or_insert(rule.access);
                    *access = (*access).min(rule.access);
                }
            }
            let above = rule.path.ancestors().skip(1);
            ancestors.extend(above.map(|ancestor| (ancestor, rule.access)));
        }
        ancestors.sort_by(|a, b| a.0.cmp(b.0));
        // One entry per ancestor, with the narrowest access of all its duplicates.
        ancestors.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.min(later.1);
            }
            same
        });
        let pairs: Vec<(&Path, Access)> =
            rules.iter().map(|r| (r.path.as_path(), r.access)).collect();
        for (ancestor, beneath) in ancestors {
            let Some(id) = id_of(view, ancestor) else {
                continue;
            };
            let floor = effective_access(pairs.iter().copied(), ancestor).min(beneath);
            let entry = ids.floors.entry(id).or_insert(floor);
            *entry = (*entry).min(floor);
        }
        ids
    }

    /// What a place showing the object `id` may get: `access` there by path, or the object's own
    /// access when it is a rule's; and the most it may be granted itself (`Write` when it is no
    /// ancestor of a rule's object).
    pub fn at(&self, id: Id, access: Access) -> (Access, Access) {
        let access = self.rules.get(&id).copied().unwrap_or(access);
        let cap = self.floors.get(&id).copied().unwrap_or(Access::Write);
        (access, cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &Path, access: Access) -> Rule {
        Rule {
            path: path.to_path_buf(),
            access,
            reason: "test".into(),
        }
    }

    fn base() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for d in ["home/project/.git", "home/docs", "other"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        (dir, base)
    }

    #[test]
    fn the_most_specific_rule_wins_and_unruled_paths_get_none() {
        let rules = [
            (Path::new("/"), Access::Read),
            (Path::new("/w"), Access::Write),
            (Path::new("/w/.git"), Access::Read),
        ];
        let at = |p: &str| effective_access(rules.iter().copied(), Path::new(p));
        assert_eq!(at("/etc"), Access::Read);
        assert_eq!(at("/w/src/x"), Access::Write);
        assert_eq!(at("/w/.git/config"), Access::Read);
        assert_eq!(at("/w/.gitignore"), Access::Write);
        assert_eq!(
            effective_access([(Path::new("/w"), Access::Write)], Path::new("/x")),
            Access::None
        );
    }

    #[test]
    fn mounts_narrow_and_reexpose_while_landlock_gets_only_widenings() {
        let (_dir, base) = base();
        let rules = canonical_rules(
            &[
                rule(Path::new("/"), Access::Write),
                rule(&base.join("home"), Access::Read),
                rule(&base.join("home/project"), Access::Write),
                rule(&base.join("home/project/.git"), Access::Read),
                rule(&base.join("missing"), Access::Read),
            ],
            &View::own(),
        )
        .unwrap();
        assert!(has_narrowing(&rules) && !handles_reads(&rules));
        let compiled = compile(&rules, true, &View::own(), &[]).unwrap();
        assert_eq!(compiled.grants, [(PathBuf::from("/"), Access::Write)]);
        let mounts: Vec<(PathBuf, MountKind)> = compiled
            .mounts
            .iter()
            .map(|m| (m.path.clone(), m.kind))
            .collect();
        assert_eq!(
            mounts,
            [
                (base.join("home"), MountKind::ReadOnly),
                (base.join("home/project"), MountKind::Expose),
                (base.join("home/project/.git"), MountKind::ReadOnly),
            ]
        );
    }

    #[test]
    fn a_rule_wider_than_a_hidden_path_is_refused_with_mounts_and_covered_without() {
        let (_dir, base) = base();
        let rules = canonical_rules(
            &[
                rule(Path::new("/"), Access::Read),
                rule(&base.join("home"), Access::None),
                rule(&base.join("home/docs"), Access::Read),
            ],
            &View::own(),
        )
        .unwrap();
        assert!(handles_reads(&rules));
        assert!(matches!(
            compile(&rules, true, &View::own(), &[]),
            Err(Error::Unsupported { .. })
        ));
        let compiled = compile(&rules, false, &View::own(), &[]).unwrap();
        assert!(compiled
            .grants
            .contains(&(base.join("home/docs"), Access::Read)));
        assert!(compiled
            .grants
            .contains(&(base.join("other"), Access::Read)));
        assert!(!compiled
            .grants
            .iter()
            .any(|(p, _)| p == &base.join("home") || p == &base.join("home/project")));
        assert!(compiled.no_new_entries_in.contains(&base));
    }

    #[test]
    fn the_cover_grants_everything_but_the_narrow_rule_and_keeps_wider_rules_inside() {
        let (_dir, base) = base();
        let rules = canonical_rules(
            &[
                rule(Path::new("/"), Access::Write),
                rule(&base.join("home"), Access::Read),
                rule(&base.join("home/project"), Access::Write),
            ],
            &View::own(),
        )
        .unwrap();
        let compiled = compile(&rules, false, &View::own(), &[]).unwrap();
        let granted = |p: &Path| {
            compiled
                .grants
                .iter()
                .any(|(g, a)| g == p && *a == Access::Write)
        };
        assert!(granted(&base.join("home/project")) && granted(&base.join("other")));
        assert!(!compiled.grants.iter().any(|(g, _)| g == &base.join("home")
            || g.starts_with(base.join("home/docs"))
            || base.starts_with(g)));
        let home = rules.iter().find(|r| r.path == base.join("home")).unwrap();
        assert_eq!(compiled.enforced_by(home), EnforcedBy::Cover);
    }
}
