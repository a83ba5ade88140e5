//! OpenAI Responses codec: request decoding, response and stream encoding, usage reading.

use serde_json::{json, Value};

use super::canon::{
    Message, OutputFormat, Part, Request, Response, Role, StopReason, StreamEvent, Tool,
    ToolChoice, Usage,
};
use super::chat::parse_image_url;
use super::fields::{self, join, missing, opt_array, opt_bool, opt_f64, opt_str, opt_u64};
use super::sse::push_event;
use super::{ApiError, StreamEncoder};
use crate::util::new_id;

/// Checks that a Responses body has `input` (pointing at `messages` when that was sent instead).
pub fn validate(body: &Value) -> Result<(), ApiError> {
    input_of(fields::object(body, "body")?).map(|_| ())
}

fn input_of(o: &serde_json::Map<String, Value>) -> Result<&Value, ApiError> {
    match o.get("input") {
        None | Some(Value::Null) if o.contains_key("messages") => Err(ApiError::invalid_param(
            "input",
            "Missing required parameter: `input`. This body has `messages`, which belongs to the Chat \
             Completions API (POST /v1/chat/completions); the Responses API takes `input`.",
        )),
        None | Some(Value::Null) => Err(missing("input")),
        Some(v) => Ok(v),
    }
}

/// Validates a Responses body and decodes it into the canonical request.
pub fn decode_request(body: &Value) -> Result<Request, ApiError> {
    let o = fields::object(body, "body")?;
    let input = input_of(o)?;
    let mut req = Request {
        model: fields::req_str(o, "model", "")?.to_string(),
        stream: fields::stream_flag(o)?,
        ..Request::default()
    };
    if let Some(instr) = opt_str(o, "instructions", "")? {
        req.system.push(instr.to_string());
    }
    match input {
        Value::String(s) => req.messages.push(Message::text(Role::User, s.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                decode_item(item, &format!("input[{i}]"), &mut req)?;
            }
        }
        other => {
            return Err(fields::wrong_type(
                "input",
                "a string or an array of input items",
                other,
            ))
        }
    }
    if let Some(tools) = opt_array(o, "tools", "")? {
        for (i, t) in tools.iter().enumerate() {
            let path = format!("tools[{i}]");
            let to = fields::object(t, &path)?;
            if fields::req_str(to, "type", &path)? == "function" {
                req.tools.push(decode_function_tool(to, &path)?);
            }
        }
    }
    req.tool_choice = match o.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => {
                return Err(fields::bad_value(
                    "tool_choice",
                    "\"auto\", \"none\", \"required\" or a function",
                ))
            }
        }),
        Some(Value::Object(c)) => match opt_str(c, "type", "tool_choice")? {
            Some("function") => Some(ToolChoice::Function(
                fields::req_str(c, "name", "tool_choice")?.to_string(),
            )),
            _ => Some(ToolChoice::Auto),
        },
        Some(other) => {
            return Err(fields::wrong_type(
                "tool_choice",
                "a string or an object",
                other,
            ))
        }
    };
    req.parallel_tool_calls = opt_bool(o, "parallel_tool_calls", "")?;
    req.max_tokens = opt_u64(o, "max_output_tokens", "")?;
    req.temperature = opt_f64(o, "temperature", "")?;
    req.top_p = opt_f64(o, "top_p", "")?;
    req.user = opt_str(o, "user", "")?.map(str::to_string);
    if let Some(Value::Object(text)) = o.get("text") {
        if let Some(f) = text.get("format") {
            req.output_format = Some(decode_format(f)?);
        }
    }
    if let Some(Value::Object(r)) = o.get("reasoning") {
        req.reasoning_effort = opt_str(r, "effort", "reasoning")?.map(str::to_string);
    }
    Ok(req)
}

fn decode_function_tool(to: &serde_json::Map<String, Value>, path: &str) -> Result<Tool, ApiError> {
    Ok(Tool {
        name: fields::req_str(to, "name", path)?.to_string(),
        description: opt_str(to, "description", path)?.map(str::to_string),
        parameters: to
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        strict: opt_bool(to, "strict", path)?,
    })
}

fn decode_format(f: &Value) -> Result<OutputFormat, ApiError> {
    let o = fields::object(f, "text.format")?;
    match fields::req_str(o, "type", "text.format")? {
        "text" => Ok(OutputFormat::Text),
        "json_object" => Ok(OutputFormat::JsonObject),
        "json_schema" => Ok(OutputFormat::JsonSchema {
            name: opt_str(o, "name", "text.format")?
                .unwrap_or("output")
                .to_string(),
            schema: o
                .get("schema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
            strict: opt_bool(o, "strict", "text.format")?,
            description: opt_str(o, "description", "text.format")?.map(str::to_string),
        }),
        _ => Err(fields::bad_value(
            "text.format.type",
            "text, json_object or json_schema",
        )),
    }
}

fn decode_item(item: &Value, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let o = fields::object(item, path)?;
    let ty = opt_str(o, "type", path)?.unwrap_or("message");
    match ty {
        "message" => {
            let role = match fields::req_str(o, "role", path)? {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                "system" | "developer" => Role::System,
                other => {
                    return Err(ApiError::invalid_param(
                        &join(path, "role"),
                        format!("Invalid value for `{path}.role`: {other:?}."),
                    ))
                }
            };
            let parts = decode_content(
                o.get("content").unwrap_or(&Value::Null),
                &join(path, "content"),
            )?;
            if role == Role::System && req.messages.is_empty() {
                let text: String = parts
                    .iter()
                    .filter_map(|p| {
                        if let Part::Text(t) = p {
                            Some(t.as_str())
                        } else {
                            None
                        }
                    })
                    .collect();
                req.system.push(text);
            } else {
                push_merged(req, role, parts);
            }
        }
        "function_call" => {
            let call = Part::ToolCall {
                id: fields::req_str(o, "call_id", path)?.to_string(),
                name: fields::req_str(o, "name", path)?.to_string(),
                arguments: opt_str(o, "arguments", path)?.unwrap_or("{}").to_string(),
            };
            push_merged(req, Role::Assistant, vec![call]);
        }
        "function_call_output" => {
            let opath = join(path, "output");
            let content = match o.get("output") {
                Some(Value::String(s)) => vec![Part::Text(s.clone())],
                Some(v @ Value::Array(_)) => decode_content(v, &opath)?,
                _ => return Err(missing(&opath)),
            };
            let result = Part::ToolResult {
                call_id: fields::req_str(o, "call_id", path)?.to_string(),
                content,
                is_error: false,
            };
            push_merged(req, Role::Tool, vec![result]);
        }
        "reasoning" => {
            let text: String = opt_array(o, "summary", path)?
                .into_iter()
                .flatten()
                .filter_map(|s| s.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            if !text.is_empty() {
                push_merged(
                    req,
                    Role::Assistant,
                    vec![Part::Reasoning {
                        text,
                        signature: None,
                    }],
                );
            }
        }
        "item_reference" => return Err(ApiError::invalid_param(
            path,
            "`item_reference` input items need stored responses, which this gateway does not keep.",
        )),
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "type"),
                format!("Input items of type {other:?} are not supported by this gateway."),
            ))
        }
    }
    Ok(())
}

/// Appends parts to the last message if it has the same role (function calls after assistant text form one
/// assistant turn), else starts a new message.
fn push_merged(req: &mut Request, role: Role, parts: Vec<Part>) {
    match req.messages.last_mut() {
        Some(last) if last.role == role && role != Role::User => last.content.extend(parts),
        _ => req.messages.push(Message {
            role,
            content: parts,
        }),
    }
}

fn decode_content(content: &Value, path: &str) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::Text(s.clone())]),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                let ppath = format!("{path}[{i}]");
                let po = fields::object(p, &ppath)?;
                match fields::req_str(po, "type", &ppath)? {
                    "input_text" | "output_text" | "text" => {
                        out.push(Part::Text(fields::req_str(po, "text", &ppath)?.to_string()))
                    }
                    "refusal" => out.push(Part::Text(fields::req_str(po, "refusal", &ppath)?.to_string())),
                    "input_image" => match opt_str(po, "image_url", &ppath)? {
                        Some(url) => out.push(Part::Image(parse_image_url(url))),
                        None => {
                            return Err(ApiError::invalid_param(
                                &join(&ppath, "file_id"),
                                "Images by `file_id` are not supported by this gateway; send `image_url`.",
                            ))
                        }
                    },
                    other => {
                        return Err(ApiError::invalid_param(
                            &join(&ppath, "type"),
                            format!("Content parts of type {other:?} are not supported by this gateway."),
                        ))
                    }
                }
            }
            Ok(out)
        }
        other => Err(fields::wrong_type(
            path,
            "a string or an array of content parts",
            other,
        )),
    }
}

/// The Responses usage object (both detail objects always present).
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total(),
    })
}

/// Reads a Responses `usage` object.
pub fn usage_from(u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input_tokens: n(o.get("input_tokens")),
        cached_input_tokens: n(u.pointer("/input_tokens_details/cached_tokens")),
        cache_creation_input_tokens: 0,
        output_tokens: n(o.get("output_tokens")),
        reasoning_tokens: n(u.pointer("/output_tokens_details/reasoning_tokens")),
    })
}

/// Status and `incomplete_details` for a stop reason.
fn status_of(stop: &StopReason) -> (&'static str, Value) {
    match stop {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// The fields every response object carries, echoing the request where it matters.
fn skeleton(id: &str, model: &str, created: u64, req: &Request) -> Value {
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            json!({"type": "function", "name": t.name, "description": t.description,
                   "parameters": t.parameters, "strict": t.strict.unwrap_or(false)})
        })
        .collect();
    let tool_choice = match &req.tool_choice {
        None | Some(ToolChoice::Auto) => json!("auto"),
        Some(ToolChoice::None) => json!("none"),
        Some(ToolChoice::Required) => json!("required"),
        Some(ToolChoice::Function(n)) => json!({"type": "function", "name": n}),
    };
    let format = match &req.output_format {
        None | Some(OutputFormat::Text) => json!({"type": "text"}),
        Some(OutputFormat::JsonObject) => json!({"type": "json_object"}),
        Some(OutputFormat::JsonSchema {
            name,
            schema,
            strict,
            description,
        }) => json!({
            "type": "json_schema", "name": name, "schema": schema, "strict": strict, "description": description
        }),
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "error": null,
        "incomplete_details": null,
        "instructions": req.system.first(),
        "max_output_tokens": req.max_tokens,
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls.unwrap_or(true),
        "previous_response_id": null,
        "reasoning": {"effort": req.reasoning_effort, "summary": null},
        "store": false,
        "temperature": req.temperature.unwrap_or(1.0),
        "text": {"format": format},
        "tool_choice": tool_choice,
        "tools": tools,
        "top_p": req.top_p.unwrap_or(1.0),
        "truncation": "disabled",
        "usage": null,
        "user": req.user,
        "metadata": {},
    })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn call_item(id: &str, call_id: &str, name: &str, args: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": args, "status": status})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

/// Encodes a complete answer as a `response` object.
pub fn encode_response(resp: &Response, req: &Request) -> Value {
    let mut v = skeleton(&resp.id, &resp.model, resp.created, req);
    let mut output = Vec::new();
    let mut text = String::new();
    let flush_text = |text: &mut String, output: &mut Vec<Value>| {
        if !text.is_empty() {
            output.push(message_item(&new_id("msg_"), text, "completed"));
            text.clear();
        }
    };
    for part in &resp.content {
        match part {
            Part::Text(t) => text.push_str(t),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                flush_text(&mut text, &mut output);
                output.push(call_item(&new_id("fc_"), id, name, arguments, "completed"));
            }
            Part::Reasoning { text: r, .. } => {
                flush_text(&mut text, &mut output);
                output.push(reasoning_item(&new_id("rs_"), r));
            }
            _ => {}
        }
    }
    flush_text(&mut text, &mut output);
    let (status, incomplete) = status_of(&resp.stop);
    v["status"] = json!(status);
    v["incomplete_details"] = incomplete;
    v["output"] = Value::Array(output);
    v["usage"] = usage_json(&resp.usage);
    v
}

enum Item {
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        args: String,
        canon_index: usize,
    },
    Reasoning {
        id: String,
        text: String,
    },
}

/// Re-emits canonical events as the Responses lifecycle: `response.created`, `response.in_progress`, output
/// items and content parts opened and closed in order with a rising `sequence_number`, then a terminal
/// `response.completed` / `response.incomplete` carrying the full output and usage.
pub struct ResponsesStreamEncoder {
    req: Request,
    response: Value,
    seq: u64,
    items: Vec<Item>,
    /// Index into `items` of the item still open, if any.
    open: Option<usize>,
    done_items: Vec<Value>,
    usage: Usage,
    stop: Option<StopReason>,
    failed: bool,
}

impl ResponsesStreamEncoder {
    pub fn new(req: &Request) -> Self {
        ResponsesStreamEncoder {
            req: req.clone(),
            response: Value::Null,
            seq: 0,
            items: Vec::new(),
            open: None,
            done_items: Vec::new(),
            usage: Usage::default(),
            stop: None,
            failed: false,
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, ty: &str, mut data: Value) {
        data["type"] = json!(ty);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        push_event(out, Some(ty), &data.to_string());
    }

    fn close_open(&mut self, out: &mut Vec<u8>) {
        let Some(idx) = self.open.take() else { return };
        let done = match &self.items[idx] {
            Item::Message { id, text } => {
                let (id, text) = (id.clone(), text.clone());
                let base = json!({"item_id": id, "output_index": idx, "content_index": 0});
                let mut d = base.clone();
                d["text"] = json!(text);
                d["logprobs"] = json!([]);
                self.emit(out, "response.output_text.done", d);
                let mut d = base;
                d["part"] =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                self.emit(out, "response.content_part.done", d);
                message_item(&id, &text, "completed")
            }
            Item::Call {
                id,
                call_id,
                name,
                args,
                ..
            } => {
                let item = call_item(id, call_id, name, args, "completed");
                let d =
                    json!({"item_id": id, "output_index": idx, "arguments": args, "name": name});
                self.emit(out, "response.function_call_arguments.done", d);
                item
            }
            Item::Reasoning { id, text } => {
                let (id, text) = (id.clone(), text.clone());
                let base = json!({"item_id": id, "output_index": idx, "summary_index": 0});
                let mut d = base.clone();
                d["text"] = json!(text);
                self.emit(out, "response.reasoning_summary_text.done", d);
                let mut d = base;
                d["part"] = json!({"type": "summary_text", "text": text});
                self.emit(out, "response.reasoning_summary_part.done", d);
                reasoning_item(&id, &text)
            }
        };
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": idx, "item": done.clone()}),
        );
        self.done_items.push(done);
    }

    fn open_item(&mut self, out: &mut Vec<u8>, item: Item) -> usize {
        self.close_open(out);
        let idx = self.items.len();
        let added = match &item {
            Item::Message { id, .. } => {
                json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []})
            }
            Item::Call {
                id, call_id, name, ..
            } => call_item(id, call_id, name, "", "in_progress"),
            Item::Reasoning { id, .. } => json!({"type": "reasoning", "id": id, "summary": []}),
        };
        self.emit(
            out,
            "response.output_item.added",
            json!({"output_index": idx, "item": added}),
        );
        match &item {
            Item::Message { id, .. } => {
                let d = json!({"item_id": id, "output_index": idx, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}});
                self.emit(out, "response.content_part.added", d);
            }
            Item::Reasoning { id, .. } => {
                let d = json!({"item_id": id, "output_index": idx, "summary_index": 0,
                               "part": {"type": "summary_text", "text": ""}});
                self.emit(out, "response.reasoning_summary_part.added", d);
            }
            Item::Call { .. } => {}
        }
        self.items.push(item);
        self.open = Some(idx);
        idx
    }
}

impl StreamEncoder for ResponsesStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        match event {
            StreamEvent::Start {
                id, model, created, ..
            } => {
                let id = if id.starts_with("resp_") {
                    id.clone()
                } else {
                    new_id("resp_")
                };
                self.response = skeleton(&id, model, *created, &self.req);
                let r = self.response.clone();
                self.emit(out, "response.created", json!({"response": r}));
                let r = self.response.clone();
                self.emit(out, "response.in_progress", json!({"response": r}));
            }
            StreamEvent::TextDelta(t) => {
                let idx = match self.open {
                    Some(i) if matches!(self.items[i], Item::Message { .. }) => i,
                    _ => self.open_item(
                        out,
                        Item::Message {
                            id: new_id("msg_"),
                            text: String::new(),
                        },
                    ),
                };
                let Item::Message { id, text } = &mut self.items[idx] else {
                    return;
                };
                text.push_str(t);
                let d = json!({"item_id": id, "output_index": idx, "content_index": 0, "delta": t, "logprobs": []});
                self.emit(out, "response.output_text.delta", d);
            }
            StreamEvent::ReasoningDelta(t) => {
                let idx = match self.open {
                    Some(i) if matches!(self.items[i], Item::Reasoning { .. }) => i,
                    _ => self.open_item(
                        out,
                        Item::Reasoning {
                            id: new_id("rs_"),
                            text: String::new(),
                        },
                    ),
                };
                let Item::Reasoning { id, text } = &mut self.items[idx] else {
                    return;
                };
                text.push_str(t);
                let d = json!({"item_id": id, "output_index": idx, "summary_index": 0, "delta": t});
                self.emit(out, "response.reasoning_summary_text.delta", d);
            }
            StreamEvent::ReasoningSignature(_) => {}
            StreamEvent::ToolCallStart { index, id, name } => {
                let item = Item::Call {
                    id: new_id("fc_"),
                    call_id: id.clone(),
                    name: name.clone(),
                    args: String::new(),
                    canon_index: *index,
                };
                self.open_item(out, item);
            }
            StreamEvent::ToolArgsDelta { index, delta } => {
                let found = self.items.iter().position(
                    |it| matches!(it, Item::Call { canon_index, .. } if canon_index == index),
                );
                let Some(idx) = found else { return };
                if self.open != Some(idx) {
                    // Arguments for a call whose item is already closed cannot be placed; SDKs would reject
                    // a delta after `output_item.done`.
                    log::warn!("dropping arguments for a tool call that was already closed");
                    return;
                }
                let Item::Call { id, args, .. } = &mut self.items[idx] else {
                    return;
                };
                args.push_str(delta);
                let d = json!({"item_id": id, "output_index": idx, "delta": delta});
                self.emit(out, "response.function_call_arguments.delta", d);
            }
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Finish(r) => self.stop = Some(r.clone()),
            StreamEvent::Error(e) => {
                self.failed = true;
                let code = e.code.clone().unwrap_or_else(|| "server_error".to_string());
                let d = json!({"code": code, "message": e.message, "param": e.param});
                self.emit(out, "error", d);
                let mut r = self.response.clone();
                r["status"] = json!("failed");
                r["error"] = json!({"code": code, "message": e.message});
                r["output"] = Value::Array(self.done_items.clone());
                self.emit(out, "response.failed", json!({"response": r}));
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        self.close_open(out);
        let stop = self.stop.clone().unwrap_or(StopReason::EndTurn);
        let (status, incomplete) = status_of(&stop);
        let mut r = self.response.clone();
        r["status"] = json!(status);
        r["incomplete_details"] = incomplete;
        r["output"] = Value::Array(self.done_items.clone());
        r["usage"] = usage_json(&self.usage);
        let ty = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(out, ty, json!({"response": r}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_instead_of_input_names_the_field() {
        let e = decode_request(&json!({"model": "m", "messages": []})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
        let e = decode_request(&json!({"model": "m"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
    }

    #[test]
    fn decodes_items_into_turns() {
        let r = decode_request(&json!({
            "model": "m", "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "dev"},
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "42"}
            ]
        }))
        .unwrap();
        assert_eq!(r.system, vec!["be brief", "dev"]);
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[1].role, Role::Assistant);
        assert_eq!(r.messages[2].role, Role::Tool);
    }

    #[test]
    fn stream_lifecycle_is_ordered() {
        let req = Request::default();
        let mut enc = ResponsesStreamEncoder::new(&req);
        let mut out = Vec::new();
        enc.encode(
            &StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                created: 1,
                input_tokens: 1,
            },
            &mut out,
        );
        enc.encode(&StreamEvent::TextDelta("Hel".into()), &mut out);
        enc.encode(&StreamEvent::TextDelta("lo".into()), &mut out);
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
        enc.encode(
            &StreamEvent::Usage(Usage {
                input_tokens: 1,
                output_tokens: 2,
                ..Usage::default()
            }),
            &mut out,
        );
        enc.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        let events: Vec<Value> = text
            .split("\n\n")
            .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types[0], "response.created");
        assert_eq!(*types.last().unwrap(), "response.completed");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        let done = events.last().unwrap();
        assert_eq!(done["response"]["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["response"]["output"][1]["arguments"], "{}");
        assert_eq!(done["response"]["usage"]["total_tokens"], 3);
    }
}
