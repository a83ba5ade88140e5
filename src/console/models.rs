//! Models from the console: the list with upstreams, prices, state and live availability; disable, enable
//! and reprice a model (written to the overrides file atomically, in effect at once).

use serde_json::{json, Value};

use super::manage::{config_error, object, opt_amount};
use crate::config::ModelChange;
use crate::gateway::Gateway;
use crate::protocol::ApiError;

/// `GET /admin/models[?probe=1]`: every model with its upstreams, prices, state and live availability.
pub(super) fn models(gw: &Gateway, probe: bool) -> Value {
    let config = gw.config();
    let cache = gw.cache.stats();
    let now = crate::util::unix_now();
    let probes = if probe {
        gw.stats.probe_all(&gw.agent, &config)
    } else {
        Default::default()
    };
    let data: Vec<Value> = config
        .models
        .iter()
        .map(|m| {
            let upstreams: Vec<Value> = m
                .upstreams
                .iter()
                .map(|u| {
                    let kind = config.upstream(u).map(|x| x.kind.name()).unwrap_or("?");
                    let b = gw.breakers.view(u);
                    let breaker = json!({
                        "state": b.state,
                        "until": b.until_unix_ms.map(crate::util::rfc3339_millis),
                        "reason": b.reason,
                        "failures": b.failures,
                    });
                    let r = gw.routing.view(u);
                    let routing = json!({
                        "in_flight": r.in_flight,
                        "first_byte_ms": r.first_byte_ms.map(|ms| (ms * 10.0).round() / 10.0),
                        "cooling_until": r.cooling_until_unix_ms.map(crate::util::rfc3339_millis),
                    });
                    json!({"name": u, "kind": kind, "probe": probes.get(u), "breaker": breaker,
                           "routing": routing})
                })
                .collect();
            let mut v = json!({
                "name": m.name,
                "upstream_model": m.upstream_model,
                "upstreams": upstreams,
                "route": m.route.name(),
                "aliases": m.aliases,
                "discovered": m.discovered,
                "weights": m.weights,
                "max_output_tokens": m.max_output_tokens,
                "allow_hosted_tools": config.hosted_prices(&m.name).tools,
                "allow_service_tiers": config.hosted_prices(&m.name).tiers,
                "max_hosted_uses": config.hosted_prices(&m.name).max_uses,
                "disabled": m.disabled,
                "availability": gw.stats.model_json(&m.name),
                "cache": cache_json(m, &cache),
            });
            merge(&mut v, m.prices.json(now));
            v
        })
        .collect();
    let discovery: Vec<Value> = gw
        .discovered_servers()
        .iter()
        .map(|s| json!({"base_url": s.base_url, "up": s.up, "models": s.models, "error": s.error}))
        .collect();
    json!({"data": data, "discovery": discovery})
}

/// A cached model's answer cache: its TTL and scope, and what the cache did for it on this instance since it
/// started (hits, misses, bypasses, the hit rate of the look-ups, the bytes of its entries, evictions).
fn cache_json(m: &crate::config::Model, stats: &[(String, crate::cache::ModelStats)]) -> Value {
    let Some(c) = m.cache else {
        return Value::Null;
    };
    let s = stats
        .iter()
        .find(|(name, _)| *name == m.name)
        .map(|(_, s)| *s)
        .unwrap_or_default();
    let answered = s.hits + s.misses + s.bypasses;
    json!({
        "ttl_secs": c.ttl.as_secs(),
        "scope": c.scope.name(),
        "hits": s.hits,
        "misses": s.misses,
        "bypasses": s.bypasses,
        "hit_rate": (answered > 0).then(|| s.hits as f64 / answered as f64),
        "bytes": s.bytes,
        "evictions": s.evictions,
    })
}

/// The fields of `extra` added to the object `v`.
fn merge(v: &mut Value, extra: Value) {
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
}

/// `POST /admin/models/{name} {disabled?, input_price?, cached_input_price?, cache_write_price?,
/// cache_write_1h_price?, output_price?}`: the prices set become the model's own (list prices included); a
/// null cache price clears it (reads and writes cost the input price again, 1-hour writes the write price).
pub(super) fn change_model(gw: &Gateway, name: &str, body: &Value) -> Result<Value, ApiError> {
    let o = object(body)?;
    // An alias or a matching name stands for its entry, whose name the overrides are kept under.
    let name = match gw.config().model_any(name) {
        Some(m) => m.name.clone(),
        None => {
            return Err(ApiError::not_found(format!("no model named {name:?}")).with_param("name"))
        }
    };
    let name = name.as_str();
    let disabled = match o.get("disabled") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "disabled",
                "disabled: expected true or false",
            ))
        }
    };
    let null = |k: &str| o.get(k) == Some(&Value::Null);
    let change = ModelChange {
        disabled,
        input_price: opt_amount(o, "input_price")?,
        output_price: opt_amount(o, "output_price")?,
        cached_input_price: opt_amount(o, "cached_input_price")?,
        cache_write_price: opt_amount(o, "cache_write_price")?,
        cache_write_1h_price: opt_amount(o, "cache_write_1h_price")?,
        clear_cached_input_price: null("cached_input_price"),
        clear_cache_write_price: null("cache_write_price"),
        clear_cache_write_1h_price: null("cache_write_1h_price"),
    };
    change.validate().map_err(config_error)?;
    gw.change_overrides(|ov| {
        let entry = ov.models.entry(name.to_string()).or_default();
        if change.disabled.is_some() {
            entry.disabled = change.disabled;
        }
        for (slot, v) in [
            (&mut entry.input_price, change.input_price),
            (&mut entry.output_price, change.output_price),
        ] {
            if v.is_some() {
                *slot = v;
            }
        }
        for (slot, cleared, v, clear) in [
            (
                &mut entry.cached_input_price,
                &mut entry.clear_cached_input_price,
                change.cached_input_price,
                change.clear_cached_input_price,
            ),
            (
                &mut entry.cache_write_price,
                &mut entry.clear_cache_write_price,
                change.cache_write_price,
                change.clear_cache_write_price,
            ),
            (
                &mut entry.cache_write_1h_price,
                &mut entry.clear_cache_write_1h_price,
                change.cache_write_1h_price,
                change.clear_cache_write_1h_price,
            ),
        ] {
            if v.is_some() {
                *slot = v;
                *cleared = false;
            } else if clear {
                *slot = None;
                *cleared = true;
            }
        }
        Ok(())
    })
    .map_err(config_error)?;
    let config = gw.config();
    let m = config
        .model_any(name)
        .ok_or_else(|| ApiError::internal("model vanished"))?;
    let mut v = json!({"name": m.name, "disabled": m.disabled});
    merge(&mut v, m.prices.json(crate::util::unix_now()));
    Ok(v)
}
