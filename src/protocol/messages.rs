//! Anthropic Messages codec: request decoding, response and stream encoding, usage reading.

use serde_json::{json, Value};

use super::canon::{
    ImageSource, Message, OutputFormat, Part, Request, Response, Role, StopReason, StreamEvent,
    Tool, ToolChoice, Usage,
};
use super::fields::{self, join, missing, opt_array, opt_f64, opt_str, opt_u64};
use super::sse::push_event;
use super::{ApiError, StreamEncoder};

/// Checks the fields Messages requires before anything else: `max_tokens` (an integer) and `messages`.
pub fn validate(body: &Value) -> Result<(), ApiError> {
    let o = fields::object(body, "body")?;
    if opt_u64(o, "max_tokens", "")?.is_none() {
        return Err(ApiError::invalid_param(
            "max_tokens",
            "max_tokens: Field required",
        ));
    }
    if opt_array(o, "messages", "")?.is_none() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages: Field required",
        ));
    }
    Ok(())
}

/// Validates a Messages body and decodes it into the canonical request.
pub fn decode_request(body: &Value) -> Result<Request, ApiError> {
    validate(body)?;
    let o = fields::object(body, "body")?;
    let mut req = Request {
        model: fields::req_str(o, "model", "")?.to_string(),
        stream: fields::stream_flag(o)?,
        max_tokens: opt_u64(o, "max_tokens", "")?,
        temperature: opt_f64(o, "temperature", "")?,
        top_p: opt_f64(o, "top_p", "")?,
        ..Request::default()
    };
    match o.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => req.system.push(s.clone()),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                let path = format!("system[{i}]");
                let bo = fields::object(b, &path)?;
                req.system
                    .push(fields::req_str(bo, "text", &path)?.to_string());
            }
        }
        Some(other) => {
            return Err(fields::wrong_type(
                "system",
                "a string or an array of text blocks",
                other,
            ))
        }
    }
    for (i, m) in opt_array(o, "messages", "")?
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("messages[{i}]");
        let mo = fields::object(m, &path)?;
        let role = match fields::req_str(mo, "role", &path)? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            other => {
                return Err(ApiError::invalid_param(
                    &join(&path, "role"),
                    format!(
                        "Invalid value for `{path}.role`: {other:?}. Expected user or assistant."
                    ),
                ))
            }
        };
        let content = decode_content(
            mo.get("content").unwrap_or(&Value::Null),
            &join(&path, "content"),
        )?;
        req.messages.push(Message { role, content });
    }
    for (i, t) in opt_array(o, "tools", "")?.into_iter().flatten().enumerate() {
        let path = format!("tools[{i}]");
        let to = fields::object(t, &path)?;
        match opt_str(to, "type", &path)? {
            None | Some("custom") => req.tools.push(Tool {
                name: fields::req_str(to, "name", &path)?.to_string(),
                description: opt_str(to, "description", &path)?.map(str::to_string),
                parameters: to
                    .get("input_schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                strict: None,
            }),
            Some(_) => {}
        }
    }
    if let Some(Value::Object(c)) = o.get("tool_choice") {
        req.tool_choice = Some(match opt_str(c, "type", "tool_choice")?.unwrap_or("auto") {
            "any" => ToolChoice::Required,
            "none" => ToolChoice::None,
            "tool" => ToolChoice::Function(fields::req_str(c, "name", "tool_choice")?.to_string()),
            _ => ToolChoice::Auto,
        });
        if c.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
            req.parallel_tool_calls = Some(false);
        }
    }
    if let Some(stops) = opt_array(o, "stop_sequences", "")? {
        req.stop = stops
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect();
    }
    let format = o
        .get("output_config")
        .and_then(|c| c.get("format"))
        .or_else(|| o.get("output_format"));
    if let Some(Value::Object(f)) = format {
        if f.get("type").and_then(Value::as_str) == Some("json_schema") {
            req.output_format = Some(OutputFormat::JsonSchema {
                name: "output".into(),
                schema: f
                    .get("schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                strict: Some(true),
                description: None,
            });
        }
    }
    if let Some(effort) = o
        .get("output_config")
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str)
    {
        req.reasoning_effort = Some(effort.to_string());
    } else if let Some(Value::Object(t)) = o.get("thinking") {
        if t.get("type").and_then(Value::as_str) == Some("enabled") {
            let budget = t.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
            req.reasoning_effort = Some(effort_for_budget(budget).to_string());
        }
    }
    req.user = o
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(req)
}

/// The effort level a thinking budget corresponds to (the inverse of the budget policy).
pub fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..=3_999 => "low",
        4_000..=15_999 => "medium",
        _ => "high",
    }
}

fn decode_content(content: &Value, path: &str) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::Text(s.clone())]),
        Value::Array(blocks) => {
            let mut out = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                let bpath = format!("{path}[{i}]");
                if let Some(p) = decode_block(b, &bpath)? {
                    out.push(p);
                }
            }
            Ok(out)
        }
        Value::Null => Err(missing(path)),
        other => Err(fields::wrong_type(
            path,
            "a string or an array of content blocks",
            other,
        )),
    }
}

fn decode_block(b: &Value, path: &str) -> Result<Option<Part>, ApiError> {
    let bo = fields::object(b, path)?;
    Ok(Some(match fields::req_str(bo, "type", path)? {
        "text" => Part::Text(fields::req_str(bo, "text", path)?.to_string()),
        "image" => {
            let spath = join(path, "source");
            let so = fields::object(bo.get("source").unwrap_or(&Value::Null), &spath)?;
            match fields::req_str(so, "type", &spath)? {
                "base64" => Part::Image(ImageSource::Base64 {
                    media_type: fields::req_str(so, "media_type", &spath)?.to_string(),
                    data: fields::req_str(so, "data", &spath)?.to_string(),
                }),
                "url" => Part::Image(ImageSource::Url(
                    fields::req_str(so, "url", &spath)?.to_string(),
                )),
                other => {
                    return Err(ApiError::invalid_param(
                        &join(&spath, "type"),
                        format!(
                            "Image sources of type {other:?} are not supported by this gateway."
                        ),
                    ))
                }
            }
        }
        "tool_use" => Part::ToolCall {
            id: fields::req_str(bo, "id", path)?.to_string(),
            name: fields::req_str(bo, "name", path)?.to_string(),
            arguments: bo
                .get("input")
                .map(Value::to_string)
                .unwrap_or_else(|| "{}".into()),
        },
        "tool_result" => {
            let content = match bo.get("content") {
                None | Some(Value::Null) => Vec::new(),
                Some(c) => decode_content(c, &join(path, "content"))?,
            };
            Part::ToolResult {
                call_id: fields::req_str(bo, "tool_use_id", path)?.to_string(),
                content,
                is_error: bo.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            }
        }
        "thinking" => Part::Reasoning {
            text: opt_str(bo, "thinking", path)?.unwrap_or("").to_string(),
            signature: opt_str(bo, "signature", path)?.map(str::to_string),
        },
        "redacted_thinking" => return Ok(None),
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "type"),
                format!("Content blocks of type {other:?} are not supported by this gateway."),
            ))
        }
    }))
}

/// Anthropic's `stop_reason` for a stop reason.
pub fn stop_reason(stop: &StopReason) -> (String, Value) {
    match stop {
        StopReason::EndTurn => ("end_turn".into(), Value::Null),
        StopReason::MaxTokens => ("max_tokens".into(), Value::Null),
        StopReason::StopSequence(s) => ("stop_sequence".into(), json!(s)),
        StopReason::ToolUse => ("tool_use".into(), Value::Null),
        StopReason::ContentFilter => ("refusal".into(), Value::Null),
        StopReason::Other(o) => (o.clone(), Value::Null),
    }
}

/// The Messages usage object; `input_tokens` excludes cached and cache-write tokens.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens.saturating_sub(u.cached_input_tokens + u.cache_creation_input_tokens),
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cache_read_input_tokens": u.cached_input_tokens,
    })
}

/// Reads a Messages `usage` object into normalised usage (input includes cache reads and writes).
pub fn usage_from(u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    let n = |k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (read, write) = (
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    );
    Some(Usage {
        input_tokens: n("input_tokens") + read + write,
        cached_input_tokens: read,
        cache_creation_input_tokens: write,
        output_tokens: n("output_tokens"),
        reasoning_tokens: u
            .pointer("/output_tokens_details/reasoning_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Tool arguments as a JSON object for a `tool_use` block; invalid JSON is kept as `{"_raw": text}`.
pub fn arguments_object(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(other) => json!({"_value": other}),
        Err(_) => json!({"_raw": arguments}),
    }
}

/// Encodes a complete answer as a `message` object.
pub fn encode_response(resp: &Response) -> Value {
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
    Tool(usize),
}

/// Re-emits canonical events as the Messages lifecycle: `message_start` first, content blocks with
/// contiguous indices, `message_delta` with cumulative usage, `message_stop` last.
pub struct MessagesStreamEncoder {
    open: Option<(usize, Block)>,
    next_index: usize,
    tool_blocks: Vec<(usize, usize)>,
    usage: Usage,
    stop: Option<StopReason>,
    signature: Option<String>,
    failed: bool,
}

impl Default for MessagesStreamEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl MessagesStreamEncoder {
    pub fn new() -> Self {
        MessagesStreamEncoder {
            open: None,
            next_index: 0,
            tool_blocks: Vec::new(),
            usage: Usage::default(),
            stop: None,
            signature: None,
            failed: false,
        }
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
            StreamEvent::ReasoningSignature(s) => self.signature = Some(s.clone()),
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
                let d = json!({"error": e.anthropic_object("")});
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

    #[test]
    fn max_tokens_is_required() {
        let e = decode_request(&json!({"model": "m", "messages": []})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e =
            decode_request(&json!({"model": "m", "max_tokens": "5", "messages": []})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
    }

    #[test]
    fn decodes_blocks() {
        let r = decode_request(&json!({
            "model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "s"}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": true}]}
            ]
        }))
        .unwrap();
        assert_eq!(r.system, vec!["s"]);
        assert_eq!(
            r.messages[1].content[0],
            Part::ToolCall {
                id: "t1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            }
        );
        assert!(matches!(
            r.messages[2].content[0],
            Part::ToolResult { is_error: true, .. }
        ));
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
}
