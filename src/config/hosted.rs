//! Paid hosted features a model allows: `allow_hosted_tools` (tool family → credits per use),
//! `allow_service_tiers` (tier → credits per request served at it), `max_hosted_uses` (the most hosted-tool
//! uses one request may ask for) and `allow_inference_geo` (the multiplier on a request's token cost when it
//! asks Anthropic for inference in one geography, 1.1 at Anthropic) on `[[models]]`. Kept beside the models, by entry name, so that models found
//! on local servers (which allow none) need nothing of it.

use std::collections::BTreeMap;

use super::{err, ConfigError};
use crate::money::Money;

/// The uses of hosted tools one request may ask for when the model does not say (`max_hosted_uses`).
pub(crate) const DEFAULT_MAX_HOSTED_USES: u64 = 10;

/// The largest `max_hosted_uses` accepted.
const MAX_HOSTED_USES: u64 = 1000;

/// Tool families tollgate recognizes in requests (others are allowed by name, with a warning).
const KNOWN_TOOLS: [&str; 9] = [
    "web_search",
    "web_fetch",
    "image_generation",
    "computer_use",
    "advisor",
    "file_search",
    "code_interpreter",
    "code_execution",
    "mcp",
];

/// What one model allows, and at what price.
#[derive(Debug, Clone, PartialEq)]
pub struct HostedPrices {
    /// Tool family (`web_search`, `web_fetch`, `image_generation`, `computer_use`, ...) → credits per use.
    pub tools: BTreeMap<String, Money>,
    /// Service tier (`priority`, `fast`, `scale`, ...) → credits per request served at it.
    pub tiers: BTreeMap<String, Money>,
    /// The most hosted-tool uses one request may ask for.
    pub max_uses: u64,
    /// Surcharge field (`inference_geo`) → the multiplier on the token cost of a request that sets it.
    pub surcharges: BTreeMap<String, Money>,
}

/// A model that allows nothing.
pub(crate) static NOTHING_ALLOWED: HostedPrices = HostedPrices {
    tools: BTreeMap::new(),
    tiers: BTreeMap::new(),
    max_uses: DEFAULT_MAX_HOSTED_USES,
    surcharges: BTreeMap::new(),
};

/// The keys of one `[[models]]` entry that allow paid features, as the file has them.
pub(super) struct Allowed {
    pub tools: Option<BTreeMap<String, Money>>,
    pub tiers: Option<BTreeMap<String, Money>>,
    pub max_uses: Option<u64>,
    pub inference_geo: Option<Money>,
}

/// The largest surcharge multiplier accepted (a typo such as 11 for 1.1 is caught).
const MAX_SURCHARGE: i64 = 10;

impl super::Config {
    /// What the model entry `name` allows (nothing, unless its `[[models]]` entry says).
    pub fn hosted_prices(&self, name: &str) -> &HostedPrices {
        self.hosted.get(name).unwrap_or(&NOTHING_ALLOWED)
    }
}

/// Validates the keys of `models[i]` that allow paid features; None when none is set. Unknown tool names
/// are warned about.
pub(super) fn validate(
    i: usize,
    allowed: Allowed,
    warnings: &mut Vec<String>,
) -> Result<Option<HostedPrices>, ConfigError> {
    let Allowed {
        tools,
        tiers,
        max_uses,
        inference_geo,
    } = allowed;
    if tools.is_none() && tiers.is_none() && max_uses.is_none() && inference_geo.is_none() {
        return Ok(None);
    }
    let f = |k: &str| format!("models[{i}].{k}");
    let mut surcharges = BTreeMap::new();
    if let Some(m) = inference_geo {
        if m <= Money::ZERO || m > Money::credits(MAX_SURCHARGE) {
            return Err(err(
                f("allow_inference_geo"),
                format!(
                    "expected the multiplier on the token cost (Anthropic charges 1.1), above 0 and at most \
                     {MAX_SURCHARGE}, got {m}"
                ),
            ));
        }
        surcharges.insert("inference_geo".to_string(), m);
    }
    let tools = tools.unwrap_or_default();
    let tiers = tiers.unwrap_or_default();
    for (key, map) in [
        ("allow_hosted_tools", &tools),
        ("allow_service_tiers", &tiers),
    ] {
        for (name, price) in map {
            let field = f(&format!("{key}.{name}"));
            let fine = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !fine {
                return Err(err(
                    field,
                    "expected a name of lowercase letters, digits and `_` (such as `web_search`)",
                ));
            }
            if price.is_negative() {
                return Err(err(
                    field,
                    format!("expected a price of 0 or more credits, got {price}"),
                ));
            }
        }
    }
    for name in tools.keys().filter(|n| !KNOWN_TOOLS.contains(&n.as_str())) {
        warnings.push(format!(
            "models[{i}].allow_hosted_tools.{name}: not a hosted tool tollgate knows ({}); requests are matched \
             by this name as it is",
            KNOWN_TOOLS.join(", ")
        ));
    }
    let max_uses = max_uses.unwrap_or(DEFAULT_MAX_HOSTED_USES);
    if !(1..=MAX_HOSTED_USES).contains(&max_uses) {
        return Err(err(
            f("max_hosted_uses"),
            format!("expected a number from 1 to {MAX_HOSTED_USES}, got {max_uses}"),
        ));
    }
    Ok(Some(HostedPrices {
        tools,
        tiers,
        max_uses,
        surcharges,
    }))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn config(model_extra: &str) -> Result<Config, crate::config::ConfigError> {
        Config::from_toml_str(&format!(
            "[[upstreams]]\nname='a'\nkind='mock'\n[[models]]\nname='m'\nupstream='a'\n{model_extra}\n\
             [[models]]\nname='plain'\nupstream='a'\n"
        ))
    }

    #[test]
    fn prices_per_use_are_read_and_checked() {
        let c = config(
            "allow_hosted_tools = { web_search = 10.0, image_generation = 0.04 }\n\
             allow_service_tiers = { priority = 0.5 }\nmax_hosted_uses = 4",
        )
        .unwrap();
        let h = c.hosted_prices("m");
        assert_eq!(h.tools["web_search"].to_string(), "10");
        assert_eq!(h.tools["image_generation"].to_string(), "0.04");
        assert_eq!(h.tiers["priority"].to_string(), "0.5");
        assert_eq!(h.max_uses, 4);
        let plain = c.hosted_prices("plain");
        assert!(plain.tools.is_empty() && plain.tiers.is_empty());
        assert_eq!(plain.max_uses, super::DEFAULT_MAX_HOSTED_USES);
        let e = config("allow_hosted_tools = { web_search = -1 }").unwrap_err();
        assert_eq!(e.field, "models[0].allow_hosted_tools.web_search");
        let e = config("allow_service_tiers = { 'Priority' = 1 }").unwrap_err();
        assert_eq!(e.field, "models[0].allow_service_tiers.Priority");
        let e = config("max_hosted_uses = 0").unwrap_err();
        assert_eq!(e.field, "models[0].max_hosted_uses");
        let c = config("allow_inference_geo = 1.1").unwrap();
        assert_eq!(
            c.hosted_prices("m").surcharges["inference_geo"].to_string(),
            "1.1"
        );
        for bad in ["0", "-1", "11"] {
            let e = config(&format!("allow_inference_geo = {bad}")).unwrap_err();
            assert_eq!(e.field, "models[0].allow_inference_geo");
        }
        let c = config("allow_hosted_tools = { websearch = 1 }").unwrap();
        assert!(
            c.warnings.iter().any(|w| w.contains("websearch")),
            "{:?}",
            c.warnings
        );
    }
}
