//! Chat Completions answers to clients: the `chat.completion` object and the chunk stream.

use serde_json::{json, Map, Value};

use crate::protocol::canon::{Part, Request, Response, StopReason, StreamEvent, Usage};
use crate::protocol::codec::ReplyCodec;
use crate::protocol::openai;
use crate::protocol::sse::push_event;
use crate::protocol::{ApiError, StreamEncoder};

use super::Chat;

/// Chat's `finish_reason` for a stop reason.
pub(super) fn finish_reason(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn | StopReason::StopSequence(_) | StopReason::Other(_) => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
    }
}

/// The usage object of a response or final chunk: `prompt_tokens` counts all input, cache reads and
/// writes included; `cached_tokens` the reads, `cache_write_tokens` (only when there were any) the writes.
pub(super) fn usage_json(u: &Usage) -> Value {
    let mut prompt = json!({"cached_tokens": u.cached_input_tokens, "audio_tokens": 0});
    if u.cache_write_tokens > 0 {
        prompt["cache_write_tokens"] = json!(u.cache_write_tokens);
    }
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total(),
        "prompt_tokens_details": prompt,
        "completion_tokens_details": {
            "reasoning_tokens": u.reasoning_tokens, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0
        }
    })
}

impl ReplyCodec for Chat {
    /// Encodes a complete answer as a `chat.completion` object.
    fn encode_response(&self, resp: &Response, _req: &Request) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        let text = resp.text();
        let calls: Vec<Value> = resp
            .content
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some(json!({
                    "id": id, "type": "function", "function": {"name": name, "arguments": arguments}
                })),
                _ => None,
            })
            .collect();
        let reasoning: String = resp
            .content
            .iter()
            .filter_map(|p| match p {
                Part::Reasoning { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        message.insert(
            "content".into(),
            if text.is_empty() && !calls.is_empty() {
                Value::Null
            } else {
                json!(text)
            },
        );
        message.insert("refusal".into(), Value::Null);
        if !reasoning.is_empty() {
            message.insert("reasoning_content".into(), json!(reasoning));
        }
        if !calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        json!({
            "id": resp.id,
            "object": "chat.completion",
            "created": resp.created,
            "model": resp.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason(&resp.stop),
            }],
            "usage": usage_json(&resp.usage),
            "system_fingerprint": null,
        })
    }

    fn stream_encoder(
        &self,
        _req: &Request,
        include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(ChatStreamEncoder::new(include_usage).with_request_id(request_id.into()))
    }

    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        openai::error_body(err, request_id)
    }

    /// A chunk whose `error` holds the error object (no event name).
    fn error_event(&self, err: &ApiError, request_id: &str, _next_seq: Option<u64>) -> Vec<u8> {
        let d = json!({"error": err.openai_object(request_id)});
        let mut out = Vec::new();
        push_event(&mut out, None, &d.to_string());
        out
    }
}

/// Re-emits canonical events as `chat.completion.chunk`s: `role` once, tool-call `index` on every delta,
/// the finish chunk, then usage on its own final chunk (only if the client asked), then `[DONE]`.
pub(super) struct ChatStreamEncoder {
    include_usage: bool,
    id: String,
    model: String,
    created: u64,
    started: bool,
    stop: Option<StopReason>,
    usage: Usage,
    failed: bool,
    saw_tool_call: bool,
    /// Carried by error events.
    request_id: String,
}

impl ChatStreamEncoder {
    /// Sets the request id error events carry.
    pub(super) fn with_request_id(mut self, id: String) -> Self {
        self.request_id = id;
        self
    }

    pub(super) fn new(include_usage: bool) -> Self {
        ChatStreamEncoder {
            include_usage,
            id: String::new(),
            model: String::new(),
            created: 0,
            started: false,
            stop: None,
            usage: Usage::default(),
            failed: false,
            saw_tool_call: false,
            request_id: String::new(),
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: Value, finish: Option<&str>) {
        let mut v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        push_event(out, None, &v.to_string());
    }
}

impl StreamEncoder for ChatStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        match event {
            StreamEvent::Start {
                id, model, created, ..
            } => {
                self.id = id.clone();
                self.model = model.clone();
                self.created = *created;
                self.started = true;
                self.chunk(out, json!({"role": "assistant", "content": ""}), None);
            }
            StreamEvent::TextDelta(t) => self.chunk(out, json!({"content": t}), None),
            StreamEvent::ReasoningDelta(t) => {
                self.chunk(out, json!({"reasoning_content": t}), None)
            }
            StreamEvent::ReasoningSignature(_)
            | StreamEvent::Unkept
            | StreamEvent::ToolCallEnd { .. } => {}
            StreamEvent::ToolCallStart { index, id, name } => {
                self.saw_tool_call = true;
                self.chunk(
                    out,
                    json!({"tool_calls": [{
                        "index": index, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}
                    }]}),
                    None,
                )
            }
            StreamEvent::ToolArgsDelta { index, delta } => self.chunk(
                out,
                json!({"tool_calls": [{"index": index, "function": {"arguments": delta}}]}),
                None,
            ),
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Finish(reason) => self.stop = Some(reason.clone()),
            StreamEvent::Error(e) => {
                self.failed = true;
                let v = json!({"error": e.openai_object(&self.request_id)});
                push_event(out, None, &v.to_string());
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        let stop = self.stop.clone().unwrap_or(if self.saw_tool_call {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        self.chunk(out, json!({}), Some(finish_reason(&stop)));
        if self.include_usage {
            let v = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_json(&self.usage),
            });
            push_event(out, None, &v.to_string());
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_encoder_sends_role_once_and_usage_last() {
        let mut enc = ChatStreamEncoder::new(true);
        let mut out = Vec::new();
        enc.encode(
            &StreamEvent::Start {
                id: "c".into(),
                model: "m".into(),
                created: 1,
                input_tokens: 3,
            },
            &mut out,
        );
        enc.encode(&StreamEvent::TextDelta("a".into()), &mut out);
        enc.encode(
            &StreamEvent::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
            },
            &mut out,
        );
        enc.encode(
            &StreamEvent::ToolArgsDelta {
                index: 0,
                delta: "{}".into(),
            },
            &mut out,
        );
        enc.encode(&StreamEvent::Finish(StopReason::ToolUse), &mut out);
        enc.encode(
            &StreamEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2,
                ..Usage::default()
            }),
            &mut out,
        );
        enc.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("\"role\"").count(), 1);
        assert!(text.ends_with("data: [DONE]\n\n"));
        let chunks: Vec<Value> = text
            .split("\n\n")
            .filter_map(|b| b.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["total_tokens"], 5);
        assert_eq!(
            chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert!(chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["usage"].is_null()));
    }
}
