//! Codex's per-call sandbox (the `sandbox` argument of `process/start` and of every `fs/*` call)
//! translated into the one policy engine, [`cleanroom::protect`] (spec §5 "sandbox", §6).
//!
//! Owns: parsing a `FileSystemSandboxContext`; resolving its entries (paths, globs, the special
//! roots `root`, `minimal`, `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`)
//! to canonical paths with `read` / `write` / `none`; keeping `.git`, `.codex`, `.agents` and
//! `.aws` read-only inside writable roots unless an entry names them; intersecting the result
//! with the environment's own `--protect` rules; compiling it into a [`Sandbox`] for a child
//! process ([`Target::Process`]) or for the short-lived thread an `fs/*` call runs on
//! ([`Target::Thread`], see [`on_thread`]).
//!
//! Invariants: a call is never run less protected than it asked: what no mechanism can enforce
//! is refused with -32602 naming the entry or the reason; the kernel enforces every rule
//! (Landlock, mount and network namespaces), nothing is a path-string check (the `fs` module
//! asks the compiled rules only to refuse more: what `stat` reveals where Landlock does not
//! decide, a removal checked before it starts); the environment's protection still holds under
//! a managed policy (the two are intersected, path by path).

pub(crate) mod glob;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cleanroom::protect::view::View;
use cleanroom::protect::{Access, Narrowing, Network, Policy, Protection, Sandbox, UserNamespace};
use serde_json::Value;

use crate::protocol::{Params, RpcError};
use crate::sys::hook::ChildHook;
use crate::uri::parse_file_uri;

/// Names kept read-only inside every writable root unless an entry names them.
pub const PROTECTED_NAMES: &[&str] = &[".git", ".codex", ".agents", ".aws"];

/// What `minimal` makes readable: what a shell and its tools need to run.
const MINIMAL_READ: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/dev",
    "/proc",
    "/sys",
    "/run",
    "/opt",
    "/nix/store",
];

/// The value `sandboxType` takes when a kernel policy applies (the Codex name for Linux).
const KERNEL_SANDBOX_TYPE: &str = "linuxSeccomp";

/// What the environment contributes to every call's policy.
#[derive(Clone, Debug, Default)]
pub struct Base {
    /// The environment's `--protect` rules (canonical); empty when protection is off.
    pub rules: Vec<(PathBuf, Access)>,
    /// Whether the kernel enforces them for every process.
    pub enforced: bool,
    /// The environment's temp dir (`tmpdir` when the call has no TMPDIR of its own).
    pub tmpdir: PathBuf,
    /// Whether the environment's processes share one private `/dev/shm`, which a process under
    /// a managed policy joins; otherwise such a process gets one of its own (never the host's).
    pub shared_dev_shm: bool,
    /// The mount namespace the environment's processes see (its private `/tmp`, `/var/tmp` and
    /// `/dev/shm`): every policy is compiled in it and every `fs/*` path resolved in it.
    pub view: View,
    /// The user namespace the environment's processes and `fs/*` children make their
    /// namespaces in (an ordinary user's server: [`UserNamespace`]), attached to every policy
    /// compiled for a process or a child.
    pub user_ns: Option<UserNamespace>,
}

impl Base {
    /// The access the environment's rules give `path` (every access when it has none).
    pub fn access(&self, path: &Path) -> Access {
        if self.rules.is_empty() {
            return Access::Write;
        }
        let mut policy = Policy::new();
        for (rule_path, access) in &self.rules {
            policy.rule(rule_path.clone(), *access, "environment protection");
        }
        policy.access(path)
    }
}

/// Where a compiled policy is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A child process, between fork and exec (every mechanism is available).
    Process,
    /// The calling thread of a multi-threaded server: Landlock alone, narrowings expressed by
    /// the cover, for root too. A mount namespace of the thread's own would not bind it:
    /// `/proc/self` names the thread-group leader, whose root and descriptors are the server's
    /// (and an ordinary user's user namespace needs a single-threaded process anyway).
    Thread,
    /// A child forked for one filesystem call (mounts as for a process, the host network).
    Child,
}

/// One resolved rule.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resolved {
    path: PathBuf,
    access: Access,
    reason: String,
}

/// A managed sandbox request, resolved to canonical paths.
#[derive(Clone, Debug)]
pub struct Managed {
    rules: Vec<Resolved>,
    network: Network,
}

/// How a started process is confined (shared by its [`crate::process::Spec`] clones).
#[derive(Debug, Default)]
pub struct Confinement {
    /// The managed policy intersected with the environment's, or without one the environment's
    /// protection compiled afresh for this process ([`Protection::renewed`]); either is applied
    /// inside the environment's namespaces. `None`: the environment's sandbox as it is (nothing
    /// to renew).
    managed: Option<Sandbox>,
    /// Whether the environment's protection is enforced by the kernel.
    base_enforced: bool,
}

impl Confinement {
    /// The confinement of a process started with `sandbox` (the request's argument), in an
    /// environment protected by `protection` (`None`: nothing to renew).
    pub fn for_process(
        sandbox: Option<&Value>,
        cwd: &Path,
        tmpdir: &Path,
        base: &Base,
        protection: Option<&Protection>,
    ) -> Result<Arc<Confinement>, RpcError> {
        let managed = match parse(sandbox, cwd, tmpdir, &base.view)? {
            // An enforced protection always has rules: none means they were not resolved.
            Some(_) if base.enforced && base.rules.is_empty() => {
                return Err(RpcError::internal(
                    "the environment's rules were not resolved for a managed sandbox",
                ))
            }
            Some(managed) => {
                let rules = intersect(&managed.rules, &base.rules);
                let own_dev_shm = !base.shared_dev_shm;
                let target = Target::Process;
                Some(compile(rules, managed.network, target, own_dev_shm, base)?)
            }
            None => match protection {
                Some(protection) => protection.renewed().map_err(|e| {
                    RpcError::internal(format!(
                        "cannot compile the environment's protection for the process: {e}"
                    ))
                })?,
                None => None,
            },
        };
        Ok(Arc::new(Confinement {
            managed,
            base_enforced: base.enforced,
        }))
    }

    /// `sandboxType` of the start result: what is actually applied.
    pub fn sandbox_type(&self) -> &'static str {
        if self.managed.is_some() || self.base_enforced {
            KERNEL_SANDBOX_TYPE
        } else {
            "none"
        }
    }

    /// The hook applying this confinement in the child (see [`Sandbox::child_hook`]): the
    /// managed policy or the renewed protection, inside the environment's namespaces (its
    /// private `/dev/shm`, not the host's: see [`Sandbox::within`]) and on top of its ruleset,
    /// else the environment's `protection`; then the process drops what would let it read the
    /// server's memory ([`crate::sys::hook::keep_out_of_the_server`]).
    pub fn child_hook(&self, protection: &Protection) -> Option<ChildHook> {
        match (&self.managed, protection.sandbox()) {
            (Some(sandbox), Some(environment)) => {
                ChildHook::confining(&sandbox.within(environment))
            }
            (Some(sandbox), None) => ChildHook::confining(sandbox),
            (None, environment) => environment.and_then(ChildHook::confining),
        }
    }
}

/// The sandbox an `fs/*` call runs under on `target` ([`Target::Thread`] or [`Target::Child`]):
/// its `sandbox` argument intersected with the environment's rules, or the environment's rules
/// alone; `None` when nothing restricts the call: nothing is restricted, or the call only
/// `reads` and the policy lets it read every path (no `none` rule, `/` readable: Landlock
/// restricts no read then and no mount hides anything, so confining it would change nothing;
/// Codex's reads carry `sandbox: null`, and `--protect` only narrows writes).
pub fn for_fs_call(
    params: &Params<'_>,
    base: &Base,
    target: Target,
    reads: bool,
) -> Result<Option<Sandbox>, RpcError> {
    let managed = match managed_of(params, base)? {
        Some(managed) => managed,
        None if base.rules.is_empty() => return Ok(None),
        None => Managed {
            rules: vec![rule("/", Access::Write, "unrestricted")],
            network: Network::Host,
        },
    };
    let rules = intersect(&managed.rules, &base.rules);
    if reads && reads_everything(&rules) {
        return Ok(None);
    }
    compile(rules, Network::Host, target, false, base).map(Some)
}

/// Whether the call's `sandbox` leaves the file system unrestricted: none, `disabled`,
/// `external`, or a `managed` one whose file system is `unrestricted` or writable everywhere.
pub fn leaves_files_unrestricted(params: &Params<'_>, base: &Base) -> Result<bool, RpcError> {
    Ok(managed_of(params, base)?
        .is_none_or(|managed| managed.rules.iter().all(|r| r.access == Access::Write)))
}

/// The call's `sandbox`, parsed (`None`: it restricts nothing).
fn managed_of(params: &Params<'_>, base: &Base) -> Result<Option<Managed>, RpcError> {
    let sandbox = params.get("sandbox");
    let context = sandbox.and_then(|s| s.get("policyContext"));
    let cwd = [sandbox, context]
        .into_iter()
        .flatten()
        .find_map(|v| v.get("cwd").and_then(Value::as_str));
    let cwd = match cwd {
        Some(uri) => parse_file_uri(uri, "sandbox.cwd").map_err(RpcError::invalid_params)?,
        None => PathBuf::from("/"),
    };
    parse(sandbox, &cwd, &base.tmpdir, &base.view)
}

/// Whether `rules` let every path be read: `/` is readable and no rule is `none`.
fn reads_everything(rules: &[cleanroom::protect::Rule]) -> bool {
    let mut policy = Policy::new();
    policy.rules = rules.to_vec();
    policy.access(Path::new("/")) >= Access::Read && rules.iter().all(|r| r.access >= Access::Read)
}

/// Runs `f` on a new thread that first confines itself with the established ruleset of
/// `environment` (if any) and then with `sandbox` (Landlock restricts only the calling thread,
/// so the server keeps its own rights; the two layers allow only what both allow, so a call's
/// rules resolved now can narrow the environment's start-time rules, never widen them); the
/// thread ends with the call and its domain with it. Without a sandbox `f` runs on the blocking
/// pool (its threads are never confined).
pub async fn on_thread<T: Send + 'static>(
    sandbox: Option<Sandbox>,
    environment: Option<&Sandbox>,
    f: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    if sandbox.is_none() {
        return tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| RpcError::internal(format!("the filesystem task failed: {e}")))?;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let environment = environment.cloned();
    std::thread::Builder::new()
        .name("cleanroom-fs".into())
        .spawn(move || {
            let beneath = environment
                .as_ref()
                .map_or(Ok(()), Sandbox::restrict_thread_to_established);
            let confined =
                beneath.and_then(|()| match sandbox.as_ref().and_then(Sandbox::child_hook) {
                    Some(hook) => hook(),
                    None => Ok(()),
                });
            let confined = confined.map_err(|e| {
                RpcError::internal(format!("cannot confine the filesystem call: {e}"))
            });
            let _ = tx.send(confined.and_then(|()| f()));
        })
        .map_err(|e| RpcError::internal(format!("cannot start a filesystem thread: {e}")))?;
    rx.await
        .map_err(|_| RpcError::internal("the filesystem thread died"))?
}

/// Parses `sandbox`; `None` when it restricts nothing per call (absent, `disabled`, `external`
/// without a restricted network, managed with nothing restricted).
fn parse(
    sandbox: Option<&Value>,
    cwd: &Path,
    tmpdir: &Path,
    view: &View,
) -> Result<Option<Managed>, RpcError> {
    let Some(sandbox) = sandbox else {
        return Ok(None);
    };
    let s =
        Params::new(sandbox).map_err(|_| RpcError::invalid_params("sandbox must be an object"))?;
    let Some(permissions) = s.get("permissions") else {
        return Ok(None);
    };
    let perms = Params::new(permissions)
        .map_err(|_| RpcError::invalid_params("sandbox.permissions must be an object"))?;
    let network = match perms
        .opt_string("network")
        .map_err(|_| RpcError::invalid_params("sandbox.permissions.network must be a string"))?
    {
        None | Some("enabled") => Network::Host,
        Some("restricted") => Network::Loopback,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "sandbox.permissions.network {other:?} is not restricted or enabled"
            )))
        }
    };
    let kind = perms
        .string("type")
        .map_err(|_| RpcError::invalid_params("sandbox.permissions.type must be a string"))?;
    let file_system = match kind {
        "disabled" => return Ok(None),
        "external" => None,
        "managed" => perms.get("file_system").or_else(|| perms.get("fileSystem")),
        other => {
            return Err(RpcError::invalid_params(format!(
                "sandbox.permissions.type {other:?} is not managed, disabled or external"
            )))
        }
    };
    let context = Context::of(&s, cwd, tmpdir, view)?;
    let rules = match file_system {
        None => None,
        Some(fs) => file_system_rules(fs, &context)?,
    };
    if rules.is_none() && network == Network::Host {
        return Ok(None);
    }
    let rules = rules.unwrap_or_else(|| vec![rule("/", Access::Write, "unrestricted")]);
    Ok(Some(Managed { rules, network }))
}

/// What the special roots resolve against, and where paths are canonicalized.
struct Context {
    cwd: PathBuf,
    project_roots: Vec<PathBuf>,
    tmpdir: PathBuf,
    view: View,
}

impl Context {
    fn of(
        sandbox: &Params<'_>,
        cwd: &Path,
        tmpdir: &Path,
        view: &View,
    ) -> Result<Context, RpcError> {
        let policy_context = sandbox.get("policyContext");
        let context = policy_context.map(Params::new).transpose()?;
        let field = |name: &str| {
            sandbox
                .get(name)
                .or_else(|| context.as_ref().and_then(|c| c.get(name)))
        };
        let cwd = match field("cwd").and_then(Value::as_str) {
            Some(uri) => parse_file_uri(uri, "sandbox.cwd").map_err(RpcError::invalid_params)?,
            None => cwd.to_path_buf(),
        };
        let mut project_roots = Vec::new();
        if let Some(roots) = field("workspaceRoots") {
            for uri in crate::protocol::strings(roots, "sandbox.workspaceRoots")? {
                project_roots.push(
                    parse_file_uri(&uri, "sandbox.workspaceRoots")
                        .map_err(RpcError::invalid_params)?,
                );
            }
        }
        if project_roots.is_empty() {
            project_roots.push(cwd.clone());
        }
        Ok(Context {
            cwd,
            project_roots,
            tmpdir: tmpdir.to_path_buf(),
            view: view.clone(),
        })
    }
}

/// The rules of `file_system`; `None` when it is unrestricted.
fn file_system_rules(fs: &Value, context: &Context) -> Result<Option<Vec<Resolved>>, RpcError> {
    let fs = Params::new(fs).map_err(|_| {
        RpcError::invalid_params("sandbox.permissions.file_system must be an object")
    })?;
    match fs.string("type").map_err(|_| {
        RpcError::invalid_params("sandbox.permissions.file_system.type must be a string")
    })? {
        "unrestricted" => return Ok(None),
        "restricted" => {}
        other => {
            return Err(RpcError::invalid_params(format!(
                "sandbox.permissions.file_system.type {other:?} is not restricted or unrestricted"
            )))
        }
    }
    let entries = match fs.get("entries") {
        None => &[][..],
        Some(Value::Array(entries)) => entries.as_slice(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "sandbox.permissions.file_system.entries must be an array",
            ))
        }
    };
    let mut rules = Vec::new();
    // One budget for every glob entry: a sandbox cannot multiply the walks' bound by its entries.
    let mut globs = glob::Globs::default();
    for (i, entry) in entries.iter().enumerate() {
        let label = format!("sandbox.permissions.file_system.entries[{i}]");
        rules.extend(entry_rules(entry, context, &mut globs).map_err(|why| {
            RpcError::invalid_params(format!(
                "filesystem sandbox restrictions cannot be enforced: {label} {entry}: {why}"
            ))
        })?);
    }
    protect_names(&mut rules, &context.view);
    Ok(Some(rules))
}

/// The canonical rules one entry stands for (none when its paths do not exist: skipped, as
/// Codex's `missing_path_behavior: skip`; the enclosing rule decides).
fn entry_rules(
    entry: &Value,
    context: &Context,
    globs: &mut glob::Globs,
) -> Result<Vec<Resolved>, String> {
    let access = match entry.get("access").and_then(Value::as_str) {
        Some("read") => Access::Read,
        Some("write") => Access::Write,
        Some("none") | Some("deny") => Access::None,
        other => return Err(format!("access {other:?} is not read, write or none")),
    };
    let path = entry.get("path").ok_or("has no path")?;
    let reason = |what: &str| format!("sandbox entry: {what}");
    let paths = match path.get("type").and_then(Value::as_str) {
        Some("path") => {
            let uri = path
                .get("path")
                .and_then(Value::as_str)
                .ok_or("path.path must be a string")?;
            vec![parse_file_uri(uri, "path.path")?]
        }
        Some("special") => special(
            path.get("value").ok_or("special has no value")?,
            context,
            access,
        )?,
        Some("glob_pattern") => {
            let pattern = path
                .get("pattern")
                .and_then(Value::as_str)
                .ok_or("glob_pattern.pattern must be a string")?;
            globs.expand(pattern, &context.cwd)?
        }
        other => {
            return Err(format!(
                "path type {other:?} is not path, special or glob_pattern"
            ))
        }
    };
    Ok(paths
        .iter()
        .filter_map(|p| context.view.canonicalize(p).ok())
        .map(|(path, _)| Resolved {
            reason: reason(&path.display().to_string()),
            path,
            access,
        })
        .collect())
}

/// The paths of a special root.
fn special(value: &Value, context: &Context, access: Access) -> Result<Vec<PathBuf>, String> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("special.kind must be a string")?;
    let subpath = match value.get("subpath") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(relative(s)?),
        Some(_) => return Err("special.subpath must be a string".into()),
    };
    let bases: Vec<PathBuf> = match kind {
        "root" => vec!["/".into()],
        "minimal" => MINIMAL_READ.iter().map(PathBuf::from).collect(),
        "current_working_directory" => vec![context.cwd.clone()],
        "project_roots" => context.project_roots.clone(),
        "tmpdir" => vec![context.tmpdir.clone()],
        "slash_tmp" => vec!["/tmp".into()],
        // Ignoring an unknown root grants less than asked, except when it would deny.
        _ if access != Access::None => {
            tracing::warn!("ignoring the unknown special sandbox root {kind:?}");
            Vec::new()
        }
        _ => {
            return Err(format!(
                "the special root {kind:?} is unknown to this server"
            ))
        }
    };
    Ok(match subpath {
        None => bases,
        Some(sub) => bases.into_iter().map(|b| b.join(&sub)).collect(),
    })
}

/// A subpath: relative, without `..`.
fn relative(subpath: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(subpath);
    if path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        Ok(path)
    } else {
        Err(format!(
            "subpath {subpath:?} must be relative, without `..`"
        ))
    }
}

/// Adds read-only rules for [`PROTECTED_NAMES`] inside every writable root, unless an entry
/// names that path itself.
fn protect_names(rules: &mut Vec<Resolved>, view: &View) {
    let writable: Vec<PathBuf> = rules
        .iter()
        .filter(|r| r.access == Access::Write)
        .map(|r| r.path.clone())
        .collect();
    for root in writable {
        for name in PROTECTED_NAMES {
            let Ok((path, _)) = view.canonicalize(&root.join(name)) else {
                continue;
            };
            if !rules.iter().any(|r| r.path == path) {
                rules.push(Resolved {
                    reason: format!(
                        "{name} stays read-only inside the writable {}",
                        root.display()
                    ),
                    path,
                    access: Access::Read,
                });
            }
        }
    }
}

fn rule(path: &str, access: Access, reason: &str) -> Resolved {
    Resolved {
        path: path.into(),
        access,
        reason: reason.into(),
    }
}

/// Compiles `rules` (already intersected with the environment's) for `target`, in `base`'s view;
/// `network` applies to a process only (a thread or a forked fs child keeps the host's), as a
/// private `/dev/shm` does (`private_dev_shm`). A process's or a child's namespaces of its own
/// are made in `base`'s user namespace ([`Sandbox::in_user_namespace`]).
fn compile(
    rules: Vec<cleanroom::protect::Rule>,
    network: Network,
    target: Target,
    private_dev_shm: bool,
    base: &Base,
) -> Result<Sandbox, RpcError> {
    let mut policy = Policy::new();
    policy.view = base.view.clone();
    policy.private_dev_shm = private_dev_shm && target == Target::Process;
    policy.network = match target {
        Target::Process => network,
        Target::Thread | Target::Child => Network::Host,
    };
    policy.narrowing = match target {
        Target::Process | Target::Child => Narrowing::MountElseCover,
        Target::Thread => Narrowing::Cover,
    };
    policy.rules = rules;
    let sandbox = Sandbox::compile(&policy).map_err(|e| {
        let what = match e.to_string().contains("network") {
            true => "network restrictions",
            false => "filesystem sandbox restrictions",
        };
        RpcError::invalid_params(format!("{what} cannot be enforced: {e}"))
    })?;
    Ok(match target {
        Target::Process | Target::Child => sandbox.in_user_namespace(base.user_ns.as_ref()),
        Target::Thread => sandbox,
    })
}

/// The rules giving every path the weaker of what `managed` and `base` give it: a rule at every
/// path of either set (the longest rule path above any path is then in both sets' terms the
/// same as each set's own longest), with the minimum of the two accesses there.
fn intersect(managed: &[Resolved], base: &[(PathBuf, Access)]) -> Vec<cleanroom::protect::Rule> {
    let as_rule = |r: &Resolved| cleanroom::protect::Rule {
        path: r.path.clone(),
        access: r.access,
        reason: r.reason.clone(),
    };
    if base.is_empty() {
        return managed.iter().map(as_rule).collect();
    }
    let mut left = Policy::new();
    left.rules = managed.iter().map(as_rule).collect();
    let mut right = Policy::new();
    for (path, access) in base {
        right.rule(path.clone(), *access, "environment protection");
    }
    let mut rules: Vec<cleanroom::protect::Rule> = Vec::new();
    for (path, reason) in managed
        .iter()
        .map(|r| (&r.path, r.reason.as_str()))
        .chain(base.iter().map(|(p, _)| (p, "environment protection")))
    {
        if rules.iter().any(|r| &r.path == path) {
            continue;
        }
        let access = left.access(path).min(right.access(path));
        rules.push(cleanroom::protect::Rule {
            path: path.clone(),
            access,
            reason: reason.to_string(),
        });
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolved(path: &str, access: Access) -> Resolved {
        rule(path, access, "t")
    }

    #[test]
    fn intersection_gives_every_path_the_weaker_access() {
        let managed = [resolved("/", Access::Read), resolved("/w", Access::Write)];
        let base = [
            (PathBuf::from("/"), Access::Write),
            (PathBuf::from("/w/home"), Access::Read),
        ];
        let mut policy = Policy::new();
        policy.rules = intersect(&managed, &base);
        assert_eq!(policy.access(Path::new("/etc")), Access::Read);
        assert_eq!(policy.access(Path::new("/w/x")), Access::Write);
        assert_eq!(policy.access(Path::new("/w/home/x")), Access::Read);
    }

    #[test]
    fn codex_workspace_write_resolves_its_special_roots() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(ws.join(".git")).unwrap();
        std::fs::create_dir(ws.join(".codex")).unwrap();
        let sandbox = json!({"cwd": crate::uri::file_uri(&ws), "permissions": {"type": "managed",
            "network": "restricted", "file_system": {"type": "restricted", "entries": [
            {"access": "read", "path": {"type": "special", "value": {"kind": "root"}}},
            {"access": "write", "path": {"type": "special", "value": {"kind": "project_roots"}}},
            {"access": "write", "path": {"type": "special", "value": {"kind": "slash_tmp"}}},
            {"access": "read", "path": {"type": "special", "value": {"kind": "project_roots", "subpath": ".git"}}}]}}});
        let managed = parse(
            Some(&sandbox),
            Path::new("/"),
            Path::new("/tmp"),
            &View::own(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(managed.network, Network::Loopback);
        let mut policy = Policy::new();
        policy.rules = intersect(&managed.rules, &[]);
        assert_eq!(policy.access(&ws.join("src")), Access::Write);
        assert_eq!(policy.access(&ws.join(".git/config")), Access::Read);
        assert_eq!(
            policy.access(&ws.join(".codex/x")),
            Access::Read,
            "protected name added"
        );
        assert_eq!(policy.access(Path::new("/etc")), Access::Read);
    }

    #[test]
    fn refusals_name_the_entry() {
        let bad = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted",
            "entries": [{"access": "none", "path": {"type": "special", "value": {"kind": "nonesuch"}}}]}}});
        let err = parse(Some(&bad), Path::new("/"), Path::new("/tmp"), &View::own()).unwrap_err();
        assert!(err.message.contains("entries[0]"), "{}", err.message);
        let disabled = json!({"permissions": {"type": "disabled"}});
        assert!(parse(
            Some(&disabled),
            Path::new("/"),
            Path::new("/tmp"),
            &View::own()
        )
        .unwrap()
        .is_none());
    }
}
