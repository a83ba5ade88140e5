//! Responses answers to clients: the `response` object and the event lifecycle of a stream.

use serde_json::{json, Value};

use crate::protocol::canon::{
    OutputFormat, Part, Request, Response, StopReason, StreamEvent, ToolChoice, Usage,
};
use crate::protocol::openai::{self, OpenAiShape};
use crate::protocol::sse::push_event;
use crate::protocol::codec::ReplyCodec;
use crate::protocol::{ApiError, StreamEncoder};

use super::Responses;
use crate::util::new_id;

/// The Responses usage object (both detail objects always present): `input_tokens` counts all input, cache
/// reads and writes included; `cached_tokens` the reads, `cache_write_tokens` (only when there were any) the
/// writes.
pub(super) fn usage_json(u: &Usage) -> Value {
    let mut input = json!({"cached_tokens": u.cached_input_tokens});
    if u.cache_write_tokens > 0 {
        input["cache_write_tokens"] = json!(u.cache_write_tokens);
    }
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": input,
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total(),
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
        .map(|t| openai::encode_function(t, OpenAiShape::Flat))
        .collect();
    let tool_choice = openai::encode_tool_choice(
        req.tool_choice.as_ref().unwrap_or(&ToolChoice::Auto),
        OpenAiShape::Flat,
    );
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
        "instructions": req.instructions,
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

/// Whether a (flattened) tool name is a custom tool of the request.
fn is_custom(req: &Request, name: &str) -> bool {
    req.tools.iter().any(|t| t.custom && t.name == name)
}

/// The free-form input of a custom tool call, from the arguments of the function that carried it.
fn custom_input(args: &str) -> String {
    match serde_json::from_str::<Value>(args) {
        Ok(v) => v
            .get("input")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| args.to_string()),
        Err(_) => args.to_string(),
    }
}

/// The output item for a tool call: a `function_call` (with its `namespace` when the client grouped the
/// tool in one) or, for a custom tool, a `custom_tool_call`.
fn call_item(
    req: &Request,
    id: &str,
    call_id: &str,
    name: &str,
    args: &str,
    status: &str,
) -> Value {
    let (namespace, real) = match req.unflatten(name) {
        Some((ns, n)) => (Some(ns), n),
        None => (None, name),
    };
    let mut item = if is_custom(req, name) {
        json!({"type": "custom_tool_call", "id": id, "call_id": call_id, "name": real,
               "input": custom_input(args), "status": status})
    } else {
        json!({"type": "function_call", "id": id, "call_id": call_id, "name": real, "arguments": args, "status": status})
    };
    if let Some(ns) = namespace {
        item["namespace"] = json!(ns);
    }
    item
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

impl ReplyCodec for Responses {
    /// Encodes a complete answer as a `response` object.
    fn encode_response(&self, resp: &Response, req: &Request) -> Value {
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
                    output.push(call_item(
                        req,
                        &new_id("fc_"),
                        id,
                        name,
                        arguments,
                        "completed",
                    ));
                }
                // A signature alone (from another vendor's upstream) is nothing to a Responses client.
                Part::Reasoning { text: r, .. } if !r.is_empty() => {
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


    fn stream_encoder(
        &self,
        req: &Request,
        _include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(ResponsesStreamEncoder::new(req).with_request_id(request_id.into()))
    }

    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        openai::error_body(err, request_id)
    }

    /// An `error` event, numbered after the events before it.
    fn error_event(&self, err: &ApiError, request_id: &str, next_seq: Option<u64>) -> Vec<u8> {
        let code = err.code().unwrap_or("server_error");
        let d = json!({"type": "error", "code": code,
                       "message": err.openai_object(request_id)["message"],
                       "param": err.param(), "sequence_number": next_seq.unwrap_or(0)});
        let mut out = Vec::new();
        push_event(&mut out, Some("error"), &d.to_string());
        out
    }
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
pub(super) struct ResponsesStreamEncoder {
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
    /// Carried by error events.
    request_id: String,
}

impl ResponsesStreamEncoder {
    /// Sets the request id error events carry.
    pub(super) fn with_request_id(mut self, id: String) -> Self {
        self.request_id = id;
        self
    }

    pub(super) fn new(req: &Request) -> Self {
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
            request_id: String::new(),
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
                let (id, call_id, name, args) =
                    (id.clone(), call_id.clone(), name.clone(), args.clone());
                let item = call_item(&self.req, &id, &call_id, &name, &args, "completed");
                if is_custom(&self.req, &name) {
                    // Custom tool input arrives whole here: the upstream streamed JSON arguments around it.
                    let input = custom_input(&args);
                    let d = json!({"item_id": id, "output_index": idx, "delta": input});
                    self.emit(out, "response.custom_tool_call_input.delta", d);
                    let d = json!({"item_id": id, "output_index": idx, "input": input});
                    self.emit(out, "response.custom_tool_call_input.done", d);
                } else {
                    let d = json!({"item_id": id, "output_index": idx, "arguments": args, "name": item["name"]});
                    self.emit(out, "response.function_call_arguments.done", d);
                }
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
            } => call_item(&self.req, id, call_id, name, "", "in_progress"),
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

impl ResponsesStreamEncoder {
    fn text_delta(&mut self, t: &str, out: &mut Vec<u8>) {
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

    fn reasoning_delta(&mut self, t: &str, out: &mut Vec<u8>) {
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

    fn args_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        let found = self
            .items
            .iter()
            .position(|it| matches!(it, Item::Call { canon_index, .. } if *canon_index == index));
        let Some(idx) = found else { return };
        if self.open != Some(idx) {
            // Arguments for a call whose item is already closed cannot be placed; SDKs would reject a delta
            // after `output_item.done`.
            log::warn!("dropping arguments for a tool call that was already closed");
            return;
        }
        let Item::Call { id, args, name, .. } = &mut self.items[idx] else {
            return;
        };
        args.push_str(delta);
        if is_custom(&self.req, name) {
            return;
        }
        let d = json!({"item_id": id, "output_index": idx, "delta": delta});
        self.emit(out, "response.function_call_arguments.delta", d);
    }

    /// The in-stream `error` event (with the request id), then `response.failed`; nothing after it.
    fn fail(&mut self, e: &crate::protocol::ApiError, out: &mut Vec<u8>) {
        self.failed = true;
        let code = e.code().unwrap_or("server_error");
        let message = e.openai_object(&self.request_id)["message"].clone();
        let d = json!({"code": code, "message": message, "param": e.param()});
        self.emit(out, "error", d);
        let mut r = self.response.clone();
        r["status"] = json!("failed");
        r["error"] = json!({"code": code, "message": message});
        r["output"] = Value::Array(self.done_items.clone());
        self.emit(out, "response.failed", json!({"response": r}));
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
            StreamEvent::TextDelta(t) => self.text_delta(t, out),
            StreamEvent::ReasoningDelta(t) => self.reasoning_delta(t, out),
            StreamEvent::ReasoningSignature(_)
            | StreamEvent::Unkept
            | StreamEvent::ToolCallEnd { .. } => {}
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
            StreamEvent::ToolArgsDelta { index, delta } => self.args_delta(*index, delta, out),
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Finish(r) => self.stop = Some(r.clone()),
            StreamEvent::Error(e) => self.fail(e, out),
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

/// The number the first of these held events carries, if any.
pub(super) fn next_sequence(held: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(held);
    let at = text.find("\"sequence_number\":")? + "\"sequence_number\":".len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

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
