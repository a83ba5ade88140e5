//! Stopping the gateway: the [`Shutdown`] request its owner holds (with or without the grace period), and
//! the drain `Running::join` runs once it is asked for: no new connections, requests in flight get the
//! grace period, those still running are cut (each keeps its usage record), the ledger is closed and, with
//! a store, the instance leaves it (`cluster::leave`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::cluster;
use crate::gateway::Gateway;
use crate::http::{self, ServerState};
use crate::util::lock;

/// A request to stop, shared by the server and whoever may ask for it (clone it freely).
#[derive(Clone, Default)]
pub struct Shutdown {
    asked: Arc<(Mutex<Option<Stop>>, Condvar)>,
}

/// Why the server stops, and whether requests in flight get the grace period.
#[derive(Clone)]
pub(super) struct Stop {
    why: String,
    grace: bool,
}

impl Shutdown {
    /// A request to stop that nobody has made yet.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Asks the server to stop (`why`, for the log: `SIGTERM`): requests in flight get the grace period
    /// (`shutdown_grace_secs`) before they are cut. The first request counts.
    pub fn request(&self, why: &str) {
        self.ask(why, true);
    }

    /// Asks the server to stop with no grace period: requests in flight are cut at once (each keeps its
    /// usage record), and with a store, records not shipped yet are left to the shipper of the next start.
    pub fn request_now(&self, why: &str) {
        self.ask(why, false);
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        lock(&self.asked.0).is_some()
    }

    fn ask(&self, why: &str, grace: bool) {
        let mut asked = lock(&self.asked.0);
        if asked.is_none() {
            *asked = Some(Stop {
                why: why.to_string(),
                grace,
            });
            self.asked.1.notify_all();
        }
    }

    pub(super) fn wait(&self) -> Stop {
        let mut asked = lock(&self.asked.0);
        loop {
            if let Some(stop) = asked.as_ref() {
                return stop.clone();
            }
            asked = self
                .asked
                .1
                .wait(asked)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// Drains after a stop was asked for: no new connections, requests in flight get the grace period (none
/// when the stop asked for none), those still running are cut (each keeps its usage record), and the ledger
/// is closed. Returns the exit code.
pub(super) fn drain(gw: &Gateway, http: &http::Server, stop: &Stop) -> i32 {
    let config = &gw.base;
    let state = &gw.state;
    let grace = if stop.grace {
        config.shutdown_grace
    } else {
        Duration::ZERO
    };
    log::info!(
        "received {}; no longer accepting, draining {} in-flight requests (up to {} s)",
        stop.why,
        state.in_flight.load(Ordering::SeqCst),
        grace.as_secs()
    );
    state.shutting_down.store(true, Ordering::SeqCst);
    // Wake the accept loop so it sees the flag.
    http.wake_accept();
    wait_until_idle(state, grace);
    let left = state.in_flight.load(Ordering::SeqCst);
    if left > 0 {
        // Nothing is lost at the deadline: every request still running is cut (its upstream call ends,
        // the client gets the protocol's in-stream error or 503) and leaves its usage record.
        log::warn!(
            "shutdown grace of {} s has passed with {left} requests still in flight: cutting them (each ends \
             with an error and keeps its usage record)",
            grace.as_secs()
        );
        gw.watchdog.cut_all_for_shutdown();
        wait_until_idle(state, CUT_WAIT);
        let stuck = state.in_flight.load(Ordering::SeqCst);
        if stuck > 0 {
            log::error!(
                "{stuck} requests did not end within {} s of being cut; exiting without them",
                CUT_WAIT.as_secs()
            );
        }
    }
    let unwritten = gw.ledger.close(Duration::from_secs(5));
    if let Some(store) = &gw.store {
        let shipping = if stop.grace {
            Duration::from_secs(3)
        } else {
            Duration::ZERO
        };
        cluster::leave(store, &gw.ledger, shipping);
    }
    if unwritten > 0 {
        log::error!(
            "{unwritten} usage records could not be written to the ledger; they are in the log above as \
             `unwritten usage record` lines"
        );
        return 1;
    }
    log::info!("all requests finished and recorded; bye");
    0
}

/// Waits until no request is in flight, or `limit` has passed.
fn wait_until_idle(state: &ServerState, limit: Duration) {
    let deadline = Instant::now() + limit;
    while state.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long requests cut at the shutdown deadline get to end (their upstream waits end within a slice).
const CUT_WAIT: Duration = Duration::from_secs(10);
