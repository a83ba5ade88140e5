//! A model's prices in the config file: the five prices, `[[models.tiers]]`, `prices = "none"`, and the
//! built-in list prices (`pricing::list`) for a model that sets none; what `check` refuses about them and
//! what it warns of (a paid upstream served for nothing, writes cheaper than reads, list prices in another
//! currency).

use serde::Deserialize;

use super::{err, ConfigError, Model, Upstream, UpstreamKind};
use crate::money::Money;
use crate::pricing::{list, PriceSheet, Prices, Source, Tier};

/// The price fields of a `[[models]]` entry.
#[derive(Default)]
pub(super) struct RawPrices {
    pub input_price: Option<Money>,
    pub cached_input_price: Option<Money>,
    pub cache_write_price: Option<Money>,
    pub cache_write_1h_price: Option<Money>,
    pub output_price: Option<Money>,
}

/// One `[[models.tiers]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTier {
    above_input_tokens: Option<u64>,
    input_price: Option<Money>,
    cached_input_price: Option<Money>,
    cache_write_price: Option<Money>,
    cache_write_1h_price: Option<Money>,
    output_price: Option<Money>,
}

impl RawTier {
    fn prices(&self) -> RawPrices {
        RawPrices {
            input_price: self.input_price,
            cached_input_price: self.cached_input_price,
            cache_write_price: self.cache_write_price,
            cache_write_1h_price: self.cache_write_1h_price,
            output_price: self.output_price,
        }
    }
}

impl RawPrices {
    fn named(&self) -> [(&'static str, Option<Money>); 5] {
        [
            ("input_price", self.input_price),
            ("cached_input_price", self.cached_input_price),
            ("cache_write_price", self.cache_write_price),
            ("cache_write_1h_price", self.cache_write_1h_price),
            ("output_price", self.output_price),
        ]
    }

    fn any(&self) -> bool {
        self.named().iter().any(|(_, v)| v.is_some())
    }

    /// Each price set is 0 or more with at most 6 decimals.
    fn check(&self, f: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        for (k, v) in self.named() {
            if let Some(p) = v {
                crate::money::check_price(p).map_err(|m| err(f(k), m.to_string()))?;
            }
        }
        Ok(())
    }
}

/// A model's price sheet: its own prices and tiers; none and `prices = "none"`: free on purpose; none at
/// all: the list prices of its upstream model when the table has them.
pub(super) fn sheet(
    raw: RawPrices,
    tiers: Vec<RawTier>,
    opt: Option<&str>,
    upstream_model: &str,
    f: &dyn Fn(&str) -> String,
) -> Result<PriceSheet, ConfigError> {
    raw.check(f)?;
    let tiers = validate_tiers(tiers, f)?;
    let own = raw.any() || !tiers.is_empty();
    let source = match opt {
        None if own => Source::Set,
        None => match list::find(upstream_model) {
            Some(l) => return Ok(l.sheet()),
            None => Source::Unset,
        },
        Some("none") if own => {
            return Err(err(
                f("prices"),
                "`prices = \"none\"` says the model is free: leave out its prices and tiers, or this line",
            ))
        }
        Some("none") => Source::OptedOut,
        Some(other) => {
            return Err(err(
                f("prices"),
                format!("expected \"none\" (no prices, not even the built-in list prices), got {other:?}"),
            ))
        }
    };
    Ok(PriceSheet {
        base: Prices {
            input: raw.input_price.unwrap_or_default(),
            cached_input: raw.cached_input_price,
            cache_write: raw.cache_write_price,
            cache_write_1h: raw.cache_write_1h_price,
            output: raw.output_price.unwrap_or_default(),
        },
        tiers,
        source,
        later: None,
    })
}

/// Tiers: each with a threshold and at least one price, thresholds rising.
fn validate_tiers(raw: Vec<RawTier>, f: &dyn Fn(&str) -> String) -> Result<Vec<Tier>, ConfigError> {
    let mut tiers: Vec<Tier> = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let tf = |k: &str| f(&format!("tiers[{i}].{k}"));
        let p = t.prices();
        p.check(&tf)?;
        let Some(above) = t.above_input_tokens else {
            return Err(err(
                tf("above_input_tokens"),
                "a tier needs the input size it starts above (above_input_tokens = 200000)",
            ));
        };
        if !p.any() {
            return Err(err(
                tf("input_price"),
                "a tier sets at least one of input_price, cached_input_price, cache_write_price, \
                 cache_write_1h_price, output_price",
            ));
        }
        if let Some(prev) = tiers.last().filter(|p| p.above_input_tokens >= above) {
            return Err(err(
                tf("above_input_tokens"),
                format!(
                    "tiers go by rising above_input_tokens: {above} comes after {}",
                    prev.above_input_tokens
                ),
            ));
        }
        tiers.push(Tier {
            above_input_tokens: above,
            input: p.input_price,
            cached_input: p.cached_input_price,
            cache_write: p.cache_write_price,
            cache_write_1h: p.cache_write_1h_price,
            output: p.output_price,
        });
    }
    Ok(tiers)
}

/// Warnings about prices: a cache write priced below a cache read (a probable mistake: writes cost more
/// than reads at every vendor), a model that serves a paid upstream for nothing (no price, not in the list,
/// not opted out), list prices (USD) shown in another currency.
pub(super) fn warnings(
    models: &[Model],
    upstreams: &[Upstream],
    currency: &str,
    warnings: &mut Vec<String>,
) {
    for (i, m) in models.iter().enumerate() {
        let s = &m.prices;
        let sets_writes = |p: &Prices| p.cache_write.is_some() || p.cache_write_1h.is_some();
        let mut sheets = vec![(String::new(), s.base)];
        for (k, t) in s.tiers.iter().enumerate() {
            sheets.push((format!(" (tiers[{k}])"), t.over(&s.base)));
        }
        for (at, p) in sheets {
            let r = p.rates();
            let cheap = r.cache_write_5m.min(r.cache_write_1h);
            if s.source == Source::Set && sets_writes(&p) && cheap < r.cache_read {
                warnings.push(format!(
                    "models[{i}]{at}: model {:?} prices cache writes ({cheap}) below cache reads ({}); writes cost \
                     more than reads at every vendor (Anthropic: 1.25× input for 5 minutes, 2× for an hour; reads \
                     0.1×)",
                    m.name, r.cache_read
                ));
            }
        }
        if let (Source::Set, Some(l)) = (s.source, list::find(&m.upstream_model)) {
            let missing: Vec<&str> = [
                (
                    "cached_input_price",
                    s.base.cached_input.is_none() && l.prices.cached.is_some(),
                ),
                (
                    "cache_write_price",
                    s.base.cache_write.is_none() && l.prices.write.is_some(),
                ),
            ]
            .into_iter()
            .filter_map(|(k, miss)| miss.then_some(k))
            .collect();
            if !missing.is_empty() {
                warnings.push(format!(
                    "models[{i}]: model {:?} sets its own prices but not {}: those tokens are billed at the input \
                     price, while {} prices them apart (list: {}); set them, or leave out every price to take the \
                     list's",
                    m.name,
                    missing.join(" or "),
                    l.model,
                    l.sheet().describe()
                ));
            }
        }
        if s.source == Source::Unset {
            let paid = m
                .upstreams
                .iter()
                .filter_map(|n| upstreams.iter().find(|u| &u.name == n))
                .find(|u| is_paid(u));
            if let Some(u) = paid {
                warnings.push(format!(
                    "models[{i}]: model {:?} sends paid traffic to upstream {:?} ({}) but has no price: its requests \
                     cost nothing. Set input_price and output_price (credits per 1M tokens), or prices = \"none\" if \
                     that is meant ({:?} is not in the built-in list prices)",
                    m.name, u.name, u.base_url, m.upstream_model
                ));
            }
        }
    }
    let listed = models
        .iter()
        .any(|m| matches!(m.prices.source, Source::List(_)));
    if listed && !["credits", "USD", "usd", "$"].contains(&currency) {
        warnings.push(format!(
            "currency is {currency:?}, but the built-in list prices are US dollars (taken as credits one for one): \
             set the models' prices, or prices = \"none\""
        ));
    }
}

/// An upstream that bills: not the mock, not a server on this machine or a private network.
fn is_paid(u: &Upstream) -> bool {
    if u.kind == UpstreamKind::Mock {
        return false;
    }
    let rest = u.base_url.split_once("://").map_or("", |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
    .to_ascii_lowercase();
    !is_local_host(&host)
}

/// Loopback, private and link-local addresses and names that only resolve locally.
fn is_local_host(host: &str) -> bool {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return match ip {
            std::net::IpAddr::V4(v4) => {
                v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified()
            }
            std::net::IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || (v6.segments()[0] & 0xfe00) == 0xfc00
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
            }
        };
    }
    host == "localhost"
        || [".localhost", ".local", ".internal", ".lan", ".home.arpa"]
            .iter()
            .any(|s| host.ends_with(s))
        || !host.contains('.')
}

/// One line per model that takes the list prices (for the start's log and `check`).
pub fn list_price_lines(models: &[Model]) -> Vec<String> {
    models
        .iter()
        .filter_map(|m| match m.prices.source {
            Source::List(row) => Some(format!(
                "model {:?} takes the list prices of {row} (table of {}, USD as credits, per 1M tokens): {}",
                m.name,
                list::AS_OF,
                m.prices.describe()
            )),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(url: &str) -> Upstream {
        let mut u = crate::config::Config::embedded().upstreams[0].clone();
        u.kind = UpstreamKind::Speaks(crate::protocol::Protocol::Chat);
        u.base_url = url.into();
        u
    }

    #[test]
    fn local_and_private_upstreams_are_not_paid() {
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://localhost:8000/v1",
            "http://[::1]:8000/v1",
            "http://192.168.1.20/v1",
            "http://vllm:8000/v1",
            "http://host.docker.internal:1234/v1",
        ] {
            assert!(!is_paid(&up(url)), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://api.anthropic.com",
            "http://8.8.8.8/v1",
        ] {
            assert!(is_paid(&up(url)), "{url}");
        }
    }
}
