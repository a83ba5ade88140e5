//! Keys and groups from the console: list, create, revoke, rotate, top up; create and edit groups (models:
//! `models.rs`). Key changes go to the keys file, group changes to the overrides file; both are rewritten
//! atomically and take effect at once.

use crate::budget::Budget;
use crate::money::Money;
use serde_json::{json, Map, Value};

use crate::access::key_ops::{self, Changed, CreditChange, KeyChange, KeyOpError, KeyOpKind};
use crate::config::{ConfigError, GroupSpec};
use crate::gateway::Gateway;
use crate::protocol::{ApiError, Cause};

fn key_error(e: KeyOpError) -> ApiError {
    match e.kind {
        KeyOpKind::StoreDown => {
            ApiError::unavailable(e.message).with_cause(Cause::StoreUnavailable)
        }
        KeyOpKind::Failed => ApiError::internal(e.message),
        KeyOpKind::NoSuchKey => ApiError::not_found(e.message).with_param(e.field),
        KeyOpKind::Invalid => {
            ApiError::invalid_param(e.field, format!("{}: {}", e.field, e.message))
        }
    }
}

pub(super) fn config_error(e: ConfigError) -> ApiError {
    if e.field.is_empty() {
        ApiError::internal(e.message)
    } else {
        let field = e.field.rsplit('.').next().unwrap_or(&e.field).to_string();
        ApiError::invalid_param(&field, format!("{field}: {}", e.message))
    }
}

pub(super) fn object(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::invalid("expected a JSON object"))
}

/// An amount of credits: a JSON number, or a decimal string for exactness beyond a float's 15 digits.
pub(super) fn opt_amount(o: &Map<String, Value>, k: &str) -> Result<Option<Money>, ApiError> {
    let bad = |why: String| ApiError::invalid_param(k, format!("{k}: {why}"));
    let m = match o.get(k) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .and_then(Money::from_f64)
            .ok_or_else(|| bad("expected an amount".into()))?,
        Some(Value::String(t)) => Money::parse(t).map_err(|e| bad(e.to_string()))?,
        Some(_) => return Err(bad("expected a number of 0 or more".into())),
    };
    if m.is_negative() {
        return Err(bad("expected a number of 0 or more".into()));
    }
    Ok(Some(m))
}

/// Makes a key change (the admin call's audit entry is written around it, `console/mod.rs`) and puts the
/// keys in force at once.
fn change(gw: &Gateway, name: &str, change: &KeyChange) -> Result<Changed, ApiError> {
    let changed = key_ops::apply(gw.keys_at(), name, change).map_err(key_error)?;
    gw.reload_keys();
    Ok(changed)
}

/// `GET /admin/keys`.
pub(super) fn keys(gw: &Gateway) -> Value {
    let config = gw.config();
    let records = gw.keys.records();
    let names: Vec<String> = records.iter().map(|k| k.name.clone()).collect();
    let balances = gw.accounts.balances(&names);
    let data: Vec<Value> = records
        .iter()
        .map(|k| {
            let (spent, last_used) = balances.get(&k.name).cloned().unwrap_or_default();
            let mut v = json!({
                "name": k.name,
                "group": k.group,
                "credit": k.credit,
                "spent": spent,
                "balance": k.credit.map(|c| c - spent),
                "disabled": k.disabled,
                "created": k.created,
                "expires": k.expires,
                "hint": k.hint.as_ref().map(|h| format!("{h}…")),
                "last_used": last_used,
            });
            budget_fields(gw, &config, k, &mut v);
            v
        })
        .collect();
    json!({"data": data})
}

/// The budget in force for a key (its own, else its group's), what it spent in the current period and
/// when that period ends.
fn budget_fields(
    gw: &Gateway,
    config: &crate::config::Config,
    k: &crate::access::keys::KeyRecord,
    v: &mut Value,
) {
    let group = config.group(&k.group).and_then(|g| g.budget);
    let (budget, from) = match (k.budget, group) {
        (Some(b), _) => (Some(b), "key"),
        (None, Some(b)) => (Some(b), "group"),
        (None, None) => (None, ""),
    };
    let Some(b) = budget else {
        v["budget"] = Value::Null;
        return;
    };
    let now = crate::util::unix_now();
    let start = b.period.start_of(now);
    v["budget"] = json!({
        "amount": b.amount,
        "period": b.period.name(),
        "from": from,
        "spent": gw.accounts.period_spent(&k.name, b.period, now),
        "since": crate::util::rfc3339(start),
        "resets": crate::util::rfc3339(b.period.end_of(start)),
    });
}

/// `POST /admin/keys/{name}/budget {amount, period}` (or `{"none": true}`: the group's applies again).
pub(super) fn set_budget(gw: &Gateway, name: &str, body: &Value) -> Result<Value, ApiError> {
    let o = object(body)?;
    let budget = if o.get("none") == Some(&Value::Bool(true)) {
        None
    } else {
        let mut wrapped = Map::new();
        wrapped.insert("budget".into(), Value::Object(o.clone()));
        Some(opt_budget(&wrapped)?.ok_or_else(|| {
            ApiError::invalid("give {\"amount\", \"period\"} or {\"none\": true}")
        })?)
    };
    change(gw, name, &KeyChange::Budget(budget))?;
    Ok(json!({"name": name, "budget": budget}))
}

/// `POST /admin/keys/{name}/expires {"at": "2026-12-31T00:00:00Z"}` or `{"never": true}`.
pub(super) fn set_expiry(gw: &Gateway, name: &str, body: &Value) -> Result<Value, ApiError> {
    let expires = parse_expiry(object(body)?)?;
    change(gw, name, &KeyChange::Expiry(expires))?;
    Ok(json!({"name": name, "expires": expires.map(crate::util::rfc3339)}))
}

fn parse_expiry(o: &Map<String, Value>) -> Result<Option<u64>, ApiError> {
    if o.get("never") == Some(&Value::Bool(true)) {
        return Ok(None);
    }
    let at = o
        .get("at")
        .or_else(|| o.get("expires"))
        .and_then(Value::as_str);
    match at {
        None => Err(ApiError::invalid_param(
            "at",
            "give {\"at\": \"2026-12-31T00:00:00Z\"} (UTC) or {\"never\": true}",
        )),
        Some(t) => crate::util::parse_rfc3339(t).map(Some).ok_or_else(|| {
            ApiError::invalid_param(
                "at",
                format!("at: expected a UTC time such as 2026-12-31T00:00:00Z, got {t:?}"),
            )
        }),
    }
}

/// `POST /admin/keys/{name}/group {"group": "other"}`: moves a key to another group.
pub(super) fn move_key(gw: &Gateway, name: &str, body: &Value) -> Result<Value, ApiError> {
    let group = object(body)?
        .get("group")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if gw.config().group(&group).is_none() {
        return Err(ApiError::invalid_param(
            "group",
            format!("group: no group named {group:?}"),
        ));
    }
    change(gw, name, &KeyChange::Move(group.clone()))?;
    Ok(json!({"name": name, "group": group}))
}

/// `POST /admin/keys {name, group, credit?}`: the new key is in the answer, once.
pub(super) fn create_key(gw: &Gateway, body: &Value) -> Result<Value, ApiError> {
    let o = object(body)?;
    let name = o.get("name").and_then(Value::as_str).unwrap_or("");
    let group = o.get("group").and_then(Value::as_str).unwrap_or("");
    let credit = opt_amount(o, "credit")?;
    let config = gw.config();
    if config.group(group).is_none() {
        let known: Vec<&str> = config.groups.iter().map(|g| g.name.as_str()).collect();
        return Err(ApiError::invalid_param(
            "group",
            format!(
                "group: unknown group {group:?}; expected one of [{}]",
                known.join(", ")
            ),
        ));
    }
    let budget = opt_budget(o)?;
    let expires = match o.get("expires") {
        None | Some(Value::Null) => None,
        Some(_) => parse_expiry(o)?,
    };
    let add = KeyChange::Add {
        group: group.to_string(),
        credit,
        budget,
        expires,
    };
    let key = match change(gw, name, &add)? {
        Changed::Key(key) => key,
        _ => String::new(),
    };
    Ok(
        json!({"name": name, "group": group, "credit": credit, "budget": budget,
              "expires": expires.map(crate::util::rfc3339), "key": key}),
    )
}

pub(super) fn revoke_key(gw: &Gateway, name: &str) -> Result<Value, ApiError> {
    change(gw, name, &KeyChange::Revoke)?;
    Ok(json!({"name": name, "disabled": true}))
}

/// `POST /admin/keys/{name}/enable`: a revoked key works again.
pub(super) fn enable_key(gw: &Gateway, name: &str) -> Result<Value, ApiError> {
    change(gw, name, &KeyChange::Enable)?;
    Ok(json!({"name": name, "disabled": false}))
}

/// `DELETE /admin/keys/{name}`: a revoked key leaves every list (its name stays taken).
pub(super) fn delete_key(gw: &Gateway, name: &str) -> Result<Value, ApiError> {
    change(gw, name, &KeyChange::Delete)?;
    Ok(json!({"name": name, "deleted": true}))
}

pub(super) fn rotate_key(gw: &Gateway, name: &str) -> Result<Value, ApiError> {
    let key = match change(gw, name, &KeyChange::Rotate)? {
        Changed::Key(key) => key,
        _ => String::new(),
    };
    Ok(json!({"name": name, "key": key}))
}

/// `POST /admin/keys/{name}/credit {add | set | unlimited: true}`.
pub(super) fn credit(gw: &Gateway, name: &str, body: &Value) -> Result<Value, ApiError> {
    let o = object(body)?;
    let change = match (
        opt_amount(o, "add")?,
        opt_amount(o, "set")?,
        o.get("unlimited").and_then(Value::as_bool),
    ) {
        (Some(a), None, None | Some(false)) => CreditChange::Add(a),
        (None, Some(s), None | Some(false)) => CreditChange::Set(s),
        (None, None, Some(true)) => CreditChange::Unlimited,
        _ => {
            return Err(ApiError::invalid(
                "give exactly one of `add`, `set` or `unlimited: true`",
            ))
        }
    };
    let credit = match self::change(gw, name, &KeyChange::Credit(change))? {
        Changed::Credit(c) => c,
        _ => None,
    };
    let spent = gw.accounts.spent(name);
    Ok(
        json!({"name": name, "credit": credit, "spent": spent, "balance": credit.map(|c| c - spent)}),
    )
}

/// `"budget": {"amount": 10, "period": "daily"}` (or null / absent: none).
fn opt_budget(o: &Map<String, Value>) -> Result<Option<Budget>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("budget", format!("budget: {m}"));
    match o.get("budget") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(b)) => {
            let amount = opt_amount(b, "amount")?
                .ok_or_else(|| bad("expected {\"amount\": credits, \"period\": \"daily\"}".into()))?;
            let period = b.get("period").and_then(Value::as_str).unwrap_or("");
            Budget::new(amount, period)
                .map(Some)
                .map_err(|e| bad(e.to_string()))
        }
        Some(_) => Err(bad(
            "expected {\"amount\": credits, \"period\": \"daily\" | \"weekly\" | \"monthly\"} or null".into(),
        )),
    }
}

/// `GET /admin/groups`.
pub(super) fn groups(gw: &Gateway) -> Value {
    let config = gw.config();
    json!({"data": config.groups})
}

/// `POST /admin/groups` (create) or `PUT /admin/groups/{name}` (edit): `{name, models, rpm, tpm,
/// max_concurrent}`.
pub(super) fn save_group(
    gw: &Gateway,
    body: &Value,
    name: Option<&str>,
) -> Result<Value, ApiError> {
    let o = object(body)?;
    let limit = |k: &str| -> Result<Option<u64>, ApiError> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ApiError::invalid_param(
                    k,
                    format!("{k}: expected a whole number, or null for no limit"),
                )
            }),
        }
    };
    let models: Vec<String> = match o.get("models") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|m| {
                m.as_str().map(|s| s.trim().to_string()).ok_or_else(|| {
                    ApiError::invalid_param("models", "models: expected a list of names or globs")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(Value::String(s)) => s
            .split([',', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => {
            return Err(ApiError::invalid_param(
                "models",
                "models: expected a list of names or globs",
            ))
        }
    };
    let spec = GroupSpec {
        name: name.map(str::to_string).unwrap_or_else(|| {
            o.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim()
                .to_string()
        }),
        models,
        rpm: limit("rpm")?,
        tpm: limit("tpm")?,
        max_concurrent: limit("max_concurrent")?,
        budget: opt_budget(o)?,
    };
    spec.validate().map_err(config_error)?;
    let exists = gw.config().group(&spec.name).is_some();
    match (name, exists) {
        (None, true) => {
            return Err(ApiError::new(
                409,
                crate::protocol::ErrorKind::InvalidRequest,
                format!("name: a group named {:?} already exists", spec.name),
            )
            .with_param("name"))
        }
        (Some(n), false) => {
            return Err(ApiError::not_found(format!("no group named {n:?}")).with_param("name"))
        }
        _ => {}
    }
    let saved = spec.clone();
    gw.change_overrides(|o| {
        o.groups.retain(|g| g.name != saved.name);
        o.deleted_groups.retain(|n| n != &saved.name);
        o.groups.push(saved.clone());
        Ok(())
    })
    .map_err(config_error)?;
    Ok(json!(spec))
}

/// `DELETE /admin/groups/{name}`: only a group no key is in (revoked keys count: they may come back).
pub(super) fn delete_group(gw: &Gateway, name: &str) -> Result<Value, ApiError> {
    if gw.config().group(name).is_none() {
        return Err(ApiError::not_found(format!("no group named {name:?}")).with_param("name"));
    }
    let members: Vec<String> = gw
        .keys
        .records()
        .into_iter()
        .filter(|k| k.group == name)
        .map(|k| k.name)
        .collect();
    if !members.is_empty() {
        return Err(ApiError::new(
            409,
            crate::protocol::ErrorKind::InvalidRequest,
            format!(
                "the group {name:?} still has {} key(s) ({}); move them to another group or delete them first",
                members.len(),
                members.join(", ")
            ),
        )
        .with_param("name"));
    }
    let name = name.to_string();
    gw.change_overrides(|o| {
        o.groups.retain(|g| g.name != name);
        if !o.deleted_groups.contains(&name) {
            o.deleted_groups.push(name.clone());
        }
        Ok(())
    })
    .map_err(config_error)?;
    Ok(json!({"name": name, "deleted": true}))
}
