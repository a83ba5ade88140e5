//! Talking to a Gemini API upstream on behalf of a client of another protocol: the canonical request as a
//! `GenerateContentRequest` (the model and the stream go in the URL: `Codec::upstream_endpoint`), and the
//! upstream's answer (JSON, or the chunks of an `alt=sse` stream) back as canonical values.

use crate::protocol::fields::At;
use serde_json::{json, Map, Value};

use super::reply::{args_object, stop_from};
use super::schema::for_upstream;
use crate::protocol::canon::{
    ImageSource, OutputFormat, Part, Request, Response, Role, StopReason, StreamEvent, ToolChoice,
    Usage,
};
use crate::protocol::egress::{thinking_budget, tool_result_text};
use crate::protocol::sse::SseEvent;
use crate::protocol::codec::UpstreamCodec;
use crate::protocol::{ApiError, EgressOptions, StreamDecoder};

use super::Gemini;

/// What a function call in the history carries where no signature of the model's own came with it: the
/// value Google documents for conversations whose calls another model (or none) made, so Gemini 3 models
/// take them without their thought signatures.
const NO_SIGNATURE: &str = "skip_thought_signature_validator";

/// The most stop sequences the Gemini API takes.
const MAX_STOPS: usize = 5;

/// An image as a Gemini part: inline data, a `data:` URL unpacked, or a URL the API fetches.
fn image_part(src: &ImageSource) -> Value {
    match src {
        ImageSource::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        ImageSource::Url(u) => match u.strip_prefix("data:").and_then(|r| r.split_once(";base64,")) {
            Some((mime, data)) => json!({"inlineData": {"mimeType": mime, "data": data}}),
            None => json!({"fileData": {"mimeType": guess_mime(u), "fileUri": u}}),
        },
    }
}

/// The MIME type of an image URL by its extension (JPEG when it says nothing).
fn guess_mime(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url).to_ascii_lowercase();
    match path.rsplit('.').next() {
        Some("png") => "image/png",
        Some("webp") => "image/webp",
        Some("gif") => "image/gif",
        Some("heic") => "image/heic",
        _ => "image/jpeg",
    }
}

/// A tool result as a `functionResponse` (its call's name found in the history): the text under `output`,
/// or under `error` for a failed call.
fn response_part(call_id: &str, content: &[Part], is_error: bool, names: &[(String, String)]) -> Value {
    let name = names
        .iter()
        .find(|(id, _)| id == call_id)
        .map_or("", |(_, n)| n.as_str());
    let text = tool_result_text(content, false);
    let key = if is_error { "error" } else { "output" };
    json!({"functionResponse": {"id": call_id, "name": name, "response": {key: text}}})
}

/// The parts of one canonical message; `names`: (call id, function name) of the calls so far.
fn parts_of(content: &[Part], names: &mut Vec<(String, String)>) -> Vec<Value> {
    let mut out = Vec::new();
    let mut signature: Option<&str> = None;
    let mut signed = false;
    for p in content {
        match p {
            Part::Text(t) if !t.is_empty() => out.push(json!({"text": t})),
            Part::Image(src) => out.push(image_part(src)),
            // An empty signature is none (the placeholder goes instead: Gemini refuses an empty one).
            Part::Reasoning { signature: s, .. } => {
                signature = s.as_deref().filter(|s| !s.is_empty()).or(signature)
            }
            Part::ToolCall { id, name, arguments } => {
                names.push((id.clone(), name.clone()));
                let mut part = json!({"functionCall": {"id": id, "name": name, "args": args_object(arguments)}});
                // The first call of a turn carries the turn's signature.
                if !signed {
                    part["thoughtSignature"] = json!(signature.unwrap_or(NO_SIGNATURE));
                    signed = true;
                }
                out.push(part);
            }
            Part::ToolResult { call_id, content, is_error } => {
                out.push(response_part(call_id, content, *is_error, names))
            }
            _ => {}
        }
    }
    out
}

impl UpstreamCodec for Gemini {
    /// The canonical request as a `GenerateContentRequest`.
    fn encode_request(&self, req: &Request, _opts: &EgressOptions) -> Result<Value, ApiError> {
        let mut system: Vec<String> = req.system.clone();
        let mut contents: Vec<Value> = Vec::new();
        let mut names: Vec<(String, String)> = Vec::new();
        for m in &req.messages {
            let role = match m.role {
                Role::System => {
                    // No system turns in `contents`: they join the system instruction.
                    system.push(m.joined_text());
                    continue;
                }
                Role::Assistant => "model",
                Role::User | Role::Tool => "user",
            };
            let parts = parts_of(&m.content, &mut names);
            if parts.is_empty() {
                continue;
            }
            match contents.last_mut() {
                Some(last) if last["role"] == role => {
                    if let Some(arr) = last["parts"].as_array_mut() {
                        arr.extend(parts);
                    }
                }
                _ => contents.push(json!({"role": role, "parts": parts})),
            }
        }
        let mut body = Map::new();
        body.insert("contents".into(), Value::Array(contents));
        let system: Vec<&String> = system.iter().filter(|s| !s.is_empty()).collect();
        if !system.is_empty() {
            let parts: Vec<Value> = system.iter().map(|s| json!({"text": s})).collect();
            body.insert("systemInstruction".into(), json!({"parts": parts}));
        }
        encode_tools(req, &mut body);
        body.insert("generationConfig".into(), Value::Object(generation(req)));
        Ok(Value::Object(body))
    }

    /// Decodes a `GenerateContentResponse`. A prompt the upstream blocked (`promptFeedback.blockReason`, no
    /// candidate) is an empty answer stopped by its content filter.
    fn decode_response(&self, body: &Value, _opts: &EgressOptions) -> Result<Response, ApiError> {
        let candidates = body.get("candidates").and_then(Value::as_array);
        let blocked = body.at("promptFeedback/blockReason").is_some();
        if candidates.is_none() && !blocked {
            return Err(ApiError::bad_gateway(
                "upstream answer is not a Gemini `GenerateContentResponse` (no `candidates`)",
            ));
        }
        let first = candidates.and_then(|c| c.first());
        let mut content = Vec::new();
        let parts = first.and_then(|c| c.at("content/parts")).and_then(Value::as_array);
        let calls = decode_parts(parts.map_or(&[][..], Vec::as_slice), &mut content);
        let stop = match first.and_then(|c| c.get("finishReason")).and_then(Value::as_str) {
            Some(r) => stop_from(r, calls),
            None if blocked => StopReason::ContentFilter,
            None if calls => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        Ok(Response {
            id: body.get("responseId").and_then(Value::as_str).unwrap_or_default().to_string(),
            model: body.get("modelVersion").and_then(Value::as_str).unwrap_or_default().to_string(),
            content,
            stop,
            usage: body.get("usageMetadata").and_then(|u| Gemini.usage_from(u)).unwrap_or_default(),
            created: 0,
            unkept: parts.is_some_and(|p| p.iter().any(beyond_canon)),
        })
    }

    /// Reads a `usageMetadata` object into normalised usage: input is the prompt (cached tokens inside it) and
    /// the tool-use prompt (what hosted tools fed the model); output is the candidates and the thoughts.
    fn usage_from(&self, u: &Value) -> Option<Usage> {
        let o = u.as_object()?;
        let n = |k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
        let thoughts = n("thoughtsTokenCount");
        Some(Usage {
            input_tokens: n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount")),
            cached_input_tokens: n("cachedContentTokenCount"),
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: n("candidatesTokenCount").saturating_add(thoughts),
            reasoning_tokens: thoughts,
        })
    }

    fn stream_decoder(&self, _opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::<GeminiStreamDecoder>::default()
    }
}

/// `tools` (function declarations with their JSON Schemas) and `toolConfig`.
fn encode_tools(req: &Request, body: &mut Map<String, Value>) {
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut d = json!({"name": t.name, "parametersJsonSchema": for_upstream(&t.parameters)});
                if let Some(desc) = &t.description {
                    d["description"] = json!(desc);
                }
                d
            })
            .collect();
        body.insert("tools".into(), json!([{"functionDeclarations": decls}]));
    }
    let config = match &req.tool_choice {
        None => return,
        Some(ToolChoice::Auto | ToolChoice::Hosted(_)) => json!({"mode": "AUTO"}),
        Some(ToolChoice::None) => json!({"mode": "NONE"}),
        Some(ToolChoice::Required) => json!({"mode": "ANY"}),
        Some(ToolChoice::Function(n)) => json!({"mode": "ANY", "allowedFunctionNames": [n]}),
    };
    body.insert("toolConfig".into(), json!({"functionCallingConfig": config}));
}

/// `generationConfig`: the output limit, sampling, stop sequences, structured output, thinking.
fn generation(req: &Request) -> Map<String, Value> {
    let mut g = Map::new();
    if let Some(m) = req.max_tokens {
        g.insert("maxOutputTokens".into(), json!(m));
    }
    if let Some(t) = req.temperature {
        g.insert("temperature".into(), json!(t.clamp(0.0, 2.0)));
    }
    if let Some(p) = req.top_p {
        g.insert("topP".into(), json!(p));
    }
    if let Some(k) = req.top_k {
        g.insert("topK".into(), json!(k));
    }
    if !req.stop.is_empty() {
        let stops: Vec<&String> = req.stop.iter().take(MAX_STOPS).collect();
        g.insert("stopSequences".into(), json!(stops));
    }
    match &req.output_format {
        Some(OutputFormat::JsonSchema { schema, .. }) => {
            g.insert("responseMimeType".into(), json!("application/json"));
            g.insert("responseJsonSchema".into(), for_upstream(schema));
        }
        Some(OutputFormat::JsonObject) => {
            g.insert("responseMimeType".into(), json!("application/json"));
        }
        _ => {}
    }
    if let Some(t) = thinking(req) {
        g.insert("thinkingConfig".into(), t);
    }
    g
}

/// `thinkingConfig`: the client's budget, or the effort's (Anthropic's budgets for the levels), within the
/// output limit (the limit the gateway reserved is never raised: a budget that does not fit leaves half of
/// it for the answer); `none` leaves the model's default. Thoughts are shown where the client asked to see
/// reasoning (and, unless it said otherwise, where it asked for any).
fn thinking(req: &Request) -> Option<Value> {
    let effort = req.reasoning_effort.as_deref();
    if effort == Some("none") {
        return None;
    }
    let budget = req.reasoning_budget.or_else(|| effort.and_then(thinking_budget))?;
    let budget = match req.max_tokens {
        Some(max) if budget >= max => max / 2,
        _ => budget,
    };
    let shown = req.reasoning_shown.unwrap_or(true);
    Some(json!({"thinkingBudget": budget, "includeThoughts": shown}))
}

/// A part the canonical form does not hold (an image or audio out, code the model ran, its result).
fn beyond_canon(p: &Value) -> bool {
    ["inlineData", "fileData", "executableCode", "codeExecutionResult"]
        .iter()
        .any(|k| p.get(k).is_some())
}

/// A part's `thoughtSignature`, if it has one.
fn signature_of(p: &Value) -> Option<&str> {
    p.get("thoughtSignature")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The canonical parts of a candidate's content; `calls`: whether any is a function call. A thought
/// signature (Gemini puts it on a thought, on the first function call of a turn, or on its last text) is the
/// signature of the reasoning before it, or of an empty reasoning part: clients send it back with their
/// next turn, which the upstream then takes as its own.
fn decode_parts(parts: &[Value], content: &mut Vec<Part>) -> bool {
    let mut calls = false;
    for p in parts {
        let thought = p.get("thought").and_then(Value::as_bool) == Some(true);
        if let Some(sig) = signature_of(p).filter(|_| !thought) {
            match content.last_mut() {
                Some(Part::Reasoning { signature, .. }) if signature.is_none() => {
                    *signature = Some(sig.to_string())
                }
                _ => content.push(Part::Reasoning {
                    text: String::new(),
                    signature: Some(sig.to_string()),
                }),
            }
        }
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            if thought {
                content.push(Part::Reasoning {
                    text: t.to_string(),
                    signature: signature_of(p).map(str::to_string),
                });
            } else if !t.is_empty() {
                content.push(Part::Text(t.to_string()));
            }
        } else if let Some(f) = p.get("functionCall") {
            calls = true;
            content.push(Part::ToolCall {
                id: call_id(f),
                name: f.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                arguments: f.get("args").cloned().unwrap_or_else(|| json!({})).to_string(),
            });
        }
    }
    calls
}

/// A call's id: the upstream's, or one of the gateway's (the Gemini API may send none; clients of other
/// protocols pair results by id).
fn call_id(f: &Value) -> String {
    match f.get("id").and_then(Value::as_str).filter(|i| !i.is_empty()) {
        Some(id) => id.to_string(),
        None => crate::util::new_id("call_"),
    }
}

/// Decodes the chunks of an `alt=sse` stream: text and thoughts as deltas, each function call whole, usage
/// as reported (cumulative), the finish reason, which ends the stream (Gemini sends no end marker after it);
/// an error object ends it too.
#[derive(Default)]
pub(super) struct GeminiStreamDecoder {
    next_call: usize,
    usage: Option<Usage>,
}

impl StreamDecoder for GeminiStreamDecoder {
    fn feed(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> bool {
        if !ev.has_data || ev.data.trim().is_empty() {
            return false;
        }
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            out.push(StreamEvent::Error(ApiError::bad_gateway(
                "upstream sent an event that is not valid JSON",
            )));
            return true;
        };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            out.push(StreamEvent::Error(error_event(e)));
            return true;
        }
        let candidate = v.at("candidates/0");
        let parts = candidate
            .and_then(|c| c.at("content/parts"))
            .and_then(Value::as_array);
        for p in parts.into_iter().flatten() {
            self.part(p, out);
        }
        if let Some(u) = v.get("usageMetadata").and_then(|u| Gemini.usage_from(u)) {
            self.usage = Some(u);
            out.push(StreamEvent::Usage(u));
        }
        let reason = candidate
            .and_then(|c| c.get("finishReason"))
            .and_then(Value::as_str)
            .or_else(|| v.at("promptFeedback/blockReason").map(|_| "SAFETY"));
        match reason {
            Some(r) => {
                out.push(StreamEvent::Finish(stop_from(r, self.next_call > 0)));
                true
            }
            None => false,
        }
    }
}

impl GeminiStreamDecoder {
    fn part(&mut self, p: &Value, out: &mut Vec<StreamEvent>) {
        if beyond_canon(p) {
            out.push(StreamEvent::Unkept);
        }
        let thought = p.get("thought").and_then(Value::as_bool) == Some(true);
        // A signature on anything but a thought signs the reasoning before it (see `decode_parts`).
        if let Some(sig) = signature_of(p).filter(|_| !thought) {
            out.push(StreamEvent::ReasoningSignature(sig.to_string()));
        }
        if let Some(t) = p.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            if thought {
                out.push(StreamEvent::ReasoningDelta(t.to_string()));
                if let Some(sig) = signature_of(p) {
                    out.push(StreamEvent::ReasoningSignature(sig.to_string()));
                }
            } else {
                out.push(StreamEvent::TextDelta(t.to_string()));
            }
        } else if let Some(f) = p.get("functionCall") {
            let index = self.next_call;
            self.next_call += 1;
            let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
            out.push(StreamEvent::ToolCallStart {
                index,
                id: call_id(f),
                name: name.to_string(),
            });
            let args = f.get("args").cloned().unwrap_or_else(|| json!({}));
            out.push(StreamEvent::ToolArgsDelta {
                index,
                delta: args.to_string(),
            });
            out.push(StreamEvent::ToolCallEnd { index });
        }
    }
}

/// An in-stream error object as the upstream's failure (its status kept, for Gemini clients).
fn error_event(e: &Value) -> ApiError {
    let msg = e.get("message").and_then(Value::as_str).unwrap_or("upstream error");
    let mut err = ApiError::bad_gateway(format!("upstream error: {msg}"));
    if let Some(status) = e.get("status").and_then(Value::as_str) {
        err = err.with_code(status);
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::canon::{Message, Tool};

    fn opts() -> EgressOptions {
        EgressOptions {
            model: "gemini-2.5-flash".into(),
            stream: false,
            default_max_tokens: 4096,
            max_completion_tokens_field: false,
            structured_via_tool: false,
        }
    }

    #[test]
    fn a_conversation_with_tools_encodes() {
        let req = Request {
            system: vec!["sys".into()],
            messages: vec![
                Message::text(Role::User, "weather?"),
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall { id: "toolu_1".into(), name: "w".into(), arguments: "{\"c\":1}".into() }],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Part::ToolResult { call_id: "toolu_1".into(), content: vec![Part::Text("sunny".into())], is_error: false }],
                },
                Message::text(Role::User, "thanks"),
                Message::text(Role::System, "be nice"),
            ],
            tools: vec![Tool { custom: false, name: "w".into(), description: Some("Weather".into()),
                parameters: json!({"$schema": "x", "type": "object"}), strict: None }],
            tool_choice: Some(ToolChoice::Function("w".into())),
            max_tokens: Some(1000),
            top_k: Some(5),
            reasoning_effort: Some("medium".into()),
            output_format: Some(OutputFormat::JsonSchema { name: "o".into(), schema: json!({"type": "object"}), strict: None, description: None }),
            ..Request::default()
        };
        let v = Gemini.encode_request(&req, &opts()).unwrap();
        assert_eq!(v["systemInstruction"]["parts"][1]["text"], "be nice");
        let c = v["contents"].as_array().unwrap();
        assert_eq!(c.len(), 3, "the tool result and the next user text share one user turn");
        assert_eq!(c[1]["role"], "model");
        assert_eq!(c[1]["parts"][0]["functionCall"]["args"], json!({"c": 1}));
        assert_eq!(c[1]["parts"][0]["thoughtSignature"], NO_SIGNATURE);
        assert_eq!(c[2]["parts"][0]["functionResponse"]["name"], "w");
        assert_eq!(c[2]["parts"][0]["functionResponse"]["response"]["output"], "sunny");
        assert_eq!(c[2]["parts"][1]["text"], "thanks");
        assert_eq!(v["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"], json!({"type": "object"}));
        assert_eq!(v["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"][0], "w");
        let g = &v["generationConfig"];
        assert_eq!((g["maxOutputTokens"].as_u64(), g["topK"].as_u64()), (Some(1000), Some(5)));
        assert_eq!(g["thinkingConfig"]["thinkingBudget"], 500, "half the limit");
        assert_eq!(g["responseMimeType"], "application/json");
        assert!(v.get("model").is_none() && v.get("stream").is_none());
    }

    #[test]
    fn answers_and_streams_decode() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "thinking", "thought": true}, {"text": "Hi"},
            {"functionCall": {"name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "thoughtsTokenCount": 3},
            "modelVersion": "gemini-x", "responseId": "r1"});
        let r = Gemini.decode_response(&body, &opts()).unwrap();
        assert_eq!(r.stop, StopReason::ToolUse);
        assert_eq!(r.usage.output_tokens, 5);
        assert!(matches!(&r.content[2], Part::ToolCall { id, .. } if id.starts_with("call_")));
        let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}});
        assert_eq!(Gemini.decode_response(&blocked, &opts()).unwrap().stop, StopReason::ContentFilter);
        assert!(Gemini.decode_response(&json!({"x": 1}), &opts()).is_err());

        let mut d = GeminiStreamDecoder::default();
        let ev = |data: &str| SseEvent { data: data.into(), has_data: true, terminated: true, ..SseEvent::default() };
        let mut out = Vec::new();
        assert!(!d.feed(&ev(r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"He"}]}}]}"#), &mut out));
        assert!(d.feed(&ev(r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"llo"}]},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}}"#), &mut out));
        assert_eq!(out[0], StreamEvent::TextDelta("He".into()));
        assert_eq!(out.last(), Some(&StreamEvent::Finish(StopReason::MaxTokens)));
        let mut out = Vec::new();
        assert!(d.feed(&ev(r#"{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}"#), &mut out));
        assert!(matches!(&out[0], StreamEvent::Error(e) if e.google_status() == "UNAVAILABLE"));
    }

    /// Gemini's thought signature reaches the client on the reasoning it signs (an empty one where the
    /// thoughts were not shown), and comes back on the turn's first call; an empty signature is none.
    #[test]
    fn thought_signatures_go_around() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "w", "args": {"c": 1}}, "thoughtSignature": "sig-1"}]},
            "finishReason": "STOP"}]});
        let resp = Gemini.decode_response(&body, &opts()).unwrap();
        assert_eq!(
            resp.content[0],
            Part::Reasoning { text: String::new(), signature: Some("sig-1".into()) }
        );
        assert!(matches!(resp.content[1], Part::ToolCall { .. }));
        let turn = |signature: Option<&str>| {
            let req = Request {
                messages: vec![
                    Message::text(Role::User, "weather?"),
                    Message {
                        role: Role::Assistant,
                        content: vec![
                            Part::Reasoning { text: String::new(), signature: signature.map(str::to_string) },
                            Part::ToolCall { id: "c1".into(), name: "w".into(), arguments: "{}".into() },
                        ],
                    },
                ],
                ..Request::default()
            };
            Gemini.encode_request(&req, &opts()).unwrap()["contents"][1]["parts"][0]["thoughtSignature"].clone()
        };
        assert_eq!(turn(Some("sig-1")), "sig-1");
        assert_eq!(turn(Some("")), NO_SIGNATURE);
        let mut d = GeminiStreamDecoder::default();
        let mut out = Vec::new();
        let chunk = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "hmm", "thought": true}, {"functionCall": {"name": "w", "args": {}}, "thoughtSignature": "sig-2"}]}}]});
        d.feed(
            &SseEvent { event: None, data: chunk.to_string(), has_data: true, raw: Vec::new(), terminated: true },
            &mut out,
        );
        assert_eq!(out[0], StreamEvent::ReasoningDelta("hmm".into()));
        assert_eq!(out[1], StreamEvent::ReasoningSignature("sig-2".into()));
        assert!(matches!(out[2], StreamEvent::ToolCallStart { .. }));
    }
}
