//! The removal walk (`cleanroom::remove`) against real trees, real mounts and real file modes.
//!
//! Each test owns a private namespace in a temporary directory and removes roots made by
//! `Root::create` through `remove_entry`, holding the root's directory as a run does. Tests that
//! need root (bind mounts, `chattr +i`) are counted skips elsewhere. Root normally ignores
//! file modes; the walks that must meet read-only and unreadable directories run on a thread that
//! has dropped the capabilities that let it (`as_plain_owner`), so modes bind it as they bind the
//! user who owns the tree. Bind mounts are made on a thread with its own mount namespace
//! (`with_own_mounts`): they vanish with the thread, even when the test fails.

mod support;

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cleanroom::marker::{Marker, MARKER_FILE};
use cleanroom::remove::{self, Persistence, Removal, RemovalStatus};
use cleanroom::{Namespace, Root, RootOptions};
use rustix::fs::{IFlags, Mode, OFlags};
use rustix::thread::{CapabilitySet, CapabilitySets};
use support::{root_or_skip, PRECIOUS};

/// One attempt, no retries, no deadline.
const ONCE: Persistence = Persistence {
    retries: false,
    deadline: None,
};

/// The directories `Root::create` makes (its layout without `homes`).
const LAYOUT_DIR_COUNT: u64 = cleanroom::root::LAYOUT_DIRS.len() as u64 - 1;

/// A private namespace and room outside it for the things a root's links point to.
struct Place {
    tmp: tempfile::TempDir,
    ns: Namespace,
}

/// A root as its run holds it: its name, its open directory (which holds the liveness lock)
/// and the marker it was created with.
struct Held {
    name: String,
    dir: OwnedFd,
    marker: Marker,
}

impl Place {
    fn new() -> Place {
        let tmp = tempfile::tempdir().unwrap();
        let ns = Namespace::open_or_create(&tmp.path().join("ns")).unwrap();
        Place { tmp, ns }
    }

    /// A path beside the namespace.
    fn outside(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// A fresh root, held as its run holds it.
    fn root(&self) -> Held {
        let run_id = cleanroom::root::new_run_id().unwrap();
        let root = Root::create(&self.ns, &run_id, &RootOptions::default()).unwrap();
        let dir = root.dir().try_clone_to_owned().unwrap();
        let marker = root.marker().clone();
        let name = root
            .leave()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        Held { name, dir, marker }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.ns.path().join(name)
    }

    fn remove(&self, held: &Held, how: Persistence) -> Removal {
        remove::remove_entry(&self.ns, &held.name, &held.dir, &held.marker, how)
    }

    /// The namespace's entries, sorted.
    fn names(&self) -> Vec<String> {
        names_in(self.ns.path())
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn reason(removal: &Removal) -> &str {
    match &removal.status {
        RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) => reason,
        RemovalStatus::Removed => panic!("removed, not left over: {removal:?}"),
    }
}

/// Whether the root directory `held` carries exactly its own marker.
fn keeps_its_marker(held: &Held) -> bool {
    Marker::read(held.dir.as_fd(), &held.marker.user).as_ref() == Ok(&held.marker)
}

/// Runs `f` on a thread without the capabilities that let root ignore file modes, so a
/// directory without write or search permission stops it as it stops the tree's owner.
fn as_plain_owner<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            drop_mode_overrides();
            f()
        })
        .join()
        .unwrap()
    })
}

fn drop_mode_overrides() {
    let mut sets: CapabilitySets = rustix::thread::capabilities(None).unwrap();
    sets.effective -=
        CapabilitySet::DAC_OVERRIDE | CapabilitySet::DAC_READ_SEARCH | CapabilitySet::FOWNER;
    rustix::thread::set_capabilities(None, sets).unwrap();
}

/// Runs `f` on a thread with a private mount namespace (root only): what `f` mounts is seen by
/// nobody else and is gone when the thread ends.
fn with_own_mounts<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: plain syscalls on C strings that outlive them; CLONE_NEWNS (with the
            // CLONE_FS it implies) is allowed in a multi-threaded process and affects this thread.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare");
                let root = c"/".as_ptr();
                let flags = libc::MS_REC | libc::MS_PRIVATE;
                let made_private = libc::mount(
                    std::ptr::null(),
                    root,
                    std::ptr::null(),
                    flags,
                    std::ptr::null(),
                );
                assert_eq!(made_private, 0, "make the mounts private");
            }
            f()
        })
        .join()
        .unwrap()
    })
}

fn bind(source: &Path, target: &Path) {
    let source = CString::new(source.as_os_str().as_bytes()).unwrap();
    let target = CString::new(target.as_os_str().as_bytes()).unwrap();
    // SAFETY: as in `with_own_mounts`.
    let status = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    assert_eq!(status, 0, "bind mount: {}", std::io::Error::last_os_error());
}

/// `chattr +i`, undone on drop.
struct Immutable(fs::File);

impl Immutable {
    fn set(path: &Path) -> Immutable {
        let file = fs::File::open(path).unwrap();
        let flags = rustix::fs::ioctl_getflags(file.as_fd()).unwrap();
        rustix::fs::ioctl_setflags(file.as_fd(), flags | IFlags::IMMUTABLE).unwrap();
        Immutable(file)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let flags = rustix::fs::ioctl_getflags(self.0.as_fd()).unwrap();
        rustix::fs::ioctl_setflags(self.0.as_fd(), flags - IFlags::IMMUTABLE).unwrap();
    }
}

/// Pins `file` (in a root): immutable, with a second link outside the root, so the removal,
/// which clears the flags only of what is the root's alone, cannot unlink it.
fn pin(place: &Place, file: &Path) -> Immutable {
    let name = format!("pin-{}", file.file_name().unwrap().to_string_lossy());
    fs::hard_link(file, place.outside(&name)).unwrap();
    Immutable::set(file)
}

/// Something outside every root that links in a root point to: a directory with a file, and a
/// file. Returns both.
fn victims(place: &Place) -> (PathBuf, PathBuf) {
    let dir = place.outside("victim-dir");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("keep.txt"), PRECIOUS).unwrap();
    let file = place.outside("victim-file");
    fs::write(&file, PRECIOUS).unwrap();
    (dir, file)
}

fn assert_victims_intact(dir: &Path, file: &Path) {
    assert_eq!(names_in(dir), vec!["keep.txt"]);
    assert_eq!(fs::read_to_string(dir.join("keep.txt")).unwrap(), PRECIOUS);
    assert_eq!(fs::read_to_string(file).unwrap(), PRECIOUS);
    assert_eq!(
        fs::metadata(file).unwrap().nlink(),
        1,
        "its hard link is gone"
    );
}

#[test]
fn every_kind_of_entry_goes_in_one_walk_and_nothing_outside_is_touched() {
    let place = Place::new();
    let (victim_dir, victim_file) = victims(&place);
    let held = place.root();
    let top = place.path(&held.name);
    let home = top.join("home");
    // Counted below: 12 non-directories (files, links, a fifo) and 8 directories besides the
    // layout.
    fs::create_dir_all(home.join("a/b/c")).unwrap();
    for (i, dir) in ["a", "a/b", "a/b/c"].iter().enumerate() {
        fs::write(home.join(dir).join(format!("f{i}")), "x").unwrap();
    }
    fs::create_dir(home.join("empty")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, home.join("to-dir")).unwrap();
    std::os::unix::fs::symlink(&victim_file, home.join("to-file")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/dangling", home.join("dangling")).unwrap();
    fs::hard_link(&victim_file, home.join("hard")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        home.join("fifo"),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // A directory under the marker's name below the top is content like any other.
    fs::create_dir(home.join(MARKER_FILE)).unwrap();
    fs::write(home.join(MARKER_FILE).join("inside"), "x").unwrap();
    // Read-only, write-only and unreadable directories with contents, and a read-only top.
    for (dir, mode) in [("ro", 0o555), ("wo", 0o300), ("sealed", 0o000)] {
        fs::create_dir(home.join(dir)).unwrap();
        fs::write(home.join(dir).join("f"), "x").unwrap();
        chmod(&home.join(dir), mode);
    }
    chmod(&top, 0o555);

    let removal = as_plain_owner(|| place.remove(&held, Persistence::FULL));

    assert!(removal.is_removed(), "{removal:?}");
    assert_eq!(removal.path, place.path(&format!(".trash-{}", held.name)));
    assert_eq!(removal.attempts, 1, "{removal:?}");
    assert_eq!(removal.stats.files, 12, "{removal:?}");
    assert_eq!(removal.stats.dirs, LAYOUT_DIR_COUNT + 8, "{removal:?}");
    assert!(removal.stats.errors.is_empty() && removal.stats.mounts.is_empty());
    assert_eq!(place.names(), Vec::<String>::new());
    assert_victims_intact(&victim_dir, &victim_file);
}

#[test]
fn a_root_that_lost_or_replaced_its_marker_is_still_removed() {
    let place = Place::new();
    let deleted = place.root();
    fs::remove_file(place.path(&deleted.name).join(MARKER_FILE)).unwrap();
    let replaced = place.root();
    let marker = place.path(&replaced.name).join(MARKER_FILE);
    fs::remove_file(&marker).unwrap();
    fs::create_dir(&marker).unwrap();
    fs::write(marker.join("f"), "x").unwrap();

    for held in [&deleted, &replaced] {
        let removal = place.remove(held, Persistence::FULL);
        assert!(removal.is_removed(), "{removal:?}");
        assert_eq!(removal.attempts, 1, "{removal:?}");
    }
    assert_eq!(place.names(), Vec::<String>::new());
}

#[test]
fn an_entry_that_is_not_the_held_directory_is_refused_untouched() {
    let place = Place::new();
    let mine = place.root();
    let other = place.root();
    let other_path = place.path(&other.name);
    fs::write(other_path.join("home/data"), PRECIOUS).unwrap();
    // The name now denotes another root (ours moved away), then a symlink to ours.
    let moved = place.path("moved-away");
    fs::rename(place.path(&mine.name), &moved).unwrap();
    fs::rename(&other_path, place.path(&mine.name)).unwrap();
    let refused = place.remove(&mine, Persistence::FULL);
    fs::rename(place.path(&mine.name), &other_path).unwrap();
    std::os::unix::fs::symlink(&moved, place.path(&mine.name)).unwrap();
    let via_symlink = place.remove(&mine, Persistence::FULL);

    for removal in [&refused, &via_symlink] {
        assert!(
            matches!(removal.status, RemovalStatus::Refused(_)),
            "{removal:?}"
        );
        assert!(reason(removal).contains("no longer the directory this process owns"));
        assert_eq!(removal.path, place.path(&mine.name));
        assert_eq!(removal.attempts, 0);
    }
    assert_eq!(
        fs::read_to_string(other_path.join("home/data")).unwrap(),
        PRECIOUS
    );
    assert!(moved.join(MARKER_FILE).is_file() && keeps_its_marker(&mine));
    fs::remove_file(place.path(&mine.name)).unwrap();
}

#[test]
fn a_taken_quarantine_name_is_never_replaced_and_the_tree_goes_under_its_own_name() {
    let place = Place::new();
    let held = place.root();
    let squatter = place.path(&remove::trash_name(&held.name));
    fs::write(&squatter, PRECIOUS).unwrap();

    let removal = place.remove(&held, Persistence::FULL);

    assert!(removal.is_removed(), "{removal:?}");
    assert_eq!(removal.path, place.path(&held.name));
    assert_eq!(fs::read_to_string(&squatter).unwrap(), PRECIOUS);
    assert_eq!(
        place.names(),
        vec![squatter.file_name().unwrap().to_str().unwrap()]
    );
    assert_eq!(remove::trash_name(".pending-run-x"), ".trash-run-x");
    assert_eq!(remove::trash_name(".trash-run-x"), ".trash-run-x");
}

#[test]
fn mounts_inside_a_root_are_left_in_place_unopened_and_the_leftover_keeps_its_proof() {
    if !root_or_skip("bind mounts") {
        return;
    }
    let place = Place::new();
    let (victim, victim_file) = victims(&place);
    let sealed = place.outside("sealed-victim");
    fs::create_dir(&sealed).unwrap();
    fs::write(sealed.join("keep.txt"), PRECIOUS).unwrap();
    chmod(&sealed, 0o000);
    let held = place.root();
    let top = place.path(&held.name);
    let home = top.join("home");
    for dir in ["mnt", "sealed", "locked/inner"] {
        fs::create_dir_all(home.join(dir)).unwrap();
    }
    fs::write(home.join("file"), "x").unwrap();
    let marker_inode = fs::metadata(top.join(MARKER_FILE)).unwrap().ino();

    let removal = with_own_mounts(|| {
        bind(&victim, &home.join("mnt"));
        bind(&sealed, &home.join("sealed"));
        bind(&victim, &home.join("locked/inner"));
        chmod(&home.join("locked"), 0o000);
        chmod(&home, 0o555);
        chmod(&top, 0o555);
        // A descriptor opened before the mounts' namespace existed does not see them (its
        // lookups stay in the old namespace): the walk gets the root as this namespace has it.
        let seen = Held {
            dir: open_dir(rustix::fs::CWD, &top),
            name: held.name.clone(),
            marker: held.marker.clone(),
        };
        as_plain_owner(|| place.remove(&seen, Persistence::FULL))
    });

    let trash = place.path(&format!(".trash-{}", held.name));
    let mut mounts = removal.stats.mounts.clone();
    mounts.sort();
    let expected: Vec<PathBuf> = ["home/locked/inner", "home/mnt", "home/sealed"]
        .iter()
        .map(|m| trash.join(m))
        .collect();
    assert_eq!(mounts, expected, "{removal:?}");
    // Giving up lists the mounts among the errors; nothing else (their parents' failed rmdir
    // is not reported on top).
    assert_eq!(removal.stats.errors.len(), 3, "{removal:?}");
    assert_eq!(removal.attempts, 1, "a mount does not go away by waiting");
    let reasons: Vec<&str> = reason(&removal).split("; ").collect();
    assert_eq!(reasons.len(), 3, "{removal:?}");
    assert!(reasons
        .iter()
        .all(|r| r.ends_with(": a mount point, left in place")));
    assert_victims_intact(&victim, &victim_file);
    assert_eq!(mode_of(&sealed), 0o000, "a mounted directory was chmodded");
    // What is left is only the way to the mounts, made writable (owner bits only) and marked with
    // the very marker it was created with.
    assert_eq!(names_in(&trash), vec![MARKER_FILE, "home"]);
    assert_eq!(
        names_in(&trash.join("home")),
        vec!["locked", "mnt", "sealed"]
    );
    assert_eq!(mode_of(&trash), 0o755);
    assert_eq!(mode_of(&trash.join("home")), 0o755);
    assert_eq!(mode_of(&trash.join("home/locked")), 0o700);
    assert_eq!(
        fs::metadata(trash.join(MARKER_FILE)).unwrap().ino(),
        marker_inode
    );
    assert!(keeps_its_marker(&held));

    // The mounts went with the thread: the quarantined leftover goes under its own name.
    let again = Held {
        name: trash.file_name().unwrap().to_str().unwrap().to_string(),
        ..held
    };
    let removal = place.remove(&again, Persistence::FULL);
    assert!(removal.is_removed(), "{removal:?}");
    assert_eq!(removal.path, trash);
    assert_eq!(place.names(), Vec::<String>::new());
    chmod(&sealed, 0o700);
}

#[test]
fn a_walk_that_cannot_finish_retries_on_schedule_then_restores_the_marker() {
    if !root_or_skip("chattr +i") {
        return;
    }
    let place = Place::new();
    let outside = place.outside("linked-marker");
    fs::write(&outside, PRECIOUS).unwrap();
    let held = place.root();
    let top = place.path(&held.name);
    let pinned: Vec<Immutable> = (0..5)
        .map(|i| {
            let file = top.join(format!("home/pinned-{i}"));
            fs::write(&file, "x").unwrap();
            pin(&place, &file)
        })
        .collect();
    // The run replaced its marker by a hard link to a file of its own.
    fs::remove_file(top.join(MARKER_FILE)).unwrap();
    fs::hard_link(&outside, top.join(MARKER_FILE)).unwrap();

    let once = place.remove(&held, ONCE);
    assert_eq!(once.attempts, 1, "{once:?}");
    assert_eq!(once.stats.errors.len(), 5, "{once:?}");
    assert!(reason(&once).ends_with(" (and 2 more)"), "{once:?}");
    assert_eq!(reason(&once).split("; ").count(), 3, "{once:?}");
    assert!(keeps_its_marker(&held), "{once:?}");
    assert_eq!(fs::read_to_string(&outside).unwrap(), PRECIOUS);

    // Quarantined now: the tree is removed under the name it has.
    let held = Held {
        name: remove::trash_name(&held.name),
        ..held
    };
    let started = Instant::now();
    let full = place.remove(&held, Persistence::FULL);
    assert_eq!(full.attempts, 6, "one walk and five retries: {full:?}");
    assert!(started.elapsed() >= Duration::from_millis(1610), "{full:?}");
    // With a deadline 500 ms away, the pauses of 10, 50 and 150 ms fit; the next (400) does not.
    let until = Persistence {
        retries: true,
        deadline: Some(Instant::now() + Duration::from_millis(500)),
    };
    let bounded = place.remove(&held, until);
    assert_eq!(bounded.attempts, 4, "{bounded:?}");
    assert!(!bounded.is_removed() && keeps_its_marker(&held));

    drop(pinned);
    let removal = place.remove(&held, Persistence::FULL);
    assert!(removal.is_removed(), "{removal:?}");
    assert_eq!(place.names(), Vec::<String>::new());
}

#[test]
fn a_root_that_cannot_be_unlinked_from_its_namespace_gets_its_marker_back() {
    if !root_or_skip("chattr +i") {
        return;
    }
    let place = Place::new();
    // Roots already quarantined (their names are not changed), one without its marker, one with
    // a directory in the marker's place that cannot be emptied.
    let mut roots = Vec::new();
    for _ in 0..3 {
        let held = place.root();
        let trash = remove::trash_name(&held.name);
        fs::rename(place.path(&held.name), place.path(&trash)).unwrap();
        roots.push(Held {
            name: trash,
            ..held
        });
    }
    fs::remove_file(place.path(&roots[1].name).join(MARKER_FILE)).unwrap();
    let in_place = place.path(&roots[2].name).join(MARKER_FILE);
    fs::remove_file(&in_place).unwrap();
    fs::create_dir(&in_place).unwrap();
    fs::write(in_place.join("pinned"), "x").unwrap();
    let pinned = pin(&place, &in_place.join("pinned"));
    let frozen = Immutable::set(place.ns.path());

    let removals: Vec<Removal> = roots.iter().map(|held| place.remove(held, ONCE)).collect();

    drop(frozen);
    for (held, removal) in roots.iter().zip(&removals).take(2) {
        assert!(
            reason(removal).contains("Operation not permitted"),
            "{removal:?}"
        );
        assert_eq!(names_in(&place.path(&held.name)), vec![MARKER_FILE]);
        assert!(keeps_its_marker(held), "{removal:?}");
    }
    assert!(
        reason(&removals[2]).contains("could not be restored: a directory is in its place"),
        "{:?}",
        removals[2]
    );
    drop(pinned);
    for held in &roots {
        assert!(place.remove(held, Persistence::FULL).is_removed());
    }
    assert_eq!(place.names(), Vec::<String>::new());
}

#[test]
fn a_walk_stops_at_its_deadline_and_a_later_one_finishes() {
    let place = Place::new();
    let held = place.root();
    let home = place.path(&held.name).join("home");
    for i in 0..600 {
        fs::write(home.join(format!("f{i}")), "x").unwrap();
    }
    let marker_inode = fs::metadata(place.path(&held.name).join(MARKER_FILE))
        .unwrap()
        .ino();
    let past = Persistence {
        retries: true,
        deadline: Some(Instant::now()),
    };

    let cut = place.remove(&held, past);

    assert!(cut.stats.interrupted, "{cut:?}");
    assert_eq!(cut.attempts, 1, "{cut:?}");
    assert_eq!(reason(&cut), "stopped at the time budget");
    let done = cut.stats.files + cut.stats.dirs;
    assert!(
        (1..256).contains(&done),
        "one look at the clock per 256 entries: {cut:?}"
    );
    assert_eq!(
        names_in(&cut.path.join("home")).len() as u64,
        600 - cut.stats.files
    );
    let trash = cut.path.clone();
    assert_eq!(
        fs::metadata(trash.join(MARKER_FILE)).unwrap().ino(),
        marker_inode
    );

    let held = Held {
        name: remove::trash_name(&held.name),
        ..held
    };
    let later = Persistence {
        retries: true,
        deadline: Some(Instant::now() + Duration::from_secs(600)),
    };
    let removal = place.remove(&held, later);
    assert!(removal.is_removed(), "{removal:?}");
    assert_eq!(removal.stats.files + cut.stats.files, 600);
    assert_eq!(place.names(), Vec::<String>::new());
}

/// Depth of the tree that is deeper than PATH_MAX and than the descriptor budget.
const DEPTH: u64 = 400;
const DEEP_NAME: &str = "a-directory-name-of-thirty-bytes";
const DEEP_HELPER_ENV: &str = "CLEANROOM_TEST_DEEP_TREE";

#[test]
fn a_tree_deeper_than_path_max_goes_with_a_bounded_number_of_descriptors() {
    let place = Place::new();
    let top = place.outside("deep");
    fs::create_dir(&top).unwrap();
    let mut dir: OwnedFd = open_dir(rustix::fs::CWD, &top);
    for _ in 0..DEPTH {
        rustix::fs::mkdirat(&dir, DEEP_NAME, Mode::from_raw_mode(0o755)).unwrap();
        let file = rustix::fs::openat(&dir, "file", OFlags::CREATE | OFlags::WRONLY, Mode::RUSR);
        drop(file.unwrap());
        dir = open_dir(&dir, Path::new(DEEP_NAME));
    }
    drop(dir);

    // In a process of its own, so that its descriptor limit binds nobody else.
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "deep_tree_helper", "--ignored", "--nocapture"])
        .env(DEEP_HELPER_ENV, &top)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = stdout
        .lines()
        .find_map(|l| l.strip_prefix("STATS "))
        .unwrap_or_else(|| panic!("no stats: {stdout}"));
    let stats: serde_json::Value = serde_json::from_str(stats).unwrap();
    assert_eq!(stats["files"], DEPTH, "{stats}");
    assert_eq!(stats["dirs"], DEPTH, "{stats}");
    assert_eq!(stats["errors"], serde_json::json!([]), "{stats}");
    assert_eq!(names_in(&top), Vec::<String>::new());
}

/// The body of the child process of the test above: walks the tree with just enough
/// descriptors for the walk's budget of 128 (plus the one it opens before closing another).
#[test]
#[ignore = "the child process of a_tree_deeper_than_path_max_goes_with_a_bounded_number_of_descriptors"]
fn deep_tree_helper() {
    let top = PathBuf::from(std::env::var_os(DEEP_HELPER_ENV).expect("run by the deep-tree test"));
    let dir = open_dir(rustix::fs::CWD, &top);
    let open_now = fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
    let limit = open_now + 129;
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(limit),
            maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
        },
    )
    .unwrap();
    let stats = remove::remove_contents(&dir, &top, None);
    println!("STATS {}", serde_json::to_string(&stats).unwrap());
}

fn open_dir<Fd: AsFd>(at: Fd, path: &Path) -> OwnedFd {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(at, path, flags, Mode::empty()).unwrap()
}
