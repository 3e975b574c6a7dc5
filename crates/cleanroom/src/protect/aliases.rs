//! Other places that show a policy's objects: a bind of `/` at `/host`, of `/home` at `/data/h`,
//! a workspace bound inside itself. Landlock binds its rules to inodes and checks them on the
//! way from a file up to the root, jumping from a mount's root to where it is mounted; a rule
//! is therefore only as narrow as the widest grant on that way, whatever path the child spells.
//! The cover grants wide rules entry by entry, by path, so it must know every place where an
//! object it narrows shows, and every place whose object it must not grant wholesale.
//!
//! Owns: reading the caller's mount table ([`MountTable`]); adding, to a policy's rules, a rule at
//! every other place that shows a rule's object (at that object's access) and at every mount
//! point whose mount shows a part of a rule's object (at the access the rules give that part)
//! ([`add_aliases`]). The identities the cover checks each place against live with the cover
//! (`compile::Identities`).
//!
//! Invariant: a place is added only when the kernel shows the same object there (device and
//! inode compared), so a name that merely looks alike adds nothing; a mount the caller cannot
//! read or verify adds nothing. Mounts made after this runs (by the host, later) are not seen:
//! the compiled rules hold for the mount table as it was read.

use std::path::{Path, PathBuf};

use super::compile::{self, id_of, CanonicalRule};
use super::rule::Access;
use super::view::View;

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug)]
struct Mount {
    id: u64,
    /// `major:minor` of its filesystem (the superblock: every mount of it shares this).
    device: String,
    /// The directory of its filesystem it shows.
    root: PathBuf,
    /// Where it is mounted.
    point: PathBuf,
}

/// The caller's mount table.
#[derive(Debug)]
pub(super) struct MountTable {
    mounts: Vec<Mount>,
}

impl MountTable {
    /// The caller's mount table as it is now, read afresh on every call. A table is never
    /// carried from one compile to the next: the kernel signals mounts, unmounts and moves on
    /// `/proc/self/mountinfo` (`POLLPRI`), but not the rename of a directory above a mount point,
    /// which changes where that mount shows; a table kept across such a rename would grant by
    /// paths that no longer show what they showed.
    pub fn read() -> std::io::Result<MountTable> {
        let text = std::fs::read_to_string("/proc/self/mountinfo")?;
        Ok(MountTable::parse(&text))
    }

    /// Where its mounts are mounted, in its order.
    pub fn points(&self) -> impl Iterator<Item = &Path> {
        self.mounts.iter().map(|m| m.point.as_path())
    }

    fn parse(text: &str) -> MountTable {
        let mounts = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let id = fields.next()?.parse().ok()?;
                let _parent = fields.next()?;
                let device = fields.next()?.to_string();
                let root = PathBuf::from(crate::contain::unescape_mountinfo(fields.next()?));
                let point = PathBuf::from(crate::contain::unescape_mountinfo(fields.next()?));
                Some(Mount {
                    id,
                    device,
                    root,
                    point,
                })
            })
            .collect();
        MountTable { mounts }
    }

    /// The mount `path` (canonical) lies in: the one the kernel names (`statx` mount id, in the
    /// caller's own namespace), else the one mounted last at the longest prefix of `path`.
    fn mount_of(&self, view: &View, path: &Path) -> Option<&Mount> {
        if view.is_own() {
            let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
            let mask = rustix::fs::StatxFlags::MNT_ID;
            if let Ok(stx) = rustix::fs::statx(rustix::fs::CWD, path, flags, mask) {
                if stx.stx_mask & mask.bits() != 0 {
                    return self.mounts.iter().find(|m| m.id == stx.stx_mnt_id);
                }
            }
        }
        self.mounts
            .iter()
            .filter(|m| path.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
    }

    /// Whether `mount` is what its mount point shows (not covered by a later mount). Another
    /// namespace's mounts have other ids: there, the mount point is taken as it is (a rule on a
    /// place that shows something else only narrows more).
    fn shows(&self, view: &View, mount: &Mount) -> bool {
        !view.is_own()
            || self
                .mount_of(view, &mount.point)
                .is_some_and(|m| m.id == mount.id)
    }

    /// Where `path` lies in its filesystem: its mount and the path inside the filesystem.
    fn locate(&self, view: &View, path: &Path) -> Option<(&Mount, PathBuf)> {
        let mount = self.mount_of(view, path)?;
        let rest = path.strip_prefix(&mount.point).ok()?;
        Some((mount, join_inside(&mount.root, rest)))
    }
}

/// `base` joined with `rest` (an empty `rest` is `base` itself).
fn join_inside(base: &Path, rest: &Path) -> PathBuf {
    match rest.as_os_str().is_empty() {
        true => base.to_path_buf(),
        false => base.join(rest),
    }
}

/// Adds to `rules` (canonical, sorted) a rule at every other place that shows a rule's object
/// (at the access of that object's rules), and at every mount point whose mount shows a part of
/// a rule's object (at the access the rules give that part where it lies), each verified (see
/// the module docs); `skip` are rule paths that name no host object (fresh private mounts).
pub(super) fn add_aliases(rules: &mut Vec<CanonicalRule>, view: &View, skip: &[&Path]) {
    let table = match MountTable::read() {
        Ok(table) => table,
        Err(e) => {
            // Nothing is added.
            tracing::debug!("cannot read /proc/self/mountinfo: {e}");
            return;
        }
    };
    let located: Vec<(CanonicalRule, &Mount, PathBuf)> = rules
        .iter()
        .filter(|r| r.dir.is_some() && !skip.contains(&r.path.as_path()))
        .filter_map(|r| {
            let (mount, inside) = table.locate(view, &r.path)?;
            Some((r.clone(), mount, inside))
        })
        .collect();
    let mut added: Vec<CanonicalRule> = Vec::new();
    let mut alias = |path: PathBuf, access: Access, dir: bool, of: &Path| {
        added.push(CanonicalRule {
            path,
            access,
            reason: format!("{} shows here too (a mount)", of.display()),
            dir: Some(dir),
            alias_of: Some(of.to_path_buf()),
        })
    };
    for (rule, mount, inside) in &located {
        let same_fs = table.mounts.iter().filter(|m| m.device == mount.device);
        let id = id_of(view, &rule.path);
        for other in same_fs {
            if let Ok(rest) = inside.strip_prefix(&other.root) {
                // `other` shows the rule's object.
                let place = join_inside(&other.point, rest);
                if place != rule.path && id.is_some() && id_of(view, &place) == id {
                    alias(place, rule.access, rule.dir == Some(true), &rule.path);
                }
            } else if other.root.starts_with(inside) && table.shows(view, other) {
                // `other` shows a part of the rule's object: its mount point gets what the rules
                // give that part (the most specific rule above it in the filesystem).
                let access = lifted_access(&located, &mount.device, &other.root);
                let dir = view.is_dir(&other.point);
                alias(other.point.clone(), access, dir, &rule.path);
            }
        }
    }
    for rule in added {
        tracing::debug!(
            "protect: {:?} {}: {}",
            rule.access,
            rule.path.display(),
            rule.reason
        );
        compile::insert_rule(rules, rule);
    }
}

/// The access the rules in `located` give the object at `inside` of the filesystem `device`:
/// that of the rule whose object is its nearest ancestor (or itself); the weaker when several
/// rules name that object.
fn lifted_access(
    located: &[(CanonicalRule, &Mount, PathBuf)],
    device: &str,
    inside: &Path,
) -> Access {
    let mut best: Option<(usize, Access)> = None;
    for (rule, mount, at) in located {
        if mount.device != device || !inside.starts_with(at) {
            continue;
        }
        let depth = at.components().count();
        best = match best {
            Some((d, a)) if d > depth => Some((d, a)),
            Some((d, a)) if d == depth => Some((d, a.min(rule.access))),
            _ => Some((depth, rule.access)),
        };
    }
    best.map_or(Access::None, |(_, access)| access)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_table_is_read_with_escapes_and_the_deepest_mount_wins() {
        let table = MountTable::parse(
            "22 1 8:1 / / rw - ext4 /dev/vda rw\n\
             30 22 8:1 /home /data/h rw - ext4 /dev/vda rw\n\
             31 22 0:40 / /data/with\\040space rw - tmpfs tmpfs rw\n",
        );
        let view = View::own();
        let (mount, inside) = table.locate(&view, Path::new("/zz-none/x")).unwrap();
        assert_eq!((mount.id, inside), (22, PathBuf::from("/zz-none/x")));
        let inside = |p: &str| {
            let m = table
                .mounts
                .iter()
                .filter(|m| Path::new(p).starts_with(&m.point))
                .max_by_key(|m| m.point.components().count())
                .unwrap();
            join_inside(&m.root, Path::new(p).strip_prefix(&m.point).unwrap())
        };
        assert_eq!(inside("/data/h/u/x"), Path::new("/home/u/x"));
        assert_eq!(inside("/data/with space"), Path::new("/"));
    }
}
