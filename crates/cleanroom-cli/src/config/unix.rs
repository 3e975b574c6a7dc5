//! The trust rule for a discovered config file (see `docs/config.md`): it is used only when
//! nobody but the user and root could have written it or anything on the way to it.
//!
//! Every component of its path from `/`, and of what each symbolic link on the way names, is
//! opened without following it (`O_PATH|O_NOFOLLOW`; on macOS, which has no `O_PATH`, see
//! [`lookup`]) and judged by what that descriptor is:
//! owned by the effective user or root; not writable by group or others unless it is a symbolic
//! link (whose mode means nothing) or a sticky directory (whose entries are then judged by their
//! own owner); not hard-linked into a directory others may write (the owner and mode
//! judgement is [`cleanroom::trust`]'s, which project roots share). Links are followed by this
//! walk, never by the kernel; the file is opened `O_NOFOLLOW` relative to its judged directory
//! and must be the very inode judged, so what is read is what was checked.
//!
//! In a user namespace that leaves uids unmapped (a nested run: an unprivileged run maps only
//! the user), every owner outside the map shows as the overflow uid and cannot be judged. Such
//! a file is used only when the run outside judged that very file (same path, device and
//! inode) and says so in [`TRUSTED_CONFIG_VAR`]; otherwise the run is refused with how to name
//! the file.
//!
//! Invariant: a file is opened for reading only once every component was judged trusted (or
//! unseen, with the outer run's word for it); anything another user could have made or changed
//! ends the walk as [`Distrust::Untrusted`], and the file is never read.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use anyhow::anyhow;
use cleanroom::trust::{self, Owner, Owners};
use rustix::fs::{Dev, FileType, Mode, OFlags, Stat};

use super::{Distrust, Trusted, TRUSTED_CONFIG_VAR};

/// Symbolic links followed on the way to a config file before it is refused (as the kernel's
/// `ELOOP` limit).
const MAX_LINKS: usize = 40;

/// A file's device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    dev: Dev,
    ino: u64,
}

impl Identity {
    fn of(stat: &Stat) -> Identity {
        Identity {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }

    /// The value of [`TRUSTED_CONFIG_VAR`] saying that the file at `path` is this one.
    pub fn var_value(self, path: &Path) -> OsString {
        let mut value = format!("{}:{}:", self.dev, self.ino).into_bytes();
        value.extend_from_slice(path.as_os_str().as_bytes());
        OsString::from_vec(value)
    }

    /// The identity [`TRUSTED_CONFIG_VAR`] gives the file at `path`, if it names that path.
    fn passed_for(path: &Path) -> Option<Identity> {
        let value = std::env::var_os(TRUSTED_CONFIG_VAR)?;
        let mut parts = value.as_bytes().splitn(3, |&b| b == b':');
        fn number<T: std::str::FromStr>(part: Option<&[u8]>) -> Option<T> {
            std::str::from_utf8(part?).ok()?.parse().ok()
        }
        let (dev, ino) = (number(parts.next())?, number(parts.next())?);
        (parts.next()? == path.as_os_str().as_bytes()).then_some(Identity { dev, ino })
    }
}

/// Opens the discovered config `path` if the trust rule holds (see the module documentation).
pub fn open(path: &Path) -> Result<Trusted, Distrust> {
    let mut walk = Walk::start(path)?;
    let (file, stat) = walk.walk_to_the_file()?;
    let identity = Identity::of(&stat);
    match &walk.unseen {
        Some((what, uid)) if Identity::passed_for(path) != Some(identity) => {
            Err(Distrust::Refused(anyhow!(
                "cannot judge config {}: {} is owned by uid {uid}, which stands for any owner this \
                 user namespace does not map (a run nested in another), so whether another user \
                 could have written it cannot be told, and no run outside judged this file; name \
                 it with --config {} to use it, or --no-config",
                path.display(),
                walk.shown(what),
                path.display(),
            )))
        }
        _ => Ok(Trusted { file, identity }),
    }
}

/// The walk from `/` to a config file.
struct Walk<'a> {
    /// The config file's path, for messages.
    config: &'a Path,
    owners: Owners,
    /// The directories walked so far, `/` first; the last is where the next name is looked up.
    dirs: Vec<Dir>,
    /// The names still to walk; a symbolic link puts the names of its target in front.
    names: VecDeque<OsString>,
    links: usize,
    /// The first component whose owner this user namespace hides, and the uid it shows.
    unseen: Option<(PathBuf, u32)>,
}

/// A directory judged on the way.
struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    stat: Stat,
}

/// What one name on the way turned out to be, judged.
enum Step {
    Dir(Dir),
    Link(PathBuf),
    File(File, Stat),
}

impl<'a> Walk<'a> {
    fn start(config: &'a Path) -> Result<Walk<'a>, Distrust> {
        let root = Path::new("/");
        let mut walk = Walk {
            config,
            owners: Owners::default(),
            dirs: Vec::new(),
            names: components(config),
            links: 0,
            unseen: None,
        };
        let fd = rustix::fs::open(root, LOOK_UP | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| walk.cannot(root, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| walk.cannot(root, e))?;
        walk.judge(root, &stat, None)?;
        walk.dirs.push(Dir {
            fd,
            path: root.to_path_buf(),
            stat,
        });
        Ok(walk)
    }

    /// Walks every name to the file, which it returns open with what was judged of it.
    fn walk_to_the_file(&mut self) -> Result<(File, Stat), Distrust> {
        while let Some(name) = self.names.pop_front() {
            if name.as_bytes() == b".." {
                if self.dirs.len() > 1 {
                    self.dirs.pop();
                }
                continue;
            }
            match self.step(&name)? {
                Step::Dir(dir) => self.dirs.push(dir),
                Step::Link(target) => {
                    if target.is_absolute() {
                        self.dirs.truncate(1);
                    }
                    for component in components(&target).into_iter().rev() {
                        self.names.push_front(component);
                    }
                }
                Step::File(file, stat) => return Ok((file, stat)),
            }
        }
        Err(self.untrusted(self.config, "is a directory"))
    }

    /// Looks `name` up in the last directory walked, without following it, and judges it.
    fn step(&mut self, name: &OsStr) -> Result<Step, Distrust> {
        let dir = self.dirs.last().expect("/ is never popped");
        let here = dir.path.join(name);
        let (fd, stat) = lookup(&dir.fd, name).map_err(|e| self.cannot(&here, e))?;
        let parent = dir.stat;
        self.judge(&here, &stat, Some(&parent))?;
        let last = self.names.is_empty();
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Ok(Step::Dir(Dir {
                fd: fd.expect("a directory looked up is open"),
                path: here,
                stat,
            })),
            FileType::Symlink => {
                self.links += 1;
                if self.links > MAX_LINKS {
                    return Err(self.untrusted(&here, "leads through too many symbolic links"));
                }
                let dir = self.dirs.last().expect("/ is never popped");
                let target =
                    read_link(&dir.fd, name, fd.as_ref()).map_err(|e| self.cannot(&here, e))?;
                Ok(Step::Link(PathBuf::from(OsString::from_vec(
                    target.into_bytes(),
                ))))
            }
            FileType::RegularFile if last => {
                let dir = self.dirs.last().expect("/ is never popped");
                match open_judged(&dir.fd, name, &stat) {
                    Ok(Some(file)) => Ok(Step::File(file, stat)),
                    Ok(None) => Err(self.untrusted(&here, "was replaced while being checked")),
                    Err(e) => Err(self.cannot(&here, e)),
                }
            }
            _ if last => Err(self.untrusted(&here, "is not a regular file")),
            _ => Err(self.untrusted(&here, "is not a directory")),
        }
    }

    /// Judges one component by its own metadata (`parent`: the directory it was found in). An
    /// owner this user namespace hides is remembered, not refused: [`open`] decides.
    fn judge(&mut self, what: &Path, stat: &Stat, parent: Option<&Stat>) -> Result<(), Distrust> {
        let kind = FileType::from_raw_mode(stat.st_mode);
        let mode = stat.st_mode & 0o7777;
        let owner = self.owners.judge(stat.st_uid);
        if owner == Owner::Other {
            return Err(self.untrusted(what, &format!("is owned by uid {}", stat.st_uid)));
        }
        if trust::writable_by_others(stat.st_mode) && !trust::sticky_dir(stat.st_mode) {
            return Err(self.untrusted(what, &format!("is writable by others (mode {mode:o})")));
        }
        let open_parent = parent.is_some_and(|p| trust::writable_by_others(p.st_mode));
        if kind != FileType::Directory && stat.st_nlink > 1 && open_parent {
            return Err(self.untrusted(
                what,
                &format!(
                    "has {} hard links, in a directory others may write (another user could \
                     have linked it there)",
                    stat.st_nlink
                ),
            ));
        }
        if owner == Owner::Unseen && self.unseen.is_none() {
            self.unseen = Some((what.to_path_buf(), stat.st_uid));
        }
        Ok(())
    }

    /// `what`, or `it` when it is the config file itself.
    fn shown(&self, what: &Path) -> String {
        if what == self.config {
            "it".to_string()
        } else {
            what.display().to_string()
        }
    }

    fn untrusted(&self, what: &Path, why: &str) -> Distrust {
        Distrust::Untrusted(format!(
            "{} {why}; a discovered config is used only when nobody but you and root could have \
             written it or anything on the way to it (name it with --config {} to use it anyway)",
            self.shown(what),
            self.config.display(),
        ))
    }

    fn cannot(&self, what: &Path, e: rustix::io::Errno) -> Distrust {
        Distrust::Refused(anyhow!(
            "cannot read config {}: {}: {}",
            self.config.display(),
            what.display(),
            std::io::Error::from(e)
        ))
    }
}

/// How a directory on the way is opened: only to look names up in it.
#[cfg(target_os = "linux")]
const LOOK_UP: OFlags = OFlags::PATH.union(OFlags::CLOEXEC);
/// How a directory on the way is opened on macOS, which has no `O_PATH`: `O_SEARCH` (macOS 13),
/// so that a directory one may search but not read is walked too (older kernels ignore the
/// `O_EXEC` bit and open it for reading).
#[cfg(target_os = "macos")]
const LOOK_UP: OFlags = OFlags::from_bits_retain(libc::O_SEARCH as u32).union(OFlags::CLOEXEC);

/// Looks `name` up in `dir` without following it: its metadata, and a descriptor where the walk
/// needs one. Linux opens every name `O_PATH|O_NOFOLLOW` and judges what the descriptor is.
#[cfg(target_os = "linux")]
fn lookup(dir: &OwnedFd, name: &OsStr) -> Result<(Option<OwnedFd>, Stat), rustix::io::Errno> {
    let fd = rustix::fs::openat(dir, name, LOOK_UP | OFlags::NOFOLLOW, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    Ok((Some(fd), stat))
}

/// macOS: `lstat` of the name, and for a directory the directory itself, opened `O_NOFOLLOW`
/// and judged by what the descriptor is (a name replaced meanwhile by a link is refused by
/// `O_NOFOLLOW`). A link or a file is judged by the `lstat`: a link is then read by its name
/// ([`read_link`]) and a file opened by [`open_judged`], which checks it is the inode judged.
/// Between the two, only a writer of `dir` could replace the name, and `dir` was judged: nobody
/// but the user and root may write it, or it is sticky and the name's owner (judged) alone may.
#[cfg(target_os = "macos")]
fn lookup(dir: &OwnedFd, name: &OsStr) -> Result<(Option<OwnedFd>, Stat), rustix::io::Errno> {
    let stat = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Ok((None, stat));
    }
    let fd = rustix::fs::openat(
        dir,
        name,
        LOOK_UP | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&fd)?;
    Ok((Some(fd), stat))
}

/// The target of the link `name` of `dir`, looked up as `fd` (Linux: read through the `O_PATH`
/// descriptor of the link itself).
#[cfg(target_os = "linux")]
fn read_link(
    _dir: &OwnedFd,
    _name: &OsStr,
    fd: Option<&OwnedFd>,
) -> Result<std::ffi::CString, rustix::io::Errno> {
    let fd = fd.expect("Linux opens every name it looks up");
    rustix::fs::readlinkat(fd, c"", Vec::new())
}

/// The target of the link `name` of `dir` (macOS: read by its name, see [`lookup`]).
#[cfg(target_os = "macos")]
fn read_link(
    dir: &OwnedFd,
    name: &OsStr,
    _fd: Option<&OwnedFd>,
) -> Result<std::ffi::CString, rustix::io::Errno> {
    rustix::fs::readlinkat(dir, name, Vec::new())
}

/// Opens the regular file `name` of `dir` for reading without following a symbolic link (nor
/// blocking on a FIFO); `None` when it is not the inode judged as `judged` any more.
fn open_judged(
    dir: &OwnedFd,
    name: &OsStr,
    judged: &Stat,
) -> Result<Option<File>, rustix::io::Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let opened = rustix::fs::fstat(&fd)?;
    let same = Identity::of(&opened) == Identity::of(judged);
    Ok(same.then(|| File::from(fd)))
}

/// The names of `path`, in order, without the root and `.` (`..` is kept: the walk resolves
/// it against the directories it has really walked).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}
