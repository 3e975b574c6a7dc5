//! The root marker's file rules (docs/marker.md), through the library against real files: it is
//! written with `O_EXCL` (never replacing a file or following a symlink in its place), mode 0600
//! with one link, and read back whole up to 64 KiB, while a larger one is refused unread. (The
//! write-back of a removal that gives up relies on the first rule; gc.rs tests that end to end.)

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use cleanroom::marker::{
    Kept, Marker, KEPT_MARKER_VERSION, MARKER_FILE, MARKER_FORMAT, MARKER_VERSION, MAX_MARKER_BYTES,
};
use cleanroom::namespace::User;
use cleanroom::process::{Host, ProcessId};

fn marker(euid: u32, command: Vec<String>) -> Marker {
    Marker {
        format: MARKER_FORMAT.into(),
        version: MARKER_VERSION,
        run_id: "20261129T093000Z-0123456789abcdef".into(),
        user: User::Uid(euid),
        owner: ProcessId {
            pid: 42,
            start_time: 7,
        },
        host: Host {
            boot_id: "b".into(),
            pid_ns: 1,
            hostname: "h".into(),
        },
        created_unix_ms: 1,
        command,
        keep: false,
        cgroup: None,
        kept: None,
    }
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[test]
fn a_marker_is_written_once_private_and_never_over_a_file_or_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::File::open(dir.path()).unwrap();
    let first = marker(euid(), vec!["first".into()]);
    first.write(root.as_fd()).unwrap();
    let path = dir.path().join(MARKER_FILE);
    let meta = fs::symlink_metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.nlink(), 1);
    assert_eq!(
        Marker::read(root.as_fd(), &User::Uid(euid())).unwrap(),
        first
    );

    let second = marker(euid(), vec!["second".into()]);
    let err = second.write(root.as_fd()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
    assert_eq!(
        Marker::read(root.as_fd(), &User::Uid(euid())).unwrap(),
        first
    );

    fs::remove_file(&path).unwrap();
    let target = dir.path().join("elsewhere");
    fs::write(&target, "precious\n").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    assert!(second.write(root.as_fd()).is_err());
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");
}

#[test]
fn a_marker_up_to_64_kib_is_read_whole_and_a_larger_one_is_refused() {
    for (size, accepted) in [
        (60 * 1024, true),
        (MAX_MARKER_BYTES, true),
        (MAX_MARKER_BYTES + 1, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::File::open(dir.path()).unwrap();
        let mut written = marker(euid(), vec![String::new()]);
        // Size the command so the file is exactly `size` bytes.
        written.write(root.as_fd()).unwrap();
        let path = dir.path().join(MARKER_FILE);
        let overhead = fs::metadata(&path).unwrap().len();
        fs::remove_file(&path).unwrap();
        written.command = vec!["x".repeat((size - overhead) as usize)];
        written.write(root.as_fd()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), size);
        let read = Marker::read(root.as_fd(), &User::Uid(euid()));
        match accepted {
            true => assert_eq!(read.unwrap(), written),
            false => assert!(!read.unwrap_err().damaged, "too large is refused"),
        }
    }
}

#[test]
fn a_fifo_in_the_markers_place_is_refused_without_blocking_the_reader() {
    // A run could plant a FIFO under the marker's name: gc and list must not hang opening it.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join(MARKER_FILE);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
    let root = fs::File::open(dir.path()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Marker::read(root.as_fd(), &User::Uid(euid())));
    });
    // Only a bound on a hang, not a timing assertion: the read returns at once or never.
    let read = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("reading a FIFO marker blocked");
    let problem = read.unwrap_err();
    assert!(problem.damaged, "{problem}");
}

#[test]
fn a_linux_marker_is_written_byte_for_byte_as_before() {
    // The marker's text is a contract with other tools and older builds (docs/marker.md): the
    // exact bytes written for fixed inputs (captured from the build before the marker had one
    // definition for every platform), a version 1 marker with a cgroup and a version 2 marker
    // that records why its root was kept; each reads back as what was written.
    let dir = tempfile::tempdir().unwrap();
    let root = fs::File::open(dir.path()).unwrap();
    let path = dir.path().join(MARKER_FILE);
    let mut v1 = marker(1000, vec!["cargo".into(), "test".into()]);
    v1.cgroup = Some("/sys/fs/cgroup/cleanroom-20261129T093000Z-0123456789abcdef".into());
    let mut v2 = marker(1000, vec!["true".into()]);
    v2.version = KEPT_MARKER_VERSION;
    v2.keep = true;
    v2.kept = Some(Kept::OnFailure {
        exit_status: 3,
        retain: 5,
    });
    let golden = [
        (
            v1,
            concat!(
                r#"{"format":"cleanroom-root-marker","version":1,"#,
                r#""run_id":"20261129T093000Z-0123456789abcdef","euid":1000,"#,
                r#""owner":{"pid":42,"start_time":7},"#,
                r#""host":{"boot_id":"b","pid_ns":1,"hostname":"h"},"created_unix_ms":1,"#,
                r#""command":["cargo","test"],"keep":false,"#,
                r#""cgroup":"/sys/fs/cgroup/cleanroom-20261129T093000Z-0123456789abcdef"}"#,
                "\n"
            ),
        ),
        (
            v2,
            concat!(
                r#"{"format":"cleanroom-root-marker","version":2,"#,
                r#""run_id":"20261129T093000Z-0123456789abcdef","euid":1000,"#,
                r#""owner":{"pid":42,"start_time":7},"#,
                r#""host":{"boot_id":"b","pid_ns":1,"hostname":"h"},"created_unix_ms":1,"#,
                r#""command":["true"],"keep":true,"cgroup":null,"#,
                r#""kept":{"when":"on-failure","exit_status":3,"retain":5}}"#,
                "\n"
            ),
        ),
    ];
    for (written, text) in golden {
        written.write(root.as_fd()).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        assert_eq!(Marker::parse(text, &written.user).unwrap(), written);
        fs::remove_file(&path).unwrap();
    }
}
