//! Talking to a Responses upstream on behalf of a client of another protocol: the canonical request as a
//! Responses body, and the upstream's answer (JSON or event stream) back as canonical values.

use crate::protocol::fields::At;
use crate::protocol::fields::{str_at, str_or};
use serde_json::{json, Map, Value};

use crate::protocol::canon::{Part, Request, Response, Role, StopReason, StreamEvent, Usage};
use crate::protocol::egress::tool_result_text;
use crate::protocol::openai::{self, image_url_string, OpenAiShape};
use crate::protocol::sse::SseEvent;
use crate::protocol::codec::UpstreamCodec;
use crate::protocol::{ApiError, EgressOptions, StreamDecoder};

use super::Responses;

impl UpstreamCodec for Responses {
    /// The canonical request as a Responses body. Stop sequences have no place in it: refused.
    fn encode_request(&self, req: &Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        if !req.stop.is_empty() {
            return Err(ApiError::invalid_param(
                "stop",
                "This model's upstream speaks the Responses API, which has no stop sequences; remove `stop` \
                 (or `stop_sequences`).",
            ));
        }
        let input = encode_input(req);
        let mut body = Map::new();
        body.insert("model".into(), json!(opts.model));
        let system = openai::system_text(req);
        if !system.is_empty() {
            body.insert("instructions".into(), json!(system));
        }
        body.insert("input".into(), Value::Array(input));
        openai::encode_tools(req, OpenAiShape::Flat, &mut body);
        if let Some(n) = req.max_tokens {
            body.insert("max_output_tokens".into(), json!(n));
        }
        openai::encode_sampling(req, &mut body);
        let format = req.output_format.as_ref();
        if let Some(f) = format.and_then(|f| openai::encode_output_format(f, OpenAiShape::Flat)) {
            body.insert("text".into(), json!({ "format": f }));
        }
        if let Some(e) = &req.reasoning_effort {
            body.insert("reasoning".into(), json!({"effort": openai::effort(e)}));
        }
        if let Some(u) = &req.user {
            body.insert("user".into(), json!(u));
        }
        body.insert("store".into(), json!(false));
        if opts.stream {
            body.insert("stream".into(), json!(true));
        }
        Ok(Value::Object(body))
    }

    /// Decodes a `response` body.
    fn decode_response(&self, body: &Value, _opts: &EgressOptions) -> Result<Response, ApiError> {
        let Some(output) = body.get("output").filter(|o| o.is_array()) else {
            return Err(ApiError::bad_gateway(
                "upstream answer is not a Responses `response` object (no `output`)",
            ));
        };
        let mut unkept = false;
        let (content, calls) = decode_output(output, &mut unkept);
        Ok(Response {
            id: str_at(body, "id"),
            model: str_at(body, "model"),
            stop: stop_of(body, calls)?,
            content,
            usage: body.get("usage").and_then(|u| Responses.usage_from(u)).unwrap_or_default(),
            created: body.get("created_at").and_then(Value::as_u64).unwrap_or(0),
            unkept,
        })
    }

    /// Reads a Responses `usage` object (the same semantics as Chat's: cached and written tokens inside
    /// `input_tokens`, reasoning inside `output_tokens`).
    fn usage_from(&self, u: &Value) -> Option<Usage> {
        let o = u.as_object()?;
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            input_tokens: n(o.get("input_tokens")),
            cached_input_tokens: n(u.at("input_tokens_details/cached_tokens")),
            cache_write_tokens: n(u.at("input_tokens_details/cache_write_tokens")),
            cache_write_1h_tokens: 0,
            output_tokens: n(o.get("output_tokens")),
            reasoning_tokens: n(u.at("output_tokens_details/reasoning_tokens")),
        })
    }

    fn stream_decoder(&self, _opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::new(ResponsesStreamDecoder::default())
    }
}

/// The conversation as Responses input items: system turns as developer messages, tool calls and their
/// results as items of their own.
fn encode_input(req: &Request) -> Vec<Value> {
    let mut input = Vec::new();
    for m in &req.messages {
        match m.role {
            Role::System => input.push(json!({"type": "message", "role": "developer",
                "content": [{"type": "input_text", "text": m.joined_text()}]})),
            Role::User | Role::Tool => {
                let mut parts = Vec::new();
                for p in &m.content {
                    match p {
                        Part::ToolResult { call_id, content, is_error } => input.push(json!({
                            "type": "function_call_output", "call_id": call_id,
                            "output": tool_result_text(content, *is_error)
                        })),
                        Part::Text(t) => parts.push(json!({"type": "input_text", "text": t})),
                        Part::Image(src) => parts.push(
                            json!({"type": "input_image", "image_url": image_url_string(src), "detail": "auto"}),
                        ),
                        _ => {}
                    }
                }
                if !parts.is_empty() {
                    input.push(json!({"type": "message", "role": "user", "content": parts}));
                }
            }
            Role::Assistant => {
                for p in &m.content {
                    match p {
                        Part::Text(t) if !t.is_empty() => input.push(json!({"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": t, "annotations": []}]})),
                        Part::ToolCall { id, name, arguments } => input.push(json!({
                            "type": "function_call", "call_id": id, "name": name, "arguments": arguments
                        })),
                        _ => {}
                    }
                }
            }
        }
    }
    input
}

/// Output items of a `response` as canonical parts; returns also whether there were function calls.
fn decode_output(output: &Value, unkept: &mut bool) -> (Vec<Part>, bool) {
    let mut content = Vec::new();
    let mut calls = false;
    for item in output.as_array().into_iter().flatten() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for c in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    *unkept |= c.get("type").and_then(Value::as_str) == Some("refusal");
                    let text = c
                        .get("text")
                        .or_else(|| c.get("refusal"))
                        .and_then(Value::as_str);
                    if let Some(t) = text.filter(|t| !t.is_empty()) {
                        content.push(Part::Text(t.to_string()));
                    }
                }
            }
            Some("function_call") => {
                calls = true;
                content.push(Part::ToolCall {
                    id: str_at(item, "call_id"),
                    name: str_at(item, "name"),
                    arguments: str_or(item, "arguments", "{}"),
                });
            }
            Some("reasoning") => {
                // Its encrypted content is the client's to send back, and no other form holds it.
                *unkept |= item.get("encrypted_content").is_some_and(|c| !c.is_null());
                let text: Vec<&str> = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.get("text").and_then(Value::as_str))
                    .collect();
                if !text.is_empty() {
                    content.push(Part::Reasoning {
                        text: text.join("\n"),
                        signature: None,
                    });
                }
            }
            _ => {}
        }
    }
    (content, calls)
}

/// The stop reason of a finished `response` object (or the upstream's error if it failed).
fn stop_of(resp: &Value, calls: bool) -> Result<StopReason, ApiError> {
    match resp.get("status").and_then(Value::as_str) {
        Some("failed") => {
            let msg = resp
                .at("error/message")
                .and_then(Value::as_str)
                .unwrap_or("the response failed");
            Err(ApiError::bad_gateway(format!("upstream error: {msg}")))
        }
        Some("incomplete") => Ok(
            match resp
                .at("incomplete_details/reason")
                .and_then(Value::as_str)
            {
                Some("content_filter") => StopReason::ContentFilter,
                _ => StopReason::MaxTokens,
            },
        ),
        _ if calls => Ok(StopReason::ToolUse),
        _ => Ok(StopReason::EndTurn),
    }
}

/// Decodes the Responses event lifecycle, keyed by `output_index`.
#[derive(Default)]
pub(super) struct ResponsesStreamDecoder {
    /// (output_index, canonical tool index, whether argument deltas were seen)
    calls: Vec<(u64, usize, bool)>,
}

impl StreamDecoder for ResponsesStreamDecoder {
    fn feed(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> bool {
        if !ev.has_data {
            return false;
        }
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            out.push(StreamEvent::Error(ApiError::bad_gateway(
                "upstream sent an event that is not valid JSON",
            )));
            return true;
        };
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or("");
        let output_index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = || {
            v.get("delta")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map(str::to_string)
        };
        match ty {
            "response.output_item.added" => self.item_added(&v, output_index, out),
            "response.output_text.delta" => out.extend(delta().map(StreamEvent::TextDelta)),
            "response.refusal.delta" => {
                out.push(StreamEvent::Unkept);
                out.extend(delta().map(StreamEvent::TextDelta));
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                out.extend(delta().map(StreamEvent::ReasoningDelta));
            }
            "response.function_call_arguments.delta" => {
                if let Some(call) = self.calls.iter_mut().find(|c| c.0 == output_index) {
                    call.2 = true;
                    let delta = str_at(&v, "delta");
                    out.push(StreamEvent::ToolArgsDelta {
                        index: call.1,
                        delta,
                    });
                }
            }
            "response.output_item.done" => self.item_done(&v, output_index, out),
            "response.completed" | "response.incomplete" | "response.failed" => {
                let resp = v.get("response").unwrap_or(&Value::Null);
                if let Some(u) = resp.get("usage").and_then(|u| Responses.usage_from(u)) {
                    out.push(StreamEvent::Usage(u));
                }
                match stop_of(resp, !self.calls.is_empty()) {
                    Ok(stop) => out.push(StreamEvent::Finish(stop)),
                    Err(e) => out.push(StreamEvent::Error(e)),
                }
                return true;
            }
            "error" => {
                let msg = v
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("upstream error");
                let code = v.get("code").and_then(Value::as_str).map(str::to_string);
                let e = ApiError::bad_gateway(format!("upstream error: {msg}")).with_code_opt(code);
                out.push(StreamEvent::Error(e));
                return true;
            }
            _ => {}
        }
        false
    }
}

impl ResponsesStreamDecoder {
    /// A new output item: a function call starts a tool call (with arguments, when they came whole).
    fn item_added(&mut self, v: &Value, output_index: u64, out: &mut Vec<StreamEvent>) {
        let item = v.get("item").unwrap_or(&Value::Null);
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return;
        }
        let index = self.calls.len();
        self.calls.push((output_index, index, false));
        out.push(StreamEvent::ToolCallStart {
            index,
            id: str_at(item, "call_id"),
            name: str_at(item, "name"),
        });
        if let Some(a) = item
            .get("arguments")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
        {
            self.calls[index].2 = true;
            out.push(StreamEvent::ToolArgsDelta {
                index,
                delta: a.to_string(),
            });
        }
    }

    /// An item done: arguments that arrived only whole, at the end.
    fn item_done(&mut self, v: &Value, output_index: u64, out: &mut Vec<StreamEvent>) {
        // A reasoning item's encrypted content: see `decode_output`.
        let item = v.get("item").unwrap_or(&Value::Null);
        if item.get("type").and_then(Value::as_str) == Some("reasoning")
            && item.get("encrypted_content").is_some_and(|c| !c.is_null())
        {
            out.push(StreamEvent::Unkept);
        }
        if let Some(call) = self.calls.iter_mut().find(|c| c.0 == output_index && !c.2) {
            call.2 = true;
            if let Some(a) = v.at("item/arguments").and_then(Value::as_str) {
                out.push(StreamEvent::ToolArgsDelta {
                    index: call.1,
                    delta: a.to_string(),
                });
            }
        }
        if let Some(call) = self.calls.iter().find(|c| c.0 == output_index) {
            out.push(StreamEvent::ToolCallEnd { index: call.1 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::canon::Message;

    #[test]
    fn stop_sequences_are_refused_naming_the_field() {
        let req = Request {
            stop: vec!["x".into()],
            ..Request::default()
        };
        let opts = EgressOptions {
            model: "m".into(),
            stream: false,
            default_max_tokens: 10,
            max_completion_tokens_field: false,
            structured_via_tool: false,
        };
        assert_eq!(
            Responses.encode_request(&req, &opts).unwrap_err().param(),
            Some("stop")
        );
        let req = Request {
            system: vec!["s".into()],
            messages: vec![
                Message::text(Role::User, "hi"),
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall {
                        id: "c".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Part::ToolResult {
                        call_id: "c".into(),
                        content: vec![Part::Text("ok".into())],
                        is_error: false,
                    }],
                },
            ],
            ..Request::default()
        };
        let v = Responses.encode_request(&req, &opts).unwrap();
        assert_eq!(v["instructions"], "s");
        assert_eq!(
            v["input"][1],
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"})
        );
        assert_eq!(
            v["input"][2],
            json!({"type": "function_call_output", "call_id": "c", "output": "ok"})
        );
        assert_eq!(v["store"], false);
    }
}
