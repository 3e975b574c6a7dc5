//! Children forked for `fs/*` calls. Mutating calls whose plan the thread's Landlock cover would
//! refuse (it cannot create or remove entries directly in the directories it descends, such as a
//! workspace root holding a read-only `.git`): a forked child applies the process form of the
//! call's policy (mount namespace with read-only binds and hidden paths, a user namespace for an
//! ordinary user, Landlock; the same hook as `process/start`) and carries out the plan
//! ([`Plan::execute_in`]). Calls whose policy binds host paths beneath the private `/tmp` and
//! `/var/tmp` ([`view`]): a forked child binds them as a process of the policy would and sends
//! its root and mount namespace back, and exits; the call works in that namespace.
//!
//! Invariants: the child runs nothing but the sandbox hook and the plan's raw system calls on
//! data prepared before the fork (a view's child: two `open`s and a `sendmsg`, or a `send` of
//! its set-up's error, which the call's answer explains); once confined it closes every
//! descriptor it inherited but its report pipe (the server's sockets, logs and namespace descriptors are not the plan's); the
//! plan resolves every path again inside the child's mount namespace (the environment's, joined
//! first, with the call's own mounts inside it), without magic links (a descriptor inherited from
//! the server would lead past the child's mounts); the child writes one report (done, or the
//! failing step and errno) to a pipe before it exits, and the call is answered from that report,
//! so the answer does not wait for the teardown of the child's namespaces (an RCU grace period)
//! that its exit waits for; the child is registered with the reaper before it can exit and
//! reaped by this module, so the orphan reaper never takes its status, and with its session,
//! which kills it when it ends; the fork is made from an unconfined thread (a child of a confined
//! one would keep the cover on top of the mounts). The fork and everything the child does are
//! [`crate::sys::fork`]'s.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use cleanroom::protect::view::View;
use cleanroom::protect::Sandbox;
use rustix::pipe::PipeFlags;

use super::handles::Handles;
use super::mutate::{Failure, Plan};
use crate::process::Reaper;
use crate::protocol::RpcError;
use crate::sys::fork::{wait, Errand, CONFINING, DONE, REPORT};

/// Forks a child that applies `sandbox` and executes `plan`; answers when the child has
/// reported, and reaps it afterwards on the same blocking thread (never a confined one). The
/// child belongs to the session of `handles` until it is reaped.
pub async fn run(
    sandbox: Sandbox,
    plan: Plan,
    reaper: Reaper,
    handles: &Handles,
) -> Result<(), RpcError> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let children = handles.children();
    tokio::task::spawn_blocking(move || {
        let mut answer = Some(answer);
        let mut send = |result| {
            if let Some(answer) = answer.take() {
                let _ = answer.send(result);
            }
        };
        let (pid, report) = match fork(&sandbox, &plan, &reaper) {
            Ok(forked) => forked,
            Err(e) => return send(Err(e)),
        };
        let registered = children.add(pid);
        if let Some(report) = read_report(&report) {
            send(answer_of(&sandbox, &plan, report));
        }
        let exited = wait(pid);
        drop(registered);
        reaper.release(pid);
        // Without a report (the child died first) the answer is sent only now.
        send(Err(RpcError::internal(match exited {
            Some(code) => format!("the filesystem child exited with {code} before it reported"),
            None => "the filesystem child did not finish".into(),
        })));
    });
    answered
        .await
        .map_err(|_| RpcError::internal("the filesystem task failed"))?
}

/// Forks the child; its pid and the end of the pipe it reports on.
fn fork(sandbox: &Sandbox, plan: &Plan, reaper: &Reaper) -> Result<(i32, OwnedFd), RpcError> {
    let mut slots = plan.slots();
    let (report, report_in_child) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)
        .map_err(|e| RpcError::internal(format!("cannot make a pipe for the child: {e}")))?;
    let errand = Errand::Execute {
        plan,
        slots: &mut slots,
        report: report_in_child.as_fd(),
    };
    let pid = fork_confined(sandbox, reaper, errand)?;
    Ok((pid, report))
}

/// The mount namespace a process of the call's policy works in, with the host paths it binds
/// beneath the private `/tmp` and `/var/tmp` (`binder`: [`Sandbox::binder`]): a forked child
/// applies `binder` and sends its root and namespace ([`send_own`]); it belongs to the session
/// of `handles` until it is reaped, as the child of a mutating call.
pub async fn view(binder: Sandbox, reaper: Reaper, handles: &Handles) -> Result<View, RpcError> {
    let children = handles.children();
    let seen = tokio::task::spawn_blocking(move || {
        let flags = rustix::net::SocketFlags::CLOEXEC;
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            flags,
            None,
        )
        .map_err(|e| RpcError::internal(format!("cannot make a socket for the child: {e}")))?;
        let errand = Errand::SendView {
            socket: theirs.as_fd(),
        };
        let pid = fork_confined(&binder, &reaper, errand)?;
        let registered = children.add(pid);
        drop(theirs);
        let view = View::receive(ours.as_fd());
        wait(pid);
        drop(registered);
        reaper.release(pid);
        view.map_err(|e| {
            let why = binder.explain(&e).unwrap_or_else(|| e.to_string());
            RpcError::internal(format!(
                "cannot bind the host paths of the call's policy: {why}"
            ))
        })
    });
    seen.await
        .map_err(|e| RpcError::internal(format!("the filesystem task failed: {e}")))?
}

/// Forks a child that applies `sandbox` and does `errand` ([`crate::sys::fork`]); the child's
/// pid, owned by this module (the orphan reaper leaves it alone until released).
fn fork_confined(sandbox: &Sandbox, reaper: &Reaper, errand: Errand<'_>) -> Result<i32, RpcError> {
    let hook = crate::sys::hook::ChildHook::applying(sandbox);
    let mut guard = reaper.spawning();
    let pid = crate::sys::fork::fork_confined(hook.as_ref(), errand)
        .map_err(|e| RpcError::internal(format!("cannot fork for the filesystem call: {e}")))?;
    guard.own(pid);
    Ok(pid)
}

/// The child's report (`None`: it exited or died without one).
fn read_report(report: &OwnedFd) -> Option<(u64, i32)> {
    let mut bytes = [0u8; REPORT];
    let mut filled = 0;
    while filled < REPORT {
        match rustix::io::read(report, &mut bytes[filled..]) {
            Ok(0) => return None,
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    let step = u64::from_ne_bytes(bytes[..8].try_into().ok()?);
    let errno = i32::from_ne_bytes(bytes[8..].try_into().ok()?);
    Some((step, errno))
}

/// The answer to the child's report. A failure to apply `sandbox` names its step (the hook's
/// error carries it) and the system's answer.
fn answer_of(sandbox: &Sandbox, plan: &Plan, (step, errno): (u64, i32)) -> Result<(), RpcError> {
    match step {
        DONE => Ok(()),
        CONFINING => {
            let error = io::Error::from_raw_os_error(errno);
            let why = sandbox.explain(&error).unwrap_or_else(|| error.to_string());
            Err(RpcError::internal(format!(
                "cannot confine the filesystem call: {why}"
            )))
        }
        step => Err(plan.answer(Failure {
            step: usize::try_from(step).unwrap_or(usize::MAX),
            errno,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::mutate;
    use crate::fs::resolve::Reach;
    use crate::policy::{self, Base, Target};
    use crate::protocol::Params;
    use serde_json::json;

    /// The child applies the call's policy itself, whatever the plan: one made without a policy
    /// (an unconfined [`Reach`], so no check of the thread's refuses it) writes where the policy
    /// lets it (the workspace root, the route that needs the child) and not into the read-only
    /// `.git` in it. Fails when the child skips the sandbox hook.
    #[tokio::test]
    async fn the_child_holds_the_policy_even_for_a_plan_no_check_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join(".git")).unwrap();
        let base = Base {
            rules: Vec::new(),
            enforced: false,
            tmpdir: ws.clone(),
            shared_dev_shm: false,
            view: View::own(),
            user_ns: None,
        };
        let special = |kind: &str, subpath: Option<&str>, access: &str| {
            json!({"access": access, "path": {"type": "special",
                   "value": {"kind": kind, "subpath": subpath}}})
        };
        let params = json!({"sandbox": {"cwd": crate::uri::file_uri(&ws),
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted", "entries": [
                    special("root", None, "read"),
                    special("project_roots", None, "write"),
                    special("project_roots", Some(".git"), "read")]}}}});
        let params = Params::new(&params).unwrap();
        let handles = Handles::default();
        for (name, allowed) in [("new", true), (".git/new", false)] {
            let sandbox = policy::for_fs_call(&params, &base, Target::Child, false)
                .unwrap()
                .expect("a policy that restricts");
            let path = ws.join(name);
            let plan = mutate::write_file(&path, b"x".to_vec(), &Reach::default()).unwrap();
            let result = run(sandbox, plan, Reaper::default(), &handles).await;
            assert_eq!(result.is_ok(), allowed, "{name}: {result:?}");
            assert_eq!(path.exists(), allowed, "{name}");
        }
    }
}
