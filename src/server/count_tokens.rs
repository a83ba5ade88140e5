//! `POST /v1/messages/count_tokens` (Claude Code asks it to size its context): forwarded to an Anthropic
//! upstream, estimated from the text for the others.

use serde_json::{json, Value};

use super::respond::{self, Trace};
use super::Gateway;
use crate::access;
use crate::config::UpstreamKind;
use crate::http::Exchange;
use crate::protocol::{fields, messages, ApiError, Protocol};
use crate::upstream::http as uphttp;
use crate::util::estimate_tokens;

pub fn handle(gw: &Gateway, ex: &mut Exchange) {
    let trace = Trace::new(ex, Protocol::Messages);
    match count(gw, ex) {
        Ok(body) => respond::json(ex.response(), &trace, 200, &body, &[]),
        Err(e) => respond::error(ex.response(), &trace, &e),
    }
}

fn count(gw: &Gateway, ex: &Exchange) -> Result<Vec<u8>, ApiError> {
    let identity = access::authenticate(&ex.request, Protocol::Messages, &gw.keys)?;
    if ex.request.header("anthropic-version").is_none() {
        return Err(ApiError::invalid_param(
            "anthropic-version",
            "anthropic-version: header is required",
        ));
    }
    let mut body: Value = serde_json::from_slice(&ex.request.body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}.")))?;
    let config = gw.config();
    let o = fields::object(&body, "body")?;
    let model_name = fields::req_str(o, "model", "")?.to_string();
    let model = config
        .model(&model_name)
        .ok_or_else(|| ApiError::model_not_found(&model_name))?;
    if !access::group_allows(&config, &identity.group, &model.name) {
        return Err(access::forbidden_model(&model.name, &identity.group));
    }
    let upstream = model
        .upstreams
        .first()
        .and_then(|u| config.upstream(u))
        .ok_or_else(|| ApiError::internal("the model has no upstream"))?;
    if upstream.kind == UpstreamKind::Anthropic {
        body["model"] = json!(model.upstream_model);
        let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::internal(e.to_string()))?;
        let beta: Vec<&str> = ex.request.header_all("anthropic-beta").collect();
        let beta = (!beta.is_empty()).then(|| beta.join(","));
        let url = format!("{}/v1/messages/count_tokens", upstream.base_url);
        let reply = uphttp::send_to(&gw.agent, upstream, &url, &bytes, false, beta.as_deref())?;
        let (status, retry_after) = (reply.status, reply.retry_after);
        let raw = reply.read_all(&upstream.name)?;
        if status >= 400 {
            return Err(ApiError::from_upstream(status, &raw, retry_after));
        }
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
