//! The running gateway, on top of the protocol-agnostic HTTP layer in `crate::http`: started, drained and
//! stopped in `lifecycle.rs` ([`run`] returns a [`Running`] server); what every worker runs is [`work`].

mod accounting;
mod admit;
mod attempt;
mod builtin;
mod cached;
mod call;
pub(crate) mod cluster;
mod complete;
mod count_tokens;
mod embed;
mod events;
mod failover;
mod generate;
mod hosted;
mod lifecycle;
mod outcome;
mod passthrough;
mod prepared;
mod report;
mod router;
mod screen;
mod shutdown;
mod text_completion;
mod thread;
mod translate;

use std::sync::Arc;
use std::time::Instant;

pub use self::lifecycle::{data_dir_ready, first_group, run, Running, StartError};
pub use self::shutdown::Shutdown;
use self::thread::spawn;
pub use self::thread::ThreadError;
use crate::gateway::Gateway;
use crate::http::Exchange;
use crate::protocol::{ApiError, Protocol};

/// Renders errors the HTTP layer answers by itself, in the shape of the protocol at that path, with the
/// headers every other answer carries (`x-request-id`, `x-should-retry` where a retry cannot help,
/// `x-tollgate-overhead-ms`).
fn render_http_error(
    path: Option<&str>,
    status: u16,
    message: &str,
) -> (Vec<(String, String)>, Vec<u8>) {
    let began = Instant::now();
    let protocol = Protocol::for_errors_at(path);
    let request_id = crate::util::new_id("req_");
    let mut err = ApiError::new(status, ApiError::kind_for_status(status), message);
    if status == 503 {
        err = err.with_retry_after(1);
    }
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("x-request-id".to_string(), request_id.clone()),
    ];
    if let Some(name) = protocol.id_header {
        headers.push((name.to_string(), request_id.clone()));
    }
    if let Some(v) = crate::gateway::respond::should_retry(status) {
        headers.push(("x-should-retry".to_string(), v.to_string()));
    }
    let body = protocol.reply.error_body(&err, &request_id);
    headers.push((
        "x-tollgate-overhead-ms".to_string(),
        format!("{:.3}", began.elapsed().as_secs_f64() * 1000.0),
    ));
    (headers, body)
}

/// A shared store joined at start, with what it held then.
pub struct Shared {
    /// The handle on the store.
    pub store: Arc<crate::store::Store>,
    /// What the store held when this instance joined it: the key records, the overrides and their versions.
    pub joined: cluster::Joined,
}

/// Runs one exchange on a worker; a panic is caught, answered with 500 if nothing was sent yet, and logged.
fn work(gw: &Gateway, ex: &mut Exchange) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| router::route(gw, ex)));
    if result.is_err() {
        log::error!(
            "a worker panicked while handling {} {}; the worker continues",
            ex.request.method,
            ex.request.path
        );
        let w = ex.response();
        if !w.is_started() {
            let (headers, body) =
                render_http_error(Some(&ex.request.path), 500, "internal error in the gateway");
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let w = ex.response();
            w.close_after();
            let _ = w.send(500, &headers, &body);
        }
    }
}
