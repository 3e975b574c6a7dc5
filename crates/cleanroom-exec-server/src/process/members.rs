//! Who a termination is for: the processes of one started process, and of one client session
//! (its [`Scope`]), listed afresh on every look.
//!
//! Owns: the session tag (`CLEANROOM_SESSION_ID`), the membership rules ([`Members`]) and a
//! started process's process group ([`Group`]).
//!
//! Invariants: a process is a member by a rule that names it (its tag, a living main process it
//! descends from, an output descriptor of the set it holds, the session's cgroup leaf it is in),
//! never by a pid alone: every listed pid is confirmed by its start time; a group is signalled
//! only through a pidfd of its leader, so a group that merely reuses the number is never hit; a
//! process is a member for holding an output only if it still holds it once no spawn of the
//! server is between its clone and its exec (such a child holds a copy of every descriptor of
//! the server, every session's outputs included).

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use cleanroom::contain::SubCgroup;
use cleanroom::process::{self, ProcessId, ProcessInfo};

/// The session tag every process of a session carries.
pub const SESSION_ID_VAR: &str = "CLEANROOM_SESSION_ID";

/// The prefix of a session's cgroup leaf below the server's (`s-<session id>`).
pub const SESSION_LEAF_PREFIX: &str = "s-";

/// A session's tag: every process the session starts carries `CLEANROOM_SESSION_ID=<id>`, set by
/// `Process::spawn` after the client's env.
#[derive(Clone, Debug)]
pub struct Scope {
    /// `CLEANROOM_SESSION_ID=<id>`, exactly as in the environment.
    pub env_entry: Vec<u8>,
}

impl Scope {
    /// The scope of session `id`.
    pub fn of_session(id: &str) -> Scope {
        Scope {
            env_entry: format!("{SESSION_ID_VAR}={id}").into_bytes(),
        }
    }

    /// The tag's value (the session id).
    pub fn value(&self) -> &[u8] {
        &self.env_entry[SESSION_ID_VAR.len() + 1..]
    }

    /// The session id.
    pub fn session(&self) -> Box<str> {
        String::from_utf8_lossy(self.value()).into()
    }

    /// The name of the session's cgroup leaf below the server's.
    pub fn leaf_name(&self) -> String {
        format!("{SESSION_LEAF_PREFIX}{}", self.session())
    }
}

/// The process group a started process leads (every started process calls `setsid`), named by
/// its leader's pid and a pidfd on the leader: the pidfd reaches the original group even once
/// the leader is reaped ([`cleanroom::contain::kill_group_of`]).
#[derive(Clone, Debug)]
pub struct Group {
    leader: i32,
    pidfd: Arc<OwnedFd>,
}

impl Group {
    /// The group `leader` leads, through `pidfd` (opened before anything could reap it).
    pub fn new(leader: i32, pidfd: Arc<OwnedFd>) -> Group {
        Group { leader, pidfd }
    }

    /// Sends `signal` to the whole group.
    pub fn signal(&self, signal: libc::c_int) {
        cleanroom::contain::signal_group_of(&self.pidfd, self.leader, signal);
    }

    /// Whether the group may still have members (false: it is empty for good, or out of reach).
    pub fn may_have_members(&self) -> bool {
        cleanroom::contain::group_may_have_members(&self.pidfd)
    }
}

/// A set of processes defined by rules, listed afresh on every look: the processes of one
/// started process ([`Members::of_process`]), of a whole session ([`Members::of_session`]), or
/// the union of such sets ([`Members::include`]), in one walk of the server's descendants.
///
/// Liveness: a zombie thread-group leader whose other threads still run is alive (it still
/// runs code); its environment is read through a live thread.
#[derive(Clone, Debug)]
pub struct Members {
    /// The session the members belong to (whose orphans' deaths can hide one, see
    /// `reaper::Settling`).
    session: Box<str>,
    /// Environment entries that make a descendant of the server a member (`CLEANROOM_SESSION_ID=…`
    /// of a session, `CLEANROOM_EXEC_ID=…` of a process: setsid and double-forked children that
    /// re-parented to the server).
    tags: Vec<Vec<u8>>,
    /// Main processes, named by pid + start time: each is a member while alive, and so is
    /// every descendant of it.
    mains: Vec<ProcessId>,
    /// Output descriptors as `/proc/<pid>/fd` links show them (`pipe:[ino]`, `/dev/pts/N`):
    /// whoever holds one is a member (an escapee that cleared its environment but keeps the
    /// process from closing).
    output_links: Vec<Vec<u8>>,
    /// The process groups of the main processes: TERM and KILL reach each as a whole, which
    /// catches a process that cleared its environment and holds no output (and the newest link
    /// of a fork-and-exit chain wherever a listing would only find it gone).
    groups: Vec<Group>,
    /// The session's cgroup leaf (as root): everything in it is a member, `cgroup.kill` kills
    /// it at once, and `populated 0` is the kernel's word that it is empty.
    cgroup: Option<Arc<SubCgroup>>,
}

impl Members {
    /// Everything one session started, whatever became of its process records: every
    /// descendant of the server whose environment carries the session's tag (a detached daemon
    /// of a process the table forgot long ago included), everything in the session's cgroup
    /// leaf, and the process groups of its started processes that may still have members.
    pub fn of_session(
        scope: &Scope,
        cgroup: Option<Arc<SubCgroup>>,
        groups: Vec<Group>,
    ) -> Members {
        Members {
            session: scope.session(),
            tags: vec![scope.env_entry.clone()],
            mains: Vec::new(),
            output_links: Vec::new(),
            groups,
            cgroup,
        }
    }

    /// Who belongs to one started process of session `scope`: its main process while it
    /// lives, that process's descendants, and every descendant of the server that carries
    /// `exec_entry` or holds one of `output_links` (and its process group: [`Members::with_group`]).
    pub fn of_process(
        scope: &Scope,
        main: ProcessId,
        exec_entry: Vec<u8>,
        output_links: Vec<Vec<u8>>,
    ) -> Members {
        Members {
            session: scope.session(),
            tags: vec![exec_entry],
            mains: vec![main],
            output_links,
            groups: Vec::new(),
            cgroup: None,
        }
    }

    /// These members, and `group` killed as a whole with them.
    pub fn with_group(mut self, group: Option<Group>) -> Members {
        self.groups.extend(group);
        self
    }

    /// Adds `other`'s members (of the same session) to these.
    pub fn include(&mut self, other: &Members) {
        debug_assert_eq!(self.session, other.session);
        self.tags.extend(other.tags.iter().cloned());
        self.mains.extend(other.mains.iter().copied());
        self.output_links.extend(other.output_links.iter().cloned());
        self.groups.extend(other.groups.iter().cloned());
        if self.cgroup.is_none() {
            self.cgroup.clone_from(&other.cgroup);
        }
    }

    /// The session the members belong to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The session's cgroup leaf, if the set has one.
    pub fn cgroup(&self) -> Option<&SubCgroup> {
        self.cgroup.as_deref()
    }

    /// TERM or KILL (`signal`) to every group of the set.
    pub fn signal_groups(&self, signal: libc::c_int) {
        for group in &self.groups {
            group.signal(signal);
        }
    }

    /// The kernel's word on whether the set is empty: `Some(false)` while its cgroup leaf is
    /// populated or one of its process groups may still have members (a process that cleared its
    /// environment, holds no output and whose parent exited is found by no listing, only by its
    /// group: the set is not done while it lives, so the KILL rounds reach it if it ignores
    /// TERM); `Some(true)` when the leaf is empty and no group has members; `None` without a
    /// leaf and with no group left (the listings decide).
    pub fn kernel_says_empty(&self) -> Option<bool> {
        if self.groups.iter().any(Group::may_have_members) {
            return Some(false);
        }
        self.cgroup.as_ref().map(|cgroup| !cgroup.populated())
    }

    /// The living members now. `spawns_settled` returns once no spawn of the server is between
    /// its clone and its exec (see [`Members::held_outputs`]).
    pub fn current(&self, spawns_settled: impl FnOnce()) -> Vec<ProcessInfo> {
        let mut members: Vec<ProcessInfo> = Vec::new();
        let mut found: HashSet<u32> = HashSet::new();
        if let Some(cgroup) = &self.cgroup {
            members.extend(
                cgroup
                    .members()
                    .into_iter()
                    .filter(|m| found.insert(m.id.pid)),
            );
        }
        let mut ids: Vec<ProcessId> = Vec::new();
        for &main in &self.mains {
            if process::still_alive(main) {
                let tree = std::iter::once(main).chain(process::descendants(main.pid));
                ids.extend(tree.filter(|id| found.insert(id.pid)));
            }
        }
        let tags: HashSet<&[u8]> = self.tags.iter().map(Vec::as_slice).collect();
        let mut holders = Vec::new();
        for id in process::descendants(std::process::id()) {
            if found.contains(&id.pid) {
                continue;
            }
            if self.tagged(id.pid, &tags) {
                found.insert(id.pid);
                ids.push(id);
            } else if self.holds_output(id.pid) {
                holders.push(id);
            }
        }
        ids.extend(self.held_outputs(holders, spawns_settled));
        // Checked by pid, then confirmed by identity: a pid reused meanwhile is not adopted.
        ids.retain(|&id| process::still_alive(id));
        members.extend(ids.into_iter().map(process::describe));
        members
    }

    /// Of the processes seen holding an output of the set, the ones that still hold one once no
    /// spawn is under way: a child of the server between its clone and its exec holds a copy of
    /// every descriptor of the server (another session's outputs included) until exec closes
    /// them, and must not be taken for a member (a TERM then kills another session's process
    /// before its program runs).
    fn held_outputs(
        &self,
        holders: Vec<ProcessId>,
        spawns_settled: impl FnOnce(),
    ) -> Vec<ProcessId> {
        if holders.is_empty() {
            return holders;
        }
        spawns_settled();
        holders
            .into_iter()
            .filter(|id| self.holds_output(id.pid))
            .collect()
    }

    fn tagged(&self, pid: u32, tags: &HashSet<&[u8]>) -> bool {
        process::environ(pid).is_some_and(|env| env.split(|&b| b == 0).any(|e| tags.contains(e)))
    }

    fn holds_output(&self, pid: u32) -> bool {
        if self.output_links.is_empty() {
            return false;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|link| {
                self.output_links
                    .iter()
                    .any(|l| l == link.as_os_str().as_bytes())
            })
        })
    }
}
