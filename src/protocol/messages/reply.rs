//! Messages answers to clients: the `message` object and the event lifecycle of a stream.

use serde_json::{json, Value};

use crate::protocol::canon::{Part, Request, Response, StopReason, StreamEvent, Usage};
use crate::protocol::codec::{Listed, ModelList, ReplyCodec};
use crate::protocol::sse::push_event;
use crate::protocol::{ApiError, StreamEncoder};

use super::Messages;

/// Anthropic's `stop_reason` for a stop reason.
pub(super) fn stop_reason(stop: &StopReason) -> (String, Value) {
    match stop {
        StopReason::EndTurn => ("end_turn".into(), Value::Null),
        StopReason::MaxTokens => ("max_tokens".into(), Value::Null),
        StopReason::StopSequence(s) => ("stop_sequence".into(), json!(s)),
        StopReason::ToolUse => ("tool_use".into(), Value::Null),
        StopReason::ContentFilter => ("refusal".into(), Value::Null),
        // Anthropic's own (`pause_turn`, from an Anthropic upstream) as they came; another vendor's reason
        // that is none of them (`abort`, `MALFORMED_FUNCTION_CALL`) is no value the SDKs know: the turn ended.
        StopReason::Other(o) if ANTHROPIC_STOPS.contains(&o.as_str()) => (o.clone(), Value::Null),
        StopReason::Other(_) => ("end_turn".into(), Value::Null),
    }
}

/// The `stop_reason` values of the Messages API.
const ANTHROPIC_STOPS: [&str; 7] = [
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
];

/// The Messages usage object: the input in its three buckets (`input_tokens` is only the uncached part),
/// and the writes split by lifetime in `cache_creation` when there were any (writes of a lifetime the
/// upstream did not state count as 5-minute ones, the price they are billed at).
pub(super) fn usage_json(u: &Usage) -> Value {
    let s = u.split();
    let writes = s.cache_writes_5m + s.cache_writes_1h;
    let mut v = json!({
        "input_tokens": s.uncached,
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": writes,
        "cache_read_input_tokens": s.cache_reads,
    });
    if writes > 0 {
        v["cache_creation"] = json!({
            "ephemeral_5m_input_tokens": s.cache_writes_5m,
            "ephemeral_1h_input_tokens": s.cache_writes_1h,
        });
    }
    v
}

/// Tool arguments as a JSON object for a `tool_use` block; invalid JSON is kept as `{"_raw": text}`.
pub(super) fn arguments_object(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(other) => json!({"_value": other}),
        Err(_) => json!({"_raw": arguments}),
    }
}

impl ReplyCodec for Messages {
    /// Encodes a complete answer as a `message` object.
    fn encode_response(&self, resp: &Response, _req: &Request) -> Value {
        let content: Vec<Value> = resp
            .content
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) if !t.is_empty() => Some(json!({"type": "text", "text": t})),
                Part::ToolCall { id, name, arguments } => {
                    Some(json!({"type": "tool_use", "id": id, "name": name, "input": arguments_object(arguments)}))
                }
                Part::Reasoning { text, signature } => Some(json!({
                    "type": "thinking", "thinking": text, "signature": signature.clone().unwrap_or_default()
                })),
                _ => None,
            })
            .collect();
        let (reason, seq) = stop_reason(&resp.stop);
        json!({
            "id": resp.id,
            "type": "message",
            "role": "assistant",
            "model": resp.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": seq,
            "usage": usage_json(&resp.usage),
        })
    }

    fn stream_encoder(
        &self,
        _req: &Request,
        _include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(MessagesStreamEncoder::new().with_request_id(request_id.into()))
    }

    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        let v = json!({"type": "error", "error": err.anthropic_object(request_id),
                       "request_id": request_id});
        serde_json::to_vec(&v).unwrap_or_default()
    }

    fn error_event(&self, err: &ApiError, request_id: &str, _next_seq: Option<u64>) -> Vec<u8> {
        let d = json!({"type": "error", "error": err.anthropic_object(request_id),
                       "request_id": request_id});
        let mut out = Vec::new();
        push_event(&mut out, Some("error"), &d.to_string());
        out
    }
}

/// Anthropic's models list: one page, its first and last ids.
impl ModelList for Messages {
    fn models_list(&self, models: &[Listed], created: u64) -> Value {
        let data: Vec<Value> = models.iter().map(|m| self.model_entry(m, created)).collect();
        json!({
            "data": data,
            "has_more": false,
            "first_id": models.first().map(|m| m.id),
            "last_id": models.last().map(|m| m.id),
        })
    }

    fn model_entry(&self, model: &Listed, created: u64) -> Value {
        json!({"type": "model", "id": model.id, "display_name": model.id,
               "created_at": crate::util::rfc3339(created)})
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
    Tool(usize),
}

/// Re-emits canonical events as the Messages lifecycle: `message_start` first, content blocks with
/// contiguous indices, `message_delta` with cumulative usage, `message_stop` last.
pub(super) struct MessagesStreamEncoder {
    open: Option<(usize, Block)>,
    next_index: usize,
    tool_blocks: Vec<(usize, usize)>,
    usage: Usage,
    stop: Option<StopReason>,
    signature: Option<String>,
    failed: bool,
    /// Carried by error events.
    request_id: String,
}

impl Default for MessagesStreamEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl MessagesStreamEncoder {
    pub(super) fn new() -> Self {
        MessagesStreamEncoder {
            open: None,
            next_index: 0,
            tool_blocks: Vec::new(),
            usage: Usage::default(),
            stop: None,
            signature: None,
            failed: false,
            request_id: String::new(),
        }
    }

    /// Sets the request id error events carry.
    pub(super) fn with_request_id(mut self, id: String) -> Self {
        self.request_id = id;
        self
    }

    fn emit(out: &mut Vec<u8>, ty: &str, mut data: Value) {
        data["type"] = json!(ty);
        push_event(out, Some(ty), &data.to_string());
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, block)) = self.open.take() {
            if block == Block::Thinking {
                let sig = self.signature.take().unwrap_or_default();
                if !sig.is_empty() {
                    let d = json!({"index": index, "delta": {"type": "signature_delta", "signature": sig}});
                    Self::emit(out, "content_block_delta", d);
                }
            }
            Self::emit(out, "content_block_stop", json!({"index": index}));
        }
    }

    fn ensure(&mut self, out: &mut Vec<u8>, block: Block, start: Value) -> usize {
        if let Some((index, b)) = self.open {
            if b == block {
                return index;
            }
        }
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        Self::emit(
            out,
            "content_block_start",
            json!({"index": index, "content_block": start}),
        );
        self.open = Some((index, block));
        index
    }
}

impl StreamEncoder for MessagesStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        match event {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
                ..
            } => {
                let id = if id.starts_with("msg_") {
                    id.clone()
                } else {
                    crate::util::new_id("msg_")
                };
                let d = json!({"message": {
                    "id": id, "type": "message", "role": "assistant", "content": [], "model": model,
                    "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
                }});
                Self::emit(out, "message_start", d);
            }
            StreamEvent::TextDelta(t) => {
                let index = self.ensure(out, Block::Text, json!({"type": "text", "text": ""}));
                let d = json!({"index": index, "delta": {"type": "text_delta", "text": t}});
                Self::emit(out, "content_block_delta", d);
            }
            StreamEvent::ReasoningDelta(t) => {
                let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                let index = self.ensure(out, Block::Thinking, start);
                let d = json!({"index": index, "delta": {"type": "thinking_delta", "thinking": t}});
                Self::emit(out, "content_block_delta", d);
            }
            StreamEvent::Unkept | StreamEvent::ToolCallEnd { .. } => {}
            // A signature of reasoning not shown: an empty thinking block carries it.
            StreamEvent::ReasoningSignature(s) => {
                if !matches!(self.open, Some((_, Block::Thinking))) {
                    let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                    self.ensure(out, Block::Thinking, start);
                }
                self.signature = Some(s.clone());
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.close(out);
                let start = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                let block_index = self.ensure(out, Block::Tool(*index), start);
                self.tool_blocks.push((*index, block_index));
            }
            StreamEvent::ToolArgsDelta { index, delta } => {
                let Some(&(_, block_index)) = self.tool_blocks.iter().find(|(i, _)| i == index)
                else {
                    return;
                };
                let d = json!({"index": block_index, "delta": {"type": "input_json_delta", "partial_json": delta}});
                Self::emit(out, "content_block_delta", d);
            }
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Finish(r) => self.stop = Some(r.clone()),
            StreamEvent::Error(e) => {
                self.failed = true;
                let d = json!({"error": e.anthropic_object(&self.request_id),
                               "request_id": self.request_id});
                Self::emit(out, "error", d);
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        self.close(out);
        let stop = self.stop.clone().unwrap_or(if self.tool_blocks.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
        let (reason, seq) = stop_reason(&stop);
        let d = json!({"delta": {"stop_reason": reason, "stop_sequence": seq}, "usage": usage_json(&self.usage)});
        Self::emit(out, "message_delta", d);
        Self::emit(out, "message_stop", json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::UpstreamCodec;
    use crate::protocol::messages::upstream::usage_update;

    #[test]
    fn a_streams_usage_keeps_what_later_events_leave_out() {
        let start = json!({"input_tokens": 10, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 30,
                           "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20},
                           "output_tokens": 1});
        let u = Messages.usage_from(&start).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.cache_write_tokens,
                u.cache_write_1h_tokens
            ),
            (60, 30, 20)
        );
        // message_delta repeating the counts without the split; then one with only the output; one with nulls.
        let repeat = json!({"input_tokens": 10, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 30,
                            "output_tokens": 7});
        let u = usage_update(u, &repeat).unwrap();
        let u = usage_update(u, &json!({"output_tokens": 9, "input_tokens": null})).unwrap();
        assert_eq!(
            u,
            Usage {
                input_tokens: 60,
                cached_input_tokens: 20,
                cache_write_tokens: 30,
                cache_write_1h_tokens: 20,
                output_tokens: 9,
                reasoning_tokens: 0,
            }
        );
        // And back out in Messages' buckets.
        let v = usage_json(&u);
        assert_eq!(v["input_tokens"], 10);
        assert_eq!(v["cache_creation"]["ephemeral_1h_input_tokens"], 20);
        assert_eq!(v["cache_creation"]["ephemeral_5m_input_tokens"], 10);
    }

    #[test]
    fn stream_blocks_are_contiguous() {
        let mut enc = MessagesStreamEncoder::new();
        let mut out = Vec::new();
        enc.encode(
            &StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                created: 0,
                input_tokens: 5,
            },
            &mut out,
        );
        enc.encode(&StreamEvent::TextDelta("a".into()), &mut out);
        enc.encode(
            &StreamEvent::ToolCallStart {
                index: 0,
                id: "t".into(),
                name: "f".into(),
            },
            &mut out,
        );
        enc.encode(
            &StreamEvent::ToolArgsDelta {
                index: 0,
                delta: "{\"a\":".into(),
            },
            &mut out,
        );
        enc.encode(
            &StreamEvent::ToolArgsDelta {
                index: 0,
                delta: "1}".into(),
            },
            &mut out,
        );
        enc.encode(
            &StreamEvent::ToolCallStart {
                index: 1,
                id: "u".into(),
                name: "g".into(),
            },
            &mut out,
        );
        enc.encode(
            &StreamEvent::Usage(Usage {
                input_tokens: 5,
                output_tokens: 9,
                ..Usage::default()
            }),
            &mut out,
        );
        enc.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        let starts: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("content_block_start") && l.starts_with("data"))
            .collect();
        assert_eq!(starts.len(), 3);
        for (i, s) in starts.iter().enumerate() {
            assert!(s.contains(&format!("\"index\":{i}")));
        }
        assert!(text.contains("\"stop_reason\":\"tool_use\""));
        assert!(text.contains("\"output_tokens\":9"));
        assert!(text.trim_end().ends_with("{\"type\":\"message_stop\"}"));
    }

    /// A signature of reasoning that was not shown (Gemini's, on a function call) reaches the client on an
    /// empty thinking block, which it sends back with its next turn.
    #[test]
    fn a_signature_alone_is_an_empty_thinking_block() {
        let mut enc = MessagesStreamEncoder::new();
        let mut out = Vec::new();
        enc.encode(&StreamEvent::ReasoningSignature("sig".into()), &mut out);
        enc.encode(
            &StreamEvent::ToolCallStart {
                index: 0,
                id: "t".into(),
                name: "f".into(),
            },
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        let thinking = text.find("\"type\":\"thinking\"").expect(&text);
        let signed = text.find("\"signature\":\"sig\"").expect(&text);
        let tool = text.find("\"type\":\"tool_use\"").expect(&text);
        assert!(thinking < signed && signed < tool, "{text}");
    }

    #[test]
    fn a_stop_reason_the_sdks_do_not_know_is_the_end_of_the_turn() {
        assert_eq!(stop_reason(&StopReason::Other("pause_turn".into())).0, "pause_turn");
        assert_eq!(stop_reason(&StopReason::Other("abort".into())).0, "end_turn");
    }
}
