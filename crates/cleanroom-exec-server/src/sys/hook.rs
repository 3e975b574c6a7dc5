//! What a child runs between fork or clone and exec beyond `sys`'s own system calls: the
//! library's sandbox hooks, and the capability drops that keep a command out of the server
//! ([`ChildHook`]). A hook is built here and nowhere else, from a `cleanroom` [`Sandbox`] only,
//! so under the crate's `deny(unsafe_code)` no other code can hand a child something that
//! allocates, locks or panics.
//!
//! Invariant: a [`ChildHook`] runs async-signal-safe code only: [`Sandbox::child_hook`] (raw
//! system calls on data prepared before the fork, its documented contract), then, for a command,
//! [`keep_out_of_the_server`] (`prctl`, `capget`, `capset`).

use std::io;

use cleanroom::protect::Sandbox;
use rustix::thread::CapabilitySet;

/// An async-signal-safe function a child runs last before exec (see the module docs), with the
/// sandbox it applies.
pub struct ChildHook {
    run: Box<dyn Fn() -> io::Result<()> + Send + Sync + 'static>,
    /// What it applies (none for the tests' own hooks).
    sandbox: Option<Sandbox>,
}

impl ChildHook {
    /// Applies `sandbox` alone (a child of an `fs/*` call, which never executes anything).
    pub fn applying(sandbox: &Sandbox) -> Option<ChildHook> {
        let hook = sandbox.child_hook()?;
        Some(ChildHook {
            run: Box::new(hook),
            sandbox: Some(sandbox.clone()),
        })
    }

    /// Applies `sandbox`, then [`keep_out_of_the_server`] (a command the server starts).
    pub fn confining(sandbox: &Sandbox) -> Option<ChildHook> {
        let hook = sandbox.child_hook()?;
        Some(ChildHook {
            run: Box::new(move || {
                hook()?;
                keep_out_of_the_server()
            }),
            sandbox: Some(sandbox.clone()),
        })
    }

    /// The sandbox the hook applies, whose [`Sandbox::explain`] names the step a spawn's error
    /// stands for when the hook failed.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// A hook of the tests' own.
    ///
    /// # Safety
    /// `hook` must be async-signal-safe: raw system calls only, no allocation, no lock, no
    /// panic (it may run in a vfork child that shares the server's memory).
    #[cfg(test)]
    pub unsafe fn from_fn(hook: impl Fn() -> io::Result<()> + Send + Sync + 'static) -> ChildHook {
        ChildHook {
            run: Box::new(hook),
            sandbox: None,
        }
    }

    /// Runs the hook (in the child).
    pub(super) fn run(&self) -> io::Result<()> {
        (self.run)()
    }
}

/// The capabilities that let a process get past the server's walls: `CAP_SYS_PTRACE`, and
/// `CAP_PERFMON` and `CAP_SYS_ADMIN` (either lets it read `/proc/<pid>/environ`, `maps` and
/// `auxv` of a process of its user without a ptrace check), and `CAP_DAC_READ_SEARCH`
/// (`open_by_handle_at` opens a file by its handle through any mount of its filesystem, where
/// Landlock judges it at that mount, past the read-only rules and mounts of its real path).
fn escaping_capabilities() -> CapabilitySet {
    CapabilitySet::SYS_PTRACE
        | CapabilitySet::PERFMON
        | CapabilitySet::SYS_ADMIN
        | CapabilitySet::DAC_READ_SEARCH
}

/// Drops [`escaping_capabilities`] from the calling process's bounding and inheritable sets.
/// The bounding set limits neither the inheritable set, which a process running as uid 0
/// carries into its permitted set at exec, nor the ambient set, which any process keeps across
/// exec (a server started with `AmbientCapabilities=`); taking them out of the inheritable set
/// takes them out of the ambient set too. Async-signal-safe: `prctl`, `capget` and `capset`
/// only. The server is not dumpable, so without them a process it starts, even one running as
/// uid 0, cannot read the server's environment, memory or descriptors through `/proc/<server>`
/// (Landlock's ptrace scoping does not refuse it when the server itself runs inside a Landlock
/// domain that the process's is nested in). Only a process running as uid 0 fails on a refusal
/// of the bounding set: an ordinary user's command has none to drop (one that made or joined its
/// namespaces in a user namespace the server or its holder made has given up every capability
/// held there before this runs, so its drops are refused, and moot).
pub fn keep_out_of_the_server() -> io::Result<()> {
    use rustix::thread::remove_capability_from_bounding_set;
    for capability in escaping_capabilities().iter() {
        match remove_capability_from_bounding_set(capability) {
            Err(e) if rustix::process::geteuid().is_root() => return Err(e.into()),
            _ => {}
        }
    }
    lower_inheritable()
}

/// Takes [`escaping_capabilities`] out of the calling thread's inheritable (and so ambient)
/// set, leaving its own effective and permitted sets as they are. The server does it once at
/// start, before its threads exist, so that nothing it ever executes inherits them.
pub fn lower_inheritable() -> io::Result<()> {
    use rustix::thread::{capabilities, set_capabilities};
    let mut sets = capabilities(None)?;
    if sets.inheritable.intersects(escaping_capabilities()) {
        sets.inheritable.remove(escaping_capabilities());
        set_capabilities(None, sets)?;
    }
    Ok(())
}
