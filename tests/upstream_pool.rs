//! Pooled upstream connections that the upstream closed while they sat idle never become a 502: the
//! gateway keeps idle connections for less than common server limits, and sends a request again exactly
//! when the failure proves the upstream did not take it (a reused connection closed before any byte of the
//! answer, or a failed write), never after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::json;

/// An upstream that drops every request arriving on a connection idle for more than 100 ms (the close and
/// the request crossing on the wire, as with uvicorn's 5 s keep-alive limit): requests spaced below, at and
/// above that idle time all get 200, and the upstream answered each exactly once.
#[test]
fn stale_pooled_connections_never_become_502s() {
    let idle = Duration::from_millis(100);
    let fake = FakeUpstream::start_idle_close(idle, |rec| {
        if rec.json()["stream"] == true {
            let delta = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]});
            Reply::sse(vec![
                format!("data: {delta}\n\n").into_bytes(),
                b"data: [DONE]\n\n".to_vec(),
            ])
        } else {
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
            )
        }
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let gaps = [20u64, 60, 95, 100, 105, 140, 200];
    let mut sent = 0;
    for i in 0..42 {
        std::thread::sleep(Duration::from_millis(gaps[i % gaps.len()]));
        let stream = i % 3 == 2;
        let body = json!({"model": "m-chat", "stream": stream,
                          "messages": [{"role": "user", "content": format!("req {i}")}]});
        let r = gw.post("/v1/chat/completions", &body);
        assert_eq!(
            r.status,
            200,
            "request {i} (gap {} ms): {}",
            gaps[i % gaps.len()],
            r.text()
        );
        sent += 1;
    }
    assert_eq!(
        fake.received().len(),
        sent,
        "each client request was answered by the upstream exactly once"
    );
    assert!(
        fake.connections.load(std::sync::atomic::Ordering::SeqCst) > 1,
        "the stale connections were replaced"
    );
}

/// Never after any byte of the answer: a reused connection that breaks in the middle of the answer's head
/// is a 502, and the upstream saw the request once.
#[test]
fn a_call_that_got_any_answer_is_never_sent_again() {
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = n.clone();
    let fake = FakeUpstream::start(move |_| {
        if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
            )
        } else {
            Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-ty".to_vec())
        }
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let body = json!({"model": "m-chat", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(gw.post("/v1/chat/completions", &body).status, 200);
    let r = gw.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        fake.received().len(),
        2,
        "the broken call was not sent again"
    );
    assert_eq!(
        fake.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the second call reused the pooled connection"
    );
}
