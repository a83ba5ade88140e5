//! What the gateway reads and changes in a client request before (or instead of) decoding it: which endpoint
//! a path is, the envelope every request needs (`model`, `stream`), and the edits a body going to an upstream
//! of its own protocol gets (the model renamed, the one output limit written, other protocols' fields left
//! out, stream usage switched on, nothing stored, the use limit of paid tools), asked of the protocol's
//! codec and applied as the body is serialized (`edit.rs`). `server/` asks these; it names no wire field
//! itself.

use std::borrow::Cow;

use serde_json::Value;

use super::codec::Serves;
use super::completion::CompletionAsk;
use super::edit::{Edit, Edits, Put};
use super::{fields, limits, ApiError, Protocol, ALL};

/// The endpoints a client may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// Generation: each protocol's own path.
    Generate(Protocol),
    /// A protocol's token counting (`/v1/messages/count_tokens`).
    CountTokens(Protocol),
    /// Embeddings (`/v1/embeddings`; Gemini's `:embedContent` and `:batchEmbedContents`).
    Embed(Protocol),
    /// Legacy text completions (`/v1/completions`).
    Complete(Protocol),
}

impl Endpoint {
    /// The endpoint at `path`, if it is one (each protocol says which of its paths it is).
    pub(crate) fn from_path(path: &str) -> Option<Endpoint> {
        ALL.iter().find_map(|&p| match p.serves(path)? {
            Serves::Generate => Some(Endpoint::Generate(p)),
            Serves::CountTokens => Some(Endpoint::CountTokens(p)),
            Serves::Embed => Some(Endpoint::Embed(p)),
            Serves::Complete => Some(Endpoint::Complete(p)),
        })
    }

    /// The protocol whose shapes (errors, headers) its answers take.
    pub(crate) fn protocol(self) -> Protocol {
        match self {
            Endpoint::Generate(p)
            | Endpoint::CountTokens(p)
            | Endpoint::Embed(p)
            | Endpoint::Complete(p) => p,
        }
    }

    /// Token counting (metered, never billed).
    pub(crate) fn counts_tokens(self) -> bool {
        matches!(self, Endpoint::CountTokens(_))
    }

    /// Generation: the one endpoint whose answers are text, streamed or not.
    pub(crate) fn generates(self) -> bool {
        matches!(self, Endpoint::Generate(_))
    }

    /// Embeddings.
    pub(crate) fn embeds(self) -> bool {
        matches!(self, Endpoint::Embed(_))
    }

    /// Legacy text completions.
    pub(crate) fn completes(self) -> bool {
        matches!(self, Endpoint::Complete(_))
    }

    /// The endpoint's name in usage records and metrics, besides generation's (which records name none).
    pub(crate) fn recorded_as(self) -> Option<&'static str> {
        match self {
            Endpoint::Generate(_) => None,
            Endpoint::CountTokens(_) => Some("count_tokens"),
            Endpoint::Embed(_) => Some("embeddings"),
            Endpoint::Complete(_) => Some("completions"),
        }
    }
}

impl Protocol {
    /// Checks the fields every request of the protocol at `path` needs, without decoding the whole body: a
    /// model (in the body, unless the path names it) and, for generation, `stream` (unless the path says);
    /// returns whether it asks for a stream.
    pub fn validate_envelope(
        self,
        path: &str,
        body: &Value,
        generation: bool,
    ) -> Result<bool, ApiError> {
        let o = fields::object(body, "body")?;
        if self.path_model(path).is_none() {
            fields::req_str(o, "model", "")?;
        }
        if !generation {
            return Ok(false);
        }
        let stream = match self.path_stream(path) {
            Some(s) => s,
            None => fields::stream_flag(o)?,
        };
        self.request.validate(body)?;
        Ok(stream)
    }

    /// The model a request to `path` names: in the path, for protocols whose paths name it, else the body's
    /// `model` (empty when it names none; validation refuses that first).
    pub fn requested_model<'a>(self, path: &'a str, body: &'a Value) -> Cow<'a, str> {
        if let Some(m) = self.path_model(path) {
            return m;
        }
        Cow::Borrowed(
            body.get("model")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
    }

    /// The edits a client's body of this protocol gets on its way to an upstream of the same protocol.
    pub fn upstream_edits<'a>(self, f: &Forward<'a>) -> Edits<'a> {
        if f.completion {
            return self.completion_edits(f);
        }
        let mut e = Edits::default();
        if self.model_in_body {
            e.put("model", Edit::Set(Put::Str(f.model)));
        }
        if !f.generation {
            if let Some((field, edit)) = self.counting.and_then(|c| c.count_model_edit(f.model)) {
                e.put(field, edit);
            }
            return e;
        }
        // One output limit, in the one field the upstream reads; other protocols' fields never go.
        let own = self.limit.fields;
        let nested = self.limit.parent;
        for field in limits::all_fields() {
            if nested.is_some() || f.limit.is_some() || !own.contains(&field) {
                e.put(field, Edit::Remove);
            }
        }
        if let Some(limit) = f.limit {
            let field = self.upstream_limit_field(f.max_completion_tokens);
            let edit = match nested {
                Some(parent) => (parent, Edit::SetIn(field, Put::Num(limit))),
                None => (field, Edit::Set(Put::Num(limit))),
            };
            e.put(edit.0, edit.1);
        }
        for field in limits::all_choice_fields() {
            if self.limit.choices != Some(field) {
                e.put(field, Edit::Remove);
            }
        }
        let store = f.store_nothing.then(|| self.store_nothing).flatten();
        let inline = (f.store_nothing && f.reasoning)
            .then(|| self.reasoning_inline)
            .flatten();
        let usage = f.stream.then(|| self.stream_usage_on).flatten();
        let cap = f
            .hosted_cap
            .and_then(|(cap, tools)| self.hosted_cap(cap, tools));
        for (field, edit) in [store, inline, usage, cap].into_iter().flatten() {
            e.put(field, edit);
        }
        e
    }
}

/// What a body going to an upstream of its own protocol carries besides what the client sent.
#[derive(Debug, Clone, Copy)]
pub struct Forward<'a> {
    /// The model name the upstream knows.
    pub model: &'a str,
    /// Generation (the output limit, choices, storage and hosted limits are the gateway's to set); token
    /// counting only renames the model.
    pub generation: bool,
    /// The one output limit (per choice) to send, if any.
    pub limit: Option<u64>,
    /// The upstream takes the limit as OpenAI's `max_completion_tokens`.
    pub max_completion_tokens: bool,
    /// A stream: its usage report is switched on (the gateway bills from it).
    pub stream: bool,
    /// A legacy text completion: the model renamed, the limit in its own field, a stream's usage on; nothing
    /// else.
    pub completion: bool,
    /// Nothing may be stored in the operator's account.
    pub store_nothing: bool,
    /// The model reasons (its `reasoning` setting): with nothing stored, its reasoning is asked for whole.
    pub reasoning: bool,
    /// The use limit of paid hosted tools, and the positions of the tools it is written into.
    pub hosted_cap: Option<(u64, &'a [usize])>,
}

impl Protocol {
    /// Checks a legacy text completions request at `path`: its model, then what [`Completions::read`]
    /// reads.
    ///
    /// [`Completions::read`]: super::completion::Completions
    pub fn validate_completion(self, path: &str, body: &Value) -> Result<CompletionAsk, ApiError> {
        self.validate_envelope(path, body, false)?;
        let Some(c) = self.completions else {
            return Err(ApiError::not_found(
                "This protocol has no text completions endpoint.",
            ));
        };
        (c.read)(body)
    }

    /// The edits of a legacy text completion (see [`Forward::completion`]).
    fn completion_edits<'a>(self, f: &Forward<'a>) -> Edits<'a> {
        let mut e = Edits::default();
        e.put("model", Edit::Set(Put::Str(f.model)));
        if let (Some(limit), Some(c)) = (f.limit, self.completions) {
            e.put(c.limit_field, Edit::Set(Put::Num(limit)));
        }
        if let Some((field, edit)) = f.stream.then_some(self.stream_usage_on).flatten() {
            e.put(field, edit);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn forward(model: &str) -> Forward<'_> {
        Forward {
            model,
            generation: true,
            limit: None,
            max_completion_tokens: false,
            stream: false,
            completion: false,
            store_nothing: false,
            reasoning: false,
            hosted_cap: None,
        }
    }

    fn sent(p: Protocol, body: Value, f: &Forward) -> Value {
        serde_json::from_slice(&p.upstream_edits(f).apply(&body).unwrap()).unwrap()
    }

    #[test]
    fn endpoints_and_error_shapes_by_path() {
        assert_eq!(
            Endpoint::from_path("/v1/messages/count_tokens"),
            Some(Endpoint::CountTokens(Protocol::Messages))
        );
        assert_eq!(
            Endpoint::from_path("/v1/responses"),
            Some(Endpoint::Generate(Protocol::Responses))
        );
        assert_eq!(Endpoint::from_path("/v1/other"), None);
        assert_eq!(
            Protocol::for_errors_at(Some("/v1/messages/count_tokens")),
            Protocol::Messages
        );
        assert_eq!(Protocol::for_errors_at(None), Protocol::Chat);
    }

    #[test]
    fn passthrough_edits() {
        let body = json!({"model": "public", "stream": true, "messages": []});
        assert!(!Protocol::Chat.wants_stream_usage(&body));
        let f = Forward {
            stream: true,
            ..forward("private")
        };
        let out = sent(Protocol::Chat, body, &f);
        assert_eq!(out["model"], "private");
        assert_eq!(out["stream_options"]["include_usage"], true);
        let asked = json!({"model": "m", "stream_options": {"include_usage": true}});
        assert!(Protocol::Chat.wants_stream_usage(&asked));
        let m = json!({"model": "m"});
        assert!(Protocol::Messages.wants_stream_usage(&m));
        let out = sent(
            Protocol::Messages,
            m,
            &Forward {
                stream: true,
                ..forward("x")
            },
        );
        assert!(out.get("stream_options").is_none());
    }

    #[test]
    fn decoy_fields_of_other_protocols_never_go_upstream() {
        let b =
            json!({"max_tokens": 8192, "max_completion_tokens": 0, "max_output_tokens": 1, "n": 3});
        assert_eq!(
            sent(Protocol::Messages, b, &forward("m")),
            json!({"model": "m", "max_tokens": 8192})
        );
        let b = json!({"max_tokens": 0, "max_output_tokens": 8192});
        assert_eq!(
            sent(Protocol::Responses, b, &forward("m")),
            json!({"model": "m", "max_output_tokens": 8192})
        );
    }

    #[test]
    fn the_one_limit_goes_in_the_field_the_upstream_reads() {
        let with = |limit, mct| Forward {
            limit: Some(limit),
            max_completion_tokens: mct,
            ..forward("m")
        };
        let b = json!({"max_tokens": 100});
        assert_eq!(
            sent(Protocol::Chat, b, &with(50, true)),
            json!({"model": "m", "max_completion_tokens": 50})
        );
        let b = json!({"max_completion_tokens": 10, "max_tokens": 10});
        assert_eq!(
            sent(Protocol::Chat, b, &with(10, false)),
            json!({"model": "m", "max_tokens": 10})
        );
        assert_eq!(
            sent(Protocol::Responses, json!({}), &with(7, false)),
            json!({"model": "m", "max_output_tokens": 7})
        );
        // Chat keeps its `n`; token counting only renames the model.
        let b = json!({"n": 2, "max_output_tokens": 3});
        assert_eq!(
            sent(Protocol::Chat, b.clone(), &forward("m")),
            json!({"model": "m", "n": 2})
        );
        let count = Forward {
            generation: false,
            ..forward("m")
        };
        assert_eq!(
            sent(Protocol::Messages, b, &count),
            json!({"model": "m", "n": 2, "max_output_tokens": 3})
        );
    }

    #[test]
    fn hosted_use_limits_are_written_where_the_client_gave_none() {
        let capped = |cap, tools| Forward {
            hosted_cap: Some((cap, tools)),
            ..forward("m")
        };
        let b = json!({"tools": [{"type": "web_search"}]});
        assert_eq!(
            sent(Protocol::Responses, b, &capped(5, &[]))["max_tool_calls"],
            5
        );
        let b = json!({"max_tool_calls": 2});
        assert_eq!(
            sent(Protocol::Responses, b, &capped(5, &[]))["max_tool_calls"],
            2
        );
        let b = json!({"tools": [{"type": "web_search_20250305"}, {"type": "web_fetch_20250910", "max_uses": 3}, {"name": "f"}]});
        let tools = Protocol::Messages.hosted_asks(&b).unwrap().capped;
        let out = sent(Protocol::Messages, b, &capped(5, &tools));
        assert_eq!(out["tools"][0]["max_uses"], 5);
        assert_eq!(out["tools"][1]["max_uses"], 3);
        assert!(out["tools"][2].get("max_uses").is_none());
    }

    /// With nothing stored, a reasoning model's answer must carry its reasoning whole: a client sends it
    /// back on the next turn, and an id alone names nothing. Models without reasoning refuse the `include`
    /// ("Encrypted content is not supported with this model"), so it goes only to a model set to reason.
    #[test]
    fn a_reasoning_model_with_nothing_stored_is_asked_for_its_reasoning_whole() {
        let f = |store_nothing, reasoning| Forward {
            store_nothing,
            reasoning,
            ..forward("m")
        };
        let b = json!({"include": ["file_search_call.results"], "store": true});
        assert_eq!(
            sent(Protocol::Responses, b.clone(), &f(true, true)),
            json!({"model": "m", "store": false,
                   "include": ["file_search_call.results", "reasoning.encrypted_content"]})
        );
        assert_eq!(
            sent(Protocol::Responses, b.clone(), &f(true, false))["include"],
            json!(["file_search_call.results"])
        );
        assert_eq!(
            sent(Protocol::Responses, b, &f(false, true))["include"],
            json!(["file_search_call.results"])
        );
        let chat = sent(Protocol::Chat, json!({"messages": []}), &f(true, true));
        assert!(chat.get("include").is_none(), "{chat}");
    }
}
