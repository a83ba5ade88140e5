//! Same-protocol passthrough: the client's body goes upstream as it came (model renamed, stream usage
//! switched on for Chat), and the answer comes back byte for byte, streams event by event, while usage is
//! read on the way. A stream that breaks after it started ends with the protocol's in-stream error event.

use serde_json::{json, Value};

use super::call;
use super::generate::{chat_wants_usage, Outcome, Prepared};
use super::respond::{self, Trace};
use super::Gateway;
use crate::config::Upstream;
use crate::http::Exchange;
use crate::protocol::canon::Usage;
use crate::protocol::sse::{push_event, SseEvent};
use crate::protocol::{chat, limits, messages, responses, ApiError, Protocol};
use crate::upstream::http as uphttp;

pub fn passthrough(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    p: &mut Prepared,
) -> Result<(), ApiError> {
    // The body is changed in place (no copy): the model renamed, stream usage switched on, the output limit
    // set where the key's balance needs one. All are idempotent, so a failover to the next upstream can
    // change it again.
    let protocol = trace.protocol;
    let stream = p.stream;
    let client_wants_usage = chat_wants_usage(&p.body);
    let limit = p.limit_for_upstream();
    if p.must_limit() {
        let chat_field = if upstream.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        let reserved = p.reserved_output();
        limits::apply(protocol, &mut p.body, reserved, chat_field);
    }
    out.output_limit = limit;
    let body = &mut p.body;
    body["model"] = json!(p.model.upstream_model);
    let mut hide_usage = false;
    if protocol == Protocol::Chat && stream {
        hide_usage = !client_wants_usage;
        match body.get_mut("stream_options") {
            Some(Value::Object(so)) => {
                so.insert("include_usage".into(), json!(true));
            }
            _ => body["stream_options"] = json!({"include_usage": true}),
        }
    }
    let bytes = serde_json::to_vec(&*body).map_err(|e| ApiError::internal(e.to_string()))?;
    let beta: Option<String> = if protocol == Protocol::Messages {
        let all: Vec<&str> = ex.request.header_all("anthropic-beta").collect();
        (!all.is_empty()).then(|| all.join(","))
    } else {
        None
    };
    let reply = call::send(gw, trace, out, upstream, &bytes, stream, beta.as_deref())?;
    if stream && reply.is_event_stream() {
        let watch = StreamWatch::new(protocol, hide_usage, (bytes.len() as u64 / 4).max(1), limit);
        relay_stream(gw, ex, trace, out, upstream, reply, watch);
        return Ok(());
    }
    let (bytes, usage) = call::read_usage(trace, upstream, reply)?;
    if stream {
        // A plain JSON answer to a streaming request: sent as a stream in the client's protocol, the same
        // way a translated answer is.
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_gateway(format!("upstream `{}`: {e}", upstream.name)))?;
        return super::translate::answer_as_stream(gw, ex, trace, out, upstream, p, &v, protocol);
    }
    out.usage = usage.and_then(|u| protocol.usage_from(&u));
    respond::json(ex.response(), trace, 200, &bytes, &[]);
    out.status = 200;
    Ok(())
}

fn relay_stream(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    reply: uphttp::Reply,
    mut watch: StreamWatch,
) {
    let mut events = reply.into_sse();
    let w = ex.response();
    if respond::start_sse(w, trace, &[]).is_err() {
        out.client_closed = true;
        return;
    }
    if let Ok(shared) = w.share() {
        gw.watchdog.stream_started(shared, trace.protocol);
    }
    out.status = 200;
    let mut failure: Option<ApiError> = None;
    loop {
        let waiting = std::time::Instant::now();
        let next = events.next_event();
        trace.add_upstream_wait(waiting.elapsed());
        match next {
            Ok(Some(mut ev)) => {
                let relay = watch.observe(&ev);
                // Events are relayed as they came, but never with an upstream credential in them (upstreams
                // echo the key in error events).
                if crate::secrets::suspicious(&ev.raw) {
                    if let std::borrow::Cow::Owned(clean) =
                        crate::secrets::scrub(&String::from_utf8_lossy(&ev.raw))
                    {
                        ev.raw = clean.into_bytes();
                    }
                }
                if !watch.produced.is_empty() {
                    trace.mark_first_token();
                }
                if watch.beyond_limit() {
                    failure = Some(super::accounting::limit_exceeded(
                        &upstream.name,
                        watch.limit.unwrap_or(0),
                    ));
                    watch.done = false;
                    break;
                }
                if watch.done && trace.hold_tail {
                    // Strict ledger: the closing events wait for the record to be synced.
                    w.hold_rest();
                }
                if relay {
                    let written = if ev.terminated {
                        w.write_chunk(&ev.raw)
                    } else {
                        let mut raw = ev.raw.clone();
                        raw.extend_from_slice(if raw.ends_with(b"\n") { b"\n" } else { b"\n\n" });
                        w.write_chunk(&raw)
                    };
                    if written.is_err() {
                        out.client_closed = true;
                        out.set_usage(watch.usage());
                        return;
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                if !watch.done {
                    failure = Some(if trace.cut_by_shutdown() {
                        super::generate::shutdown_error()
                    } else {
                        uphttp::stream_read_error(&upstream.name, &e)
                    });
                }
                break;
            }
        }
    }
    out.set_usage(watch.usage());
    if let Some(e) = watch.upstream_error.take() {
        out.error = Some(e);
    }
    if !watch.done {
        let err = failure.unwrap_or_else(|| {
            ApiError::bad_gateway(format!(
                "upstream `{}` ended the stream before it was complete",
                upstream.name
            ))
        });
        log::warn!("{}: {}", trace.request_id, err.message);
        let mut buf = Vec::new();
        watch.error_event(&err, &trace.request_id, &mut buf);
        out.error = Some(err.message.clone());
        if w.write_chunk(&buf).is_err() {
            out.client_closed = true;
            return;
        }
    }
    if w.finish().is_err() {
        out.client_closed = true;
    }
}

/// Watches a relayed stream: reads usage, notices the terminal event, hides the usage chunk a Chat client
/// did not ask for, and remembers what an in-stream error event needs.
struct StreamWatch {
    protocol: Protocol,
    hide_usage: bool,
    usage: Option<Usage>,
    done: bool,
    /// The message of an error event the upstream itself sent inside the stream.
    upstream_error: Option<String>,
    last_seq: Option<u64>,
    response: Option<Value>,
    /// Text and tool arguments seen so far, for an estimate when the stream ends without usage.
    produced: String,
    /// A running estimate of the tokens in `produced` (summed per event, so cheap per event).
    produced_tokens: u64,
    input_estimate: u64,
    /// The output limit sent upstream.
    limit: Option<u64>,
}

impl StreamWatch {
    fn new(protocol: Protocol, hide_usage: bool, input_estimate: u64, limit: Option<u64>) -> Self {
        StreamWatch {
            protocol,
            hide_usage,
            usage: None,
            done: false,
            upstream_error: None,
            last_seq: None,
            response: None,
            produced: String::new(),
            produced_tokens: 0,
            input_estimate,
            limit,
        }
    }

    /// Whether the stream went past its output limit (see `accounting::beyond_limit`).
    fn beyond_limit(&self) -> bool {
        self.limit.is_some()
            && super::accounting::beyond_limit(
                self.limit,
                self.usage.map(|u| u.output_tokens),
                self.produced_tokens,
            )
    }

    /// The usage the upstream reported, or an estimate (and whether it is one).
    /// A stream that ended normally reports its usage; one cut short counts what was produced so far.
    fn usage(&self) -> (Usage, bool) {
        let produced = crate::util::estimate_tokens(&self.produced);
        match self.usage {
            Some(u) if self.done && (u.input_tokens > 0 || u.output_tokens > 0) => (u, false),
            Some(mut u) if u.input_tokens > 0 => {
                let estimated = produced > u.output_tokens;
                u.output_tokens = u.output_tokens.max(produced);
                (u, estimated)
            }
            _ => (
                Usage {
                    input_tokens: self.input_estimate,
                    output_tokens: produced,
                    ..Usage::default()
                },
                true,
            ),
        }
    }

    /// Collects the generated text of one event (cheaply: only the delta fields are read).
    fn collect(&mut self, ev: &SseEvent) {
        #[derive(serde::Deserialize)]
        struct Any<'a> {
            #[serde(borrow, default)]
            delta: Option<DeltaField<'a>>,
            #[serde(borrow, default)]
            choices: Vec<Choice<'a>>,
        }
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum DeltaField<'a> {
            Text(#[serde(borrow)] std::borrow::Cow<'a, str>),
            Block(#[serde(borrow)] Block<'a>),
        }
        #[derive(serde::Deserialize)]
        struct Block<'a> {
            #[serde(borrow, default)]
            text: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            thinking: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            partial_json: Option<std::borrow::Cow<'a, str>>,
        }
        #[derive(serde::Deserialize)]
        struct Choice<'a> {
            #[serde(borrow, default)]
            delta: Option<ChatDelta<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct ChatDelta<'a> {
            #[serde(borrow, default)]
            content: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            reasoning_content: Option<std::borrow::Cow<'a, str>>,
            #[serde(default)]
            tool_calls: Option<Value>,
        }
        let Ok(any) = serde_json::from_str::<Any>(&ev.data) else {
            return;
        };
        let before = self.produced.len();
        match any.delta {
            Some(DeltaField::Text(t)) => self.produced.push_str(&t),
            Some(DeltaField::Block(b)) => {
                for t in [b.text, b.thinking, b.partial_json].into_iter().flatten() {
                    self.produced.push_str(&t);
                }
            }
            None => {}
        }
        for c in any.choices {
            let Some(d) = c.delta else { continue };
            for t in [d.content, d.reasoning_content].into_iter().flatten() {
                self.produced.push_str(&t);
            }
            if let Some(calls) = d.tool_calls {
                for call in calls.as_array().into_iter().flatten() {
                    if let Some(a) = call.pointer("/function/arguments").and_then(Value::as_str) {
                        self.produced.push_str(a);
                    }
                }
            }
        }
        self.produced_tokens += crate::util::estimate_tokens(&self.produced[before..]);
    }

    /// Looks at one event; returns whether to pass it on.
    fn observe(&mut self, ev: &SseEvent) -> bool {
        if ev.is_comment() {
            return true;
        }
        self.collect(ev);
        match self.protocol {
            Protocol::Chat => self.observe_chat(ev),
            Protocol::Messages => {
                self.observe_messages(ev);
                true
            }
            Protocol::Responses => {
                self.observe_responses(ev);
                true
            }
        }
    }

    fn observe_chat(&mut self, ev: &SseEvent) -> bool {
        let data = ev.data.trim();
        if data.starts_with("[DONE]") {
            self.done = true;
            return true;
        }
        // Only chunks that carry usage or an error need parsing.
        if !(data.contains("\"usage\":{")
            || data.contains("\"usage\": {")
            || data.contains("\"error\""))
        {
            return true;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return true;
        };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            self.done = true;
            self.upstream_error = Some(error_message(e));
            return true;
        }
        if let Some(u) = v.get("usage").and_then(chat::usage_from) {
            self.usage = Some(u);
            let no_choices = v
                .get("choices")
                .and_then(Value::as_array)
                .is_none_or(|c| c.is_empty());
            if self.hide_usage && no_choices {
                return false;
            }
        }
        true
    }

    fn observe_messages(&mut self, ev: &SseEvent) {
        let name = ev.event.as_deref().unwrap_or("");
        match name {
            "message_start" | "message_delta" => {
                let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
                    return;
                };
                let u = if name == "message_start" {
                    v.pointer("/message/usage")
                } else {
                    v.get("usage")
                };
                let Some(new) = u.and_then(messages::usage_from) else {
                    return;
                };
                let mut merged = self.usage.unwrap_or_default();
                merged.output_tokens = new.output_tokens.max(merged.output_tokens);
                if new.input_tokens > 0 {
                    merged.input_tokens = new.input_tokens;
                    merged.cached_input_tokens = new.cached_input_tokens;
                    merged.cache_creation_input_tokens = new.cache_creation_input_tokens;
                }
                merged.reasoning_tokens = merged.reasoning_tokens.max(new.reasoning_tokens);
                self.usage = Some(merged);
            }
            "message_stop" => self.done = true,
            "error" => {
                self.done = true;
                let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
                self.upstream_error = Some(error_message(&v["error"]));
            }
            _ => {}
        }
    }

    fn observe_responses(&mut self, ev: &SseEvent) {
        if let Some(seq) = scan_u64(&ev.data, "\"sequence_number\":") {
            self.last_seq = Some(seq);
        }
        let name = ev
            .event
            .clone()
            .or_else(|| scan_str(&ev.data, "\"type\":\""))
            .unwrap_or_default();
        match name.as_str() {
            "response.created" => {
                if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                    self.response = v.get("response").cloned();
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.done = true;
                if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                    self.usage = v.pointer("/response/usage").and_then(responses::usage_from);
                    if name == "response.failed" {
                        self.upstream_error = Some(error_message(&v["response"]["error"]));
                    }
                }
            }
            "error" => {
                self.done = true;
                let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
                self.upstream_error = Some(error_message(&v));
            }
            _ => {}
        }
    }

    /// The protocol's in-stream error for a stream that broke (for Responses, continuing the upstream's
    /// numbering and followed by `response.failed` when the opening response is known).
    fn error_event(&mut self, err: &ApiError, request_id: &str, out: &mut Vec<u8>) {
        let seq = self.last_seq.map_or(0, |s| s + 1);
        out.extend_from_slice(&self.protocol.error_event(err, request_id, Some(seq)));
        if self.protocol == Protocol::Responses {
            if let Some(mut r) = self.response.take() {
                let code = err.code.clone().unwrap_or_else(|| "server_error".into());
                let message = err.openai_object(request_id)["message"].clone();
                r["status"] = json!("failed");
                r["error"] = json!({"code": code, "message": message});
                let d =
                    json!({"type": "response.failed", "sequence_number": seq + 1, "response": r});
                push_event(out, Some("response.failed"), &d.to_string());
            }
        }
    }
}

/// The `message` of an error object, or the whole value as text.
fn error_message(e: &Value) -> String {
    let m = e.get("message").and_then(Value::as_str).map(str::to_string);
    crate::secrets::scrubbed(&format!(
        "upstream error in stream: {}",
        m.unwrap_or_else(|| e.to_string())
    ))
}

/// The integer after `key` in a JSON text, found without parsing it.
fn scan_u64(data: &str, key: &str) -> Option<u64> {
    let at = data.find(key)? + key.len();
    let digits: String = data[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The string value after `key` (which ends with the opening quote), found without parsing.
fn scan_str(data: &str, key: &str) -> Option<String> {
    let at = data.find(key)? + key.len();
    let end = data[at..].find('"')?;
    Some(data[at..at + end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.into(),
            has_data: true,
            raw: Vec::new(),
            terminated: true,
        }
    }

    #[test]
    fn chat_usage_chunk_is_read_and_hidden_on_request() {
        let mut w = StreamWatch::new(Protocol::Chat, true, 0, None);
        assert!(w.observe(&ev(
            None,
            r#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#
        )));
        assert!(!w.observe(&ev(
            None,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#
        )));
        assert!(w.observe(&ev(None, "[DONE]")));
        assert!(w.done);
        assert_eq!(w.usage().0.output_tokens, 2);
    }

    #[test]
    fn messages_usage_merges_start_and_delta() {
        let mut w = StreamWatch::new(Protocol::Messages, false, 0, None);
        w.observe(&ev(Some("message_start"), r#"{"message":{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#));
        w.observe(&ev(
            Some("message_delta"),
            r#"{"usage":{"output_tokens":42}}"#,
        ));
        w.observe(&ev(Some("message_stop"), r#"{}"#));
        let u = w.usage().0;
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens),
            (15, 5, 42)
        );
        assert!(w.done);
    }

    #[test]
    fn responses_error_event_continues_the_sequence() {
        let mut w = StreamWatch::new(Protocol::Responses, false, 0, None);
        w.observe(&ev(Some("response.created"), r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}"#));
        w.observe(&ev(
            Some("response.output_text.delta"),
            r#"{"type":"response.output_text.delta","sequence_number":4,"delta":"x"}"#,
        ));
        let mut out = Vec::new();
        w.error_event(&ApiError::bad_gateway("broke"), "req_1", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"sequence_number\":5"));
        assert!(text.contains("event: response.failed"));
        assert!(text.contains("\"sequence_number\":6"));
        assert!(text.contains("\"id\":\"resp_1\""));
    }
}
