//! Talking to a Chat Completions upstream on behalf of a client of another protocol: the canonical request
//! as a Chat body, and the upstream's answer (JSON or chunk stream) back as canonical values.

use crate::protocol::fields::At;
use crate::protocol::fields::{str_at, str_or};
use serde_json::{json, Map, Value};

use crate::protocol::canon::{Message, Part, Request, Response, Role, StopReason, StreamEvent, Usage};
use crate::protocol::egress::tool_result_text;
use crate::protocol::openai::{self, image_url_string, OpenAiShape};
use crate::protocol::sse::SseEvent;
use crate::protocol::codec::UpstreamCodec;
use crate::protocol::{ApiError, EgressOptions, StreamDecoder};

use super::Chat;

impl UpstreamCodec for Chat {
    /// The canonical request as a Chat Completions body.
    fn encode_request(&self, req: &Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        // One leading system message: many local chat templates accept no more than one, and only first.
        let mut messages: Vec<Value> = Vec::new();
        let system = openai::system_text(req);
        if !system.is_empty() {
            messages.push(json!({"role": "system", "content": system}));
        }
        for m in &req.messages {
            encode_message(m, &mut messages);
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(opts.model));
        body.insert("messages".into(), Value::Array(messages));
        openai::encode_tools(req, OpenAiShape::Nested, &mut body);
        if let Some(n) = req.max_tokens {
            let field = if opts.max_completion_tokens_field {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            body.insert(field.into(), json!(n));
        }
        openai::encode_sampling(req, &mut body);
        if !req.stop.is_empty() {
            body.insert("stop".into(), json!(req.stop));
        }
        let format = req.output_format.as_ref();
        if let Some(f) = format.and_then(|f| openai::encode_output_format(f, OpenAiShape::Nested)) {
            body.insert("response_format".into(), f);
        }
        if let Some(e) = &req.reasoning_effort {
            body.insert("reasoning_effort".into(), json!(openai::effort(e)));
        }
        if let Some(u) = &req.user {
            body.insert("user".into(), json!(u));
        }
        if opts.stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        Ok(Value::Object(body))
    }

    /// Decodes a `chat.completion` body.
    fn decode_response(&self, body: &Value, _opts: &EgressOptions) -> Result<Response, ApiError> {
        let choice = body
            .at("choices/0")
            .ok_or_else(|| ApiError::bad_gateway("upstream answer has no choices"))?;
        let msg = choice.get("message").unwrap_or(&Value::Null);
        let mut content = Vec::new();
        let reasoning = msg
            .get("reasoning_content")
            .or_else(|| msg.get("reasoning"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !reasoning.is_empty() {
            content.push(Part::Reasoning {
                text: reasoning.to_string(),
                signature: None,
            });
        }
        let text = content_text(msg.get("content").unwrap_or(&Value::Null));
        let refusal = msg
            .get("refusal")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty());
        if !text.is_empty() {
            content.push(Part::Text(text));
        } else if let Some(r) = refusal {
            content.push(Part::Text(r.to_string()));
        }
        let unkept = refusal.is_some() || msg.get("audio").is_some_and(|a| !a.is_null());
        let mut calls = 0;
        for c in msg
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let f = c.get("function").unwrap_or(&Value::Null);
            content.push(Part::ToolCall {
                id: str_at(c, "id"),
                name: str_at(f, "name"),
                arguments: str_or(f, "arguments", "{}"),
            });
            calls += 1;
        }
        let mut stop = stop_from_finish(
            choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .unwrap_or("stop"),
        );
        if calls > 0 && stop == StopReason::EndTurn {
            stop = StopReason::ToolUse;
        }
        Ok(Response {
            id: str_at(body, "id"),
            model: str_at(body, "model"),
            content,
            stop,
            usage: body.get("usage").and_then(|u| Chat.usage_from(u)).unwrap_or_default(),
            created: body.get("created").and_then(Value::as_u64).unwrap_or(0),
            unkept,
        })
    }

    /// Reads a Chat `usage` object: `prompt_tokens` holds the cached tokens (`cached_tokens`) and those written
    /// to the cache (`cache_write_tokens`, lifetime not stated); `completion_tokens` holds the reasoning.
    fn usage_from(&self, u: &Value) -> Option<Usage> {
        let o = u.as_object()?;
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            input_tokens: n(o.get("prompt_tokens")),
            cached_input_tokens: n(u.at("prompt_tokens_details/cached_tokens")),
            cache_write_tokens: n(u.at("prompt_tokens_details/cache_write_tokens")),
            cache_write_1h_tokens: 0,
            output_tokens: n(o.get("completion_tokens")),
            reasoning_tokens: n(u.at("completion_tokens_details/reasoning_tokens")),
        })
    }

    fn stream_decoder(&self, _opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::new(ChatStreamDecoder::default())
    }
}

fn encode_message(m: &Message, out: &mut Vec<Value>) {
    match m.role {
        Role::System => out.push(json!({"role": "system", "content": m.joined_text()})),
        Role::User | Role::Tool => {
            // Tool results become `tool` messages, placed before the rest of the turn.
            let mut rest = Vec::new();
            for p in &m.content {
                match p {
                    Part::ToolResult { call_id, content, is_error } => out.push(json!({
                        "role": "tool", "tool_call_id": openai::chat_call_id(call_id),
                        "content": tool_result_text(content, *is_error)
                    })),
                    other => rest.push(other),
                }
            }
            if rest.is_empty() {
                return;
            }
            let content = if rest.iter().all(|p| matches!(p, Part::Text(_))) {
                json!(rest
                    .iter()
                    .filter_map(|p| if let Part::Text(t) = p {
                        Some(t.as_str())
                    } else {
                        None
                    })
                    .collect::<String>())
            } else {
                Value::Array(
                    rest.iter()
                        .filter_map(|p| match p {
                            Part::Text(t) => Some(json!({"type": "text", "text": t})),
                            Part::Image(src) => Some(json!({"type": "image_url", "image_url": {"url": image_url_string(src)}})),
                            _ => None,
                        })
                        .collect(),
                )
            };
            out.push(json!({"role": "user", "content": content}));
        }
        Role::Assistant => {
            let text: String = m
                .content
                .iter()
                .filter_map(|p| {
                    if let Part::Text(t) = p {
                        Some(t.as_str())
                    } else {
                        None
                    }
                })
                .collect();
            let calls: Vec<Value> = m
                .content
                .iter()
                .filter_map(|p| match p {
                    Part::ToolCall { id, name, arguments } => Some(json!({
                        "id": openai::chat_call_id(id), "type": "function",
                        "function": {"name": name, "arguments": arguments}
                    })),
                    _ => None,
                })
                .collect();
            let mut msg = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        }
    }
}

/// Canonical stop reason for a `finish_reason`. What compatible servers say besides OpenAI's own (TGI's
/// `eos_token` and `stop_sequence`) is read as such; anything else (`error`, `abort`, …) is no natural end,
/// and kept as it came (such an answer is never stored in the answer cache).
pub(super) fn stop_from_finish(reason: &str) -> StopReason {
    match reason {
        "stop" | "eos_token" | "eos" => StopReason::EndTurn,
        "stop_sequence" => StopReason::StopSequence(None),
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

/// Text of a message `content`, which some compatible servers send as an array of parts.
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Decodes a chunk stream: content, reasoning and tool-call deltas, the finish reason, the usage chunk.
#[derive(Default)]
pub(super) struct ChatStreamDecoder {
    /// Per upstream tool-call index: the canonical index and the call's id.
    calls: Vec<(u64, usize, String)>,
    next_call: usize,
}

impl ChatStreamDecoder {
    fn tool_delta(&mut self, tc: &Value, out: &mut Vec<StreamEvent>) {
        let upstream_index = tc
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(self.calls.len() as u64);
        let id = tc
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let f = tc.get("function").unwrap_or(&Value::Null);
        let known = self
            .calls
            .iter()
            .rposition(|(i, _, _)| *i == upstream_index);
        // A new id at a known index is a new call (some servers number every call 0).
        let index = match (known, id) {
            (Some(k), Some(id)) if self.calls[k].2 != id => None,
            (Some(k), _) => Some(self.calls[k].1),
            (None, _) => None,
        };
        let index = match index {
            Some(i) => i,
            None => {
                let i = self.next_call;
                self.next_call += 1;
                let id = id
                    .map(str::to_string)
                    .unwrap_or_else(|| crate::util::new_id("call_"));
                self.calls.push((upstream_index, i, id.clone()));
                let name = str_at(f, "name");
                out.push(StreamEvent::ToolCallStart { index: i, id, name });
                i
            }
        };
        if let Some(args) = f
            .get("arguments")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
        {
            out.push(StreamEvent::ToolArgsDelta {
                index,
                delta: args.to_string(),
            });
        }
    }
}

impl ChatStreamDecoder {
    /// One choice of a chunk: its deltas (reasoning, text, a refusal, tool calls) and its finish reason.
    fn choice(&mut self, choice: &Value, out: &mut Vec<StreamEvent>) {
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        // The first of the two names a server uses (some send both, alike): as a whole answer is read.
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|k| delta.get(*k).and_then(Value::as_str).filter(|r| !r.is_empty()));
        if let Some(r) = reasoning {
            out.push(StreamEvent::ReasoningDelta(r.to_string()));
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push(StreamEvent::TextDelta(t.to_string()));
        }
        if let Some(r) = delta
            .get("refusal")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push(StreamEvent::Unkept);
            out.push(StreamEvent::TextDelta(r.to_string()));
        }
        if delta.get("audio").is_some_and(|a| !a.is_null()) {
            out.push(StreamEvent::Unkept);
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.tool_delta(tc, out);
        }
        if let Some(reason) = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            let mut stop = stop_from_finish(reason);
            if self.next_call > 0 && stop == StopReason::EndTurn {
                stop = StopReason::ToolUse;
            }
            out.push(StreamEvent::Finish(stop));
        }
    }
}

impl StreamDecoder for ChatStreamDecoder {
    fn feed(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> bool {
        let data = ev.data.trim();
        if !ev.has_data || data.is_empty() {
            return false;
        }
        if data.starts_with("[DONE]") {
            return true;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            out.push(StreamEvent::Error(ApiError::bad_gateway(
                "upstream sent an event that is not valid JSON",
            )));
            return true;
        };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let msg = str_or(e, "message", "upstream error");
            let code = e
                .get("code")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or(Some("server_error".into()));
            let err = ApiError::bad_gateway(format!("upstream error: {msg}")).with_code_opt(code);
            out.push(StreamEvent::Error(err));
            return true;
        }
        for choice in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.choice(choice, out);
        }
        if let Some(u) = v.get("usage").and_then(|u| Chat.usage_from(u)) {
            out.push(StreamEvent::Usage(u));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::canon::{Tool, Usage};

    fn opts(stream: bool) -> EgressOptions {
        EgressOptions {
            model: "up".into(),
            stream,
            default_max_tokens: 100,
            max_completion_tokens_field: false,
            structured_via_tool: false,
        }
    }

    #[test]
    fn tool_results_become_tool_messages_before_user_text() {
        let req = Request {
            system: vec!["sys".into()],
            messages: vec![
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        Part::ToolResult {
                            call_id: "c1".into(),
                            content: vec![Part::Text("42".into())],
                            is_error: true,
                        },
                        Part::Text("thanks".into()),
                    ],
                },
            ],
            tools: vec![Tool {
                custom: false,
                name: "f".into(),
                description: None,
                parameters: json!({"type": "object"}),
                strict: None,
            }],
            ..Request::default()
        };
        let v = Chat.encode_request(&req, &opts(true)).unwrap();
        let m = v["messages"].as_array().unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], Value::Null);
        assert_eq!(m[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "Error: 42"})
        );
        assert_eq!(m[3], json!({"role": "user", "content": "thanks"}));
        assert_eq!(v["stream_options"]["include_usage"], true);
    }

    #[test]
    fn stream_decoder_handles_tool_calls_and_usage() {
        let mut d = ChatStreamDecoder::default();
        let mut out = Vec::new();
        let ev = |data: &str| SseEvent {
            data: data.into(),
            has_data: true,
            terminated: true,
            ..SseEvent::default()
        };
        d.feed(
            &ev(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}"#),
            &mut out,
        );
        d.feed(&ev(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#), &mut out);
        d.feed(&ev(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]}"#), &mut out);
        d.feed(
            &ev(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#),
            &mut out,
        );
        d.feed(
            &ev(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#),
            &mut out,
        );
        assert!(d.feed(&ev("[DONE]"), &mut out));
        assert_eq!(
            out,
            vec![
                StreamEvent::TextDelta("Hi".into()),
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "c1".into(),
                    name: "f".into()
                },
                StreamEvent::ToolArgsDelta {
                    index: 0,
                    delta: "{\"a\":1}".into()
                },
                StreamEvent::Finish(StopReason::ToolUse),
                StreamEvent::Usage(Usage {
                    input_tokens: 5,
                    output_tokens: 3,
                    ..Usage::default()
                }),
            ]
        );
    }

    #[test]
    fn a_finish_reason_that_is_no_natural_end_stays_what_it_is() {
        assert_eq!(stop_from_finish("stop"), StopReason::EndTurn);
        assert_eq!(stop_from_finish("eos_token"), StopReason::EndTurn);
        assert_eq!(stop_from_finish("stop_sequence"), StopReason::StopSequence(None));
        assert_eq!(stop_from_finish("error"), StopReason::Other("error".into()));
        assert_eq!(stop_from_finish("abort"), StopReason::Other("abort".into()));
    }

    #[test]
    fn reasoning_under_both_names_comes_once() {
        let mut d = ChatStreamDecoder::default();
        let mut out = Vec::new();
        let chunk = json!({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm", "reasoning": "hmm"}}]});
        d.feed(
            &SseEvent {
                event: None,
                data: chunk.to_string(),
                has_data: true,
                raw: Vec::new(),
                terminated: true,
            },
            &mut out,
        );
        assert_eq!(out, [StreamEvent::ReasoningDelta("hmm".into())]);
    }
}
