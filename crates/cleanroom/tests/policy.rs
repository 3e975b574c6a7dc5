//! The policy engine (`cleanroom::protect::{Policy, Sandbox}`) against the real kernel: each
//! test compiles a policy, spawns a real `sh -c` child with the sandbox applied, and checks from
//! inside the child, with real system calls, what the kernel allowed and refused, then what is
//! on disk afterwards.
//!
//! Every fixture directory is mode 0777 and every file 0666, so ordinary permissions never
//! refuse anything: what is refused, the sandbox refused. As root the tests run their children
//! both as root (no user namespace; Landlock and the mounts bind root too) and as nobody
//! (dropped before the sandbox applies, so the child takes the unprivileged path: a user
//! namespace). The undo attempts use raw system calls through perl (`syscall`, x86_64 numbers).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cleanroom::protect::{
    Access, EnforcedBy, Enforcement, Isolation, Narrowing, Network, Policy, PrivateTmp, Sandbox,
    TmpMechanism, TEST_LANDLOCK_ABSENT_ENV, TEST_NO_MOUNT_NS_ENV,
};
use cleanroom::Error;

mod support;
use support::*;

/// Raw-syscall helpers for the child: `setattr_rw P` clears the read-only flag of the mount at
/// P (`mount_setattr`), `clone_root` takes a detached copy of `/` (`open_tree`), `read F` reads
/// a file and fails unless it holds the precious text. (Perl's `syscall` passes a string by a
/// pointer it may write through, so a literal argument dies "Modification of a read-only
/// value" before any system call: every string goes in a variable.)
const TOOLS: &str = r#"
setattr_rw() { perl -e 'my ($path, $attr) = ($ARGV[0], pack("QQQQ", 0, 1, 0, 0)); syscall(442, -100, $path, 0, $attr, 32) == 0 or die "$!\n"' "$1"; }
clone_root() { perl -e 'my $path = "/"; syscall(428, -100, $path, 1) >= 0 or die "$!\n"'; }
readable() { grep -q precious "$1"; }
listed() { ls -A "$1" | grep -q .; }
"#;

/// A directory tree for one test: a workspace with a `.git`, a secret directory and file, a
/// home with a project, and a place outside every write rule.
struct Tree {
    _dir: tempfile::TempDir,
    base: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("cleanroom-policy-test-")
            .tempdir()
            .expect("create a temporary directory");
        let base = dir.path().canonicalize().unwrap();
        for d in [
            "work/.git/objects",
            "work/src",
            "secret",
            "home/project",
            "outside",
        ] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        for f in [
            "work/.git/HEAD",
            "work/.git/config",
            "secret/key.txt",
            "secret-file.txt",
            "home/existing.txt",
            "outside/existing.txt",
        ] {
            fs::write(base.join(f), PRECIOUS).unwrap();
        }
        chmod_all(&base);
        Tree { _dir: dir, base }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }

    /// Runs `script` (after the helpers) in `cwd` with the sandbox applied, as `who`.
    fn run(&self, sandbox: &Sandbox, who: Who, cwd: &str, script: &str) -> Output {
        let mut command = Command::new("sh");
        command
            .args(["-c", &format!("{TRY}\n{TOOLS}\n{script}")])
            .current_dir(self.path(cwd))
            .env("B", &self.base);
        if who == Who::Nobody {
            drop_to_nobody(&mut command);
        }
        sandbox.configure(&mut command);
        checked_output(&mut command)
    }

    fn unchanged(&self, rel: &str) {
        assert_eq!(
            fs::read_to_string(self.path(rel)).unwrap(),
            PRECIOUS,
            "{rel}"
        );
    }
}

fn chmod_all(dir: &Path) {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            chmod_all(&path);
        } else {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        }
    }
}

/// Both kinds of child this machine can run.
fn everyone() -> Vec<Who> {
    if root_or_skip("the case of a child running as nobody") {
        vec![Who::Me, Who::Nobody]
    } else {
        vec![Who::Me]
    }
}

/// Everything readable, the workspace writable, its `.git` read-only (a narrowing).
fn git_policy(tree: &Tree) -> Policy {
    let mut policy = Policy::new();
    policy
        .rule("/", Access::Read, "everything readable")
        .rule(tree.path("work"), Access::Write, "the workspace")
        .rule(tree.path("work/.git"), Access::Read, "git metadata");
    policy
}

fn compile(policy: &Policy) -> Sandbox {
    Sandbox::compile(policy).expect("compile the policy")
}

fn rule_of<'a>(sandbox: &'a Sandbox, path: &Path) -> &'a cleanroom::protect::AppliedRule {
    sandbox
        .status()
        .rules
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| {
            panic!(
                "no rule for {}: {:?}",
                path.display(),
                sandbox.status().rules
            )
        })
}

#[test]
fn a_child_cannot_write_outside_its_write_rules() {
    let tree = Tree::new();
    let mut policy = Policy::new();
    policy.rule("/", Access::Read, "everything readable").rule(
        tree.path("work"),
        Access::Write,
        "the workspace",
    );
    let sandbox = compile(&policy);
    assert_eq!(sandbox.status().enforcement, Enforcement::Full);
    assert!(!sandbox.status().handles_reads);
    for who in everyone() {
        let output = tree.run(
            &sandbox,
            who,
            "work",
            r#"
try inside:create write src/new.txt
try inside:mkdir mkdir src/newdir
try outside:create write "$B/outside/new.txt"
try outside:overwrite write "$B/outside/existing.txt"
try outside:unlink rm -f "$B/outside/existing.txt"
try outside:mkdir mkdir "$B/outside/newdir"
try tmp:create write /tmp/cleanroom-policy-escape
try read readable "$B/outside/existing.txt"
"#,
        );
        assert_all(
            &output,
            "ALLOWED",
            &["inside:create", "inside:mkdir", "read"],
        );
        assert_all(
            &output,
            "REFUSED",
            &[
                "outside:create",
                "outside:overwrite",
                "outside:unlink",
                "outside:mkdir",
                "tmp:create",
            ],
        );
        fs::remove_file(tree.path("work/src/new.txt")).unwrap();
        fs::remove_dir(tree.path("work/src/newdir")).unwrap();
    }
    tree.unchanged("outside/existing.txt");
    assert!(
        !tree.path("outside/new.txt").exists()
            && !Path::new("/tmp/cleanroom-policy-escape").exists()
    );
}

#[test]
fn a_child_cannot_read_or_list_a_none_rule_with_mounts_or_the_cover() {
    let tree = Tree::new();
    for narrowing in [Narrowing::Mount, Narrowing::Cover] {
        let mut policy = Policy::new();
        policy.narrowing = narrowing;
        policy
            .rule("/", Access::Read, "everything readable")
            .rule(tree.path("work"), Access::Write, "the workspace")
            .rule(tree.path("secret"), Access::None, "hidden directory")
            .rule(tree.path("secret-file.txt"), Access::None, "hidden file");
        let sandbox = compile(&policy);
        assert!(sandbox.status().handles_reads);
        let expected = match narrowing {
            Narrowing::Mount => EnforcedBy::HiddenByMount,
            _ => EnforcedBy::Cover,
        };
        assert_eq!(
            rule_of(&sandbox, &tree.path("secret")).enforced_by,
            expected
        );
        for who in everyone() {
            let output = tree.run(
                &sandbox,
                who,
                "work",
                r#"
try dir:read readable "$B/secret/key.txt"
try dir:list listed "$B/secret"
try dir:write write "$B/secret/new.txt"
try file:read readable "$B/secret-file.txt"
try file:write write "$B/secret-file.txt"
try other:read readable "$B/outside/existing.txt"
try work:create write new.txt
"#,
            );
            assert_all(
                &output,
                "REFUSED",
                &[
                    "dir:read",
                    "dir:list",
                    "dir:write",
                    "file:read",
                    "file:write",
                ],
            );
            assert_all(&output, "ALLOWED", &["other:read", "work:create"]);
            fs::remove_file(tree.path("work/new.txt")).unwrap();
        }
    }
    tree.unchanged("secret/key.txt");
    tree.unchanged("secret-file.txt");
}

/// What a child tries against `.git` inside its writable working directory.
const GIT_ATTEMPTS: &str = r#"
try cwd:create write new.txt
try cwd:mkdir mkdir newdir
try git:overwrite write .git/config
try git:append append .git/HEAD
try git:absolute write "$B/work/.git/config"
try git:create write .git/objects/evil
try git:mkdir mkdir .git/hooks
try git:unlink rm -f .git/HEAD
try git:rename-dir mv .git moved-git
try git:read readable .git/HEAD
try undo:umount umount .git
try undo:remount mount -o remount,bind,rw .git
try undo:setattr setattr_rw .git
try undo:write-after write .git/config
try undo:clone-root clone_root
"#;

#[test]
fn a_child_cannot_write_git_inside_a_writable_cwd_nor_undo_the_mount() {
    let tree = Tree::new();
    let policy = git_policy(&tree);
    let sandbox = compile(&policy);
    let status = sandbox.status();
    assert_eq!(
        rule_of(&sandbox, &tree.path("work/.git")).enforced_by,
        EnforcedBy::ReadOnlyMount
    );
    assert_eq!(
        status.dropped_capabilities,
        [
            "CAP_SYS_ADMIN",
            "CAP_LINUX_IMMUTABLE",
            "CAP_DAC_READ_SEARCH"
        ]
    );
    assert!(status.mount_namespace.is_some() && status.no_new_entries_in.is_empty());
    for who in everyone() {
        let output = tree.run(&sandbox, who, "work", GIT_ATTEMPTS);
        assert_all(&output, "ALLOWED", &["cwd:create", "cwd:mkdir", "git:read"]);
        assert_all(
            &output,
            "REFUSED",
            &[
                "git:overwrite",
                "git:append",
                "git:absolute",
                "git:create",
                "git:mkdir",
                "git:unlink",
                "git:rename-dir",
                "undo:umount",
                "undo:remount",
                "undo:setattr",
                "undo:write-after",
                "undo:clone-root",
            ],
        );
        fs::remove_file(tree.path("work/new.txt")).unwrap();
        fs::remove_dir(tree.path("work/newdir")).unwrap();
    }
    tree.unchanged("work/.git/HEAD");
    tree.unchanged("work/.git/config");
    assert!(
        !tree.path("work/.git/objects/evil").exists() && !tree.path("work/.git/hooks").exists()
    );
}

#[test]
fn the_cover_keeps_git_read_only_without_mounts_but_forbids_new_entries_in_the_cwd() {
    let tree = Tree::new();
    let mut policy = Policy::new();
    policy.narrowing = Narrowing::Cover;
    policy
        .rule("/", Access::Read, "everything readable")
        .rule(tree.path("work"), Access::Write, "the workspace")
        .rule(tree.path("work/.git"), Access::Read, "git metadata");
    let sandbox = compile(&policy);
    assert!(sandbox.status().mount_namespace.is_none());
    assert_eq!(sandbox.status().no_new_entries_in, [tree.path("work")]);
    let output = tree.run(
        &sandbox,
        Who::Me,
        "work",
        "try git:overwrite write .git/config\ntry src:create write src/new.txt\ntry cwd:create write new.txt",
    );
    assert_all(&output, "REFUSED", &["git:overwrite", "cwd:create"]);
    assert_all(&output, "ALLOWED", &["src:create"]);
    tree.unchanged("work/.git/config");
}

#[test]
fn a_writable_project_inside_a_read_only_home_is_writable_again() {
    let tree = Tree::new();
    let mut policy = Policy::new();
    policy
        .rule("/", Access::Write, "everything")
        .rule(tree.path("home"), Access::Read, "the home")
        .rule(tree.path("home/project"), Access::Write, "the project");
    let sandbox = compile(&policy);
    assert_eq!(
        rule_of(&sandbox, &tree.path("home")).enforced_by,
        EnforcedBy::ReadOnlyMount
    );
    assert_eq!(
        rule_of(&sandbox, &tree.path("home/project")).enforced_by,
        EnforcedBy::ExposedByMount
    );
    for who in everyone() {
        let output = tree.run(
            &sandbox,
            who,
            "home",
            r#"
try home:create write new.txt
try home:overwrite write existing.txt
try project:create write project/new.txt
try project:mkdir mkdir project/sub
try elsewhere:create write "$B/outside/new.txt"
"#,
        );
        assert_all(&output, "REFUSED", &["home:create", "home:overwrite"]);
        assert_all(
            &output,
            "ALLOWED",
            &["project:create", "project:mkdir", "elsewhere:create"],
        );
        for f in ["home/project/new.txt", "outside/new.txt"] {
            fs::remove_file(tree.path(f)).unwrap();
        }
        fs::remove_dir(tree.path("home/project/sub")).unwrap();
    }
    tree.unchanged("home/existing.txt");
}

#[test]
fn a_private_dev_shm_is_empty_writable_and_gone_with_the_child() {
    let tree = Tree::new();
    let marker = format!("cleanroom-policy-{}", std::process::id());
    let host_file = Path::new("/dev/shm").join(format!("{marker}-host"));
    fs::write(&host_file, PRECIOUS).unwrap();
    let _remove = RemoveOnDrop(host_file.clone());
    let mut policy = Policy::new();
    policy.private_dev_shm = true;
    policy.rule("/", Access::Read, "everything readable");
    let sandbox = compile(&policy);
    assert_eq!(sandbox.status().dev_shm, Isolation::Private);
    for who in everyone() {
        let output = tree.run(
            &sandbox,
            who,
            "work",
            &format!(
                "try shm:create write /dev/shm/{marker}-child\n\
                 try shm:host-visible test -e /dev/shm/{marker}-host\n\
                 try shm:lock python3 -c 'import multiprocessing; l = multiprocessing.Lock(); l.acquire(); l.release()'\n"
            ),
        );
        assert_all(&output, "ALLOWED", &["shm:create", "shm:lock"]);
        assert_all(&output, "REFUSED", &["shm:host-visible"]);
        assert!(!Path::new("/dev/shm")
            .join(format!("{marker}-child"))
            .exists());
    }
    assert_eq!(fs::read_to_string(&host_file).unwrap(), PRECIOUS);
}

#[test]
fn an_established_sandbox_shares_its_dev_shm_and_no_child_can_change_it_for_the_next() {
    let tree = Tree::new();
    let marker = format!("cleanroom-established-{}", std::process::id());
    let mut policy = git_policy(&tree);
    policy.private_dev_shm = true;
    policy.narrowing = Narrowing::Cover;
    let sandbox = compile(&policy)
        .established()
        .expect("establish the sandbox");
    assert_eq!(sandbox.status().dev_shm, Isolation::Private);
    assert_eq!(
        sandbox.status().dropped_capabilities,
        [
            "CAP_SYS_ADMIN",
            "CAP_LINUX_IMMUTABLE",
            "CAP_DAC_READ_SEARCH"
        ]
    );
    // Joining needs the identity the namespaces were made with: the spawner's own.
    let first = tree.run(
        &sandbox,
        Who::Me,
        "work",
        &format!(
            "try shm:create write /dev/shm/{marker}\n\
             try git:overwrite write .git/config\n\
             try undo:setattr-shm perl -e 'my ($p, $a) = (\"/dev/shm\", pack(\"QQQQ\", 1, 0, 0, 0)); syscall(442, -100, $p, 0x8000, $a, 32) == 0 or die \"$!\\n\"'\n\
             try undo:umount-shm umount /dev/shm\n\
             try undo:clone-root clone_root\n"
        ),
    );
    assert_all(&first, "ALLOWED", &["shm:create"]);
    assert_all(
        &first,
        "REFUSED",
        &[
            "git:overwrite",
            "undo:setattr-shm",
            "undo:umount-shm",
            "undo:clone-root",
        ],
    );
    let second = tree.run(
        &sandbox,
        Who::Me,
        "work",
        &format!(
            "try shm:shared test -e /dev/shm/{marker}\n\
             try shm:still-writable write /dev/shm/{marker}-2\n\
             try shm:outside write $B/outside/x\n"
        ),
    );
    assert_all(&second, "ALLOWED", &["shm:shared", "shm:still-writable"]);
    assert_all(&second, "REFUSED", &["shm:outside"]);
    assert!(
        !Path::new("/dev/shm").join(&marker).exists(),
        "leaked into the host"
    );
    tree.unchanged("work/.git/config");
}

#[test]
fn a_sandbox_narrowed_by_mounts_is_not_established() {
    let tree = Tree::new();
    let policy = git_policy(&tree);
    let sandbox = compile(&policy);
    assert_eq!(
        rule_of(&sandbox, &tree.path("work/.git")).enforced_by,
        EnforcedBy::ReadOnlyMount
    );
    match sandbox.established() {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("mounts"), "{what}"),
        other => panic!("established: {other:?}"),
    }
}

/// A private `/tmp` backed by a fresh directory of the tree (one compiled sandbox mounts its
/// overlay once: a volatile overlay's work directory is never reused).
fn private_tmp(tree: &Tree, name: &str) -> PrivateTmp {
    let backing = tree.path(name);
    fs::create_dir(&backing).unwrap();
    PrivateTmp {
        backing,
        own: Vec::new(),
        shared: Vec::new(),
        sockets: Vec::new(),
    }
}

#[test]
fn a_private_tmp_shows_the_hosts_entries_and_keeps_every_write_in_its_backing() {
    let tree = Tree::new();
    let marker = format!("cleanroom-private-tmp-{}", std::process::id());
    let host_file = Path::new("/tmp").join(format!("{marker}-host"));
    fs::write(&host_file, PRECIOUS).unwrap();
    let _remove = RemoveOnDrop(host_file.clone());
    let mut policy = Policy::new();
    policy.rule("/", Access::Read, "everything readable").rule(
        tree.path("work"),
        Access::Write,
        "the workspace",
    );
    policy.private_tmp = Some(private_tmp(&tree, "root"));
    let sandbox = compile(&policy);
    let tmp = &sandbox.status().tmp;
    assert_eq!(tmp.isolation, Isolation::Private);
    let slash_tmp = tmp
        .dirs
        .iter()
        .find(|d| d.path == Path::new("/tmp"))
        .unwrap();
    assert_eq!(slash_tmp.mechanism, TmpMechanism::Overlay);
    assert!(tmp.shared.contains(&tree.path("work")), "{tmp:?}");
    assert_eq!(
        sandbox.status().dropped_capabilities,
        [
            "CAP_SYS_ADMIN",
            "CAP_LINUX_IMMUTABLE",
            "CAP_DAC_READ_SEARCH"
        ]
    );
    let output = tree.run(
        &sandbox,
        Who::Me,
        "work",
        &format!(
            "try tmp:create write /tmp/{marker}-new\n\
             try tmp:read-host readable /tmp/{marker}-host\n\
             try tmp:overwrite-host write /tmp/{marker}-host\n\
             try tmp:remove-host rm /tmp/{marker}-host\n\
             try work:write write $B/work/made\n\
             try outside:private-write write $B/outside/made\n\
             try undo:clone-root clone_root\n"
        ),
    );
    assert_all(
        &output,
        "ALLOWED",
        &[
            "tmp:create",
            "tmp:read-host",
            "tmp:overwrite-host",
            "tmp:remove-host",
            "work:write",
            "outside:private-write",
        ],
    );
    assert_all(&output, "REFUSED", &["undo:clone-root"]);
    assert_eq!(fs::read_to_string(&host_file).unwrap(), PRECIOUS);
    assert!(!Path::new("/tmp").join(format!("{marker}-new")).exists());
    assert!(slash_tmp.backing.join(format!("{marker}-new")).exists());
    assert!(
        tree.path("work/made").exists(),
        "the workspace is the host's"
    );
    // Beneath /tmp but named by no rule: the overlay's, so the write stayed private.
    assert!(!tree.path("outside/made").exists());
}

#[test]
fn an_established_private_tmp_is_shared_and_a_managed_rule_on_tmp_grants_inside_it() {
    let tree = Tree::new();
    let marker = format!("cleanroom-shared-tmp-{}", std::process::id());
    let mut policy = Policy::new();
    policy.rule("/", Access::Write, "everything writable");
    policy.private_tmp = Some(private_tmp(&tree, "root"));
    policy.private_ipc = true;
    let sandbox = compile(&policy)
        .established()
        .expect("establish the sandbox");
    assert_eq!(sandbox.status().ipc, Isolation::Private);
    let first = tree.run(
        &sandbox,
        Who::Me,
        "work",
        &format!("try tmp:create write /tmp/{marker}\n"),
    );
    assert_all(&first, "ALLOWED", &["tmp:create"]);
    // A process with a policy of its own inside the environment (the exec-server's managed
    // sandboxes): its rule on /tmp was opened outside, on the host's /tmp; it must grant the
    // private one it sees.
    let mut managed = Policy::new();
    managed.rule("/", Access::Read, "everything readable").rule(
        "/tmp",
        Access::Write,
        "the temporary directory",
    );
    let inner = compile(&managed).within(&sandbox);
    let second = tree.run(
        &inner,
        Who::Me,
        "work",
        &format!(
            "try tmp:shared test -e /tmp/{marker}\n\
             try tmp:managed-write write /tmp/{marker}-managed\n\
             try etc:write write /etc/{marker}\n"
        ),
    );
    assert_all(&second, "ALLOWED", &["tmp:shared", "tmp:managed-write"]);
    assert_all(&second, "REFUSED", &["etc:write"]);
    for name in [marker.clone(), format!("{marker}-managed")] {
        assert!(
            !Path::new("/tmp").join(&name).exists(),
            "{name} on the host"
        );
    }
}

/// Removes a file the test made outside its temporary directory, even when the test fails.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[test]
fn a_loopback_network_gets_a_fresh_sysfs_that_keeps_its_submounts() {
    let tree = Tree::new();
    let mut policy = Policy::new();
    policy.network = Network::Loopback;
    policy.rule("/", Access::Read, "everything readable");
    let sandbox = compile(&policy);
    assert!(sandbox.status().fresh_sysfs);
    let cgroup = cleanroom::contain::cgroup2_mount().expect("cgroup2 is mounted here");
    for who in everyone() {
        let output = tree.run(
            &sandbox,
            who,
            "work",
            &format!(
                "echo net: $(ls /sys/class/net)\n\
                 try cgroup:present test -e {}/cgroup.controllers\n",
                cgroup.display()
            ),
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("net: lo\n"), "{stdout}");
        assert_all(&output, "ALLOWED", &["cgroup:present"]);
    }
}

#[test]
fn shapes_no_mechanism_can_enforce_are_refused() {
    let tree = Tree::new();
    let mut policy = Policy::new();
    policy
        .rule("/", Access::Read, "everything readable")
        .rule(tree.path("secret"), Access::None, "hidden")
        .rule(tree.path("secret/key.txt"), Access::Read, "re-exposed");
    let err = Sandbox::compile(&policy).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { reason, .. } if reason.contains("key.txt")),
        "{err:?}"
    );
    policy.rules.push(cleanroom::protect::Rule {
        path: "relative".into(),
        access: Access::Read,
        reason: "bad".into(),
    });
    assert!(matches!(Sandbox::compile(&policy), Err(Error::Invalid(_))));
}

#[test]
fn without_a_mount_namespace_mounts_are_refused_or_replaced_by_the_cover() {
    run_scenario("no_mount_namespace_scenario", TEST_NO_MOUNT_NS_ENV, "1");
}

#[test]
#[ignore = "run by without_a_mount_namespace_mounts_are_refused_or_replaced_by_the_cover"]
fn no_mount_namespace_scenario() {
    require_switch(TEST_NO_MOUNT_NS_ENV, "1");
    let tree = Tree::new();
    let mut policy = Policy::new();
    policy.private_dev_shm = true;
    policy
        .rule("/", Access::Read, "everything readable")
        .rule(tree.path("work"), Access::Write, "the workspace")
        .rule(tree.path("work/.git"), Access::Read, "git metadata");
    let err = Sandbox::compile(&policy).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { reason, .. } if reason.contains(TEST_NO_MOUNT_NS_ENV)),
        "{err:?}"
    );
    policy.narrowing = Narrowing::MountElseCover;
    let sandbox = compile(&policy);
    let status = sandbox.status();
    assert_eq!(
        rule_of(&sandbox, &tree.path("work/.git")).enforced_by,
        EnforcedBy::Cover
    );
    assert!(
        matches!(&status.dev_shm, Isolation::HostFallback { .. }),
        "{:?}",
        status.dev_shm
    );
    let output = tree.run(
        &sandbox,
        Who::Me,
        "work",
        "try git:overwrite write .git/config\ntry shm:create write /dev/shm/cleanroom-policy-no-mount",
    );
    assert_all(&output, "REFUSED", &["git:overwrite", "shm:create"]);
    tree.unchanged("work/.git/config");
    scenario_done("no_mount_namespace_scenario");
}

#[test]
fn without_landlock_a_policy_is_refused_unless_best_effort() {
    run_scenario("no_landlock_scenario", TEST_LANDLOCK_ABSENT_ENV, "1");
}

#[test]
#[ignore = "run by without_landlock_a_policy_is_refused_unless_best_effort"]
fn no_landlock_scenario() {
    require_switch(TEST_LANDLOCK_ABSENT_ENV, "1");
    let mut policy = Policy::new();
    policy.rule("/", Access::Read, "everything readable");
    assert!(matches!(
        Sandbox::compile(&policy),
        Err(Error::Unsupported { .. })
    ));
    policy.best_effort = true;
    let sandbox = compile(&policy);
    assert_eq!(sandbox.status().enforcement, Enforcement::None);
    assert!(sandbox
        .status()
        .rules
        .iter()
        .all(|r| r.enforced_by == EnforcedBy::NotEnforced));
    scenario_done("no_landlock_scenario");
}

#[test]
fn rule_paths_inside_the_hosts_dev_shm_stay_shared_with_their_rules_in_a_private_one() {
    let dir = tempfile::Builder::new()
        .prefix("cleanroom-policy-shm-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let base = dir.path().canonicalize().unwrap();
    let kept = base.join("kept");
    fs::create_dir_all(kept.join("guarded")).unwrap();
    fs::write(kept.join("guarded/file.txt"), PRECIOUS).unwrap();
    fs::write(base.join("beside.txt"), PRECIOUS).unwrap();
    chmod_all(&base);
    let top_level = format!("/dev/shm/cleanroom-policy-top-{}", std::process::id());
    let _remove = RemoveOnDrop(PathBuf::from(&top_level));
    let mut policy = Policy::new();
    policy.private_dev_shm = true;
    policy
        .rule("/", Access::Read, "everything readable")
        .rule(&kept, Access::Write, "a workspace in /dev/shm")
        .rule(kept.join("guarded"), Access::Read, "read-only inside it");
    let sandbox = compile(&policy);
    assert_eq!(
        rule_of(&sandbox, &base).enforced_by,
        EnforcedBy::ReadOnlyMount
    );
    assert_eq!(
        rule_of(&sandbox, &kept).enforced_by,
        EnforcedBy::ExposedByMount
    );
    assert_eq!(
        rule_of(&sandbox, &kept.join("guarded")).enforced_by,
        EnforcedBy::ReadOnlyMount
    );
    for who in everyone() {
        let mut command = Command::new("sh");
        command
            .args([
                "-c",
                &format!(
                    "{TRY}\ntry kept:create write new.txt\ntry beside:visible test -e ../beside.txt\n\
                     try beside:create write ../made-in-run.txt\ntry guarded:overwrite write guarded/file.txt\n\
                     try guarded:create write guarded/new.txt\ntry shm:create write {top_level}\n"
                ),
            ])
            .current_dir(&kept);
        if who == Who::Nobody {
            drop_to_nobody(&mut command);
        }
        sandbox.configure(&mut command);
        let output = command.output().unwrap();
        assert_all(
            &output,
            "ALLOWED",
            &["kept:create", "beside:visible", "shm:create"],
        );
        assert_all(
            &output,
            "REFUSED",
            &["beside:create", "guarded:overwrite", "guarded:create"],
        );
        assert_eq!(fs::read_to_string(kept.join("new.txt")).unwrap(), "new\n");
        fs::remove_file(kept.join("new.txt")).unwrap();
        assert_eq!(
            fs::read_to_string(kept.join("guarded/file.txt")).unwrap(),
            PRECIOUS
        );
        assert!(
            !Path::new(&top_level).exists(),
            "a file of the private /dev/shm leaked"
        );
    }
}
