//! What is asked of a protocol that its [`Codec`]'s data answers (its paths, where the key goes, the output
//! limit's field, the edits that keep state out of the operator's account), or its [`ModelPaths`] where it
//! has them: the questions `server/`, the doctor and the console ask a protocol by name.

/// What is asked of a protocol that its data answers, or its [`ModelPaths`] where it has them.
use std::borrow::Cow;

use serde_json::Value;

use super::{AuthHeaders, Codec, Framing, HostedCap, IdsIn, Serves};
use crate::http::HttpRequest;
use crate::protocol::edit::{Edit, Put};
use crate::protocol::hosted::Asks;
use crate::protocol::relay::Seen;
use crate::protocol::ApiError;

impl Codec {
    /// What the vendor's SDKs append to their base URL.
    pub fn sdk_path(&self) -> &'static str {
        let p = self.path;
        if self.base_url_has_v1 {
            p.strip_prefix("/v1").unwrap_or(p)
        } else {
            p
        }
    }

    /// Which endpoint of the protocol `path` is, if any: its `path` or its `count_tokens_path`.
    pub fn serves(&self, path: &str) -> Option<Serves> {
        if let Some(m) = self.model_paths {
            return m.serves(path);
        }
        if path == self.path {
            Some(Serves::Generate)
        } else if self.count_tokens_path == Some(path) {
            Some(Serves::CountTokens)
        } else if self.embed_path == Some(path) {
            Some(Serves::Embed)
        } else if self.complete_path == Some(path) {
            Some(Serves::Complete)
        } else {
            None
        }
    }

    /// The model a request names in its path (protocols whose paths name it; None: its body's `model`).
    pub fn path_model<'p>(&self, path: &'p str) -> Option<Cow<'p, str>> {
        self.model_paths.and_then(|m| m.path_model(path))
    }

    /// Whether a request asks for a stream by its path (None: its body's `stream` says).
    pub fn path_stream(&self, path: &str) -> Option<bool> {
        self.model_paths.and_then(|m| m.path_stream(path))
    }

    /// What the SDKs append to their base URL for a request to `model`.
    pub fn sdk_request_path(&self, model: &str, stream: bool) -> Cow<'static, str> {
        match self.model_paths {
            Some(m) => m.request_path(model, stream),
            None => Cow::Borrowed(self.sdk_path()),
        }
    }

    /// A hint for a path no endpoint serves that looks like a mistake this protocol's clients make.
    pub fn path_hint(&self, path: &str) -> Option<String> {
        self.model_paths.and_then(|m| m.path_hint(path))
    }

    /// Whether an answer at `path` that nothing else decides takes this protocol's shape (errors the HTTP
    /// layer gives before routing).
    pub fn shapes_errors_at(&self, path: &str) -> bool {
        match self.model_paths {
            Some(m) => m.shapes_errors_at(path),
            None => self.paths_contain.is_some_and(|p| path.contains(p)),
        }
    }

    /// Whether a request outside the model endpoints comes from this protocol's SDK.
    pub fn recognizes(&self, req: &HttpRequest) -> bool {
        match self.model_paths {
            Some(m) => m.recognizes(req),
            None => self.sdk_header.is_some_and(|h| req.header(h).is_some()),
        }
    }

    /// How a stream to this request's client is framed.
    pub fn framing(&self, req: &HttpRequest) -> Framing {
        self.model_paths.map_or(Framing::Sse, |m| m.framing(req))
    }

    /// A request whose head the protocol refuses (a header it requires missing, a path naming what the
    /// gateway does not serve), as the client's error.
    pub fn check_headers(&self, req: &HttpRequest) -> Result<(), ApiError> {
        if let Some((name, example)) = self.required_header {
            if req.header(name).is_none() {
                return Err(ApiError::invalid_param(
                    name,
                    format!("{name}: header is required (for example `{name}: {example}`)."),
                ));
            }
        }
        match self.model_paths {
            Some(m) => m.refuse_path(&req.path),
            None => Ok(()),
        }
    }

    /// Refuses headers that would open state kept in the operator's upstream account.
    pub fn refuse_account_headers(&self, req: &HttpRequest) -> Result<(), ApiError> {
        self.account_headers.map_or(Ok(()), |refuse| refuse(req))
    }

    /// Puts a client's body in the one form every rule and the decoder read (see `read_as_one`, the
    /// field).
    pub fn read_as_one(&self, body: &mut Value, counts: bool) -> Result<(), ApiError> {
        self.read_as_one.map_or(Ok(()), |read| read(body, counts))
    }

    /// Whether a client's stream is to carry a usage report.
    pub fn wants_stream_usage(&self, body: &Value) -> bool {
        self.usage_asked_at.is_none_or(|at| {
            crate::protocol::fields::At::at(body, at).and_then(Value::as_bool) == Some(true)
        })
    }

    /// The number the first of these held stream bytes carries, where events are numbered.
    pub fn next_sequence(&self, held: &[u8]) -> Option<u64> {
        self.numbered.and_then(|n| n(held))
    }

    /// What follows the in-stream error of a relayed stream that broke (numbered `seq`), if anything.
    pub fn failed_tail(
        &self,
        err: &ApiError,
        request_id: &str,
        seq: u64,
        seen: &mut Seen,
    ) -> Vec<u8> {
        self.failed_tail
            .map_or_else(Vec::new, |tail| tail(err, request_id, seq, seen))
    }

    /// The key a request presents, in the headers this protocol's clients send it in.
    pub fn presented_key<'r>(&self, req: &'r HttpRequest) -> Result<&'r str, ApiError> {
        crate::protocol::auth::presented_key_in(req, self.key.header, self.key.query, self.key.how)
    }

    /// A fresh id for an answer.
    pub fn new_response_id(&self) -> String {
        crate::util::new_id(self.response_id_prefix)
    }

    /// The paid hosted tools and service tiers a request asks for.
    pub fn hosted_asks(&self, body: &Value) -> Result<Asks, ApiError> {
        crate::protocol::hosted::asks(body, self.hosted)
    }

    /// The edit that writes the use limit `cap` where the client gave none (`tools`: the positions of the
    /// tools it limits).
    pub fn hosted_cap<'a>(&self, cap: u64, tools: &'a [usize]) -> Option<(&'static str, Edit<'a>)> {
        match self.hosted_cap.as_ref()? {
            HostedCap::Shared(field) => Some((field, Edit::Fill(Put::Num(cap)))),
            HostedCap::EachTool(list, field) => {
                Some((list, Edit::FillIn(tools, field, Put::Num(cap))))
            }
        }
    }

    /// The one field an upstream of this protocol is sent the limit in.
    pub fn upstream_limit_field(&self, max_completion_tokens: bool) -> &'static str {
        if max_completion_tokens {
            self.limit.upstream.0
        } else {
            self.limit.upstream.1
        }
    }

    /// A header of the client's request passed on to an upstream of the same protocol: every value of it,
    /// joined.
    pub fn passed_on(&self, req: &HttpRequest) -> Option<(&'static str, String)> {
        let name = self.passed_on?;
        let mut all = req.header_all(name).peekable();
        all.peek()?;
        Some((name, all.collect::<Vec<_>>().join(",")))
    }

    /// The generation endpoint (and query) under an upstream's base URL for a request to `model`, streamed
    /// or not.
    pub fn upstream_endpoint(&self, model: &str, stream: bool) -> Cow<'static, str> {
        match self.model_paths {
            Some(m) => m.request_path(model, stream),
            None => Cow::Borrowed(self.upstream_path),
        }
    }

    /// The headers that carry an upstream's credential (and the version it speaks).
    pub fn credentials<'k>(&self, key: Option<&'k str>) -> AuthHeaders<'k> {
        let key = key.map(|k| match self.credential.header {
            Some(h) => (h, Cow::Borrowed(k)),
            None => crate::protocol::auth::bearer(k),
        });
        let version = self.credential.version.map(|(h, v)| (h, Cow::Borrowed(v)));
        match version {
            Some(v) => [Some(v), key, None],
            None => [key, None, None],
        }
    }

    /// The model ids of an upstream's model list.
    pub fn model_ids(&self, list: &Value) -> Option<Vec<String>> {
        let IdsIn {
            array,
            field,
            prefix,
        } = self.ids_in;
        let items = list.get(array)?.as_array()?;
        Some(
            items
                .iter()
                .filter_map(|m| m.get(field).and_then(Value::as_str))
                .map(|n| n.strip_prefix(prefix).unwrap_or(n).to_string())
                .collect(),
        )
    }

    /// The token counting endpoint under an upstream's base URL for `model`, if it has one.
    pub fn upstream_count_endpoint(&self, model: &str) -> Option<Cow<'static, str>> {
        let path = self.upstream_count_path?;
        Some(match self.model_paths {
            Some(m) => m.count_path(model),
            None => Cow::Borrowed(path),
        })
    }
}
