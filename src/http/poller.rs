//! The kernel's readiness poller, shared by every worker: epoll on Linux, kqueue on macOS and the BSDs.
//!
//! Each socket is registered one-shot: when it becomes readable the kernel reports it to exactly one of the
//! threads waiting in [`Poller::wait`] and disarms it, so no two workers ever get the same connection; the
//! worker re-arms it ([`Poller::rearm`]) when it wants to hear from that socket again. A waiter is woken for
//! one event at a time (the kernel queues waiters exclusively), so one readable connection costs one wake-up.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub struct Poller {
    fd: OwnedFd,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

#[cfg(target_os = "linux")]
fn millis(timeout: Option<Duration>) -> libc::c_int {
    timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int)
}

#[cfg(target_os = "linux")]
impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain system call; the descriptor it returns is owned from here on.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Poller {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open for the call; `event` lives across it.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event) }).map(drop)
    }

    /// Starts watching `fd` for readability, reporting it as `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token)
    }

    /// Arms `fd` again after it was reported (one-shot): the next readability is reported once more.
    pub fn rearm(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token)
    }

    /// Watches `fd` level-triggered (not one-shot): while it is readable, every wait reports it.
    pub fn add_level(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open for the call; `event` lives across it.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) })
            .map(drop)
    }

    /// Stops watching `fd` (before it is closed, so a descriptor shared with another holder never fires).
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: as in `ctl`; a null event is allowed for EPOLL_CTL_DEL.
        let _ = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits for one ready socket and returns its token; `None` when the wait ended without one (a
    /// timeout or a signal).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<u64>> {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for exactly the one event we ask for.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), &mut event, 1, millis(timeout)) };
        match check(n) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(event.u64)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "openbsd"
))]
impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain system call; the descriptor it returns is owned from here on.
        let fd = check(unsafe { libc::kqueue() })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Poller {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn change(&self, fd: RawFd, flags: u16, token: u64) -> io::Result<()> {
        // SAFETY: an all-zero kevent is valid on every BSD (fields differ between them, so no literal).
        let mut change: libc::kevent = unsafe { std::mem::zeroed() };
        change.ident = fd as libc::uintptr_t;
        change.filter = libc::EVFILT_READ;
        change.flags = flags;
        change.udata = token as usize as *mut libc::c_void;
        // SAFETY: one change in, no events out.
        let r = unsafe {
            libc::kevent(
                self.fd.as_raw_fd(),
                &change,
                1,
                std::ptr::null_mut(),
                0,
                std::ptr::null(),
            )
        };
        check(r).map(drop)
    }

    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.rearm(fd, token)
    }

    pub fn rearm(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.change(fd, libc::EV_ADD | libc::EV_ENABLE | libc::EV_ONESHOT, token)
    }

    pub fn remove(&self, fd: RawFd) {
        let _ = self.change(fd, libc::EV_DELETE, 0);
    }

    pub fn add_level(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.change(fd, libc::EV_ADD | libc::EV_ENABLE, token)
    }

    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<u64>> {
        // SAFETY: as in `change`.
        let mut event: libc::kevent = unsafe { std::mem::zeroed() };
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as _,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: room for exactly the one event we ask for.
        let n = unsafe {
            libc::kevent(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                &mut event,
                1,
                ts_ptr,
            )
        };
        match check(n) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(event.udata as usize as u64)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A pipe whose read end, once written to, stays readable: registered level-triggered, it wakes every
/// thread waiting in the poller (to stop them).
pub struct Waker {
    read: OwnedFd,
    write: OwnedFd,
}

impl Waker {
    pub fn new() -> io::Result<Waker> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe() writes.
        check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
        // SAFETY: fresh descriptors nobody else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [&read, &write] {
            // SAFETY: plain fcntl on a descriptor we own.
            check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
        }
        Ok(Waker { read, write })
    }

    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// Makes the read end readable for good (nothing ever reads it).
    pub fn wake(&self) {
        let byte = 1u8;
        // SAFETY: writes one byte from a local into a descriptor we own.
        let _ = unsafe { libc::write(self.write.as_raw_fd(), (&byte as *const u8).cast(), 1) };
    }
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "openbsd"
)))]
compile_error!("tollgate's HTTP layer needs epoll (Linux) or kqueue (macOS, the BSDs)");
