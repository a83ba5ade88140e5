//! Property tests: every request decoder, stream decoder, the SSE reader and the HTTP head and chunked
//! parsers are driven with random input and must never panic. (Run with more cases:
//! `PROPTEST_CASES=100000 cargo test --release --test properties`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

use proptest::prelude::*;
use serde_json::{json, Value};
use tollgate::http::{parse_head, ChunkedDecoder, ParseLimits};
use tollgate::protocol::canon::Request;
use tollgate::protocol::sse::{SseEvent, SseReader};
use tollgate::protocol::{EgressOptions, Protocol};

/// Random JSON values, biased towards the shapes the decoders look for.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop_oneof![
            Just("user"),
            Just("assistant"),
            Just("system"),
            Just("tool"),
            Just("developer"),
            Just("text"),
            Just("image_url"),
            Just("function"),
            Just("tool_use"),
            Just("tool_result"),
            Just("message"),
            Just("function_call"),
            Just("function_call_output"),
            Just("input_text"),
            Just("json_schema"),
            Just("data:image/png;base64,AAAA"),
            Just(""),
            Just("\u{0}"),
            Just("é☃𝄞"),
        ]
        .prop_map(|s| json!(s)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        let key = prop_oneof![
            Just("model"),
            Just("messages"),
            Just("input"),
            Just("role"),
            Just("content"),
            Just("type"),
            Just("text"),
            Just("tools"),
            Just("tool_choice"),
            Just("function"),
            Just("name"),
            Just("arguments"),
            Just("max_tokens"),
            Just("stream"),
            Just("system"),
            Just("id"),
            Just("tool_call_id"),
            Just("call_id"),
            Just("tool_use_id"),
            Just("input_schema"),
            Just("parameters"),
            Just("response_format"),
            Just("text"),
            Just("format"),
            Just("schema"),
            Just("image_url"),
            Just("url"),
            Just("source"),
            Just("output"),
            Just("tool_calls"),
            Just("instructions"),
            Just("namespace"),
            Just("stop"),
            Just("reasoning"),
        ]
        .prop_map(str::to_string);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn opts() -> EgressOptions {
    EgressOptions {
        model: "m".into(),
        stream: true,
        default_max_tokens: 100,
        max_completion_tokens_field: false,
        structured_via_tool: true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Request decoders, and re-encoding whatever they accept for every upstream, never panic.
    #[test]
    fn request_codecs_never_panic(v in json_value(), model in prop::option::of(".{0,5}")) {
        let mut v = v;
        if let (Some(m), Value::Object(o)) = (model, &mut v) {
            o.insert("model".into(), json!(m));
            o.insert("max_tokens".into(), json!(10));
        }
        for p in [Protocol::Chat, Protocol::Responses, Protocol::Messages] {
            if let Ok(req) = p.request.decode_request(&v) {
                for target in [Protocol::Chat, Protocol::Responses, Protocol::Messages] {
                    let _ = target.upstream.encode_request(&req, &opts());
                }
            }
        }
    }

    /// Upstream answer decoders never panic on random JSON.
    #[test]
    fn response_decoders_never_panic(v in json_value()) {
        for p in [Protocol::Chat, Protocol::Responses, Protocol::Messages] {
            let _ = p.upstream.decode_response(&v, &opts());
            let _ = p.upstream.usage_from(&v);
        }
    }

    /// Stream decoders take random events, and stream encoders whatever comes out.
    #[test]
    fn stream_codecs_never_panic(events in prop::collection::vec((prop::option::of("[a-z_.]{1,30}"), json_value()), 0..12)) {
        for up in [Protocol::Chat, Protocol::Responses, Protocol::Messages] {
            let mut dec = up.upstream.stream_decoder(&opts());
            let mut encs: Vec<_> = [Protocol::Chat, Protocol::Responses, Protocol::Messages]
                .iter()
                .map(|c| c.reply.stream_encoder(&Request::default(), true, "req_test"))
                .collect();
            let mut out = Vec::new();
            let mut bytes = Vec::new();
            for (name, data) in &events {
                let ev = SseEvent { event: name.clone(), data: data.to_string(), has_data: true, raw: Vec::new(), terminated: true };
                out.clear();
                let done = dec.feed(&ev, &mut out);
                for e in &out {
                    for enc in encs.iter_mut() {
                        enc.encode(e, &mut bytes);
                    }
                }
                if done {
                    break;
                }
            }
            for enc in encs.iter_mut() {
                enc.finish(&mut bytes);
            }
        }
    }

    /// The SSE reader never panics, and the raw bytes of its events are exactly the input (minus blank
    /// lines between blocks).
    #[test]
    fn sse_reader_keeps_every_byte(input in prop::collection::vec(prop_oneof![
        Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '), Just(b'd'), Just(b'a'), Just(b't'), Just(b'e'),
        Just(b'v'), Just(b'n'), any::<u8>()
    ], 0..400)) {
        let mut r = SseReader::new(&input[..]).with_max_event_bytes(200);
        let mut raw = Vec::new();
        loop {
            match r.next_event() {
                Ok(Some(ev)) => raw.extend_from_slice(&ev.raw),
                Ok(None) => break,
                Err(_) => return Ok(()),
            }
        }
        prop_assert!(raw.len() <= input.len());
    }

    /// Events framed with `push_event` read back identically, whatever their text (split at any point).
    #[test]
    fn sse_round_trip(events in prop::collection::vec((prop::option::of("[a-z_.]{1,12}"), "[^\r]{0,40}"), 1..8), cut in 0usize..2000) {
        let mut wire = Vec::new();
        for (name, data) in &events {
            tollgate::protocol::sse::push_event(&mut wire, name.as_deref(), data);
        }
        // A reader that gets the bytes in two pieces still sees the same events.
        let cut = cut.min(wire.len());
        let reader = std::io::BufReader::with_capacity(7, std::io::Read::chain(&wire[..cut], &wire[cut..]));
        let mut r = SseReader::new(reader);
        let mut got = Vec::new();
        while let Some(ev) = r.next_event().unwrap() {
            got.push((ev.event, ev.data));
        }
        let want: Vec<(Option<String>, String)> = events.iter().map(|(n, d)| (n.clone(), d.clone())).collect();
        prop_assert_eq!(got, want);
    }

    /// HTTP heads and chunked bodies: any bytes, never a panic.
    #[test]
    fn http_parsers_never_panic(head in prop::collection::vec(any::<u8>(), 0..600), chunked in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_head(&head, &ParseLimits::default());
        let mut with_start = b"POST /v1/messages HTTP/1.1\r\n".to_vec();
        with_start.extend_from_slice(&head);
        let _ = parse_head(&with_start, &ParseLimits { max_head_bytes: 300, max_headers: 8, max_body_bytes: 100 });
        let mut dec = ChunkedDecoder::default();
        let mut out = Vec::new();
        let _ = dec.feed(&chunked, &mut out, 1000);
    }
}
