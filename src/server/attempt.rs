//! One attempt at answering a request from one upstream: everything the answering steps (the built-in
//! model, passthrough, translation, token counting) need, in one value. The pipeline makes a fresh one per
//! upstream failover gives it; the step returns the attempt's `Answer`.

use super::prepared::Prepared;
use crate::config::Upstream;
use crate::gateway::trace::Trace;
use crate::gateway::watchdog::WatchGuard;
use crate::gateway::Gateway;
use crate::http::Exchange;

pub(super) struct Attempt<'r, 'c> {
    pub gw: &'r Gateway,
    /// The client's exchange (the answer is written to it).
    pub ex: &'r mut Exchange,
    pub trace: &'r Trace,
    /// The watchdog's hold on the request (streams register here for keepalives).
    pub watch: &'r WatchGuard,
    /// The request, as prepared (never changed by an attempt).
    pub p: &'r Prepared<'c>,
    pub upstream: &'c Upstream,
    /// The answer is to be kept in canonical form for the answer cache (`Answer::kept`).
    pub keep: bool,
}
