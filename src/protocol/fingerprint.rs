//! What makes two requests the same for the answer cache: the model that serves them and the canonical
//! request (messages, system, tools and tool choice, output format, sampling parameters, output limit, stop
//! sequences), not the client protocol and not the stream flag; plus every top-level field of the body whose
//! value the canonical request does not carry whole (`Codec::carried` names the shapes it carries,
//! `carried.rs`), as sent, so that a parameter only one protocol has (a seed, a penalty, `top_k`) or a part
//! its decoder leaves out (a message's `name`, redacted thinking) still makes a different entry. Who may
//! share an entry (`scope`) and the header passed upstream with the body (`anthropic-beta`) are part of it
//! too. An embeddings request is keyed by its inputs and what shapes its vectors ([`of_embed`]). The result is a
//! SHA-256 digest: the same on every instance and every
//! build, so instances share entries through the store.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canon::{Message, OutputFormat, Request, Tool, ToolChoice};
use super::embed::{EmbedInput, EmbedRequest};
use super::Protocol;

/// A request's identity in the answer cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Lower-case hex (the store's key names).
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 15)]));
        }
        s
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Where the request goes and who shares its entry.
pub struct Target<'a> {
    /// The model entry that serves it.
    pub model: &'a str,
    /// The model name sent upstream (one entry may serve several by a pattern).
    pub upstream_model: &'a str,
    /// Who shares the entry: `key:NAME`, `group:NAME` or `all`.
    pub scope: &'a str,
    /// The output limit the request goes upstream with: the client's, or the one a key with a spending limit
    /// is held to where the client gave none (None: no limit). An answer made under another limit is another
    /// entry, so no key is served a longer answer than its own request could have had.
    pub limit: Option<u64>,
    /// The header the protocol passes on upstream (`anthropic-beta`), its values sorted ("" none): a beta can
    /// change the answer.
    pub passed_on: &'a str,
}

/// What of the canonical request the key holds (its `model`, `stream` and `user` are not).
#[derive(Serialize)]
struct Keyed<'a> {
    v: u8,
    target: (&'a str, &'a str, &'a str, &'a str),
    system: &'a [String],
    messages: &'a [Message],
    tools: &'a [Tool],
    namespaced_tools: &'a [(String, String, String)],
    tool_choice: &'a Option<ToolChoice>,
    parallel_tool_calls: Option<bool>,
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stop: &'a [String],
    output_format: &'a Option<OutputFormat>,
    reasoning_effort: &'a Option<String>,
    /// The body's fields the canonical request does not carry whole, by name (in name order: serde_json's
    /// maps are ordered).
    rest: Vec<(&'a str, &'a Value)>,
}

/// The fingerprint of `req` (decoded from `body`, a request of `protocol`) for `target`.
pub fn of(protocol: Protocol, body: &Value, req: &Request, target: &Target) -> Fingerprint {
    let rest = super::carried::uncarried(protocol.carried, body);
    let keyed = Keyed {
        v: 4,
        target: (
            target.model,
            target.upstream_model,
            target.scope,
            target.passed_on,
        ),
        system: &req.system,
        messages: &req.messages,
        tools: &req.tools,
        namespaced_tools: &req.namespaced_tools,
        tool_choice: &req.tool_choice,
        parallel_tool_calls: req.parallel_tool_calls,
        max_tokens: target.limit,
        temperature: req.temperature,
        top_p: req.top_p,
        stop: &req.stop,
        output_format: &req.output_format,
        reasoning_effort: &req.reasoning_effort,
        rest,
    };
    // Written whole, then hashed in one call (the serializer's many small writes would each be a call into
    // the hash). Serializing canonical types and JSON values into memory cannot fail.
    let mut buf = Vec::with_capacity(512);
    let _ = serde_json::to_writer(&mut buf, &keyed);
    Fingerprint(Sha256::digest(&buf).into())
}

/// What of an embeddings request the key holds: the inputs and what shapes the vectors (size, task,
/// titles); not the client protocol, the encoding (`base64` is applied when the vectors are written) or the
/// end user.
#[derive(Serialize)]
struct KeyedEmbed<'a> {
    v: u8,
    endpoint: &'static str,
    target: (&'a str, &'a str, &'a str),
    inputs: &'a [EmbedInput],
    dimensions: Option<u64>,
    task_type: &'a Option<String>,
    titles: &'a [Option<String>],
}

/// The fingerprint of an embeddings request for `target` (its output limit and passed-on header play no
/// part: embeddings have neither).
pub fn of_embed(req: &EmbedRequest, target: &Target) -> Fingerprint {
    let keyed = KeyedEmbed {
        v: 1,
        endpoint: "embeddings",
        target: (target.model, target.upstream_model, target.scope),
        inputs: &req.inputs,
        dimensions: req.dimensions,
        task_type: &req.task_type,
        titles: &req.titles,
    };
    let mut buf = Vec::with_capacity(256);
    let _ = serde_json::to_writer(&mut buf, &keyed);
    Fingerprint(Sha256::digest(&buf).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn print(p: Protocol, body: Value) -> Fingerprint {
        let mut req = p.request.decode_request(&body).unwrap();
        req.max_tokens = crate::protocol::limits::read(p, &body).unwrap();
        let target = Target {
            model: "m",
            upstream_model: "up",
            scope: "all",
            limit: req.max_tokens,
            passed_on: "",
        };
        of(p, &body, &req, &target)
    }

    /// The same question in any protocol, streamed or not, is one entry.
    #[test]
    fn the_protocol_and_the_stream_flag_make_no_difference() {
        let chat = print(
            Protocol::Chat,
            json!({"model": "a", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
        );
        let streamed = print(
            Protocol::Chat,
            json!({"model": "a", "max_tokens": 50, "stream": true, "stream_options": {"include_usage": true},
                   "messages": [{"role": "user", "content": "hi"}]}),
        );
        let messages = print(
            Protocol::Messages,
            json!({"model": "b", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
        );
        let responses = print(
            Protocol::Responses,
            json!({"model": "c", "max_output_tokens": 50, "input": "hi"}),
        );
        assert_eq!(chat, streamed);
        assert_eq!(chat, messages);
        assert_eq!(chat, responses);
        assert_eq!(chat.hex().len(), 64);
    }

    /// A parameter that can change the answer makes another entry: canonical or not.
    #[test]
    fn parameters_that_change_the_answer_make_another_entry() {
        let base = json!({"model": "a", "max_tokens": 50, "temperature": 0.2,
                          "messages": [{"role": "user", "content": "hi"}]});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            print(Protocol::Chat, b)
        };
        let first = print(Protocol::Chat, base.clone());
        assert_ne!(first, with("temperature", json!(0.3)));
        assert_ne!(first, with("max_tokens", json!(51)));
        assert_ne!(first, with("stop", json!(["x"])));
        assert_ne!(first, with("seed", json!(7)));
        assert_ne!(
            first,
            with("messages", json!([{"role": "user", "content": "hi!"}]))
        );
        assert_eq!(first, with("user", json!("someone")));
        let scoped = {
            let req = Protocol::Chat.request.decode_request(&base).unwrap();
            let t = Target {
                model: "m",
                upstream_model: "up",
                scope: "key:k1",
                limit: req.max_tokens,
                passed_on: "",
            };
            of(Protocol::Chat, &base, &req, &t)
        };
        assert_ne!(scoped, first);
    }

    /// A Responses request forcing a custom tool or a hosted one, or offering some tools only, asks for
    /// another answer than one that leaves the choice to the model.
    #[test]
    fn every_tool_choice_is_its_own_entry() {
        let with = |choice: Value| {
            print(
                Protocol::Responses,
                json!({"model": "a", "input": "patch it", "tool_choice": choice,
                       "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "function", "name": "f"}]}),
            )
        };
        let auto = with(json!("auto"));
        let custom = with(json!({"type": "custom", "name": "apply_patch"}));
        let hosted = with(json!({"type": "image_generation"}));
        let allowed = with(
            json!({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}),
        );
        for other in [custom, hosted, allowed] {
            assert_ne!(auto, other);
        }
        assert_ne!(custom, with(json!({"type": "function", "name": "f"})));
    }

    /// Requests of each protocol that hold every member the protocol's carried shapes let through
    /// (checked by `the_samples_hold_every_carried_member`).
    fn samples() -> Vec<(Protocol, Value)> {
        vec![
            (
                Protocol::Chat,
                json!({
                    "model": "a", "max_tokens": 50, "temperature": 0.5, "top_p": 0.9, "stop": ["END"],
                    "reasoning_effort": "low", "parallel_tool_calls": true, "n": 1,
                    "stream": true, "stream_options": {"include_usage": true}, "user": "u", "store": true,
                    "metadata": {"k": "v"}, "safety_identifier": "s", "prompt_cache_key": "p",
                    "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
                        "description": "the answer",
                        "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                    "messages": [
                        {"role": "system", "content": "be brief"},
                        {"role": "user", "content": [{"type": "text", "text": "look"},
                            {"type": "image_url", "image_url": {"url": "https://img.example/a.png"}}]},
                        {"role": "assistant", "content": "calling", "reasoning_content": "think",
                         "tool_calls": [{"id": "call_1", "type": "function",
                                         "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
                        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "42"}]},
                        {"role": "user", "content": "and?"}
                    ],
                    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "strict": false,
                               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
                    "tool_choice": {"type": "function", "function": {"name": "f"}}
                }),
            ),
            (
                Protocol::Chat,
                json!({
                    "model": "a", "max_completion_tokens": 50, "response_format": {"type": "json_object"},
                    "messages": [{"role": "developer", "content": [{"type": "text", "text": "json"}]},
                                 {"role": "user", "content": "hi"}]
                }),
            ),
            (
                Protocol::Responses,
                json!({
                    "model": "a", "max_output_tokens": 50, "temperature": 0.5, "top_p": 0.9,
                    "instructions": "be brief", "parallel_tool_calls": false, "tool_choice": "required",
                    "stream": true, "stream_options": {"include_obfuscation": false}, "user": "u", "store": false,
                    "metadata": {"k": "v"}, "safety_identifier": "s", "prompt_cache_key": "p",
                    "input": [
                        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
                        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look"},
                            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
                        {"role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
                        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
                        {"role": "user", "content": "and?"}
                    ],
                    "tools": [{"type": "function", "name": "f", "description": "d", "strict": true,
                               "parameters": {"type": "object"}},
                              {"type": "custom", "name": "apply_patch", "description": "patch"}]
                }),
            ),
            (
                Protocol::Responses,
                json!({
                    "model": "a", "input": "hi", "tool_choice": {"type": "function", "name": "f"},
                    "tools": [{"type": "function", "name": "f"}]
                }),
            ),
            (
                Protocol::Messages,
                json!({
                    "model": "a", "max_tokens": 50, "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["END"],
                    "stream": true, "metadata": {"user_id": "u"},
                    "system": [{"type": "text", "text": "be brief"}],
                    "messages": [
                        {"role": "user", "content": [{"type": "text", "text": "look"},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                            {"type": "image", "source": {"type": "url", "url": "https://img.example/a.png"}}]},
                        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "sig"},
                            {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                            "content": [{"type": "text", "text": "42"}]}]}
                    ],
                    "tools": [{"type": "custom", "name": "f", "description": "d", "input_schema": {"type": "object"}}],
                    "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true}
                }),
            ),
            (
                Protocol::Messages,
                json!({
                    "model": "a", "max_tokens": 50, "system": "s",
                    "messages": [{"role": "user", "content": "hi"}],
                    "tool_choice": {"type": "any", "disable_parallel_tool_use": false}
                }),
            ),
        ]
    }

    /// The samples hold every member each protocol's carried shapes let through, so the changes below
    /// try every one of them.
    #[test]
    fn the_samples_hold_every_carried_member() {
        use crate::protocol::carried;
        for p in crate::protocol::ALL {
            let mut seen = Vec::new();
            for (_, body) in samples().iter().filter(|(q, _)| q == p) {
                carried::seen(p.carried, body, &mut seen);
            }
            for (member, name) in carried::members(p.carried) {
                assert!(seen.contains(&member), "{p:?}: no sample holds `{name}`");
            }
        }
    }

    /// Every way of changing one thing in `v`, with the path it changed: each scalar changed, each object
    /// given another member, each array given one more element.
    fn changes(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
        let changed = match v {
            Value::String(s) => Some(json!(format!("{s}x"))),
            Value::Number(n) => Some(match n.as_u64() {
                Some(u) => json!(u + 1),
                None => json!(n.as_f64().unwrap_or(0.0) + 0.25),
            }),
            Value::Bool(b) => Some(json!(!b)),
            Value::Null => None,
            Value::Array(a) => {
                let mut longer = a.clone();
                longer.extend(a.last().cloned());
                Some(Value::Array(longer))
            }
            Value::Object(o) => {
                let mut wider = o.clone();
                wider.insert("extra".into(), json!("x"));
                Some(Value::Object(wider))
            }
        };
        out.extend(changed.map(|c| (path.clone(), c)));
        match v {
            Value::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    let mut inner = Vec::new();
                    changes(e, format!("{path}/{i}"), &mut inner);
                    for (p, c) in inner {
                        let mut whole = a.clone();
                        whole[i] = c;
                        out.push((p, Value::Array(whole)));
                    }
                }
            }
            Value::Object(o) => {
                for (k, e) in o {
                    let mut inner = Vec::new();
                    changes(e, format!("{path}/{k}"), &mut inner);
                    for (p, c) in inner {
                        let mut whole = o.clone();
                        whole.insert(k.clone(), c);
                        out.push((p, Value::Object(whole)));
                    }
                }
            }
            _ => {}
        }
    }

    /// No byte that reaches the upstream is outside the key: whatever one thing of a request changes (a
    /// word, a number, a flag, a member added anywhere, an element more), the changed request is another
    /// entry, or is refused. Only the fields that frame the answer (the model's name, the stream flag and
    /// its options, metadata) change nothing.
    #[test]
    fn any_change_a_decoder_lets_through_is_another_entry() {
        for (p, body) in samples() {
            let first = print(p, body.clone());
            let mut all = Vec::new();
            changes(&body, String::new(), &mut all);
            assert!(all.len() > 5, "{p:?}: {} changes", all.len());
            for (path, changed) in all {
                if p.request.decode_request(&changed).is_err() {
                    continue;
                }
                let top = path.split('/').nth(1).unwrap_or("");
                let framing = p.carried.iter().any(|(name, shape)| {
                    *name == top && matches!(shape, crate::protocol::carried::Shape::Frame)
                });
                let other = print(p, changed);
                if framing {
                    assert_eq!(first, other, "{p:?}: {path} frames the answer only");
                } else {
                    assert_ne!(first, other, "{p:?}: a change at {path} shares the entry");
                }
            }
        }
    }

    /// What the third review found the decoders leave out (each sent upstream by passthrough) makes
    /// another entry, and the same request without it still shares one across protocols.
    #[test]
    fn what_a_decoder_leaves_out_is_keyed_as_sent() {
        let chat = |m: Value| {
            print(
                Protocol::Chat,
                json!({"model": "a", "max_tokens": 50, "messages": [m]}),
            )
        };
        let plain = chat(json!({"role": "user", "content": "hi"}));
        assert_ne!(
            plain,
            chat(json!({"role": "user", "content": "hi", "name": "alice"}))
        );
        let image = |detail: Option<&str>| {
            let mut url = json!({"url": "https://img.example/a.png"});
            if let Some(d) = detail {
                url["detail"] = json!(d);
            }
            chat(json!({"role": "user", "content": [{"type": "image_url", "image_url": url}]}))
        };
        assert_ne!(image(None), image(Some("high")));

        let responses = |input: Value, tools: Value| {
            print(
                Protocol::Responses,
                json!({"model": "a", "input": input, "tools": tools}),
            )
        };
        let dev = |parts: Value| {
            responses(
                json!([{"role": "developer", "content": parts}, {"role": "user", "content": "hi"}]),
                json!([]),
            )
        };
        assert_ne!(
            dev(json!([{"type": "input_text", "text": "d"}])),
            dev(json!([{"type": "input_text", "text": "d"},
                       {"type": "input_image", "image_url": "https://img.example/evil.png"}]))
        );
        let reasoning = |extra: Value| {
            let mut item = json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]});
            if let Value::Object(e) = extra {
                item.as_object_mut().unwrap().extend(e);
            }
            responses(
                json!([{"role": "user", "content": "hi"}, item, {"role": "user", "content": "go"}]),
                json!([]),
            )
        };
        assert_ne!(
            reasoning(json!({})),
            reasoning(json!({"encrypted_content": "gAAAA"}))
        );
        let custom = |tool: Value| responses(json!("hi"), json!([tool]));
        assert_ne!(
            custom(json!({"type": "custom", "name": "patch"})),
            custom(json!({"type": "custom", "name": "patch",
                          "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"x\""}}))
        );

        let messages = |content: Value, tools: Value| {
            print(
                Protocol::Messages,
                json!({"model": "a", "max_tokens": 50, "tools": tools,
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content},
                             {"role": "user", "content": "go"}]}),
            )
        };
        let text = json!([{"type": "text", "text": "ok"}]);
        assert_ne!(
            messages(text.clone(), json!([])),
            messages(
                json!([{"type": "redacted_thinking", "data": "EqQB"}, {"type": "text", "text": "ok"}]),
                json!([])
            )
        );
        let tool = json!({"name": "f", "input_schema": {"type": "object"}});
        let mut deferred = tool.clone();
        deferred["defer_loading"] = json!(true);
        assert_ne!(
            messages(text.clone(), json!([tool])),
            messages(text.clone(), json!([tool, deferred]))
        );

        // The same plain question still shares an entry across protocols.
        let msgs = print(
            Protocol::Messages,
            json!({"model": "b", "max_tokens": 50,
            "system": "s", "messages": [{"role": "user", "content": "hi"}]}),
        );
        let chat_same = print(
            Protocol::Chat,
            json!({"model": "a", "max_tokens": 50,
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]}),
        );
        assert_eq!(msgs, chat_same);
    }
}
