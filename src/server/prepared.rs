//! The first stage of every request to a model (generation and token counting alike): authenticate, read
//! and validate the body, find the model and check that the key's group may use it. What passes is a
//! [`Prepared`] request; what does not, a [`Refused`] one. Either says who asked for what (`outcome::Asked`).

use std::sync::Arc;

use serde_json::Value;

use super::hosted;
use super::outcome::Asked;
use crate::access::{self, Identity};
use crate::budget::Budget;
use crate::config::{Config, Model, Upstream};
use crate::gateway::Gateway;
use crate::http::Exchange;
use crate::protocol::canon;
use crate::protocol::embed::EmbedRequest;
use crate::protocol::request::{Endpoint, Forward};
use crate::protocol::{account, estimate, limits, ApiError};

/// A request that passed authentication and validation, and the model it names.
pub(super) struct Prepared<'a> {
    /// The configuration the request started with (it keeps it to its end).
    pub config: &'a Config,
    pub endpoint: Endpoint,
    pub identity: Arc<Identity>,
    /// The client's body as it came (never changed: what goes upstream is built from it per attempt).
    pub body: Value,
    pub stream: bool,
    /// The client's stream is to carry a usage report (Chat clients ask for it).
    pub wants_stream_usage: bool,
    pub model: &'a Model,
    /// The model name the client asked for (the entry's name, an alias, or a name a pattern matched).
    pub requested: String,
    /// The model name sent upstream: the entry's `upstream_model`, with `{model}` replaced by the name
    /// asked for.
    pub upstream_model: String,
    /// The output limit the client asked for (per choice), read from its own protocol's field(s) only.
    pub requested_output: Option<u64>,
    /// Answers asked for, each up to the output limit (Chat's `n`; 1 elsewhere).
    pub choices: u64,
    /// Nothing of the request may be stored in the operator's upstream account.
    pub store_nothing: bool,
    /// Who asked for what: the record's side of the request (its input estimate and paid features too).
    pub asked: Asked,
    /// An embeddings request, read (None for the other endpoints).
    pub embed: Option<EmbedRequest>,
}

impl Prepared<'_> {
    /// The spend budget in force: the key's own, else its group's.
    pub(super) fn budget(&self) -> Option<Budget> {
        let group = self.config.group(&self.identity.group);
        self.identity.budget.or(group.and_then(|g| g.budget))
    }

    /// Whether every upstream request must carry an output limit: the key has a spending limit (a credit,
    /// or a budget of its own or its group's), so the worst case reserved must be the worst case possible.
    pub(super) fn must_limit(&self) -> bool {
        self.identity.credit.is_some() || self.budget().is_some()
    }

    /// The output limit of each choice admission reserves for: the client's, or the model's
    /// `max_output_tokens` (a text completion's: its endpoint's default).
    pub(super) fn limit_per_choice(&self) -> u64 {
        let default = match self.endpoint.protocol().completions {
            Some(c) if self.endpoint.completes() => c.default_limit,
            _ => self.model.max_output_tokens,
        };
        self.requested_output.unwrap_or(default)
    }

    /// The output admission reserves: the limit of each choice times the choices. No upstream request of
    /// this request asks for more (see [`Prepared::limit_for_upstream`]).
    pub(super) fn reserved_output(&self) -> u64 {
        if !(self.endpoint.generates() || self.endpoint.completes()) {
            return 0;
        }
        self.limit_per_choice().saturating_mul(self.choices)
    }

    /// The output limit (per choice) a passthrough request carries upstream: the client's own, or (keys with
    /// a spending limit) the reserved one, added when the client sent none.
    pub(super) fn limit_for_upstream(&self) -> Option<u64> {
        if self.must_limit() {
            Some(self.limit_per_choice())
        } else {
            self.requested_output
        }
    }

    /// The most output a passthrough answer is billed for (and a stream may carry before it is cut): the
    /// limit sent upstream times the choices. None: no limit was sent.
    pub(super) fn output_cap(&self) -> Option<u64> {
        self.limit_for_upstream()
            .map(|l| l.saturating_mul(self.choices))
    }

    /// The client's request decoded into the canonical request, with the output limit the gateway read (the
    /// lowest of the protocol's own fields).
    pub(super) fn canonical(&self) -> Result<canon::Request, ApiError> {
        let mut req = self
            .endpoint
            .protocol()
            .request
            .decode_request(&self.body)?;
        req.max_tokens = self.requested_output;
        Ok(req)
    }

    /// How the client's body goes to an upstream of its own protocol (see `request::Forward`).
    pub(super) fn forward<'s>(&'s self, upstream: &Upstream, stream: bool) -> Forward<'s> {
        Forward {
            model: &self.upstream_model,
            generation: self.endpoint.generates(),
            completion: self.endpoint.completes(),
            limit: self.limit_for_upstream(),
            max_completion_tokens: upstream.max_completion_tokens,
            stream,
            store_nothing: self.store_nothing,
            reasoning: self.model.reasoning,
            hosted_cap: self.asked.hosted.cap(),
        }
    }

    /// The admission estimate of the input (also what a request its upstream worked on without reporting
    /// usage is billed).
    pub(super) fn input_estimate(&self) -> u64 {
        self.asked.input_estimate
    }
}

/// A request refused before it was prepared, and who asked for what as far as it was known.
pub(super) struct Refused {
    pub asked: Asked,
    pub error: ApiError,
}

/// Authenticates and validates a request to `endpoint`.
pub(super) fn prepare<'a>(
    gw: &Gateway,
    config: &'a Config,
    ex: &Exchange,
    endpoint: Endpoint,
) -> Result<Prepared<'a>, Box<Refused>> {
    let mut asked = Asked {
        unbilled: endpoint.counts_tokens(),
        endpoint: endpoint.recorded_as(),
        ..Asked::default()
    };
    match read(gw, config, ex, endpoint, &mut asked) {
        Ok(read) => Ok(read.into_prepared(asked)),
        Err(error) => Err(Box::new(Refused { asked, error })),
    }
}

/// What `read` finds, before it becomes a [`Prepared`] request.
struct Read<'a> {
    config: &'a Config,
    endpoint: Endpoint,
    identity: Arc<Identity>,
    body: Value,
    wants_stream_usage: bool,
    model: &'a Model,
    requested: String,
    requested_output: Option<u64>,
    choices: u64,
    store_nothing: bool,
    embed: Option<EmbedRequest>,
}

impl<'a> Read<'a> {
    fn into_prepared(self, asked: Asked) -> Prepared<'a> {
        Prepared {
            config: self.config,
            endpoint: self.endpoint,
            identity: self.identity,
            body: self.body,
            stream: asked.stream,
            wants_stream_usage: self.wants_stream_usage,
            model: self.model,
            upstream_model: self
                .model
                .upstream_model
                .replace("{model}", &self.requested),
            requested: self.requested,
            requested_output: self.requested_output,
            choices: self.choices,
            store_nothing: self.store_nothing,
            asked,
            embed: self.embed,
        }
    }
}

/// Reads the request, noting in `asked` who asked for what as it is learnt.
fn read<'a>(
    gw: &Gateway,
    config: &'a Config,
    ex: &Exchange,
    endpoint: Endpoint,
    asked: &mut Asked,
) -> Result<Read<'a>, ApiError> {
    let protocol = endpoint.protocol();
    let identity = access::authenticate(&ex.request, protocol, &gw.keys)?;
    asked.key = Some(identity.name.clone());
    asked.group = Some(identity.group.clone());
    protocol.check_headers(&ex.request)?;
    let mut body = parse_body(&ex.request.body)?;
    if endpoint.generates() || endpoint.counts_tokens() {
        protocol.read_as_one(&mut body, endpoint.counts_tokens())?;
    }
    let path = ex.request.path.as_str();
    let (requested_output, choices) = envelope(endpoint, path, &body, asked)?;
    let embed = match protocol.embedder.filter(|_| endpoint.embeds()) {
        Some(e) => Some(e.decode_embed(path, &body)?),
        None => None,
    };
    let requested = protocol.requested_model(path, &body).into_owned();
    let model = match find_model(config, &requested) {
        Ok(m) => m,
        Err(e) => {
            asked.model = Some(requested);
            return Err(e);
        }
    };
    // Records name the entry that served, and the name asked for when it differs.
    asked.model = Some(model.name.clone());
    if model.name != requested {
        asked.requested_model = Some(requested.clone());
    }
    if !access::group_allows(config, &identity.group, &model.name, &requested) {
        return Err(access::forbidden_model(&requested, &identity.group));
    }
    // The operator's upstream account is shared by every key: nothing may reach state kept in it. (A text
    // completion's body names no state: its `prompt` is the text itself, not a stored template.)
    if !model.account_features {
        if !endpoint.completes() {
            account::refuse_account_features(&body, config.passes_through(model, protocol))?;
        }
        protocol.refuse_account_headers(&ex.request)?;
    }
    asked.hosted = hosted::plan(config, model, endpoint, &mut body)?;
    asked.input_estimate = match &embed {
        Some(e) => e.input_estimate(),
        None => estimate::input(&body, ex.request.body.len(), model.image_tokens),
    };
    Ok(Read {
        config,
        endpoint,
        identity,
        wants_stream_usage: protocol.wants_stream_usage(&body),
        body,
        model,
        requested,
        requested_output,
        choices,
        store_nothing: !model.account_features && endpoint.generates(),
        embed,
    })
}

/// Checks the fields every request of the endpoint at `path` needs; notes `stream`; returns the output limit
/// the client asked for and the answers it asked for.
fn envelope(
    endpoint: Endpoint,
    path: &str,
    body: &Value,
    asked: &mut Asked,
) -> Result<(Option<u64>, u64), ApiError> {
    let protocol = endpoint.protocol();
    if endpoint.completes() {
        let ask = protocol.validate_completion(path, body)?;
        asked.stream = ask.stream;
        return Ok((ask.limit, ask.choices));
    }
    let generation = endpoint.generates();
    // Token counting is checked further only where it is estimated here: an upstream that counts judges its
    // own.
    asked.stream = protocol.validate_envelope(path, body, generation)?;
    if !generation {
        return Ok((None, 1));
    }
    // One output limit: the client protocol's own field (other protocols' limit fields never go upstream,
    // so no upstream can honour a limit admission did not reserve for).
    let limit = limits::read(protocol, body)?;
    Ok((limit, limits::choices(protocol, body)?))
}

/// The enabled model named `name`, or the client's 404 (saying so when the operator disabled it).
fn find_model<'a>(config: &'a Config, name: &str) -> Result<&'a Model, ApiError> {
    config
        .model(name)
        .ok_or_else(|| match config.model_any(name) {
            Some(_) => ApiError::not_found(format!(
                "The model `{name}` is disabled by the operator for now."
            ))
            .with_param("model")
            .with_cause(crate::protocol::Cause::ModelNotFound),
            None => ApiError::model_not_found(name),
        })
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty; expected a JSON object.",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}.")))
}
