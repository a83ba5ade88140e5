//! Keepalives for quiet streams: while an upstream thinks (minutes, for reasoning models), proxies with idle
//! timeouts would cut the client's connection. One thread looks at every open stream once a second and
//! writes the protocol's keepalive into any that has been silent for the interval: an SSE comment for Chat
//! and Responses clients (their SDKs skip comments), a `ping` event for Messages clients.

use std::sync::{Mutex, Weak};
use std::time::Duration;

use crate::http::SharedStream;
use crate::protocol::Protocol;

const COMMENT: &[u8] = b": keepalive\n\n";
const PING: &[u8] = b"event: ping\ndata: {\"type\":\"ping\"}\n\n";

/// Open streams to keep alive.
pub struct Keepalive {
    interval: Duration,
    streams: Mutex<Vec<(Weak<SharedStream>, &'static [u8])>>,
}

impl Keepalive {
    pub fn new(interval: Duration) -> Keepalive {
        Keepalive {
            interval,
            streams: Mutex::new(Vec::new()),
        }
    }

    /// Watches a stream for a client of `protocol` until it ends.
    pub fn watch(&self, stream: &std::sync::Arc<SharedStream>, protocol: Protocol) {
        let payload = if protocol == Protocol::Messages {
            PING
        } else {
            COMMENT
        };
        if let Ok(mut s) = self.streams.lock() {
            s.push((std::sync::Arc::downgrade(stream), payload));
        }
    }

    /// One pass: pings the silent streams, forgets the finished ones.
    pub fn tick(&self) {
        let live: Vec<_> = match self.streams.lock() {
            Ok(mut s) => {
                s.retain(|(w, _)| w.strong_count() > 0);
                s.iter()
                    .filter_map(|(w, p)| w.upgrade().map(|a| (a, *p)))
                    .collect()
            }
            Err(_) => return,
        };
        for (stream, payload) in live {
            stream.ping_if_idle(self.interval, payload);
        }
    }

    /// Runs `tick` every second, forever.
    pub fn run(self: std::sync::Arc<Self>) {
        let period = Duration::from_millis(250)
            .max(self.interval / 8)
            .min(Duration::from_secs(1));
        loop {
            std::thread::sleep(period);
            self.tick();
        }
    }
}
