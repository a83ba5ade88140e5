//! The kernel's readiness poller, shared by every worker: epoll on Linux, kqueue on macOS and the BSDs, both
//! through `rustix` (safe wrappers over the same system calls, no libc in between on Linux).
//!
//! Each socket is registered one-shot (`EPOLLIN | EPOLLONESHOT`; kqueue's `EV_ONESHOT`): when it becomes
//! readable the kernel reports it to exactly one of the threads waiting in [`Poller::wait`] and disarms it, so
//! no two workers ever get the same connection; the worker re-arms it ([`Poller::rearm`]) when it wants to
//! hear from that socket again. A waiter is woken for one event at a time (the kernel queues waiters
//! exclusively), so one readable connection costs one wake-up. Only the stop pipe is level-triggered
//! ([`Poller::add_level`]).
//!
//! Descriptors are borrowed (`AsFd`), never raw: a descriptor is registered, re-armed and removed only while
//! its owner keeps it open. Measured against the hand-written FFI it replaced: docs/PERFORMANCE.md, "The
//! poller on rustix".
//!
//! kqueue alone keeps an `unsafe` call: rustix's `kevent` is unsafe because the kernel keeps referring to a
//! registered descriptor after the call returns. That holds here (see `Poller::kevent`).

#![cfg_attr(
    not(target_os = "linux"),
    allow(
        unsafe_code,
        reason = "rustix's kevent is an unsafe fn: see Poller::kevent"
    )
)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

pub(super) struct Poller {
    fd: OwnedFd,
}

#[cfg(target_os = "linux")]
mod imp {
    use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};
    use rustix::event::Timespec;

    use super::*;

    /// What a connection is watched for: readable, reported once, then disarmed until re-armed.
    const ONE_SHOT: EventFlags = EventFlags::IN.union(EventFlags::ONESHOT);

    impl Poller {
        pub(crate) fn new() -> io::Result<Poller> {
            Ok(Poller {
                fd: epoll::create(CreateFlags::CLOEXEC)?,
            })
        }

        /// Starts watching `fd` for readability, reporting it as `token`.
        pub(crate) fn add(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
            let data = EventData::new_u64(token);
            Ok(epoll::add(&self.fd, fd, data, ONE_SHOT)?)
        }

        /// Arms `fd` again after it was reported (one-shot): the next readability is reported once more.
        pub(crate) fn rearm(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
            let data = EventData::new_u64(token);
            Ok(epoll::modify(&self.fd, fd, data, ONE_SHOT)?)
        }

        /// Watches `fd` level-triggered (not one-shot): while it is readable, every wait reports it.
        pub(crate) fn add_level(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
            let data = EventData::new_u64(token);
            Ok(epoll::add(&self.fd, fd, data, EventFlags::IN)?)
        }

        /// Stops watching `fd` (before it is closed, so a descriptor shared with another holder never fires).
        pub(crate) fn remove(&self, fd: impl AsFd) {
            let _ = epoll::delete(&self.fd, fd);
        }

        /// Waits for one ready socket and returns its token; `None` when the wait ended without one (a
        /// timeout or a signal).
        pub(crate) fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<u64>> {
            // Whole milliseconds, as epoll_wait counts (a timeout under one millisecond polls).
            let timeout = timeout.map(|t| {
                let ms = t.as_millis().min(i32::MAX as u128) as i64;
                Timespec {
                    tv_sec: ms / 1000,
                    tv_nsec: (ms % 1000) * 1_000_000,
                }
            });
            let mut events = [Event {
                flags: EventFlags::empty(),
                data: EventData::new_u64(0),
            }];
            match epoll::wait(&self.fd, &mut events, timeout.as_ref()) {
                Ok(0) => Ok(None),
                Ok(_) => Ok(Some(events[0].data.u64())),
                Err(rustix::io::Errno::INTR) => Ok(None),
                Err(e) => Err(e.into()),
            }
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
mod imp {
    use std::mem::MaybeUninit;
    use std::os::fd::AsRawFd;

    use rustix::event::kqueue::{self, Event, EventFilter, EventFlags};

    use super::*;

    impl Poller {
        pub fn new() -> io::Result<Poller> {
            Ok(Poller {
                fd: kqueue::kqueue()?,
            })
        }

        /// One `kevent` call: `changes` applied, then at most one event waited for (none when `out` is empty).
        fn kevent<'a>(
            &self,
            changes: &[Event],
            out: &'a mut [MaybeUninit<Event>],
            timeout: Option<Duration>,
        ) -> rustix::io::Result<&'a mut [Event]> {
            // SAFETY: rustix asks that every descriptor named in `changes` stay valid while the kqueue refers
            // to it. The pool removes a connection's registration before its socket is closed (`remove`,
            // under the slot table's lock), the stop pipe outlives the poller (it is dropped after it), and
            // the kernel itself drops a descriptor's events from every kqueue when it is closed; only its
            // number and the token cross the call, never memory of ours beyond `changes` and `out`.
            let (ready, _) = unsafe { kqueue::kevent(&self.fd, changes, out, timeout)? };
            Ok(ready)
        }

        fn change(&self, fd: BorrowedFd<'_>, flags: EventFlags, token: u64) -> io::Result<()> {
            let change = Event::new(
                EventFilter::Read(fd.as_raw_fd()),
                flags,
                std::ptr::without_provenance_mut(token as usize),
            );
            self.kevent(&[change], &mut [], None)?;
            Ok(())
        }

        pub fn add(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
            self.rearm(fd, token)
        }

        pub fn rearm(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
            let flags = EventFlags::ADD | EventFlags::ENABLE | EventFlags::ONESHOT;
            self.change(fd.as_fd(), flags, token)
        }

        pub fn remove(&self, fd: impl AsFd) {
            let _ = self.change(fd.as_fd(), EventFlags::DELETE, 0);
        }

        pub fn add_level(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
            self.change(fd.as_fd(), EventFlags::ADD | EventFlags::ENABLE, token)
        }

        pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<u64>> {
            let mut out = [MaybeUninit::uninit()];
            match self.kevent(&[], &mut out, timeout) {
                Ok([]) => Ok(None),
                Ok([event, ..]) => Ok(Some(event.udata().addr() as u64)),
                Err(rustix::io::Errno::INTR) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// A pipe whose read end, once written to, stays readable: registered level-triggered, it wakes every
/// thread waiting in the poller (to stop them). Both ends are close-on-exec.
pub(super) struct Waker {
    read: std::io::PipeReader,
    write: std::io::PipeWriter,
}

impl Waker {
    pub(super) fn new() -> io::Result<Waker> {
        let (read, write) = std::io::pipe()?;
        Ok(Waker { read, write })
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Makes the read end readable for good (nothing ever reads it).
    pub(super) fn wake(&self) {
        use std::io::Write;
        let _ = (&self.write).write(&[1]);
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
