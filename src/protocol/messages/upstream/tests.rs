//! The Messages upstream codec's tests: requests encoded, answers and streams decoded.

use super::*;
use crate::protocol::canon::{Message, Tool};

fn opts() -> EgressOptions {
    EgressOptions {
        model: "claude".into(),
        stream: false,
        default_max_tokens: 4096,
        max_completion_tokens_field: false,
        structured_via_tool: false,
    }
}

#[test]
fn history_maps_to_blocks_and_merges_roles() {
    let req = Request {
        system: vec!["sys".into()],
        messages: vec![
            Message::text(Role::User, "weather?"),
            Message {
                role: Role::Assistant,
                content: vec![Part::ToolCall {
                    id: "call.1".into(),
                    name: "w".into(),
                    arguments: "{\"c\":1}".into(),
                }],
            },
            Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    call_id: "call.1".into(),
                    content: vec![Part::Text("sunny".into())],
                    is_error: false,
                }],
            },
            Message::text(Role::User, "thanks"),
            Message::text(Role::System, "be nice"),
        ],
        tools: vec![Tool {
            custom: false,
            name: "w".into(),
            description: None,
            parameters: json!({"properties": {}}),
            strict: None,
        }],
        temperature: Some(1.7),
        reasoning_effort: Some("high".into()),
        ..Request::default()
    };
    let v = Messages.encode_request(&req, &opts()).unwrap();
    assert_eq!(v["system"], "sys\n\nbe nice");
    assert_eq!(v["max_tokens"], 4096);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(
        m.len(),
        3,
        "tool result and following user text merge into one user turn"
    );
    assert_eq!(m[1]["content"][0]["input"], json!({"c": 1}));
    assert_eq!(m[1]["content"][0]["id"], "call_1");
    assert_eq!(m[2]["content"][0]["tool_use_id"], "call_1");
    assert_eq!(m[2]["content"][1]["text"], "thanks");
    assert_eq!(v["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(v["temperature"], 1.0);
    assert!(
        v.get("thinking").is_none(),
        "no thinking with tool-call history"
    );
}

#[test]
fn effort_becomes_a_thinking_budget_within_max_tokens() {
    let req = Request {
        messages: vec![Message::text(Role::User, "hi")],
        reasoning_effort: Some("medium".into()),
        max_tokens: Some(20_000),
        temperature: Some(0.5),
        ..Request::default()
    };
    let v = Messages.encode_request(&req, &opts()).unwrap();
    assert_eq!(v["thinking"]["budget_tokens"], 8192);
    assert_eq!(v["max_tokens"], 20_000, "the limit is never raised");
    assert!(v.get("temperature").is_none());
    let small = Request {
        max_tokens: Some(4000),
        ..req.clone()
    };
    let v = Messages.encode_request(&small, &opts()).unwrap();
    assert_eq!(v["thinking"]["budget_tokens"], 2000, "half the limit");
    assert_eq!(v["max_tokens"], 4000);
    let tiny = Request {
        max_tokens: Some(1000),
        ..req
    };
    let v = Messages.encode_request(&tiny, &opts()).unwrap();
    assert!(
        v.get("thinking").is_none(),
        "no room for Anthropic's minimum budget"
    );
}

#[test]
fn structured_output_via_a_forced_tool_comes_back_as_text() {
    let mut o = opts();
    o.structured_via_tool = true;
    let req = Request {
        messages: vec![Message::text(Role::User, "hi")],
        output_format: Some(OutputFormat::JsonSchema {
            name: "x".into(),
            schema: json!({"type": "object"}),
            strict: None,
            description: None,
        }),
        ..Request::default()
    };
    let v = Messages.encode_request(&req, &o).unwrap();
    assert_eq!(v["tool_choice"]["name"], STRUCTURED_TOOL);
    let resp = Messages.decode_response(
        &json!({"content": [{"type": "tool_use", "id": "t", "name": STRUCTURED_TOOL, "input": {"a": 1}}], "stop_reason": "tool_use",
                "usage": {"input_tokens": 1, "output_tokens": 1}}),
        &o,
    )
    .unwrap();
    assert_eq!(resp.content, vec![Part::Text("{\"a\":1}".into())]);
    assert_eq!(resp.stop, StopReason::EndTurn);
}

/// An upstream's event, named by its `type` as Anthropic names them.
fn event(data: Value) -> SseEvent {
    SseEvent {
        event: data["type"].as_str().map(str::to_string),
        data: data.to_string(),
        has_data: true,
        raw: Vec::new(),
        terminated: true,
    }
}

/// The input `message_start` reports is the stream's usage from then on: a stream cut before its
/// `message_delta` (the client gone, the output limit, a broken upstream) is billed it, cache reads and
/// writes as such, with the output produced estimated, not an estimate of the whole input as uncached.
#[test]
fn a_stream_cut_before_its_message_delta_keeps_the_input_reported_at_its_start() {
    let mut d = MessagesStreamDecoder::new(false);
    let mut out = Vec::new();
    d.feed(
        &event(json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                   "content": [], "usage": {"input_tokens": 200, "cache_read_input_tokens": 100_000,
                   "cache_creation_input_tokens": 0, "output_tokens": 1}}})),
        &mut out,
    );
    d.feed(
        &event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        &mut out,
    );
    d.feed(
        &event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello there, how are you doing today?"}})),
        &mut out,
    );
    let reported = out.iter().rev().find_map(|e| match e {
        StreamEvent::Usage(u) => Some(*u),
        _ => None,
    });
    let (u, estimated) =
        crate::protocol::estimate::stream_usage(reported, false, "Hello there, how are you doing today?", 9);
    assert!(estimated, "the output is estimated");
    assert_eq!(u.input_tokens, 100_200);
    assert_eq!(u.cached_input_tokens, 100_000);
    assert!(u.output_tokens > 1);
}

/// A call with no arguments streams `{}` (as a complete answer's `input` says), not an empty string;
/// input sent whole in the block's start is the arguments.
#[test]
fn a_calls_arguments_are_never_empty() {
    let mut d = MessagesStreamDecoder::new(false);
    let mut out = Vec::new();
    for data in [
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t0", "name": "now", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}}),
        json!({"type": "content_block_stop", "index": 1}),
    ] {
        d.feed(&event(data), &mut out);
    }
    let args: Vec<(usize, String)> = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolArgsDelta { index, delta } => Some((*index, delta.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(args, [(0, "{}".to_string()), (1, "{\"path\":\"a\"}".to_string())]);
}
