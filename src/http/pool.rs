//! The worker pool and the connections it owns.
//!
//! Every open connection lives in a slot of one table and is registered one-shot in the shared poller
//! (`poller.rs`). Each worker waits in the poller; the kernel hands a readable connection to exactly one of
//! them, which takes it out of its slot, reads what arrived without blocking (`conn.rs`) and then either
//! serves the complete request on its own thread (streams included) or puts the connection back and re-arms
//! it. So a request on a busy keep-alive connection costs one wake-up, and an idle or slow connection costs
//! its buffers, never a thread.
//!
//! `workers` requests are served at once (a permit each). The pool has one thread more than that: while all
//! permits are out, the spare reads the next complete request and queues it (up to `queue_size`, served by
//! the next worker to finish) or refuses it with 503 at once. A timer thread closes connections whose
//! deadline passed: idle ones quietly, a request still arriving with 408, a lingering one after its linger.
//!
//! [`Pool::stop`] ends the pool threads and the timer (a server run inside another program, once drained):
//! a pipe registered level-triggered wakes every waiting thread with the [`STOP`] token.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::conn::{Conn, Phase, Refusal, Step};
use super::poller::{Poller, Waker};
use super::request::HttpRequest;
use super::shared::{
    send_rendered, ErrorRenderer, Exchange, Handler, HttpConfig, HttpStartError, ServerState,
};

/// How often the timer looks for connections past their deadline.
const TICK: Duration = Duration::from_millis(100);

/// The token the waker is reported as: the pool is stopping.
const STOP: u64 = u64::MAX;

#[derive(Clone)]
pub(super) struct Pool {
    inner: Arc<Inner>,
    threads: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

struct Inner {
    config: Arc<HttpConfig>,
    state: Arc<ServerState>,
    handler: Arc<Handler>,
    render_error: Arc<ErrorRenderer>,
    poller: Poller,
    slots: Mutex<Slots>,
    /// Requests being served now (at most `config.workers`).
    serving: AtomicUsize,
    queue_tx: Sender<Pending>,
    queue_rx: Receiver<Pending>,
    stopping: AtomicBool,
    waker: Waker,
    /// Dropped to stop the timer at once (it waits on the other end between ticks).
    timer_stop: Mutex<Option<Sender<()>>>,
    timer_stopped: Receiver<()>,
}

/// The connection table. A slot holds its connection while it is parked in the poller; while a worker
/// has it, the slot is empty but stays taken. A token names a slot and its generation, so a report about
/// a connection that is gone never reaches the one that took its slot.
#[derive(Default)]
struct Slots {
    list: Vec<Slot>,
    free: Vec<u32>,
}

#[derive(Default)]
struct Slot {
    generation: u32,
    conn: Option<Box<Conn>>,
}

fn token(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

fn index_of(token: u64) -> (usize, u32) {
    ((token & 0xffff_ffff) as usize, (token >> 32) as u32)
}

/// A complete request and its connection, on its way to being served.
struct Pending {
    token: u64,
    conn: Box<Conn>,
    request: HttpRequest,
    received: Instant,
}

impl Pool {
    /// Starts `workers + 1` pool threads and the timer.
    pub(super) fn start(
        config: Arc<HttpConfig>,
        state: Arc<ServerState>,
        handler: Arc<Handler>,
        render_error: Arc<ErrorRenderer>,
    ) -> Result<Pool, HttpStartError> {
        let poller = Poller::new().map_err(HttpStartError::Poller)?;
        let waker = Waker::new()
            .and_then(|w| poller.add_level(w.fd(), STOP).map(|()| w))
            .map_err(HttpStartError::Waker)?;
        let (queue_tx, queue_rx) = crossbeam_channel::bounded(config.queue_size.max(1));
        let (timer_stop, timer_stopped) = crossbeam_channel::bounded(0);
        let threads = config.workers + 1;
        let pool = Pool {
            inner: Arc::new(Inner {
                config,
                state,
                handler,
                render_error,
                poller,
                slots: Mutex::new(Slots::default()),
                serving: AtomicUsize::new(0),
                queue_tx,
                queue_rx,
                stopping: AtomicBool::new(false),
                waker,
                timer_stop: Mutex::new(Some(timer_stop)),
                timer_stopped,
            }),
            threads: Default::default(),
        };
        let mut handles = Vec::with_capacity(threads + 1);
        for i in 0..threads {
            let inner = pool.inner.clone();
            let builder = std::thread::Builder::new()
                .name(format!("tollgate-worker-{i}"))
                .stack_size(1024 * 1024);
            match crate::logging::thread(builder, move || inner.work()) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    pool.stop_threads(handles);
                    return Err(HttpStartError::Worker(i, e));
                }
            }
        }
        let inner = pool.inner.clone();
        let builder = std::thread::Builder::new().name("tollgate-http-timer".into());
        match crate::logging::thread(builder, move || inner.keep_time()) {
            Ok(h) => handles.push(h),
            Err(e) => {
                pool.stop_threads(handles);
                return Err(HttpStartError::Timer(e));
            }
        }
        *crate::util::lock(&pool.threads) = handles;
        Ok(pool)
    }

    /// Ends the pool threads and the timer and waits for them; connections still parked are closed when
    /// the last holder of the pool lets go. Call it once no request is in flight.
    pub(super) fn stop(&self) {
        let handles = std::mem::take(&mut *crate::util::lock(&self.threads));
        self.stop_threads(handles);
    }

    fn stop_threads(&self, handles: Vec<std::thread::JoinHandle<()>>) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.inner.waker.wake();
        drop(crate::util::lock(&self.inner.timer_stop).take());
        for h in handles {
            let _ = h.join();
        }
    }

    /// Takes a new connection into the table and the poller.
    pub(super) fn admit(&self, stream: TcpStream, peer: SocketAddr) {
        let inner = &self.inner;
        let conn = Box::new(Conn::new(stream, peer, inner.config.read_timeout));
        let mut slots = inner.slots();
        let index = match slots.free.pop() {
            Some(i) => i,
            None => {
                slots.list.push(Slot::default());
                (slots.list.len() - 1) as u32
            }
        };
        let slot = &mut slots.list[index as usize];
        let t = token(index, slot.generation);
        let conn = slot.conn.insert(conn);
        if let Err(e) = inner.poller.add(conn.fd(), t) {
            log::warn!("could not watch a new connection: {e}");
            let conn = slots.release(t);
            drop(slots);
            if let Some(conn) = conn {
                inner.finish_conn(conn);
            }
        }
    }
}

impl Slots {
    /// Frees the slot `token` names and returns its connection if it is parked there.
    fn release(&mut self, t: u64) -> Option<Box<Conn>> {
        let (index, generation) = index_of(t);
        let slot = self.list.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index as u32);
        slot.conn.take()
    }
}

impl Inner {
    fn slots(&self) -> MutexGuard<'_, Slots> {
        crate::util::lock(&self.slots)
    }

    /// A pool thread: waits for a readable connection, and carries it on.
    fn work(&self) {
        loop {
            let t = match self.poller.wait(None) {
                Ok(Some(STOP)) => return,
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => {
                    log::error!("waiting for connections failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let conn = {
                let (index, generation) = index_of(t);
                let mut slots = self.slots();
                match slots.list.get_mut(index) {
                    Some(slot) if slot.generation == generation => slot.conn.take(),
                    _ => None,
                }
            };
            let Some(mut conn) = conn else { continue };
            let step = match conn.phase {
                Phase::Linger { .. } => conn.drain_lingering(),
                _ => conn.read_ready(&self.config, &self.state),
            };
            self.step(t, conn, step);
        }
    }

    fn step(&self, t: u64, mut conn: Box<Conn>, step: Step) {
        match step {
            Step::More => self.park(t, conn),
            Step::Closed => self.close(t, conn),
            Step::Refuse(refusal) => {
                self.refuse(&mut conn, refusal);
                conn.linger();
                self.park(t, conn);
            }
            Step::Request(request) => {
                self.state.in_flight.fetch_add(1, Ordering::SeqCst);
                self.dispatch(Pending {
                    token: t,
                    conn,
                    request,
                    received: Instant::now(),
                });
            }
        }
    }

    /// Puts a connection back in its slot and re-arms it (under the table's lock, so the timer never closes
    /// a descriptor between the two).
    fn park(&self, t: u64, conn: Box<Conn>) {
        let mut slots = self.slots();
        let (index, _) = index_of(t);
        let conn = slots.list[index].conn.insert(conn);
        if let Err(e) = self.poller.rearm(conn.fd(), t) {
            log::warn!("could not watch a connection again: {e}");
            let conn = slots.release(t);
            drop(slots);
            if let Some(conn) = conn {
                self.finish_conn(conn);
            }
        }
    }

    /// Closes a connection a worker holds.
    fn close(&self, t: u64, conn: Box<Conn>) {
        {
            let mut slots = self.slots();
            self.poller.remove(conn.fd());
            slots.release(t);
        }
        self.finish_conn(conn);
    }

    /// The end of a connection out of the table: its body reservation, its socket, its count.
    fn finish_conn(&self, conn: Box<Conn>) {
        self.state.release_body(conn.reserved);
        let _ = conn.sock.shutdown(Shutdown::Both);
        self.state.give_share(conn.peer.ip());
        self.state.open_connections.fetch_sub(1, Ordering::SeqCst);
    }

    /// Answers a request that cannot be served (it then lingers).
    fn refuse(&self, conn: &mut Conn, refusal: Refusal) {
        self.state.release_body(conn.reserved);
        conn.reserved = 0;
        let Some(w) = conn.writer.as_mut() else {
            return;
        };
        let head_only = matches!(refusal, Refusal::Screened(_, true));
        w.reset(false, head_only);
        let render = &*self.render_error;
        match refusal {
            Refusal::Screened(early, _) => {
                let headers: Vec<(&str, &str)> = early
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                let _ = w.send(early.status, &headers, &early.body);
            }
            Refusal::OverBudget(path) => {
                self.state.rejected.fetch_add(1, Ordering::Relaxed);
                let msg = "the gateway is holding too many request bodies at once; retry shortly";
                send_rendered(
                    w,
                    path.as_deref(),
                    503,
                    msg,
                    render,
                    &[("retry-after", "1")],
                );
            }
            Refusal::Framing(path, e) => {
                send_rendered(w, path.as_deref(), e.status(), &e.to_string(), render, &[]);
            }
        }
    }

    fn try_acquire(&self) -> bool {
        let max = self.config.workers;
        self.serving
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self) {
        self.serving.fetch_sub(1, Ordering::SeqCst);
    }

    fn pop(&self) -> Option<Pending> {
        let p = self.queue_rx.try_recv().ok()?;
        self.state.queued.fetch_sub(1, Ordering::SeqCst);
        Some(p)
    }

    /// Serves a complete request now, queues it while every worker is busy, or refuses it when the queue is
    /// full too.
    fn dispatch(&self, p: Pending) {
        if self.try_acquire() {
            return self.serve_with_permit(p);
        }
        // Counted before it is in the queue, so a worker that takes it at once never counts below zero.
        self.state.queued.fetch_add(1, Ordering::SeqCst);
        match self.queue_tx.try_send(p) {
            Ok(()) => {
                // A worker may have finished between the failed acquire and the push, and looked at an empty
                // queue: take the request back up if a permit is free now.
                if self.try_acquire() {
                    match self.pop() {
                        Some(q) => self.serve_with_permit(q),
                        None => self.release(),
                    }
                }
            }
            Err(TrySendError::Full(p)) | Err(TrySendError::Disconnected(p)) => {
                self.state.queued.fetch_sub(1, Ordering::SeqCst);
                self.overloaded(p)
            }
        }
    }

    /// Serves `first`, then the connection's pipelined requests and what waits in the queue, then gives the
    /// permit back.
    fn serve_with_permit(&self, first: Pending) {
        let mut next = Some(first);
        loop {
            while let Some(p) = next.take() {
                next = self.serve(p).or_else(|| self.pop());
            }
            self.release();
            // Something queued after the last look while this worker still held its permit.
            if self.state.queued.load(Ordering::SeqCst) == 0 || !self.try_acquire() {
                return;
            }
            next = self.pop();
        }
    }

    /// Serves one request on this thread; returns the connection's next request if it is already here.
    fn serve(&self, p: Pending) -> Option<Pending> {
        let Pending {
            token: t,
            mut conn,
            request,
            received,
        } = p;
        let head_only = request.method == "HEAD";
        let mut w = conn.writer.take()?;
        if self.state.shutting_down.load(Ordering::SeqCst) {
            w.reset(false, head_only);
            let msg = "server is shutting down";
            let path = Some(request.path.as_str());
            send_rendered(
                &mut w,
                path,
                503,
                msg,
                &*self.render_error,
                &[("retry-after", "1")],
            );
            conn.writer = Some(w);
            self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.close(t, conn);
            return None;
        }
        w.reset_for(request.keep_alive, head_only, request.version == 0);
        let mut ex = Exchange::new(request, conn.peer, w, self.state.clone());
        ex.received = received;
        let handled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.handler)(&mut ex)));
        if handled.is_err() {
            log::error!("a request handler panicked; the worker continues");
            ex.response().close_after();
        }
        self.after(t, conn, ex)
    }

    /// Refuses a request because every worker is busy and the queue is full.
    fn overloaded(&self, p: Pending) {
        let Pending {
            token: t,
            mut conn,
            request,
            received,
        } = p;
        let Some(mut w) = conn.writer.take() else {
            return;
        };
        w.reset_for(
            request.keep_alive,
            request.method == "HEAD",
            request.version == 0,
        );
        let mut ex = Exchange::new(request, conn.peer, w, self.state.clone());
        ex.received = received;
        let answered = self.config.overloaded.as_ref().is_some_and(|f| f(&mut ex));
        if !answered {
            self.state.rejected.fetch_add(1, Ordering::Relaxed);
            let path = ex.request.path.clone();
            let w = ex.response();
            w.close_after();
            let msg = "all workers are busy; retry shortly";
            send_rendered(
                w,
                Some(&path),
                503,
                msg,
                &*self.render_error,
                &[("retry-after", "1")],
            );
        }
        if let Some(next) = self.after(t, conn, ex) {
            self.dispatch(next);
        }
    }

    /// After an answer: the held end goes out, then the connection waits for its next request, or closes.
    fn after(&self, t: u64, mut conn: Box<Conn>, ex: Exchange) -> Option<Pending> {
        // The request is dropped here; its body's buffer receives the next one.
        let (mut w, request) = ex.into_parts();
        conn.recycle(request.body);
        self.state.release_body(conn.reserved);
        conn.reserved = 0;
        let released = w.release_held().is_ok();
        let reusable = released && w.reusable();
        conn.writer = Some(w);
        self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !reusable || self.state.shutting_down.load(Ordering::SeqCst) {
            self.close(t, conn);
            return None;
        }
        conn.next_request(self.config.read_timeout);
        if conn.buf.is_empty() {
            self.park(t, conn);
            return None;
        }
        // Pipelined: the next request is (partly) here already; the poller will not report these bytes.
        match conn.read_ready(&self.config, &self.state) {
            Step::Request(request) => {
                self.state.in_flight.fetch_add(1, Ordering::SeqCst);
                Some(Pending {
                    token: t,
                    conn,
                    request,
                    received: Instant::now(),
                })
            }
            other => {
                self.step(t, conn, other);
                None
            }
        }
    }

    /// The timer: closes connections past their deadline (and idle ones once shutdown begins).
    fn keep_time(&self) {
        while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            self.timer_stopped.recv_timeout(TICK)
        {
            let now = Instant::now();
            let shutting_down = self.state.shutting_down.load(Ordering::SeqCst);
            let mut expired = Vec::new();
            {
                let mut slots = self.slots();
                let Slots { list, free } = &mut *slots;
                for (index, slot) in list.iter_mut().enumerate() {
                    let due = slot.conn.as_ref().is_some_and(|c| {
                        c.deadline <= now || (shutting_down && matches!(c.phase, Phase::Idle))
                    });
                    if due {
                        if let Some(conn) = slot.conn.take() {
                            self.poller.remove(conn.fd());
                            slot.generation = slot.generation.wrapping_add(1);
                            free.push(index as u32);
                            expired.push(conn);
                        }
                    }
                }
            }
            for mut conn in expired {
                if conn.started() && conn.deadline <= now {
                    if let Some(w) = conn.writer.as_mut() {
                        w.reset(false, false);
                        // One thread keeps time for every connection: a client that reads nothing must
                        // not stop it (its 408 is dropped if its socket buffer is full).
                        w.never_wait();
                        let msg = "request not received in time";
                        send_rendered(w, None, 408, msg, &*self.render_error, &[]);
                    }
                }
                self.finish_conn(conn);
            }
        }
    }
}
