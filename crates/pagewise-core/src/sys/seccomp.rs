//! seccomp(2) user notifications: a command started with [`spawn_notifying`] stops, in each of
//! its processes, before every syscall that can close a file (`close`, `close_range`, `dup2`,
//! `dup3`, `execve`, `execveat`, `exit_group`) until the supervisor ([`Notifier`]) has looked at
//! the descriptors and let it go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel then runs
//! the syscall as if nothing had happened). `run` and `record` use it to learn every file the
//! command reads while it still holds it open (see `trace::witness`): the tracepoints give only
//! a device and an inode, which no call can turn back into a file without privileges.
//!
//! Kernel versions: user notifications 5.0, `SECCOMP_USER_NOTIF_FLAG_CONTINUE` 5.5,
//! `SECCOMP_IOCTL_NOTIF_RECV` insisting on a zeroed buffer 5.9. Without CAP_SYS_ADMIN the
//! filter needs `PR_SET_NO_NEW_PRIVS` (set-user-ID programs the command starts then run with
//! the caller's privileges).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use super::{cvt, cvt_long};

const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// The syscalls that can close a file descriptor, on this architecture.
#[cfg(target_arch = "x86_64")]
const CLOSING: [libc::c_long; 7] = [
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit_group,
];
#[cfg(target_arch = "aarch64")]
const CLOSING: [libc::c_long; 6] = [
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_dup3,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit_group,
];

/// What a notified syscall is about to do to the descriptors of its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// `close(fd)`, or `dup2`/`dup3` onto `fd`.
    One(i32),
    /// `close_range(first, last, flags)`.
    Range(u32, u32),
    /// `execve`/`execveat` (close-on-exec descriptors) or `exit_group` (all of them).
    All,
}

/// One notification: thread `tid` is about to close what [`Closing`] says.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    id: u64,
    /// The thread making the call (a TID in the supervisor's PID namespace).
    pub tid: u32,
    /// What it closes.
    pub closing: Closing,
}

/// `struct seccomp_data` of `<linux/seccomp.h>`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct SeccompData {
    nr: i32,
    arch: u32,
    instruction_pointer: u64,
    args: [u64; 6],
}

/// `struct seccomp_notif`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct SeccompNotif {
    id: u64,
    pid: u32,
    flags: u32,
    data: SeccompData,
}

/// `struct seccomp_notif_resp`.
#[repr(C)]
#[derive(Default)]
struct SeccompNotifResp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<SeccompNotif>() == 80);
const _: () = assert!(std::mem::size_of::<SeccompNotifResp>() == 24);

/// `_IOWR('!', nr, size)`.
const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | ((b'!' as u64) << 8) | nr
}
const SECCOMP_IOCTL_NOTIF_RECV: u64 = iowr(0, std::mem::size_of::<SeccompNotif>());
const SECCOMP_IOCTL_NOTIF_SEND: u64 = iowr(1, std::mem::size_of::<SeccompNotifResp>());

/// The filter program: notify on [`CLOSING`], allow everything else (other architectures'
/// calls too, e.g. a 32-bit program: not witnessed).
fn program() -> Vec<libc::sock_filter> {
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let n = CLOSING.len() as u8;
    let mut p = vec![
        stmt(BPF_LD_W_ABS, 4), // seccomp_data.arch
        libc::sock_filter {
            code: BPF_JEQ_K,
            jt: 1,
            jf: 0,
            k: AUDIT_ARCH,
        },
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        stmt(BPF_LD_W_ABS, 0), // seccomp_data.nr
    ];
    for (i, nr) in CLOSING.iter().enumerate() {
        // Equal: jump past the remaining tests and the ALLOW to the NOTIFY.
        p.push(libc::sock_filter {
            code: BPF_JEQ_K,
            jt: n - i as u8,
            jf: 0,
            k: *nr as u32,
        });
    }
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET_K, SECCOMP_RET_USER_NOTIF));
    p
}

/// `int seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog)` —
/// <https://man7.org/linux/man-pages/man2/seccomp.2.html>, after
/// `prctl(PR_SET_NO_NEW_PRIVS, 1)` when `no_new_privs`, then `sendmsg(2)` of the listener to
/// `sock` with SCM_RIGHTS (an empty message when the filter could not be installed). Runs in
/// the child between fork and exec: no allocation, only syscalls.
///
/// # Safety
/// Only between fork(2) and exec(2), with `prog` valid for the call.
unsafe fn install_and_send(prog: &libc::sock_fprog, no_new_privs: bool, sock: RawFd) {
    let mut listener: RawFd = -1;
    if !no_new_privs || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 {
        listener = libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
            prog as *const libc::sock_fprog,
        ) as RawFd;
    }
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor: CMSG_SPACE(sizeof(int)) is 24 bytes on 64-bit Linux.
    let mut control = [0u64; 4];
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if listener >= 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), listener);
    }
    libc::sendmsg(sock, &msg, 0);
    // The listener and `sock` are close-on-exec: exec closes them without a close(2), which
    // the filter would stop until the supervisor answered.
}

/// Spawns `cmd` with the closing-syscall filter installed in the child just before it
/// executes the program. `serve` gets the socket on which [`Notifier::receive`] will get the
/// filter's listener (or learn that the filter could not be installed) before the child is
/// forked: it must start receiving and answering on another thread, since the child's execve
/// itself waits for an answer, and `spawn` waits for the execve. An error from `serve` is
/// returned and nothing is spawned.
pub fn spawn_notifying(
    cmd: &mut Command,
    no_new_privs: bool,
    serve: impl FnOnce(OwnedFd) -> io::Result<()>,
) -> io::Result<Child> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds has room for the two descriptors socketpair(2) returns.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both were just returned by the kernel and are owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    serve(ours)?;
    let prog = program().into_boxed_slice();
    let sock = theirs.as_raw_fd();
    // SAFETY: the closure runs in the child after fork and before exec; it only makes
    // syscalls on memory it owns (`prog`, copied by the fork).
    unsafe {
        cmd.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            install_and_send(&fprog, no_new_privs, sock);
            Ok(())
        });
    }
    let child = cmd.spawn();
    // Our copy of the child's end: once the child has it too (or is gone), the receiver sees
    // the message or end-of-file.
    drop(theirs);
    child
}

/// The supervisor's end of a filter: receives notifications and lets each call go on.
#[derive(Debug)]
pub struct Notifier {
    listener: OwnedFd,
}

impl Notifier {
    /// `ssize_t recvmsg(int sockfd, struct msghdr *msg, int flags)` —
    /// <https://man7.org/linux/man-pages/man2/recvmsg.2.html>: the listener the child of
    /// [`spawn_notifying`] sends on `sock`. None when the child could not install the filter
    /// (e.g. seccomp refused, or no user notifications before Linux 5.0) or died first.
    pub fn receive(sock: BorrowedFd<'_>) -> Option<Notifier> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        // SAFETY: msg points at live buffers of the sizes given; the kernel fills them.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control);
            let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n <= 0 {
                return None;
            }
            let c = libc::CMSG_FIRSTHDR(&msg);
            if c.is_null()
                || (*c).cmsg_level != libc::SOL_SOCKET
                || (*c).cmsg_type != libc::SCM_RIGHTS
            {
                return None;
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
            Some(Notifier {
                listener: OwnedFd::from_raw_fd(fd),
            })
        }
    }

    /// `ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)`
    /// (Linux 6.6): the kernel hands the CPU straight between the stopped thread and the
    /// supervisor, as a synchronous call, instead of waking each through the scheduler.
    /// EINVAL before 6.6: the plain wake-ups then.
    pub fn sync_wake_up(&self) -> io::Result<()> {
        const SECCOMP_IOCTL_NOTIF_SET_FLAGS: u64 = (1 << 30) | (8 << 16) | ((b'!' as u64) << 8) | 4;
        const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
        // SAFETY: this ioctl takes its argument by value (a u64 of flags), no memory.
        cvt(unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        })
        .map(|_| ())
    }

    /// The listener, to poll: readable when a notification waits; POLLHUP once no process
    /// uses the filter any more.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.listener.as_fd()
    }

    /// `int poll(struct pollfd *fds, nfds_t nfds, int timeout)` on the listener —
    /// <https://man7.org/linux/man-pages/man2/poll.2.html>, through rustix: waits up to
    /// `timeout_ms` for a notification. Ok(Some(true)): one waits ([`Notifier::next`] will not
    /// block); Ok(Some(false)): no process uses the filter any more (POLLHUP, nothing
    /// pending); Ok(None): the time ran out.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<Option<bool>> {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let mut p = [PollFd::from_borrowed_fd(self.fd(), PollFlags::IN)];
        let timeout = Timespec {
            tv_sec: (timeout_ms / 1000).into(),
            tv_nsec: ((timeout_ms % 1000) * 1_000_000).into(),
        };
        if rustix::event::poll(&mut p, Some(&timeout))? == 0 {
            return Ok(None);
        }
        let r = p[0].revents();
        if r.contains(PollFlags::IN) {
            return Ok(Some(true));
        }
        Ok(Some(false).filter(|_| r.intersects(PollFlags::HUP | PollFlags::ERR)))
    }

    /// `ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &notif)` — <https://man7.org/linux/man-pages/man2/seccomp_unotify.2.html>.
    /// The next notification (blocks until one comes; poll [`Notifier::fd`] first). ENOENT:
    /// the thread that made it was killed meanwhile.
    pub fn next(&self) -> io::Result<Notification> {
        let mut n = SeccompNotif::default();
        // SAFETY: n is a zeroed struct seccomp_notif, the size the ioctl number says.
        cvt(unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut n as *mut SeccompNotif,
            )
        })?;
        let a = n.data.args;
        let nr = n.data.nr as libc::c_long;
        let closing = if nr == libc::SYS_close {
            Closing::One(a[0] as i32)
        } else if nr == libc::SYS_dup3 {
            Closing::One(a[1] as i32)
        } else if nr == libc::SYS_close_range {
            Closing::Range(a[0] as u32, a[1] as u32)
        } else {
            #[cfg(target_arch = "x86_64")]
            if nr == libc::SYS_dup2 {
                return Ok(Notification {
                    id: n.id,
                    tid: n.pid,
                    closing: Closing::One(a[1] as i32),
                });
            }
            Closing::All
        };
        Ok(Notification {
            id: n.id,
            tid: n.pid,
            closing,
        })
    }

    /// `ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp)` with
    /// `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the call goes on as if it had not been stopped.
    /// ENOENT (the thread was killed meanwhile) is not an error.
    pub fn go_on(&self, n: &Notification) -> io::Result<()> {
        let mut r = SeccompNotifResp {
            id: n.id,
            flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE,
            ..Default::default()
        };
        // SAFETY: r is a struct seccomp_notif_resp, the size the ioctl number says.
        let ret = unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                SECCOMP_IOCTL_NOTIF_SEND as _,
                &mut r as *mut SeccompNotifResp,
            )
        };
        match cvt_long(ret as libc::c_long) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r.map(|_| ()),
        }
    }
}

/// `pid_t fork(void)` — <https://man7.org/linux/man-pages/man2/fork.2.html> — of a helper
/// that answers every notification of `listener` with CONTINUE, looking at nothing, until no
/// process uses the filter any more (POLLHUP), then exits. For processes a command left
/// running (a daemon): were the listener closed with pagewise, every close(2) of theirs would
/// fail with ENOSYS. The helper keeps only the listener (as descriptor 3: its standard streams
/// and pagewise's other descriptors are closed, so it holds no pipe or file open) and leaves
/// pagewise's session (setsid), so a terminal's Ctrl-C does not end it.
pub fn answer_in_background(listener: BorrowedFd<'_>) -> io::Result<()> {
    let fd = listener.as_raw_fd();
    // SAFETY: the child of a possibly multi-threaded parent makes only raw syscalls (dup2,
    // close_range, setsid, poll, ioctl, _exit) on its own stack memory: no allocation, no lock.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(());
    }
    // SAFETY: as above; the structs are zeroed and of the sizes the ioctls name.
    unsafe {
        const KEEP: RawFd = 3;
        if fd != KEEP && libc::dup2(fd, KEEP) < 0 {
            libc::_exit(1);
        }
        libc::syscall(libc::SYS_close_range, 0u32, (KEEP - 1) as u32, 0u32);
        libc::syscall(libc::SYS_close_range, (KEEP + 1) as u32, u32::MAX, 0u32);
        libc::setsid();
        loop {
            let mut p = libc::pollfd {
                fd: KEEP,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut p, 1, -1) < 0 {
                continue;
            }
            if p.revents & libc::POLLIN == 0 {
                // POLLHUP: nobody uses the filter any more.
                libc::_exit(0);
            }
            let mut n: SeccompNotif = std::mem::zeroed();
            if libc::ioctl(
                KEEP,
                SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut n as *mut SeccompNotif,
            ) < 0
            {
                continue;
            }
            let mut r = SeccompNotifResp {
                id: n.id,
                val: 0,
                error: 0,
                flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE,
            };
            libc::ioctl(
                KEEP,
                SECCOMP_IOCTL_NOTIF_SEND as _,
                &mut r as *mut SeccompNotifResp,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_notifies_on_each_closing_call_and_allows_the_rest() {
        let p = program();
        // Load arch, check, allow, load nr, one test per call, allow, notify.
        assert_eq!(p.len(), 4 + CLOSING.len() + 2);
        let notify = p.len() - 1;
        for (i, nr) in CLOSING.iter().enumerate() {
            let at = 4 + i;
            assert_eq!(p[at].k, *nr as u32);
            assert_eq!(
                at + 1 + p[at].jt as usize,
                notify,
                "test {i} jumps to NOTIFY"
            );
        }
        assert_eq!(p[notify].k, SECCOMP_RET_USER_NOTIF);
        assert_eq!(p[notify - 1].k, SECCOMP_RET_ALLOW);
    }
}
