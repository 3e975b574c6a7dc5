//! The run's private `/tmp` and `/var/tmp`, planned in the parent: which of them can be private
//! and how, what of the host stays reachable inside them, and what the command left there.
//!
//! A directory that holds entries on the host becomes an overlay: the host's directory is the
//! lower layer (everything in it stays readable at its path), the upper and work directories are
//! in the run's root (every write lands there, and is removed with the root). An empty one is a
//! bind of a directory in the root (no overlay to pay for). Overlays cannot connect a socket to
//! its listener (the overlay's inode is not the one bound), and they do not show the host's
//! mounts beneath the directory, so on top of the overlay:
//! - the host paths that stay the host's are bound at their real paths, at the access the
//!   policy gives them: every path of the policy beneath the directory (the run's root, the
//!   working directory and its project, `--allow-write`, ...), cleanroom's namespace (read-only
//!   but for the run's root and the user lock directory) and machine lock directory (nested
//!   runs, exclusive locks), `--share-tmp` paths, and the host's mounts (read-only unless a path
//!   of the policy is inside them; one that cannot be copied is covered by an empty read-only
//!   directory, so what lies beneath it on the host is not shown);
//! - the sockets that accept connections there when the run starts (asked of the kernel with
//!   the identity of their files, see `linux::sock_diag`), and those the environment names
//!   (`SSH_AUTH_SOCK`), are bound read-only one by one, resolved without symlinks (another user
//!   may own the directory a socket is in): the named ones always, then those of the user and
//!   root, then a few of each other owner's, so that no user can crowd out another's.
//!
//! For an ordinary user, whose overlay cannot copy up a directory of another owner (the owner
//! has no mapping in the user's namespace), the upper layer gets a directory of its own for each
//! directory at the top of the host's that others may write into (`/tmp/.X11-unix`, a shared
//! scratch directory), so writing there works.
//!
//! Invariants: no new write lands in the host's directory (the overlay writes only its upper
//! layer; the binds are the paths named above, each reported); a directory that cannot be made
//! private is reported with the reason, never silently shared; the backing directories are
//! created fresh for each plan (an overlay's work directory is never reused).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::aliases::MountTable;
use super::compile::CanonicalRule;
use super::linux::child::Identity;
use super::linux::report::Outcome;
use super::linux::sock_diag;
use super::rule::Access;
use crate::error::{Error, Result};

/// The directories a run gets privately.
pub const PRIVATE_TMP_DIRS: [&str; 2] = ["/tmp", "/var/tmp"];

/// At most this many sockets are bound into the private directories (a mount each).
const MAX_SOCKETS: usize = 256;
/// Of those, at most this many of owners other than the user and root, and this many of each.
const MAX_FOREIGN_SOCKETS: usize = 64;
const MAX_SOCKETS_PER_FOREIGN_OWNER: usize = 16;
/// At most this many names of what a command left are reported per directory (and of sockets
/// left out).
const MAX_LEFT_NAMES: usize = 10;

/// A private `/tmp` and `/var/tmp` asked of a policy (see the module docs).
#[derive(Clone, Debug)]
pub struct PrivateTmp {
    /// Where their contents live: `private-tmp`, `private-var-tmp` (and an overlay's
    /// `private-tmp.work`) are created in it. The run's root, so removal takes them with it.
    pub backing: PathBuf,
    /// Cleanroom's own host paths beneath them that stay the host's (its namespace, user lock
    /// directory and machine lock directory), each at the access given (`None`: what the rest
    /// of the policy gives it). Set up once where a sandbox is established for many children.
    pub own: Vec<(PathBuf, Option<Access>)>,
    /// Users' host paths beneath them that stay the host's, besides the paths of the policy
    /// (`--share-tmp`), at the access the policy gives them.
    pub shared: Vec<PathBuf>,
    /// Sockets beneath them that stay connectable, besides those found listening
    /// (`SSH_AUTH_SOCK`).
    pub sockets: Vec<PathBuf>,
}

/// Whose directory (or namespace) the command sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Isolation {
    /// The host's (not asked for).
    Host,
    /// Its own, gone with the run.
    Private,
    /// The host's, although a private one was asked for.
    HostFallback {
        /// Why no private one could be made.
        reason: String,
    },
}

impl Isolation {
    /// Why the host's is seen although a private one was asked for, if it is.
    pub fn fallback_reason(&self) -> Option<&str> {
        match self {
            Isolation::HostFallback { reason } => Some(reason),
            _ => None,
        }
    }
}

/// How a private directory is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TmpMechanism {
    /// An overlay: the host's directory below, writes in the run's root.
    Overlay,
    /// A bind of an empty directory of the run's root (the host's was empty).
    Bind,
}

/// One private directory.
#[derive(Clone, Debug, Serialize)]
pub struct PrivateDir {
    /// The directory the command sees (`/tmp`).
    pub path: PathBuf,
    /// Where what the command writes there lands (the overlay's upper layer, or the bound
    /// directory), inside the run's root.
    pub backing: PathBuf,
    /// How it is made.
    pub mechanism: TmpMechanism,
    /// Directories made in the backing directory before the command started (see
    /// [`DirPlan::writable_foreign`]): not the command's while they stay empty.
    #[serde(skip)]
    pub premade: Vec<std::ffi::OsString>,
}

/// The private `/tmp` and `/var/tmp` as applied.
#[derive(Clone, Debug, Serialize)]
pub struct TmpStatus {
    /// Whether they are private.
    #[serde(flatten)]
    pub isolation: Isolation,
    /// The private directories.
    pub dirs: Vec<PrivateDir>,
    /// Host paths that stay the host's inside them (at the access the policy gives them).
    pub shared: Vec<PathBuf>,
    /// Host sockets bound into them read-only (connectable).
    pub sockets: Vec<PathBuf>,
    /// Sockets accepting connections beneath them that were not bound (too many; gone or
    /// replaced when the command started): the first few.
    pub sockets_left_out: Vec<PathBuf>,
    /// Host mounts beneath them that could not be copied: covered with an empty read-only
    /// directory (or `/dev/null`), so what lies beneath them on the host is not shown.
    pub mounts_covered: Vec<PathBuf>,
    /// Host mounts beneath them whose mount points the user cannot reach: left as the private
    /// directory shows them (the command cannot reach them either).
    pub mounts_unreachable: Vec<PathBuf>,
    /// What the run is warned about: a directory that stays the host's because the policy
    /// names it (a working directory of `/tmp`), sockets the environment names left out.
    #[serde(skip)]
    pub notes: Vec<String>,
    /// The sockets the environment names (`SSH_AUTH_SOCK`): one left out is warned about.
    #[serde(skip)]
    named_sockets: Vec<PathBuf>,
}

impl TmpStatus {
    /// The status of a policy that asks for nothing, or whose directories stay the host's.
    pub fn with(isolation: Isolation) -> TmpStatus {
        TmpStatus {
            isolation,
            dirs: Vec::new(),
            shared: Vec::new(),
            sockets: Vec::new(),
            sockets_left_out: Vec::new(),
            mounts_covered: Vec::new(),
            mounts_unreachable: Vec::new(),
            notes: Vec::new(),
            named_sockets: Vec::new(),
        }
    }

    /// Takes in the sockets planned: those bound, those left out (a named one, or one of the
    /// user's or root's, left out is warned about).
    pub(super) fn take_sockets(&mut self, sockets: Sockets, named: &[PathBuf]) {
        self.sockets = sockets.bound.into_iter().map(|(path, _)| path).collect();
        self.named_sockets = named.to_vec();
        if let Some(reason) = sockets.listing_failed {
            self.notes.push(format!(
                "the sockets listening under the private directories are not bound into them                  (only those the environment names): {reason}"
            ));
        }
        if !sockets.left_out_mine.is_empty() {
            self.notes.push(format!(
                "{} sockets of this user or root listening under the private directories are                  not bound into them ({}); name the ones the command needs with --share-tmp",
                sockets.left_out_mine.len(),
                shown(&sockets.left_out_mine)
            ));
        }
        let mut left_out = sockets.left_out_mine;
        left_out.extend(sockets.left_out_foreign);
        left_out.sort();
        left_out.truncate(MAX_LEFT_NAMES);
        self.sockets_left_out = left_out;
    }

    /// Records how a best-effort step on `path` turned out in the child.
    pub(super) fn record(&mut self, outcome: Outcome, path: PathBuf) {
        match outcome {
            Outcome::SocketNotBound => {
                self.sockets.retain(|s| *s != path);
                if self.named_sockets.contains(&path) {
                    self.notes.push(format!(
                        "the socket {} was gone or replaced when the command started: it is not                          bound into the private /tmp",
                        path.display()
                    ));
                }
                if self.sockets_left_out.len() < MAX_LEFT_NAMES {
                    self.sockets_left_out.push(path);
                }
            }
            Outcome::MountCovered => self.mounts_covered.push(path),
            Outcome::MountUnreachable => self.mounts_unreachable.push(path),
        }
    }
}

/// The first few of `paths`, comma-separated.
fn shown(paths: &[PathBuf]) -> String {
    let mut names: Vec<String> = paths
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    if paths.len() > names.len() {
        names.push("...".into());
    }
    names.join(", ")
}

/// What a command left in one private directory (removed with the root).
#[derive(Clone, Debug, Serialize)]
pub struct TmpLeft {
    /// The directory the command saw (`/tmp`).
    pub path: PathBuf,
    /// Entries directly in it that the command made (not counting host entries it removed).
    pub entries: usize,
    /// The first few of their names, sorted.
    pub names: Vec<String>,
}

/// What the parent prepares for one private directory.
#[derive(Debug)]
pub(super) struct DirPlan {
    /// The directory (`/tmp`).
    pub path: PathBuf,
    /// The overlay's upper layer or the bound directory.
    pub backing: PathBuf,
    /// The overlay's work directory (`None`: a bind).
    pub work: Option<PathBuf>,
    /// Cleanroom's own existing host paths beneath it that stay the host's, with their access.
    pub own: Vec<(PathBuf, Option<Access>)>,
    /// Users' existing host paths beneath it that stay the host's (`--share-tmp`).
    pub shared: Vec<PathBuf>,
    /// Directories at the top of the host's that the user may write but not own: made in the
    /// upper layer (an ordinary user's overlay cannot copy them up).
    pub writable_foreign: Vec<(std::ffi::OsString, u32)>,
    /// The host's mount points beneath it (an overlay does not show them).
    pub submounts: Vec<PathBuf>,
}

/// The private directories `request` can have, given the policy's `rules` and the compile's
/// mount table `mounts`. `Err` is why none can. A directory `request.shared` names stays the
/// host's, and so does one a rule names exactly (a working directory of `/tmp`), reported in
/// `warnings`.
pub(super) fn plan(
    request: &PrivateTmp,
    rules: &[CanonicalRule],
    mounts: std::result::Result<&MountTable, &std::io::Error>,
    warnings: &mut Vec<String>,
) -> std::result::Result<Vec<DirPlan>, String> {
    let mut plans = Vec::new();
    let root = rustix::process::geteuid().is_root();
    for dir in candidates() {
        if request.shared.contains(&dir) || request.own.iter().any(|(p, _)| *p == dir) {
            continue;
        }
        if let Some(rule) = rules.iter().find(|r| r.path == dir && r.dir.is_some()) {
            warnings.push(format!(
                "{} stays the host's for this run: it is {}; what the command writes there is \
                 not removed",
                dir.display(),
                rule.reason
            ));
            continue;
        }
        let occupied = std::fs::read_dir(&dir)
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .next()
            .is_some();
        let name = format!("private-{}", dir_label(&dir));
        let backing = request.backing.join(&name);
        let work = occupied.then(|| request.backing.join(format!("{name}.work")));
        if work.is_some() {
            overlay_supported(&request.backing)?;
        }
        let submounts = match occupied {
            true => mounts
                .map_err(|e| MountTable::unreadable(e).to_string())?
                .top_submounts_of(&dir),
            false => Vec::new(),
        };
        if let (false, Some(mount)) = (root, submounts.first()) {
            return Err(locked_submount_reason(&dir, mount));
        }
        let beneath = |p: &PathBuf| p.starts_with(&dir) && *p != dir;
        plans.push(DirPlan {
            own: request
                .own
                .iter()
                .filter(|(p, _)| beneath(p))
                .cloned()
                .collect(),
            shared: request
                .shared
                .iter()
                .filter(|p| beneath(p))
                .cloned()
                .collect(),
            writable_foreign: match occupied && !root {
                true => writable_foreign_dirs(&dir),
                false => Vec::new(),
            },
            submounts,
            path: dir,
            backing,
            work,
        });
    }
    // A directory holding the backing one is mounted last: its overlay would otherwise be in
    // the way of the others' upper and work paths.
    plans.sort_by_key(|p| request.backing.starts_with(&p.path));
    Ok(plans)
}

/// Why an ordinary user's run cannot have a private `dir` while the host's `mount` lies beneath
/// it: its user namespace inherits the host's mounts locked (so what lies beneath them stays
/// hidden), and overlayfs refuses a lower layer with a locked mount beneath it ("failed to clone
/// lowerpath").
fn locked_submount_reason(dir: &Path, mount: &Path) -> String {
    format!(
        "the host has a mount at {} beneath {}, and the kernel refuses an ordinary user's \
         overlay of a directory with a host mount beneath it (run as root, or unmount it)",
        mount.display(),
        dir.display()
    )
}

/// `/tmp` and `/var/tmp` as canonical directories (once each: `/var/tmp` may be a link to
/// `/tmp`); missing ones are skipped.
fn candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in PRIVATE_TMP_DIRS {
        match std::fs::canonicalize(dir) {
            Ok(dir) if dir.is_dir() && !dirs.contains(&dir) => dirs.push(dir),
            _ => {}
        }
    }
    dirs
}

/// `tmp` for `/tmp`, `var-tmp` for `/var/tmp`.
fn dir_label(dir: &Path) -> String {
    let text = dir.to_string_lossy();
    text.trim_start_matches('/').replace('/', "-")
}

/// Whether an overlay with its upper layer under `backing` can be mounted here: overlayfs in a
/// user namespace (ordinary users), `volatile` and `userxattr` need Linux 5.11; the upper
/// layer's filesystem must support it (an ordinary user's on tmpfs needs user extended
/// attributes, Linux 6.6).
fn overlay_supported(backing: &Path) -> std::result::Result<(), String> {
    /// `f_type` of filesystems known to hold an overlay's upper layer.
    const UPPER_CAPABLE: [(i64, &str); 5] = [
        (0xEF53, "ext4"),
        (0x5846_5342, "xfs"),
        (0x9123_683E, "btrfs"),
        (0xF2F5_2010, "f2fs"),
        (0x0102_1994, "tmpfs"),
    ];
    let kernel = kernel_version();
    if kernel < (5, 11) {
        return Err(format!(
            "Linux {}.{} has no overlayfs with volatile upper layers in user namespaces (5.11)",
            kernel.0, kernel.1
        ));
    }
    let stat = rustix::fs::statfs(backing).map_err(|e| {
        format!(
            "cannot inspect the filesystem of {}: {e}",
            backing.display()
        )
    })?;
    let kind = stat.f_type as i64;
    match UPPER_CAPABLE.iter().find(|(magic, _)| *magic == kind) {
        Some((_, "tmpfs")) if kernel < (6, 6) && !rustix::process::geteuid().is_root() => Err(
            "the state dir is on tmpfs, which holds an ordinary user's overlay only from Linux \
             6.6"
            .into(),
        ),
        Some(_) => Ok(()),
        None => Err(format!(
            "the state dir {} is on a filesystem (type {kind:#x}) not known to hold an \
             overlay's upper layer",
            backing.display()
        )),
    }
}

/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Creates the backing directories of `plan`: the upper layer (or bound directory) with the
/// mode of `/tmp` (1777: the overlay's root takes it), the work directory private. They must not
/// exist yet.
pub(super) fn create_backing(plan: &DirPlan) -> Result<()> {
    std::fs::create_dir(&plan.backing)
        .map_err(|e| Error::io("create the private directory", &plan.backing, e))?;
    std::fs::set_permissions(&plan.backing, std::fs::Permissions::from_mode(0o1777))
        .map_err(|e| Error::io("set the mode of", &plan.backing, e))?;
    if let Some(work) = &plan.work {
        std::fs::create_dir(work)
            .map_err(|e| Error::io("create the overlay work directory", work, e))?;
    }
    for (name, mode) in &plan.writable_foreign {
        let upper = plan.backing.join(name);
        std::fs::create_dir(&upper)
            .map_err(|e| Error::io("create the private directory", &upper, e))?;
        std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| Error::io("set the mode of", &upper, e))?;
    }
    Ok(())
}

/// The directories directly in `dir` that the user may write into but does not own (their
/// names and modes): an ordinary user's overlay cannot copy them up (their owners have no
/// mapping in the user's namespace), so their upper directories are made first.
fn writable_foreign_dirs(dir: &Path) -> Vec<(std::ffi::OsString, u32)> {
    let euid = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            let writable = rustix::fs::accessat(
                rustix::fs::CWD,
                entry.path(),
                rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
                rustix::fs::AtFlags::EACCESS,
            )
            .is_ok();
            (meta.is_dir() && meta.uid() != euid && writable)
                .then(|| (entry.file_name(), meta.mode() & 0o7777))
        })
        .collect()
}

/// The options of the overlay of `plan` (it has a work directory): the host's directory below,
/// `volatile` (no sync of the whole upper filesystem when the run's namespace goes), and
/// `userxattr` for an ordinary user (whose overlay lives in a user namespace).
pub(super) fn overlay_options(plan: &DirPlan, work: &Path) -> Vec<u8> {
    let mut data = Vec::new();
    for (key, path) in [
        ("lowerdir", &plan.path),
        ("upperdir", &plan.backing),
        ("workdir", &work.to_path_buf()),
    ] {
        if !data.is_empty() {
            data.push(b',');
        }
        data.extend_from_slice(key.as_bytes());
        data.push(b'=');
        for &byte in path.as_os_str().as_bytes() {
            if matches!(byte, b'\\' | b',' | b':') {
                data.push(b'\\');
            }
            data.push(byte);
        }
    }
    data.extend_from_slice(b",volatile");
    if !rustix::process::geteuid().is_root() {
        data.extend_from_slice(b",userxattr");
    }
    data
}

/// The sockets planned for the private directories.
#[derive(Debug, Default)]
pub(super) struct Sockets {
    /// Bound, each with the identity of its file.
    pub bound: Vec<(PathBuf, Identity)>,
    /// Left out: of the user or root (too many), of other owners (more than their share).
    pub left_out_mine: Vec<PathBuf>,
    pub left_out_foreign: Vec<PathBuf>,
    /// Why the listening sockets could not be listed, if they could not.
    pub listing_failed: Option<String>,
}

/// The sockets to bind into the private directories `dirs`: those the environment names
/// (`named`), then those accepting connections at a path beneath them, each at a canonical path
/// (no symlink on the way) whose file is that socket now, and not inside a host path bound
/// anyway (`exposed`). The named ones always; then those of the user and root, then at most
/// [`MAX_SOCKETS_PER_FOREIGN_OWNER`] of each other owner (and [`MAX_FOREIGN_SOCKETS`] in all),
/// up to [`MAX_SOCKETS`].
pub(super) fn sockets(dirs: &[PathBuf], named: &[PathBuf], exposed: &[PathBuf]) -> Sockets {
    let wanted = |p: &Path| {
        dirs.iter().any(|d| p.starts_with(d) && p != d) && !exposed.iter().any(|e| p.starts_with(e))
    };
    let mut out = Sockets::default();
    for path in named.iter().filter(|p| wanted(p)) {
        if let Some((identity, _)) = socket_file(path) {
            if !out.bound.iter().any(|(p, _)| p == path) {
                out.bound.push((path.clone(), identity));
            }
        }
    }
    let listening = match sock_diag::accepting() {
        Ok(listening) => listening,
        Err(e) => {
            out.listing_failed = Some(format!("sock_diag: {e}"));
            Vec::new()
        }
    };
    let euid = rustix::process::geteuid().as_raw();
    let mut mine = Vec::new();
    let mut foreign: Vec<(u32, PathBuf, Identity)> = Vec::new();
    for socket in listening {
        if !wanted(&socket.path) || out.bound.iter().any(|(p, _)| *p == socket.path) {
            continue;
        }
        match socket_file(&socket.path) {
            Some((identity, owner)) if identity == socket.identity => match owner {
                0 => mine.push((socket.path, identity)),
                owner if owner == euid => mine.push((socket.path, identity)),
                owner => foreign.push((owner, socket.path, identity)),
            },
            _ => {}
        }
    }
    mine.sort();
    mine.dedup();
    for (path, identity) in mine {
        match out.bound.len() < MAX_SOCKETS {
            true => out.bound.push((path, identity)),
            false => out.left_out_mine.push(path),
        }
    }
    foreign.sort();
    foreign.dedup();
    let mut taken = 0;
    let mut of_owner = (u32::MAX, 0);
    for (owner, path, identity) in foreign {
        of_owner = match of_owner.0 == owner {
            true => (owner, of_owner.1 + 1),
            false => (owner, 1),
        };
        let room = out.bound.len() < MAX_SOCKETS && taken < MAX_FOREIGN_SOCKETS;
        if room && of_owner.1 <= MAX_SOCKETS_PER_FOREIGN_OWNER {
            out.bound.push((path, identity));
            taken += 1;
        } else {
            out.left_out_foreign.push(path);
        }
    }
    out.bound.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The identity and owner of the socket file at `path`, reached without any symlink (its parent
/// canonical).
fn socket_file(path: &Path) -> Option<(Identity, u32)> {
    let canonical_parent = path
        .parent()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .is_some_and(|p| Some(p.as_path()) == path.parent());
    let meta = std::fs::symlink_metadata(path).ok()?;
    (canonical_parent && meta.file_type().is_socket()).then(|| {
        let identity = Identity {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        (identity, meta.uid())
    })
}

/// Tries what a run does for its private `/tmp`, in a forked child: its namespaces and an overlay
/// of the host's `/tmp` whose upper layer is in `scratch` (a fresh directory where the runs'
/// roots go: a probe's own root, which gc reclaims if the prober dies). `Err` says why a run's
/// `/tmp` would stay the host's.
pub(crate) fn probe(scratch: &Path) -> std::result::Result<(), String> {
    overlay_supported(scratch)?;
    if !rustix::process::geteuid().is_root() {
        let mounts = MountTable::read().map_err(|e| MountTable::unreadable(&e).to_string())?;
        for dir in candidates() {
            if let Some(mount) = mounts.top_submounts_of(&dir).first() {
                return Err(locked_submount_reason(&dir, mount));
            }
        }
    }
    let plan = DirPlan {
        path: PathBuf::from("/tmp"),
        backing: scratch.join("upper"),
        work: Some(scratch.join("work")),
        own: Vec::new(),
        shared: Vec::new(),
        writable_foreign: Vec::new(),
        submounts: Vec::new(),
    };
    create_backing(&plan).map_err(|e| e.to_string())?;
    let data = std::ffi::CString::new(overlay_options(&plan, &scratch.join("work")))
        .map_err(|_| format!("{} contains a NUL byte", scratch.display()))?;
    super::linux::probe_in_child(super::linux::Probe::Overlay {
        target: c"/tmp",
        data: &data,
    })
    .map_err(|e| format!("the kernel refused an overlay of /tmp: {e}"))
}

/// What the command left in each private directory of `status`: the entries of its backing
/// directory, not counting an overlay's whiteouts (host entries it removed in its own view).
pub fn left_in(status: &TmpStatus) -> Vec<TmpLeft> {
    status
        .dirs
        .iter()
        .map(|dir| {
            let mut names: Vec<String> = std::fs::read_dir(&dir.backing)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|entry| {
                    dir.mechanism == TmpMechanism::Bind
                        || !entry.metadata().is_ok_and(|m| is_whiteout(&m))
                })
                .filter(|entry| !is_untouched_premade(dir, entry))
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            let entries = names.len();
            names.truncate(MAX_LEFT_NAMES);
            TmpLeft {
                path: dir.path.clone(),
                entries,
                names,
            }
        })
        .collect()
}

/// Whether `entry` of `dir`'s backing directory is one made before the command started, still
/// an empty directory.
fn is_untouched_premade(dir: &PrivateDir, entry: &std::fs::DirEntry) -> bool {
    dir.premade.contains(&entry.file_name())
        && entry.file_type().is_ok_and(|t| t.is_dir())
        && std::fs::read_dir(entry.path()).is_ok_and(|mut d| d.next().is_none())
}

impl std::fmt::Display for TmpLeft {
    /// "the command wrote 3 entries under /tmp (a, b, c)", the names as the command chose them
    /// but for their control characters, escaped.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the command wrote {} {} under {} ({}{})",
            self.entries,
            if self.entries == 1 {
                "entry"
            } else {
                "entries"
            },
            self.path.display(),
            self.names
                .iter()
                .map(|name| crate::text::escape_controls(name))
                .collect::<Vec<_>>()
                .join(", "),
            if self.entries > self.names.len() {
                ", ..."
            } else {
                ""
            }
        )
    }
}

/// An overlay whiteout: a character device 0:0.
fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_options_escape_separators_and_name_both_layers() {
        let plan = DirPlan {
            path: PathBuf::from("/tmp"),
            backing: PathBuf::from("/s,t:a\\te/private-tmp"),
            work: None,
            own: Vec::new(),
            shared: Vec::new(),
            writable_foreign: Vec::new(),
            submounts: Vec::new(),
        };
        let data = overlay_options(&plan, Path::new("/w"));
        let text = String::from_utf8(data).unwrap();
        assert!(
            text.starts_with(
                "lowerdir=/tmp,upperdir=/s\\,t\\:a\\\\te/private-tmp,workdir=/w,volatile"
            ),
            "{text}"
        );
    }

    #[test]
    fn directory_labels_name_the_backing_directories() {
        assert_eq!(dir_label(Path::new("/tmp")), "tmp");
        assert_eq!(dir_label(Path::new("/var/tmp")), "var-tmp");
    }
}
