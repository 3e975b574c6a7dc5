//! The unix sockets bound to a path in the caller's network namespace that accept connections
//! (listening stream and seqpacket sockets, unconnected datagram sockets), asked of the kernel's
//! `sock_diag` netlink interface with the path each was bound to (`UNIX_DIAG_NAME`) and the
//! device and inode of its socket file (`UNIX_DIAG_VFS`).
//!
//! Invariant: a path is reported with the identity of the file the socket was bound to, so a
//! caller trusts a name only when the file there now is that socket. (`/proc/net/unix` prints a
//! path as it is, newlines included, so another user could forge lines in it.)

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::child::Identity;

/// `SOCK_DIAG_BY_FAMILY` from `<linux/sock_diag.h>`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `UDIAG_SHOW_NAME`, `UDIAG_SHOW_VFS`, `UNIX_DIAG_NAME` and `UNIX_DIAG_VFS` from
/// `<linux/unix_diag.h>`.
const UDIAG_SHOW_NAME: u32 = 0x01;
const UDIAG_SHOW_VFS: u32 = 0x02;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
/// Socket states (`TCP_LISTEN`, `TCP_CLOSE`: an unconnected socket).
const TCP_LISTEN: u8 = 10;
const TCP_CLOSE: u8 = 7;
/// `NLMSG_DONE` and `NLMSG_ERROR`.
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;

/// A socket that accepts connections at a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    /// The path it was bound to (as the binder spelt it).
    pub path: PathBuf,
    /// Its socket file.
    pub identity: Identity,
}

/// The sockets of the caller's network namespace that accept connections at a path.
pub(crate) fn accepting() -> io::Result<Vec<Bound>> {
    use rustix::net::{netlink, AddressFamily, RecvFlags, SocketFlags, SocketType};
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    send_request(&socket)?;
    let mut found = Vec::new();
    // Room for the largest datagram a dump sends, never zeroed: the kernel writes what it sends
    // (a few hundred bytes on most machines), and zeroing 64 KiB first touched 16 pages of
    // every run.
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        // recv writes into the whole capacity and sets the length to what it wrote.
        buf.clear();
        let spare = rustix::buffer::spare_capacity(&mut buf);
        match rustix::net::recv(&socket, spare, RecvFlags::empty()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if parse(&buf, &mut found)? {
            return Ok(found);
        }
    }
}

/// Asks for every unix socket that listens or is unconnected, with its name and file.
fn send_request(socket: &OwnedFd) -> io::Result<()> {
    let states: u32 = 1 << TCP_LISTEN | 1 << TCP_CLOSE;
    let mut request = Vec::with_capacity(40);
    request.extend_from_slice(&40u32.to_ne_bytes()); // nlmsg_len
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes()); // nlmsg_type
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    request.extend_from_slice(&flags.to_ne_bytes()); // nlmsg_flags
    request.extend_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq
    request.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
                                                    // struct unix_diag_req: family, protocol, pad, states, ino, show, cookie[2].
    request.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]);
    request.extend_from_slice(&states.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    request.extend_from_slice(&u32::MAX.to_ne_bytes());
    request.extend_from_slice(&u32::MAX.to_ne_bytes());
    let sent = rustix::net::send(socket, &request, rustix::net::SendFlags::empty())?;
    if sent != request.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// Parses one datagram of the dump into `found`; `true` once the dump is done.
fn parse(data: &[u8], found: &mut Vec<Bound>) -> io::Result<bool> {
    let u16_at = |at: usize| {
        data.get(at..at + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        data.get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut at = 0;
    while at + 16 <= data.len() {
        let (Some(len), Some(kind)) = (u32_at(at), u16_at(at + 4)) else {
            break;
        };
        let len = len as usize;
        if len < 16 || at + len > data.len() {
            break;
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(at + 16).map_or(libc::EIO, |e| -(e as i32));
                return Err(io::Error::from_raw_os_error(errno));
            }
            _ => found.extend(socket(&data[at + 16..at + len])),
        }
        at += (len + 3) & !3;
    }
    Ok(false)
}

/// One `unix_diag_msg` with its attributes, if it accepts connections at a path.
fn socket(msg: &[u8]) -> Option<Bound> {
    // struct unix_diag_msg: family, type, state, pad, ino, cookie[2].
    let (kind, state) = (i32::from(*msg.get(1)?), *msg.get(2)?);
    let accepts = match kind {
        libc::SOCK_STREAM | libc::SOCK_SEQPACKET => state == TCP_LISTEN,
        libc::SOCK_DGRAM => state == TCP_CLOSE,
        _ => false,
    };
    if !accepts {
        return None;
    }
    let mut path = None;
    let mut identity = None;
    let mut at = 16;
    while at + 4 <= msg.len() {
        let len = u16::from_ne_bytes([msg[at], msg[at + 1]]) as usize;
        let attr = u16::from_ne_bytes([msg[at + 2], msg[at + 3]]);
        if len < 4 || at + len > msg.len() {
            break;
        }
        let value = &msg[at + 4..at + len];
        match attr {
            UNIX_DIAG_NAME => {
                let name = value.split(|&b| b == 0).next().unwrap_or_default();
                // Abstract names start with a NUL byte: they have no path.
                if value.first() == Some(&b'/') {
                    path = Some(PathBuf::from(OsStr::from_bytes(name)));
                }
            }
            UNIX_DIAG_VFS if value.len() >= 8 => {
                let ino = u32::from_ne_bytes([value[0], value[1], value[2], value[3]]);
                let dev = u32::from_ne_bytes([value[4], value[5], value[6], value[7]]);
                identity = Some(Identity {
                    dev: user_dev(dev),
                    ino: u64::from(ino),
                });
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Some(Bound {
        path: path?,
        identity: identity?,
    })
}

/// The device number `stat` reports for the kernel's internal `dev_t` (major above 20 bits).
fn user_dev(kernel: u32) -> u64 {
    libc::makedev(kernel >> 20, kernel & 0xf_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_listening_socket_is_found_with_the_identity_of_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s\nforged");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let found = accepting().unwrap();
        let mine: Vec<&Bound> = found.iter().filter(|b| b.path == path).collect();
        assert_eq!(mine.len(), 1, "{found:?}");
        assert_eq!(
            mine[0].identity,
            Identity {
                dev: meta.dev(),
                ino: meta.ino()
            }
        );
        assert!(!found
            .iter()
            .any(|b| b.path.ends_with("forged") && b.path != path));
        drop(listener);
    }
}
