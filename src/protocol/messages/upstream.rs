//! Talking to a Messages (Anthropic) upstream on behalf of a client of another protocol: the canonical
//! request as a Messages body, and the upstream's answer (JSON or event stream) back as canonical values.

use crate::protocol::fields::At;
use crate::protocol::fields::{str_at, str_or};
use serde_json::{json, Map, Value};

use super::reply::arguments_object;
use crate::protocol::canon::{
    ImageSource, OutputFormat, Part, Request, Response, Role, StopReason, StreamEvent, ToolChoice, Usage,
};
use crate::protocol::egress::thinking_budget;
use crate::protocol::sse::SseEvent;
use crate::protocol::codec::UpstreamCodec;
use crate::protocol::{ApiError, EgressOptions, StreamDecoder, STRUCTURED_TOOL};

use super::Messages;

/// Tool ids must match `[a-zA-Z0-9_-]+` on Anthropic; other characters become `_` (on both the call and its
/// result, so they still pair up).
fn tool_id(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "toolu_".to_string()
    } else {
        s
    }
}

fn image_block(src: &ImageSource) -> Value {
    match src {
        ImageSource::Url(u) => json!({"type": "image", "source": {"type": "url", "url": u}}),
        ImageSource::Base64 { media_type, data } => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
    }
}

fn blocks_of(parts: &[Part]) -> Vec<Value> {
    let mut results = Vec::new();
    let mut others = Vec::new();
    for p in parts {
        match p {
            Part::Text(t) if !t.trim().is_empty() => others.push(json!({"type": "text", "text": t})),
            Part::Image(src) => others.push(image_block(src)),
            Part::ToolCall { id, name, arguments } => others.push(json!({
                "type": "tool_use", "id": tool_id(id), "name": name, "input": arguments_object(arguments)
            })),
            Part::ToolResult { call_id, content, is_error } => {
                let inner = blocks_of(content);
                let mut b = json!({"type": "tool_result", "tool_use_id": tool_id(call_id), "content": inner});
                if *is_error {
                    b["is_error"] = json!(true);
                }
                results.push(b);
            }
            _ => {}
        }
    }
    // Tool results open a user turn, before any text.
    results.extend(others);
    results
}

impl UpstreamCodec for Messages {
    /// The canonical request as a Messages body.
    fn encode_request(&self, req: &Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        let mut system: Vec<String> = req.system.clone();
        let messages = encode_messages(req, &mut system);
        let mut body = Map::new();
        body.insert("model".into(), json!(opts.model));
        let max_tokens = req.max_tokens.unwrap_or(opts.default_max_tokens).max(1);
        let (tools, tool_choice) = encode_tools(req, opts, &mut body, &mut system);
        let thinking = encode_thinking(req, max_tokens, tool_choice.as_ref(), &mut body);
        body.insert("max_tokens".into(), json!(max_tokens));
        if !system.is_empty() {
            body.insert("system".into(), json!(system.join("\n\n")));
        }
        body.insert("messages".into(), Value::Array(messages));
        if !tools.is_empty() {
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(c) = tool_choice {
            body.insert("tool_choice".into(), c);
        }
        if !thinking {
            if let Some(t) = req.temperature {
                body.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
            }
            if let Some(p) = req.top_p {
                body.insert("top_p".into(), json!(p.clamp(0.0, 1.0)));
            }
            if let Some(k) = req.top_k {
                body.insert("top_k".into(), json!(k));
            }
        }
        if !req.stop.is_empty() {
            body.insert("stop_sequences".into(), json!(req.stop));
        }
        if let Some(u) = &req.user {
            body.insert("metadata".into(), json!({"user_id": u}));
        }
        if opts.stream {
            body.insert("stream".into(), json!(true));
        }
        Ok(Value::Object(body))
    }

    /// Decodes a `message` body. With `structured_via_tool`, the forced tool's input is the answer's text.
    fn decode_response(&self, body: &Value, opts: &EgressOptions) -> Result<Response, ApiError> {
        if !body.get("content").is_some_and(Value::is_array) {
            return Err(ApiError::bad_gateway(
                "upstream answer is not a Messages `message` object (no `content`)",
            ));
        }
        let mut content = Vec::new();
        let mut structured = false;
        let mut unkept = false;
        for b in body
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // Citations and redacted thinking: no other form holds them.
            unkept |= b.get("citations").is_some_and(|c| !c.is_null());
            match b.get("type").and_then(Value::as_str) {
                Some("text") => content.push(Part::Text(str_or(b, "text", ""))),
                Some("redacted_thinking") => unkept = true,
                Some("thinking") => content.push(Part::Reasoning {
                    text: str_or(b, "thinking", ""),
                    signature: b
                        .get("signature")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                }),
                Some("tool_use") => {
                    let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
                    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    if opts.structured_via_tool && name == STRUCTURED_TOOL {
                        structured = true;
                        content.push(Part::Text(input.to_string()));
                    } else {
                        content.push(Part::ToolCall {
                            id: str_at(b, "id"),
                            name: name.to_string(),
                            arguments: input.to_string(),
                        });
                    }
                }
                _ => {}
            }
        }
        let mut stop = stop_from(
            body.get("stop_reason")
                .and_then(Value::as_str)
                .unwrap_or("end_turn"),
            body.get("stop_sequence").and_then(Value::as_str),
        );
        if structured && stop == StopReason::ToolUse {
            stop = StopReason::EndTurn;
        }
        Ok(Response {
            id: str_at(body, "id"),
            model: str_at(body, "model"),
            content,
            stop,
            usage: body.get("usage").and_then(|u| Messages.usage_from(u)).unwrap_or_default(),
            created: 0,
            unkept,
        })
    }

    /// Reads a Messages `usage` object into normalised usage (input includes cache reads and writes).
    fn usage_from(&self, u: &Value) -> Option<Usage> {
        usage_update(Usage::default(), u)
    }

    fn stream_decoder(&self, opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::new(MessagesStreamDecoder::new(opts.structured_via_tool))
    }
}

/// The turns as Messages has them: system turns join the system prompt, consecutive turns of one role are
/// merged (tool results then text stay in order).
fn encode_messages(req: &Request, system: &mut Vec<String>) -> Vec<Value> {
    let mut messages: Vec<Value> = Vec::new();
    for m in &req.messages {
        let role = match m.role {
            Role::System => {
                // No system turns mid-conversation on Messages: they join the system prompt.
                system.push(m.joined_text());
                continue;
            }
            Role::Assistant => "assistant",
            Role::User | Role::Tool => "user",
        };
        let blocks = blocks_of(&m.content);
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(arr) = last["content"].as_array_mut() {
                    arr.extend(blocks);
                }
            }
            _ => messages.push(json!({"role": role, "content": blocks})),
        }
    }
    messages
}

/// The tools and `tool_choice`, with structured output as a forced tool (or `output_config.format`, or an
/// instruction for JSON objects) and parallel tool use switched off where asked.
fn encode_tools(
    req: &Request,
    opts: &EgressOptions,
    body: &mut Map<String, Value>,
    system: &mut Vec<String>,
) -> (Vec<Value>, Option<Value>) {
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            let mut schema = t.parameters.clone();
            if schema.get("type").is_none() {
                schema["type"] = json!("object");
            }
            let mut tool = json!({"name": t.name, "input_schema": schema});
            if let Some(d) = &t.description {
                tool["description"] = json!(d);
            }
            tool
        })
        .collect();
    let mut tool_choice = match &req.tool_choice {
        None => None,
        Some(ToolChoice::Auto | ToolChoice::Hosted(_)) => Some(json!({"type": "auto"})),
        Some(ToolChoice::None) => Some(json!({"type": "none"})),
        Some(ToolChoice::Required) => Some(json!({"type": "any"})),
        Some(ToolChoice::Function(n)) => Some(json!({"type": "tool", "name": n})),
    };
    match &req.output_format {
        Some(OutputFormat::JsonSchema { schema, .. }) if opts.structured_via_tool => {
            tools.push(json!({"name": STRUCTURED_TOOL, "description": "Give the answer as this tool's input.",
                              "input_schema": schema}));
            tool_choice = Some(json!({"type": "tool", "name": STRUCTURED_TOOL}));
        }
        Some(OutputFormat::JsonSchema { schema, .. }) => {
            body.insert(
                "output_config".into(),
                json!({"format": {"type": "json_schema", "schema": schema}}),
            );
        }
        Some(OutputFormat::JsonObject) => {
            system.push("Respond with a single valid JSON object and nothing else.".into());
        }
        _ => {}
    }
    if req.parallel_tool_calls == Some(false) {
        let choice = tool_choice.get_or_insert_with(|| json!({"type": "auto"}));
        choice["disable_parallel_tool_use"] = json!(true);
    }
    (tools, tool_choice)
}

/// Thinking: from the client's budget or the effort level, within max_tokens (the limit the gateway reserved for is never raised:
/// a budget that does not fit leaves half of max_tokens for the answer, and below Anthropic's minimum
/// budget of 1024 thinking stays off); off when the history holds tool calls (they would need the thinking
/// blocks that only Anthropic itself produced) or a tool is forced. Returns whether it is on.
fn encode_thinking(
    req: &Request,
    max_tokens: u64,
    tool_choice: Option<&Value>,
    body: &mut Map<String, Value>,
) -> bool {
    let has_tool_history = req
        .messages
        .iter()
        .any(|m| m.content.iter().any(|p| matches!(p, Part::ToolCall { .. })));
    let forced = tool_choice.is_some_and(|c| c["type"] == "any" || c["type"] == "tool");
    // The client's own budget where it gave one (a Gemini `thinkingBudget`), else the effort's.
    let budget = match (req.reasoning_budget, req.reasoning_effort.as_deref()) {
        (_, Some("none")) => None,
        (Some(b), _) => Some(b),
        (None, effort) => effort.and_then(thinking_budget),
    };
    let Some(budget) = budget else {
        return false;
    };
    let budget = if budget < max_tokens {
        budget
    } else {
        max_tokens / 2
    };
    if has_tool_history || forced || budget < 1024 {
        return false;
    }
    body.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": budget}),
    );
    true
}

/// Canonical stop reason for a `stop_reason`.
pub(super) fn stop_from(reason: &str, sequence: Option<&str>) -> StopReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence(sequence.map(str::to_string)),
        "tool_use" => StopReason::ToolUse,
        "refusal" => StopReason::ContentFilter,
        "end_turn" => StopReason::EndTurn,
        other => StopReason::Other(other.to_string()),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Block {
    Text,
    Thinking,
    Tool(usize),
    Structured,
    Other,
}

/// Decodes the Messages event lifecycle.
pub(super) struct MessagesStreamDecoder {
    structured_via_tool: bool,
    /// Block kinds by the upstream's block index.
    blocks: Vec<Block>,
    next_call: usize,
    usage: crate::protocol::canon::Usage,
    structured: bool,
    /// Calls whose arguments have come (some of them): a call with none gets `{}` at its block's end.
    argued: Vec<usize>,
}

impl MessagesStreamDecoder {
    pub(super) fn new(structured_via_tool: bool) -> Self {
        MessagesStreamDecoder {
            argued: Vec::new(),
            structured_via_tool,
            blocks: Vec::new(),
            next_call: 0,
            usage: Default::default(),
            structured: false,
        }
    }
}

impl StreamDecoder for MessagesStreamDecoder {
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
        let ty = ev
            .event
            .as_deref()
            .or_else(|| v.get("type").and_then(Value::as_str))
            .unwrap_or("");
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match ty {
            "message_start" => {
                if let Some(u) = v
                    .at("message/usage")
                    .and_then(|u| usage_update(self.usage, u))
                {
                    self.usage = u;
                    // Reported now: a stream cut before its `message_delta` is billed this input (its
                    // cache reads and writes as such), not an estimate of it.
                    out.push(StreamEvent::Usage(self.usage));
                }
            }
            "content_block_start" => self.block_start(&v, index, out),
            "content_block_delta" => self.block_delta(&v, index, out),
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => self.message_delta(&v, out),
            "message_stop" => return true,
            "error" => {
                out.push(StreamEvent::Error(error_event(&v)));
                return true;
            }
            _ => {}
        }
        false
    }
}

impl MessagesStreamDecoder {
    fn block_start(&mut self, v: &Value, index: usize, out: &mut Vec<StreamEvent>) {
        let cb = v.get("content_block").unwrap_or(&Value::Null);
        let kind = match cb.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = cb
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.push(StreamEvent::TextDelta(t.to_string()));
                }
                Block::Text
            }
            Some("thinking") => Block::Thinking,
            Some("redacted_thinking") => {
                out.push(StreamEvent::Unkept);
                Block::Other
            }
            Some("tool_use") => {
                let name = cb.get("name").and_then(Value::as_str).unwrap_or_default();
                if self.structured_via_tool && name == STRUCTURED_TOOL {
                    self.structured = true;
                    Block::Structured
                } else {
                    let i = self.next_call;
                    self.next_call += 1;
                    let id = str_at(cb, "id");
                    out.push(StreamEvent::ToolCallStart {
                        index: i,
                        id,
                        name: name.to_string(),
                    });
                    // Input sent whole in the start (compatible servers may): it is the arguments.
                    if let Some(input) = cb
                        .get("input")
                        .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    {
                        self.argued.push(i);
                        out.push(StreamEvent::ToolArgsDelta {
                            index: i,
                            delta: input.to_string(),
                        });
                    }
                    Block::Tool(i)
                }
            }
            _ => Block::Other,
        };
        if self.blocks.len() <= index {
            self.blocks.resize(index + 1, Block::Other);
        }
        self.blocks[index] = kind;
    }

    fn block_delta(&mut self, v: &Value, index: usize, out: &mut Vec<StreamEvent>) {
        let block = self.blocks.get(index).copied().unwrap_or(Block::Other);
        let d = v.get("delta").unwrap_or(&Value::Null);
        let s = |k: &str| {
            d.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        match (d.get("type").and_then(Value::as_str), block) {
            (Some("text_delta"), _) => out.push(StreamEvent::TextDelta(s("text"))),
            (Some("citations_delta"), _) => out.push(StreamEvent::Unkept),
            (Some("thinking_delta"), _) => out.push(StreamEvent::ReasoningDelta(s("thinking"))),
            (Some("signature_delta"), _) => {
                out.push(StreamEvent::ReasoningSignature(s("signature")))
            }
            (Some("input_json_delta"), Block::Tool(i)) => {
                let delta = s("partial_json");
                if delta.is_empty() {
                    return;
                }
                if !self.argued.contains(&i) {
                    self.argued.push(i);
                }
                out.push(StreamEvent::ToolArgsDelta { index: i, delta })
            }
            (Some("input_json_delta"), Block::Structured) => {
                out.push(StreamEvent::TextDelta(s("partial_json")))
            }
            _ => {}
        }
    }

    /// A block's end: a call that got no arguments has `{}` (as a complete answer's `input` says), not an
    /// empty string no client parses; a call's end is said (`ToolCallEnd`).
    fn block_stop(&mut self, index: usize, out: &mut Vec<StreamEvent>) {
        if let Some(Block::Tool(i)) = self.blocks.get(index).copied() {
            if !self.argued.contains(&i) {
                self.argued.push(i);
                out.push(StreamEvent::ToolArgsDelta {
                    index: i,
                    delta: "{}".into(),
                });
            }
            out.push(StreamEvent::ToolCallEnd { index: i });
        }
    }

    /// Usage (output so far, input where the upstream repeats it; see `usage_update`) and the stop reason.
    fn message_delta(&mut self, v: &Value, out: &mut Vec<StreamEvent>) {
        if let Some(u) = v.get("usage").and_then(|u| usage_update(self.usage, u)) {
            self.usage = u;
        }
        out.push(StreamEvent::Usage(self.usage));
        if let Some(r) = v.at("delta/stop_reason").and_then(Value::as_str) {
            let mut stop = stop_from(r, v.at("delta/stop_sequence").and_then(Value::as_str));
            if self.structured && stop == StopReason::ToolUse {
                stop = StopReason::EndTurn;
            }
            out.push(StreamEvent::Finish(stop));
        }
    }
}

/// An in-stream `error` event as the upstream's failure (its Anthropic type kept).
fn error_event(v: &Value) -> ApiError {
    let msg = v
        .at("error/message")
        .and_then(Value::as_str)
        .unwrap_or("upstream error");
    let ty = v.at("error/type").and_then(Value::as_str);
    let mut e = ApiError::bad_gateway(format!("upstream error: {msg}"))
        .with_anthropic_type(ty.map(str::to_string));
    if ty == Some("overloaded_error") {
        e = e.with_kind(crate::protocol::ErrorKind::Overloaded);
    }
    e
}

/// Applies a Messages `usage` object to the usage so far, the one rule for a response and for a stream
/// (`message_start`, then `message_delta`, whose counts are cumulative): each count the object carries
/// replaces the one before and counts it leaves out (or sends as null) stay, so a `message_delta` that
/// repeats the input counts changes nothing and one that leaves them out loses nothing. The writes' split
/// by lifetime (`cache_creation`) stays when a later object gives only their total; a total below the
/// split's sum counts as the sum. Output never goes down.
pub(super) fn usage_update(prev: Usage, u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    let n = |k: &str| o.get(k).and_then(Value::as_u64);
    let before = prev.split();
    let split = o.get("cache_creation").and_then(Value::as_object).map(|c| {
        let n = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
        (
            n("ephemeral_5m_input_tokens"),
            n("ephemeral_1h_input_tokens"),
        )
    });
    let split_sum = split.map(|(m5, h1)| m5.saturating_add(h1));
    let writes = match (n("cache_creation_input_tokens"), split_sum) {
        (Some(total), Some(sum)) => total.max(sum),
        (Some(total), None) => total,
        (None, Some(sum)) => sum,
        (None, None) => before.cache_writes_5m + before.cache_writes_1h,
    };
    let writes_1h = split.map_or(before.cache_writes_1h, |(_, h1)| h1);
    let reads = n("cache_read_input_tokens").unwrap_or(before.cache_reads);
    let uncached = n("input_tokens").unwrap_or(before.uncached);
    let reasoning = u.at("output_tokens_details/reasoning_tokens");
    Some(Usage {
        input_tokens: uncached.saturating_add(reads).saturating_add(writes),
        cached_input_tokens: reads,
        cache_write_tokens: writes,
        cache_write_1h_tokens: writes_1h.min(writes),
        output_tokens: n("output_tokens").unwrap_or(0).max(prev.output_tokens),
        reasoning_tokens: reasoning
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .max(prev.reasoning_tokens),
    })
}

#[cfg(test)]
mod tests;
