//! The `[[models]]` entries: each checked (name, upstreams, route and weights, prices, output limit,
//! structured output, caching, hosted tools), a model naming an upstream with several credentials given
//! every deployment of it, and names and aliases checked across the models.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{OneOrMany, Problems, RawModel};
use crate::config::hosted::HostedPrices;
use crate::config::{err, ConfigError, Model, DEFAULT_MAX_OUTPUT_TOKENS};

/// A model naming an upstream with several credentials uses all its deployments (each with the upstream's
/// weight).
pub(super) fn expand_deployments(m: &mut Model, deployments: &HashMap<String, Vec<String>>) {
    let mut names = Vec::new();
    let mut weights = Vec::new();
    for (i, n) in m.upstreams.iter().enumerate() {
        let each = deployments
            .get(n)
            .cloned()
            .unwrap_or_else(|| vec![n.clone()]);
        if let Some(w) = m.weights.get(i) {
            weights.extend(std::iter::repeat_n(*w, each.len()));
        }
        names.extend(each);
    }
    m.upstreams = names;
    m.weights = weights;
}

pub(super) fn validate_models(
    raw: Vec<RawModel>,
    upstreams: &[String],
    discovery: bool,
    p: &mut Problems,
) -> (Vec<Model>, HashMap<String, HostedPrices>) {
    let mut seen = HashSet::new();
    let mut models = Vec::new();
    let mut hosted = HashMap::new();
    for (i, mut m) in raw.into_iter().enumerate() {
        let asked = crate::config::hosted::Allowed {
            tools: m.allow_hosted_tools.take(),
            tiers: m.allow_service_tiers.take(),
            max_uses: m.max_hosted_uses,
            inference_geo: m.allow_inference_geo.take(),
        };
        let prices = crate::config::hosted::validate(i, asked, &mut p.warnings);
        let prices = p.take(prices, None);
        let checked = validate_model(i, m, upstreams, &mut seen);
        if let Ok(m) = checked.map_err(|errs| p.errors.extend(errs)) {
            if let Some(h) = prices {
                hosted.insert(m.name.clone(), h);
            }
            models.push(m);
        }
    }
    if models.is_empty() && p.errors.is_empty() && !discovery {
        p.errors.push(err(
            "models",
            "expected at least one [[models]] entry (or a [discovery] table to find local model servers)",
        ));
    }
    (models, hosted)
}

/// A model's `route` and `weights` (one per upstream, each above 0; `weighted` without weights: equal).
fn route_of(
    route: Option<&str>,
    weights: Option<Vec<u32>>,
    upstreams: usize,
    f: &dyn Fn(&str) -> String,
) -> Result<(crate::config::Route, Vec<u32>), ConfigError> {
    use crate::config::Route;
    let route = match route {
        None | Some("ordered") => Route::Ordered,
        Some("weighted") => Route::Weighted,
        Some("least-busy") => Route::LeastBusy,
        Some(other) => {
            return Err(err(
                f("route"),
                format!("expected \"ordered\", \"weighted\" or \"least-busy\", got {other:?}"),
            ))
        }
    };
    let weights = match (route, weights) {
        (Route::Weighted, None) => vec![1; upstreams],
        (Route::Weighted, Some(w)) if w.len() != upstreams => {
            return Err(err(
                f("weights"),
                format!(
                    "expected one weight per upstream ({upstreams}), got {}",
                    w.len()
                ),
            ))
        }
        (Route::Weighted, Some(w)) if w.contains(&0) => {
            return Err(err(f("weights"), "expected weights above 0"))
        }
        (Route::Weighted, Some(w)) => w,
        (_, Some(_)) => {
            return Err(err(
                f("weights"),
                "weights apply to `route = \"weighted\"` only",
            ))
        }
        (_, None) => Vec::new(),
    };
    Ok((route, weights))
}

/// One `[[models]]` entry: its upstreams must exist.
fn validate_model(
    i: usize,
    m: RawModel,
    upstreams: &[String],
    seen: &mut HashSet<String>,
) -> Result<Model, Vec<ConfigError>> {
    let f = |k: &str| format!("models[{i}].{k}");
    // Every problem of the entry, not only the first.
    let mut errors = Vec::new();
    let mut note = |r: Result<(), ConfigError>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    note(check_model_name(&m.name, seen, &f));
    let names = match m.upstream {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    };
    if names.is_empty() {
        note(Err(err(
            f("upstream"),
            "expected an upstream name or a non-empty list of them",
        )));
    }
    let routed = route_of(m.route.as_deref(), m.weights, names.len(), &f);
    note(check_upstreams_known(&names, upstreams, &f));
    let upstream_model = m.upstream_model.unwrap_or_else(|| m.name.clone());
    let raw = crate::config::prices::RawPrices {
        input_price: m.input_price,
        cached_input_price: m.cached_input_price,
        cache_write_price: m.cache_write_price,
        cache_write_1h_price: m.cache_write_1h_price,
        output_price: m.output_price,
    };
    let prices =
        crate::config::prices::sheet(raw, m.tiers, m.prices.as_deref(), &upstream_model, &f);
    if m.max_output_tokens == Some(0) {
        note(Err(err(
            f("max_output_tokens"),
            "expected a number greater than 0, got 0",
        )));
    }
    let structured = structured_via_tool(m.structured_output.as_deref(), &f);
    let cache = caching(m.cache_ttl_secs, m.cache_scope.as_deref(), &f);
    let listed_limit = crate::pricing::list::find(&upstream_model).and_then(|l| l.max_output);
    let (route, weights, prices, structured_via_tool, cache) =
        match (routed, prices, structured, cache) {
            (Ok((route, weights)), Ok(prices), Ok(s), Ok(c)) if errors.is_empty() => {
                (route, weights, prices, s, c)
            }
            (routed, prices, structured, cache) => {
                errors.extend(routed.err());
                errors.extend(prices.err());
                errors.extend(structured.err());
                errors.extend(cache.err());
                return Err(errors);
            }
        };
    Ok(Model {
        upstream_model,
        name: m.name,
        upstreams: names,
        prices,
        max_output_tokens: m
            .max_output_tokens
            .or(listed_limit)
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        image_tokens: m
            .image_tokens
            .unwrap_or(crate::protocol::estimate::IMAGE_TOKENS),
        reasoning: m.reasoning.unwrap_or(false),
        account_features: m.account_features.unwrap_or(false),
        disabled: false,
        route,
        weights,
        aliases: m.aliases,
        discovered: None,
        structured_via_tool,
        cache,
    })
}

/// `cache_ttl_secs` (absent or 0: no cache) and `cache_scope` (`key` by default).
fn caching(
    ttl: Option<u64>,
    scope: Option<&str>,
    f: &dyn Fn(&str) -> String,
) -> Result<Option<crate::config::Caching>, ConfigError> {
    let scope = match scope {
        None => crate::config::CacheScope::Key,
        Some(v) => crate::config::CacheScope::parse(v).ok_or_else(|| {
            err(
                f("cache_scope"),
                format!("expected \"key\", \"group\" or \"all\", got {v:?}"),
            )
        })?,
    };
    Ok(ttl.filter(|&t| t > 0).map(|t| crate::config::Caching {
        ttl: Duration::from_secs(t),
        scope,
    }))
}

/// A model's name: not empty, no whitespace, not taken.
fn check_model_name(
    name: &str,
    seen: &mut HashSet<String>,
    f: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(err(
            f("name"),
            format!("expected a non-empty name without spaces, got {name:?}"),
        ));
    }
    if !seen.insert(name.to_string()) {
        return Err(err(f("name"), format!("duplicate model name {name:?}")));
    }
    Ok(())
}

/// Every upstream a model names is declared.
fn check_upstreams_known(
    names: &[String],
    upstreams: &[String],
    f: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    for n in names {
        if !upstreams.iter().any(|u| u == n) {
            let known: Vec<&str> = upstreams.iter().map(String::as_str).collect();
            return Err(err(
                f("upstream"),
                format!(
                    "unknown upstream {n:?}; expected one of [{}]",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// `structured_output`: `native` (the default) or `tool` (an Anthropic upstream is asked for structured
/// output with a forced tool).
fn structured_via_tool(v: Option<&str>, f: &dyn Fn(&str) -> String) -> Result<bool, ConfigError> {
    match v {
        None | Some("native") => Ok(false),
        Some("tool") => Ok(true),
        Some(other) => Err(err(
            f("structured_output"),
            format!("expected \"native\" or \"tool\", got {other:?}"),
        )),
    }
}

/// Names and aliases are unique across models (an alias is never another model's name); patterns that tie
/// (equally specific, can match the same names) are warned about; an alias that is a pattern, and an alias of
/// a pattern entry, are refused.
pub(super) fn check_names(models: &[Model], p: &mut Problems) {
    let mut taken: HashMap<&str, &str> = HashMap::new();
    for m in models {
        taken.insert(&m.name, &m.name);
    }
    for (i, m) in models.iter().enumerate() {
        if crate::config::names::is_pattern(&m.name) && !m.aliases.is_empty() {
            // A pattern entry serves many names: the group check is made on the name asked for, and an alias
            // would be a name the pattern may not match (give it an entry of its own instead).
            p.errors.push(err(
                format!("models[{i}].aliases"),
                format!(
                    "the pattern entry {:?} cannot have aliases; give {:?} an entry of its own",
                    m.name, m.aliases[0]
                ),
            ));
        }
        for a in &m.aliases {
            if crate::config::names::is_pattern(a)
                || a.is_empty()
                || a.chars().any(char::is_whitespace)
            {
                p.errors.push(err(
                    format!("models[{i}].aliases"),
                    format!("expected plain names (no spaces, `*` or `?`), got {a:?}"),
                ));
            } else if let Some(other) = taken.insert(a, &m.name) {
                p.errors.push(err(
                    format!("models[{i}].aliases"),
                    format!("{a:?} already names the model {other:?}"),
                ));
            }
        }
    }
    let index = crate::config::names::ModelIndex::build(models);
    for (a, b) in index.ties(models) {
        p.warnings.push(format!(
            "the model patterns {a:?} and {b:?} are equally specific and can match the same names: the one \
             listed first serves them"
        ));
    }
}
