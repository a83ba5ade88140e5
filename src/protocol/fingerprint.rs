//! What makes two requests the same for the answer cache: the model that serves them and the canonical
//! request (messages, system, tools and tool choice, output format, sampling parameters, output limit, stop
//! sequences), not the client protocol and not the stream flag; plus every top-level field of the body that
//! the canonical request does not carry (`Codec::canonical_fields` names those it does), as sent, so that a
//! parameter only one protocol has (a seed, a penalty, `top_k`) still makes a different entry. Who may share
//! an entry (`scope`) is part of it too. The result is a SHA-256 digest: the same on every instance and every
//! build, so instances share entries through the store.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canon::{Message, OutputFormat, Request, Tool, ToolChoice};
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
    /// The body's fields the canonical request does not carry, by name (in name order: serde_json's maps
    /// are ordered).
    rest: Vec<(&'a str, &'a Value)>,
}

/// The fingerprint of `req` (decoded from `body`, a request of `protocol`) for `target`.
pub fn of(protocol: Protocol, body: &Value, req: &Request, target: &Target) -> Fingerprint {
    let known = protocol.canonical_fields();
    let rest = match body {
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v))
            .collect(),
        _ => Vec::new(),
    };
    let keyed = Keyed {
        v: 3,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn print(p: Protocol, body: Value) -> Fingerprint {
        let mut req = p.decode_request(&body).unwrap();
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
            let req = Protocol::Chat.decode_request(&base).unwrap();
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
}
