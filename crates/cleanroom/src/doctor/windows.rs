//! `cleanroom doctor` on Windows (the `os` module of `doctor`): what this Windows allows.
//!
//! - Job Objects, tried as a run uses them: a job made by [`Job::new`] (`KILL_ON_JOB_CLOSE`, no
//!   breakaway), `cmd.exe` spawned into it by [`Job::spawn`] (created suspended, assigned,
//!   resumed) and left waiting on a pipe, found among the job's processes, then killed with the
//!   whole job; meanwhile a second job is nested around it (what a run needs when cleanroom
//!   itself runs in a job: a CI runner's, a service's);
//! - the job cleanroom itself runs in, if any, and whether it lets processes break away (the
//!   run's own job never does, and the nearest job decides);
//! - the state namespace, opened (created if absent) and verified as every run opens it;
//! - a root made there for the probe: the temp dir a run's TEMP and TMP name, written to, and a
//!   file there locked exclusively with `LockFileEx` (what `--exclusive` needs) and refused to a
//!   second handle; then the root is removed.
//!
//! Protection and network isolation have no Windows backend: the report says so plainly.

use std::fmt;
use std::fs::{File, TryLockError};
use std::io;
use std::os::windows::io::AsHandle;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;
use windows_sys::Win32::System::JobObjects::{
    JOB_OBJECT_LIMIT_BREAKAWAY_OK, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK,
};
use windows_sys::Win32::System::Threading::CREATE_NO_WINDOW;
use windows_sys::Win32::UI::Shell::FOLDERID_System;

use super::{yes_no, Check, Decision, Findings};
use crate::contain::{Job, KILLED_EXIT_CODE};
use crate::namespace::Namespace;
use crate::root::{new_run_id, Root, RootOptions};
use crate::sys::windows as win;

/// A rule of the `--protect home` policy: none exists on Windows, which has no protection.
#[derive(Clone, Debug, Serialize)]
pub enum PolicyRule {}

/// How the decisions about shared memory and temp dirs are named in the text.
pub const DEV_SHM_LABEL: &str = "named objects, IPC";
/// See [`DEV_SHM_LABEL`].
pub const TMP_LABEL: &str = "TEMP, TMP";

/// The job cleanroom itself runs in, if any.
#[derive(Clone, Debug, Serialize)]
pub struct OuterJob {
    /// Whether cleanroom runs inside a job (then a run's job is nested in it); `None` when it
    /// cannot be told.
    pub in_job: Option<bool>,
    /// Whether that job lets its processes break away (`JOB_OBJECT_LIMIT_BREAKAWAY_OK` or
    /// `SILENT_BREAKAWAY_OK`); `None` outside a job.
    pub breakaway_ok: Option<bool>,
    /// What was asked and what Windows said.
    pub detail: String,
}

/// What this Windows allows.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// The product name and version (`CurrentVersion` in the registry).
    pub windows: String,
    /// The user SID of the process token: whose namespace and runs these are.
    pub user_sid: String,
    /// A Job Object made and used as a run's: a process spawned into it and killed with it.
    pub job_object: Check,
    /// A job nested in a job (Windows 8 and later).
    pub nested_jobs: Check,
    /// The job cleanroom itself runs in, if any.
    pub outer_job: OuterJob,
    /// The state namespace: opened (created if absent), no reparse point, owned by `user_sid`.
    pub namespace: Check,
    /// Exclusive file locks (`LockFileEx`): taken on a file of a probe root, refused to a second
    /// handle.
    pub file_locks: Check,
}

/// Probes this Windows, for runs whose roots go in the namespace at `namespace` (a root is made
/// there for the probe, and removed).
pub(super) fn probe(namespace: &Path) -> Findings {
    let user_sid = crate::namespace::os::user_sid()
        .unwrap_or_else(|e| format!("unknown (the process token's user cannot be read: {e})"));
    let (job_object, nested_jobs) = probe_jobs();
    let outer_job = probe_outer_job();
    let (namespace, tmp, file_locks) = match Namespace::open_or_create(namespace) {
        Ok(ns) => {
            let (tmp, file_locks) = probe_root(&ns);
            let check = Check {
                available: true,
                detail: format!(
                    "{}: opened (created if absent) as a directory that is no reparse point, \
                     owned by {} (the token's user), held without FILE_SHARE_DELETE",
                    ns.path().display(),
                    ns.user()
                ),
            };
            (check, tmp, file_locks)
        }
        Err(e) => (
            Check {
                available: false,
                detail: format!("{}: {e}", namespace.display()),
            },
            decision(
                "none",
                "no usable state namespace: `cleanroom run` fails (exit 125)",
            ),
            Check {
                available: false,
                detail: "not tried: no usable state namespace".into(),
            },
        ),
    };
    let containment = if job_object.available {
        decision(
            "job-object",
            "a Job Object per run, KILL_ON_JOB_CLOSE and no breakaway: the command is created \
             suspended and assigned before it runs, every process it starts is born in the job, \
             a leak is a process still in the job after the command exited (named, then killed \
             with TerminateJobObject), and the runner's death closes the job and kills the run",
        )
    } else {
        decision(
            "none",
            format!(
                "no Job Object here ({}): `cleanroom run` fails (exit 125)",
                job_object.detail
            ),
        )
    };
    Findings {
        machine: Machine {
            windows: windows_version(),
            user_sid,
            job_object,
            nested_jobs,
            outer_job,
            namespace,
            file_locks,
        },
        containment,
        protection: decision(
            "none",
            "not available on Windows: there is no write protection backend (Landlock is \
             Linux-only); --protect home|strict, --protect-path, --allow-write and \
             --require-protection are refused before anything starts (exit 125)",
        ),
        net_none: decision(
            "unavailable",
            "not available on Windows: there is no network isolation backend; --net none is \
             refused before anything starts (exit 125)",
        ),
        dev_shm: decision(
            "host",
            "no equivalent on Windows: no per-run view of a directory and no IPC namespace; \
             named kernel objects are the session's (one that only the run's processes hold \
             goes with them)",
        ),
        tmp,
    }
}

fn decision(choice: &str, reason: impl Into<String>) -> Decision {
    Decision {
        choice: choice.into(),
        reason: reason.into(),
    }
}

/// No `--protect home` policy: Windows has no protection.
pub(super) fn home_policy(_cwd: &Path) -> (Vec<PolicyRule>, Vec<String>) {
    (
        Vec::new(),
        vec![
            "--protect home is refused on Windows (no write protection backend): a run may \
             write wherever the user may"
                .into(),
        ],
    )
}

/// One rule of the policy, as the text shows it (there are none).
pub(super) fn rule_line(rule: &PolicyRule) -> String {
    match *rule {}
}

/// The product name and version, e.g. `Windows 10 Pro 10.0.19045` (before Windows 10, the
/// registry has `CurrentVersion`, `6.1`, instead of the major and minor numbers).
fn windows_version() -> String {
    const KEY: &str = r"SOFTWARE\Microsoft\Windows NT\CurrentVersion";
    let value = |name: &str| win::machine_registry_value(KEY, name).ok();
    let version = match (
        value("CurrentMajorVersionNumber"),
        value("CurrentMinorVersionNumber"),
    ) {
        (Some(major), Some(minor)) => Some(format!("{major}.{minor}")),
        _ => value("CurrentVersion"),
    };
    let number = match (version, value("CurrentBuildNumber")) {
        (Some(version), Some(build)) => format!("{version}.{build}"),
        (None, Some(build)) => format!("build {build}"),
        (Some(version), None) => version,
        (None, None) => "(version unknown)".into(),
    };
    match value("ProductName") {
        Some(name) => format!("{name} {number}"),
        None => format!("Windows {number}"),
    }
}

/// The job of a run, tried as a run uses it, and a job nested in it: see the module
/// documentation.
fn probe_jobs() -> (Check, Check) {
    const WHAT: &str = "a Job Object with KILL_ON_JOB_CLOSE and no breakaway; cmd.exe created \
                        suspended, assigned to it, resumed, listed among its processes and \
                        killed by TerminateJobObject";
    const NESTED: &str = "a second job around a process of the first";
    let failed = |detail: String| {
        (
            Check {
                available: false,
                detail: format!("{WHAT}: {detail}"),
            },
            Check {
                available: false,
                detail: format!("{NESTED}: not tried (no process in a first job)"),
            },
        )
    };
    let job = match Job::new() {
        Ok(job) => job,
        Err(e) => return failed(format!("CreateJobObjectW/SetInformationJobObject: {e}")),
    };
    let shell = match win::known_folder(&FOLDERID_System) {
        Ok(system) => system.join("cmd.exe"),
        Err(e) => return failed(format!("the System folder: {e}")),
    };
    // It reads commands from the pipe, so it waits until the job kills it (or the pipe closes).
    let mut command = Command::new(&shell);
    command
        .args(["/d", "/q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match job.spawn(&mut command, CREATE_NO_WINDOW) {
        Ok(child) => child,
        Err(e) => return failed(format!("spawning {}: {e}", shell.display())),
    };
    let listed = job.pids().contains(&child.id());
    let nested = win::assign_to_new_job(child.as_handle());
    let (_, emptied) = job.terminate();
    // Should the job have failed to kill it, the closed pipe ends it.
    drop(child.stdin.take());
    let status = child.wait();
    // The nested job's handle closes only now: its one process is dead.
    let nested = nested.map(drop);
    let job_object = match (listed, emptied, status) {
        (false, ..) => Err(format!(
            "{} was not among the job's processes",
            shell.display()
        )),
        (true, Err(e), _) => Err(format!("the job did not empty: {e}")),
        (true, Ok(()), Err(e)) => Err(format!("waiting for {}: {e}", shell.display())),
        (true, Ok(()), Ok(status)) if status.code() == Some(KILLED_EXIT_CODE as i32) => Ok(()),
        (true, Ok(()), Ok(status)) => Err(format!(
            "{} ended with {status}, not killed by the job (exit code {KILLED_EXIT_CODE})",
            shell.display()
        )),
    };
    let job_object = Check::from_probe(WHAT, job_object.map_err(io::Error::other));
    let nested_jobs = Check::from_probe(
        &format!(
            "{NESTED} (a job in a job, Windows 8 and later: what a run needs when cleanroom \
             itself runs in a job)"
        ),
        nested,
    );
    (job_object, nested_jobs)
}

/// The job cleanroom itself runs in, if any.
fn probe_outer_job() -> OuterJob {
    match win::own_job_limits() {
        Ok(None) => OuterJob {
            in_job: Some(false),
            breakaway_ok: None,
            detail: "IsProcessInJob: cleanroom runs in no job; a run's job is a job of its own"
                .into(),
        },
        Ok(Some(flags)) => {
            let breakaway_ok =
                flags & (JOB_OBJECT_LIMIT_BREAKAWAY_OK | JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK) != 0;
            OuterJob {
                in_job: Some(true),
                breakaway_ok: Some(breakaway_ok),
                detail: format!(
                    "cleanroom runs in a job (limit flags {flags:#x}{}{}): a run's job is \
                     nested in it; the run's job lets no process break away, and the nearest \
                     job decides",
                    if flags & JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE != 0 {
                        ", KILL_ON_JOB_CLOSE"
                    } else {
                        ""
                    },
                    if breakaway_ok {
                        ", breakaway allowed"
                    } else {
                        ""
                    },
                ),
            }
        }
        Err(e) => OuterJob {
            in_job: None,
            breakaway_ok: None,
            detail: format!("IsProcessInJob/QueryInformationJobObject: {e}"),
        },
    }
}

/// A root made in `ns` as a run makes its own: the temp dir its TEMP and TMP name written to, a
/// file there locked; then removed. Returns the decision about temp dirs and the lock check.
fn probe_root(ns: &Namespace) -> (Decision, Check) {
    let options = RootOptions {
        command: vec!["cleanroom".into(), "doctor".into()],
        ..RootOptions::default()
    };
    let root = match new_run_id().and_then(|id| Root::create(ns, &id, &options)) {
        Ok(root) => root,
        Err(e) => {
            return (
                decision(
                    "none",
                    format!(
                        "no root can be made in {}: {e}; `cleanroom run` fails (exit 125)",
                        ns.path().display()
                    ),
                ),
                Check {
                    available: false,
                    detail: format!("not tried: no probe root ({e})"),
                },
            )
        }
    };
    let temp: Vec<_> = crate::env::pinned(root.layout())
        .into_iter()
        .filter(|(var, _)| matches!(*var, "TEMP" | "TMP"))
        .map(|(_, path)| path.to_path_buf())
        .collect();
    let inside = temp.len() == 2 && temp.iter().all(|p| p.starts_with(root.path()));
    let file = root.layout().tmp.join("cleanroom-doctor-probe");
    let written = std::fs::write(&file, "probe");
    let file_locks = Check::from_probe(
        "LockFileEx (exclusive, fail-immediately) on a file of a probe root: held, and refused \
         to a second handle; an owner record's writer lock seen by a reader",
        written
            .as_ref()
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", file.display())))
            .and_then(|()| lock_excludes(&file))
            .and_then(|()| crate::lock::probe_record_lock(&file.with_extension("record"))),
    );
    let removal = root.close();
    // Said in every decision, not only when TEMP works: a probe root left behind is news.
    let left = match removal.is_removed() {
        true => String::new(),
        false => format!(
            "; the probe root is NOT fully removed: {} is left for `cleanroom gc`",
            removal.path.display()
        ),
    };
    let tmp = match (inside, written) {
        (false, _) => decision(
            "none",
            format!("TEMP and TMP of a run do not point into its root: {temp:?}{left}"),
        ),
        (true, Err(e)) => decision(
            "none",
            format!(
                "the temp dir of a probe root cannot be written ({e}): runs cannot use their \
                 TEMP{left}"
            ),
        ),
        (true, Ok(())) => decision(
            "root",
            format!(
                "TEMP and TMP (so GetTempPath too) point into the run's root \
                 ({}\\run-<id>\\tmp), removed with it (tried: written and {}); a fixed path \
                 such as C:\\Windows\\Temp\\x is the host's and outlives the run",
                ns.path().display(),
                if removal.is_removed() {
                    "removed".to_string()
                } else {
                    format!(
                        "NOT fully removed: {} is left for `cleanroom gc`",
                        removal.path.display()
                    )
                }
            ),
        ),
    };
    (tmp, file_locks)
}

/// Whether an exclusive lock on `path` is held by one handle and refused to another.
fn lock_excludes(path: &Path) -> io::Result<()> {
    let open = || File::options().read(true).write(true).open(path);
    let holder = open()?;
    holder.try_lock()?;
    match open()?.try_lock() {
        Err(TryLockError::WouldBlock) => Ok(()),
        Err(TryLockError::Error(e)) => Err(e),
        Ok(()) => Err(io::Error::other(
            "a second handle got the lock too: it excludes nothing",
        )),
    }
}

impl fmt::Display for Machine {
    /// The report's header line, then "this machine" and one line per probe.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cleanroom doctor: {}, user {}",
            self.windows, self.user_sid
        )?;
        writeln!(f)?;
        writeln!(f, "this machine")?;
        let checks = [
            ("job object", &self.job_object),
            ("nested jobs", &self.nested_jobs),
        ];
        for (name, check) in checks {
            writeln!(f, "  {name:<19} {} ({})", yes_no(check), check.detail)?;
        }
        let in_job = match self.outer_job.in_job {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        writeln!(
            f,
            "  {:<19} {in_job} ({})",
            "in a job", self.outer_job.detail
        )?;
        let checks = [
            ("state directory", &self.namespace),
            ("file locks", &self.file_locks),
        ];
        for (name, check) in checks {
            writeln!(f, "  {name:<19} {} ({})", yes_no(check), check.detail)?;
        }
        Ok(())
    }
}
