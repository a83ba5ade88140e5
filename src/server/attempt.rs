//! One attempt at answering a request from one upstream: everything the answering steps (the built-in
//! model, passthrough, translation, token counting) need, in one value, and the [`Answer`] the attempt
//! builds. Failover makes a fresh one per upstream.

use super::gateway::Gateway;
use super::outcome::Answer;
use super::prepared::Prepared;
use super::trace::Trace;
use super::watchdog::WatchGuard;
use crate::config::Upstream;
use crate::http::Exchange;

pub struct Attempt<'r, 'c> {
    pub gw: &'r Gateway,
    pub ex: &'r mut Exchange,
    pub trace: &'r Trace,
    /// The watchdog's hold on the request (streams register here for keepalives).
    pub watch: &'r WatchGuard,
    pub p: &'r mut Prepared<'c>,
    pub upstream: &'c Upstream,
    pub answer: Answer,
}

/// The request-wide parts an attempt borrows (the same for every attempt of a request).
pub struct InFlight<'r> {
    pub gw: &'r Gateway,
    pub ex: &'r mut Exchange,
    pub trace: &'r Trace,
    pub watch: &'r WatchGuard,
}

impl<'r> InFlight<'r> {
    /// A fresh attempt at `upstream`.
    pub fn attempt<'a, 'c>(
        &'a mut self,
        p: &'a mut Prepared<'c>,
        upstream: &'c Upstream,
    ) -> Attempt<'a, 'c> {
        Attempt {
            gw: self.gw,
            ex: &mut *self.ex,
            trace: self.trace,
            watch: self.watch,
            p,
            upstream,
            answer: Answer::for_upstream(&upstream.name),
        }
    }
}

/// How an attempt is answered (generation, or token counting). `Ok` when the answer was given (also a
/// stream that broke, recorded in the answer); `Err` when the client still needs an answer.
pub type Serve = fn(&mut Attempt) -> Result<(), crate::protocol::ApiError>;
