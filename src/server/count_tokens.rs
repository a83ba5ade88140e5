//! `POST /v1/messages/count_tokens` (Claude Code asks it to size its context): forwarded to an Anthropic
//! upstream, estimated from the text for the others. It spends the operator's upstream quota, so it is
//! metered like generation: the key's rate and concurrency limits apply, and a forwarded request leaves a
//! usage record (with its input tokens, at no cost).

use serde_json::{json, Value};

use super::accounting;
use super::call;
use super::generate::Outcome;
use super::respond::{self, Trace};
use super::Gateway;
use crate::access;
use crate::access::accounts::{Ask, Reservation};
use crate::config::{Config, UpstreamKind};
use crate::http::Exchange;
use crate::protocol::canon::Usage;
use crate::protocol::{fields, messages, ApiError, Protocol};
use crate::util::estimate_tokens;

pub fn handle(gw: &Gateway, ex: &mut Exchange) {
    let config = gw.config();
    ex.response().hold_end();
    let mut trace = Trace::new(ex, Protocol::Messages);
    let mut out = Outcome {
        unbilled: true,
        ..Outcome::default()
    };
    let mut reservation = None;
    match count(gw, &config, ex, &mut trace, &mut out, &mut reservation) {
        Ok(body) => {
            out.status = 200;
            respond::json(ex.response(), &trace, 200, &body, &[]);
        }
        Err(e) => {
            if !ex.response().is_started() {
                respond::error(ex.response(), &trace, &e);
            }
            out.status = e.status();
            out.error = Some(e.message().to_string());
        }
    }
    accounting::record(gw, &config, ex, &trace, &mut out, reservation);
    let _ = ex.response().release_held();
}

fn count(
    gw: &Gateway,
    config: &Config,
    ex: &Exchange,
    trace: &mut Trace,
    out: &mut Outcome,
    reservation: &mut Option<Reservation>,
) -> Result<Vec<u8>, ApiError> {
    let identity = access::authenticate(&ex.request, Protocol::Messages, &gw.keys)?;
    out.key = Some(identity.name.clone());
    out.group = Some(identity.group.clone());
    if ex.request.header("anthropic-version").is_none() {
        return Err(ApiError::invalid_param(
            "anthropic-version",
            "anthropic-version: header is required",
        ));
    }
    let mut body: Value = serde_json::from_slice(&ex.request.body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}.")))?;
    let o = fields::object(&body, "body")?;
    let model_name = fields::req_str(o, "model", "")?.to_string();
    out.model = Some(model_name.clone());
    let model = config
        .model(&model_name)
        .ok_or_else(|| ApiError::model_not_found(&model_name))?;
    if !access::group_allows(config, &identity.group, &model.name) {
        return Err(access::forbidden_model(&model.name, &identity.group));
    }
    if !model.account_features {
        let betas: Vec<&str> = ex.request.header_all("anthropic-beta").collect();
        crate::protocol::account::refuse_account_features(Protocol::Messages, &body, &betas)?;
    }
    let upstream = model
        .upstreams
        .first()
        .and_then(|u| config.upstream(u))
        .ok_or_else(|| ApiError::internal("the model has no upstream"))?;
    if upstream.kind == UpstreamKind::Anthropic && !gw.ledger.accepting() {
        return Err(accounting::ledger_unavailable(gw));
    }
    // The key's rate and concurrency limits, as for generation (it costs nothing against the balance).
    let ask = Ask {
        key: &identity.name,
        credit: None,
        group: config.group(&identity.group),
        tokens: (ex.request.body.len() as u64 / 4).max(1),
        cost: crate::money::Money::ZERO,
    };
    match gw.accounts.check_and_reserve(&ask) {
        Ok((res, info)) => {
            trace.extra = info.headers;
            *reservation = Some(res);
        }
        Err((e, info)) => {
            trace.extra = info.headers;
            gw.metrics
                .rate_limited
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(e);
        }
    }
    if upstream.kind == UpstreamKind::Anthropic {
        out.upstream = Some(upstream.name.clone());
        body["model"] = json!(model.upstream_model);
        let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::internal(e.to_string()))?;
        let beta: Vec<&str> = ex.request.header_all("anthropic-beta").collect();
        let beta = (!beta.is_empty()).then(|| beta.join(","));
        let url = format!("{}/v1/messages/count_tokens", upstream.base_url);
        let reply = call::send_to(gw, trace, out, upstream, &url, &bytes, beta.as_deref())?;
        let raw = reply.read_all(&upstream.name)?;
        let counted = serde_json::from_slice::<Value>(&raw)
            .ok()
            .and_then(|v| v.get("input_tokens").and_then(Value::as_u64));
        out.usage = Some(Usage {
            input_tokens: counted.unwrap_or(0),
            ..Usage::default()
        });
        return Ok(raw);
    }
    // Decoding validates the body; count_tokens bodies have no max_tokens.
    if body.get("max_tokens").is_none() {
        body["max_tokens"] = json!(1);
    }
    let req = messages::decode_request(&body)?;
    Ok(
        json!({"input_tokens": estimate_tokens(&req.all_text()).max(1)})
            .to_string()
            .into_bytes(),
    )
}
