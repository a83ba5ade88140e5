//! The accept loop, and starting the layer.
//!
//! The accept loop never ends on an error (EMFILE and friends are logged and waited out). Each accepted
//! socket gets `TCP_NODELAY`, a write deadline and a place in the worker pool's poller (`pool.rs`); from then
//! on the workers read, parse and serve its requests. Reading has a deadline: a client that sends nothing,
//! or sends its head or body too slowly, is dropped after `read_timeout` without ever occupying a worker.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pool::Pool;
use super::response::ResponseWriter;
use super::shared::{
    send_rendered, ErrorRenderer, Handler, HttpConfig, HttpStartError, ServerState,
};

/// The running HTTP layer, as [`start`] returns it.
pub struct Server {
    pool: Pool,
    accept: std::thread::JoinHandle<()>,
    local: Option<SocketAddr>,
}

/// Starts the HTTP layer: the worker pool (`config.workers` serving threads and one spare that reads
/// requests while they are all busy), its timer, and the accept loop on a thread of its own. Returns once
/// they run; the accept loop ends when `state.shutting_down` is set and a connection (or the waker) arrives.
pub fn start(
    listener: TcpListener,
    config: Arc<HttpConfig>,
    state: Arc<ServerState>,
    handler: Arc<Handler>,
    render_error: Arc<ErrorRenderer>,
) -> Result<Server, HttpStartError> {
    let local = listener.local_addr().ok();
    let pool = Pool::start(config.clone(), state.clone(), handler, render_error.clone())?;
    let accepting = pool.clone();
    let builder = std::thread::Builder::new().name("tollgate-accept".into());
    match crate::logging::thread(builder, move || {
        accept_loop(listener, &config, &state, &accepting, &*render_error)
    }) {
        Ok(accept) => Ok(Server {
            pool,
            accept,
            local,
        }),
        Err(e) => {
            pool.stop();
            Err(HttpStartError::Accept(e))
        }
    }
}

impl Server {
    /// Wakes the accept loop so it sees `shutting_down` (set by the caller) and stops taking connections.
    pub fn wake_accept(&self) {
        if let Some(addr) = self.local {
            let _ =
                std::net::TcpStream::connect_timeout(&wake_addr(addr), Duration::from_millis(200));
        }
    }

    /// Ends every thread of the layer once shutdown has begun and no request is in flight: the accept loop
    /// (woken), the pool threads and the timer. Connections still open are closed.
    pub fn stop(self) {
        self.wake_accept();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.accept.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.accept.is_finished() {
            let _ = self.accept.join();
        }
        self.pool.stop();
    }
}

/// The address to connect to in order to wake an accept loop bound to `addr` (0.0.0.0 → loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

fn accept_loop(
    listener: TcpListener,
    config: &HttpConfig,
    state: &ServerState,
    pool: &Pool,
    render_error: &ErrorRenderer,
) {
    let mut last_accept_warning: Option<Instant> = None;
    loop {
        let accepted = listener.accept();
        if state.shutting_down.load(Ordering::SeqCst) {
            break;
        }
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: wait for descriptors to free up; never end the loop.
                if last_accept_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    log::warn!("accept failed: {e}; retrying");
                    last_accept_warning = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(config.write_timeout));
        let open = state.open_connections.fetch_add(1, Ordering::SeqCst) + 1;
        if open > config.max_connections {
            state.open_connections.fetch_sub(1, Ordering::SeqCst);
            state.rejected.fetch_add(1, Ordering::Relaxed);
            reject_overloaded(stream, render_error, "too many open connections");
            continue;
        }
        if !state.take_share(peer.ip(), open, config.max_connections, &config.per_client) {
            state.open_connections.fetch_sub(1, Ordering::SeqCst);
            state.rejected.fetch_add(1, Ordering::Relaxed);
            reject_overloaded(
                stream,
                render_error,
                "too many open connections from this address: the gateway's connections run short, and each \
                 client address gets its share",
            );
            continue;
        }
        pool.admit(stream, peer);
    }
}

fn reject_overloaded(stream: TcpStream, render_error: &ErrorRenderer, why: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut writer = ResponseWriter::new(stream);
    writer.reset(false, false);
    send_rendered(
        &mut writer,
        None,
        503,
        why,
        render_error,
        &[("retry-after", "1")],
    );
}
