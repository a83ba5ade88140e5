//! Gemini API answers to clients: the `GenerateContentResponse` (one candidate), its `usageMetadata`, the
//! chunks of a stream (each a `GenerateContentResponse` in an SSE `data:` event, function calls whole, the
//! finish reason and usage in the last), and the models list.

use serde_json::{json, Map, Value};

use crate::protocol::canon::{Part, Request, Response, StopReason, StreamEvent, Usage};
use crate::protocol::codec::{Listed, ModelList, ReplyCodec};
use crate::protocol::sse::push_event;
use crate::protocol::{ApiError, StreamEncoder};

use super::Gemini;

/// Gemini's `finishReason` for a stop reason. A function call ends with `STOP` on Gemini; a reason only
/// Gemini has (passed through from a Gemini upstream) is kept.
pub(super) fn finish_reason(stop: &StopReason) -> String {
    match stop {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence(_) => "STOP".into(),
        StopReason::MaxTokens => "MAX_TOKENS".into(),
        StopReason::ContentFilter => "SAFETY".into(),
        StopReason::Other(o) if is_gemini_reason(o) => o.clone(),
        StopReason::Other(_) => "OTHER".into(),
    }
}

/// Whether a reason is spelt as Gemini spells its own (`MALFORMED_FUNCTION_CALL`).
fn is_gemini_reason(r: &str) -> bool {
    !r.is_empty() && r.chars().all(|c| c.is_ascii_uppercase() || c == '_')
}

/// The stop reason of a `finishReason` (`calls`: the answer made function calls).
pub(super) fn stop_from(reason: &str, calls: bool) -> StopReason {
    match reason {
        "STOP" if calls => StopReason::ToolUse,
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT" | "IMAGE_RECITATION" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

/// The `usageMetadata` object: the prompt with its cached part inside, the candidates' tokens without the
/// thoughts, which come apart.
pub(super) fn usage_json(u: &Usage) -> Value {
    let thoughts = u.reasoning_tokens.min(u.output_tokens);
    let mut v = json!({
        "promptTokenCount": u.input_tokens,
        "candidatesTokenCount": u.output_tokens - thoughts,
        "totalTokenCount": u.total(),
    });
    if u.cached_input_tokens > 0 {
        v["cachedContentTokenCount"] = json!(u.split().cache_reads);
    }
    if thoughts > 0 {
        v["thoughtsTokenCount"] = json!(thoughts);
    }
    v
}

/// Tool arguments as the JSON object a `functionCall` carries; anything else is kept under `_raw`.
pub(super) fn args_object(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(other) => json!({"_value": other}),
        Err(_) => json!({"_raw": arguments}),
    }
}

/// The parts of an answer: text, function calls, and thoughts where the client asked to see them.
fn parts(content: &[Part], shown: bool) -> Vec<Value> {
    content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) if !t.is_empty() => Some(json!({"text": t})),
            Part::Reasoning { text, .. } if shown && !text.is_empty() => {
                Some(json!({"text": text, "thought": true}))
            }
            Part::ToolCall { id, name, arguments } => Some(call_part(id, name, arguments)),
            _ => None,
        })
        .collect()
}

fn call_part(id: &str, name: &str, arguments: &str) -> Value {
    json!({"functionCall": {"id": id, "name": name, "args": args_object(arguments)}})
}

impl ReplyCodec for Gemini {
    /// A complete answer as a `GenerateContentResponse`.
    fn encode_response(&self, resp: &Response, req: &Request) -> Value {
        let shown = req.reasoning_shown == Some(true);
        let mut parts = parts(&resp.content, shown);
        if parts.is_empty() {
            parts.push(json!({"text": ""}));
        }
        json!({
            "candidates": [{
                "content": {"role": "model", "parts": parts},
                "finishReason": finish_reason(&resp.stop),
                "index": 0,
            }],
            "usageMetadata": usage_json(&resp.usage),
            "modelVersion": resp.model,
            "responseId": resp.id,
        })
    }

    fn stream_encoder(
        &self,
        req: &Request,
        _include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(GeminiStreamEncoder::new(req, request_id))
    }

    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        let v = json!({"error": err.google_object(request_id)});
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// Google's error object as a chunk of the stream (`google-genai` raises it).
    fn error_event(&self, err: &ApiError, request_id: &str, _next_seq: Option<u64>) -> Vec<u8> {
        let v = json!({"error": err.google_object(request_id)});
        let mut out = Vec::new();
        push_event(&mut out, None, &v.to_string());
        out
    }
}

impl ModelList for Gemini {
    /// The models list: `{"models": [...]}`, each named `models/{name}`.
    fn models_list(&self, models: &[Listed], created: u64) -> Value {
        let list: Vec<Value> = models.iter().map(|m| self.model_entry(m, created)).collect();
        json!({ "models": list })
    }

    /// One model of the list, as the Gemini API describes a model: the methods it serves with it (the
    /// embeddings methods where one of its upstreams has embeddings).
    fn model_entry(&self, m: &Listed, _created: u64) -> Value {
        let mut methods = vec!["generateContent", "streamGenerateContent", "countTokens"];
        if m.embeds {
            methods.extend(["embedContent", "batchEmbedContents"]);
        }
        json!({
            "name": format!("models/{}", m.id),
            "version": "001",
            "displayName": m.id,
            "description": format!("Served by {}.", m.owned_by),
            "outputTokenLimit": m.max_output,
            "supportedGenerationMethods": methods,
        })
    }
}

/// Re-emits canonical events as Gemini stream chunks: each text delta a chunk; a function call as one part
/// once its arguments are complete (Gemini sends calls whole); the finish reason and usage in the last
/// chunk; an error as Google's error object, which ends the stream.
pub(super) struct GeminiStreamEncoder {
    id: String,
    model: String,
    shown: bool,
    /// Calls whose arguments are still arriving: (index, id, name, arguments).
    calls: Vec<(usize, String, String, String)>,
    usage: Usage,
    stop: Option<StopReason>,
    made_calls: bool,
    failed: bool,
    request_id: String,
}

impl GeminiStreamEncoder {
    pub(super) fn new(req: &Request, request_id: &str) -> Self {
        GeminiStreamEncoder {
            id: String::new(),
            model: String::new(),
            shown: req.reasoning_shown == Some(true),
            calls: Vec::new(),
            usage: Usage::default(),
            stop: None,
            made_calls: false,
            failed: false,
            request_id: request_id.to_string(),
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, parts: Vec<Value>, last: bool) {
        let mut candidate = Map::new();
        candidate.insert("content".into(), json!({"role": "model", "parts": parts}));
        if last {
            let stop = self.stop.clone().unwrap_or(if self.made_calls {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            });
            candidate.insert("finishReason".into(), json!(finish_reason(&stop)));
        }
        candidate.insert("index".into(), json!(0));
        let mut v = json!({"candidates": [Value::Object(candidate)]});
        if last {
            v["usageMetadata"] = usage_json(&self.usage);
        }
        v["modelVersion"] = json!(self.model);
        v["responseId"] = json!(self.id);
        push_event(out, None, &v.to_string());
    }

    /// Sends the calls whose arguments are complete.
    fn flush_calls(&mut self, out: &mut Vec<u8>) {
        if self.calls.is_empty() {
            return;
        }
        let parts = self
            .calls
            .drain(..)
            .map(|(_, id, name, args)| call_part(&id, &name, &args))
            .collect();
        self.chunk(out, parts, false);
    }
}

impl StreamEncoder for GeminiStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        match event {
            StreamEvent::Start { id, model, .. } => {
                self.id = id.clone();
                self.model = model.clone();
            }
            StreamEvent::TextDelta(t) => {
                self.flush_calls(out);
                if !t.is_empty() {
                    self.chunk(out, vec![json!({"text": t})], false);
                }
            }
            StreamEvent::ReasoningDelta(t) if self.shown && !t.is_empty() => {
                self.flush_calls(out);
                self.chunk(out, vec![json!({"text": t, "thought": true})], false);
            }
            StreamEvent::ReasoningDelta(_)
            | StreamEvent::ReasoningSignature(_)
            | StreamEvent::Unkept
            | StreamEvent::ToolCallEnd { .. } => {}
            StreamEvent::ToolCallStart { index, id, name } => {
                self.made_calls = true;
                self.calls.push((*index, id.clone(), name.clone(), String::new()));
            }
            StreamEvent::ToolArgsDelta { index, delta } => {
                if let Some(c) = self.calls.iter_mut().find(|c| c.0 == *index) {
                    c.3.push_str(delta);
                }
            }
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Finish(r) => self.stop = Some(r.clone()),
            StreamEvent::Error(e) => {
                self.failed = true;
                let v = json!({"error": e.google_object(&self.request_id)});
                push_event(out, None, &v.to_string());
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        self.flush_calls(out);
        self.chunk(out, vec![json!({"text": ""})], true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::UpstreamCodec;

    #[test]
    fn usage_both_ways() {
        let meta = json!({"promptTokenCount": 12000, "cachedContentTokenCount": 8000,
            "candidatesTokenCount": 500, "thoughtsTokenCount": 1500, "totalTokenCount": 14000});
        let u = Gemini.usage_from(&meta).unwrap();
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens),
            (12000, 8000, 2000, 1500)
        );
        let back = usage_json(&u);
        assert_eq!(back["candidatesTokenCount"], 500);
        assert_eq!(back["thoughtsTokenCount"], 1500);
        assert_eq!(back["cachedContentTokenCount"], 8000);
        assert_eq!(back["totalTokenCount"], 14000);
        let tools = Gemini.usage_from(&json!({"promptTokenCount": 10, "toolUsePromptTokenCount": 90})).unwrap();
        assert_eq!(tools.input_tokens, 100);
    }

    #[test]
    fn a_stream_sends_calls_whole_and_ends_with_the_reason() {
        let req = Request::default();
        let mut enc = GeminiStreamEncoder::new(&req, "req_1");
        let mut out = Vec::new();
        for ev in [
            StreamEvent::Start { id: "r1".into(), model: "m".into(), created: 0, input_tokens: 3 },
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::ToolCallStart { index: 0, id: "c1".into(), name: "f".into() },
            StreamEvent::ToolArgsDelta { index: 0, delta: "{\"a\":".into() },
            StreamEvent::ToolArgsDelta { index: 0, delta: "1}".into() },
            StreamEvent::Usage(Usage { input_tokens: 3, output_tokens: 4, ..Usage::default() }),
        ] {
            enc.encode(&ev, &mut out);
        }
        enc.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        let chunks: Vec<Value> = text
            .split("\n\n")
            .filter_map(|b| b.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0]["candidates"][0]["content"]["parts"][0]["text"], "Hi");
        assert_eq!(chunks[1]["candidates"][0]["content"]["parts"][0]["functionCall"]["args"], json!({"a": 1}));
        assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
        assert_eq!(chunks[2]["usageMetadata"]["candidatesTokenCount"], 4);
        assert_eq!(chunks[2]["responseId"], "r1");
    }
}
