//! A small HTTP/1.1 server on `httparse` and `std::net`, protocol-agnostic: nothing here knows about LLMs.
//!
//! Why our own and not `tiny_http`: see ARCHITECTURE.md, "Why the HTTP layer is our own". What it
//! guarantees: an accept loop that never dies, `TCP_NODELAY` on every socket, a deadline on reading each
//! request (slowloris-proof), caps on head size, header count and body size (413 before reading a byte of an
//! oversized body), keep-alive, `Expect: 100-continue`, chunked request bodies, and a response writer that
//! flushes every chunk.

mod chunked;
mod conn;
mod poller;
mod pool;
mod request;
mod response;
mod server;
mod shared;
mod socket;

pub use chunked::ChunkedDecoder;
pub use request::{
    decode_path_segment, form_decode, parse_head, Body, BodyKind, Headers, HttpError, HttpRequest,
    ParseLimits, SegmentError,
};
pub use response::{reason, Reframe, ResponseWriter, Withheld};
pub use server::{start, Server};
pub use shared::{
    Early, ErrorRenderer, Exchange, Handler, HttpConfig, HttpStartError, Incoming, Overloaded,
    PerClient, Screen, ServerState,
};
pub use socket::SharedStream;
