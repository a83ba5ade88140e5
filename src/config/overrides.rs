//! Changes made from the console, kept in `data_dir/overrides.json` beside (never inside) the operator's
//! config file: groups created or edited, and models disabled or repriced. At start and after every change
//! they are applied on top of the config file; the file is rewritten atomically.

use std::collections::BTreeMap;
use std::path::Path;

use crate::money::Money;
use serde::{Deserialize, Serialize};

use super::{err, Config, ConfigError, Group};

/// File name inside `data_dir`.
pub const OVERRIDES_FILE: &str = "overrides.json";

/// A group as the console defines it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupSpec {
    /// The group's name: not empty, without spaces, at most 64 bytes. A config file group of this name is
    /// replaced.
    pub name: String,
    /// The model names or globs (`gpt-*`) its keys may use.
    pub models: Vec<String>,
    /// Requests per minute per key (None: no limit; never 0).
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens per minute per key (None: no limit; never 0).
    #[serde(default)]
    pub tpm: Option<u64>,
    /// Requests in flight at once per key (None: no limit; never 0).
    #[serde(default)]
    pub max_concurrent: Option<u64>,
    /// The spend budget of each key in the group that has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
}

/// What the console changed about a model.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModelChange {
    /// `Some(true)`: switched off; `Some(false)`: switched on again; None: as the config file has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// The new price of input tokens, in credits per 1M tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_price: Option<Money>,
    /// The new price of output tokens (reasoning included), in credits per 1M tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_price: Option<Money>,
    /// The new price of input tokens read from the upstream's prompt cache, in credits per 1M tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_price: Option<Money>,
    /// The new price of tokens written to the prompt cache for 5 minutes (or a lifetime the upstream does not
    /// state), in credits per 1M tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_price: Option<Money>,
    /// The new price of tokens written to the prompt cache for 1 hour, in credits per 1M tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_price: Option<Money>,
    /// The cached-input price was cleared: cached input costs the input price again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_cached_input_price: bool,
    /// The cache-write price was cleared: writes cost the input price again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_cache_write_price: bool,
    /// The 1-hour write price was cleared: 1-hour writes cost the 5-minute write price again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_cache_write_1h_price: bool,
}

/// Everything the console changed, laid over the config file at start and after every change: kept in
/// `data_dir/overrides.json` ([`OVERRIDES_FILE`]) or, with a `[store]`, in the store.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Overrides {
    /// Groups added or replacing the config file's group of the same name.
    #[serde(default)]
    pub groups: Vec<GroupSpec>,
    /// Changes to models, by model entry name (kept, and ignored, while the config has no such model).
    #[serde(default)]
    pub models: BTreeMap<String, ModelChange>,
    /// Groups deleted in the console (the config file's included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted_groups: Vec<String>,
}

impl GroupSpec {
    /// Checks a group definition, naming the bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty()
            || self.name.len() > 64
            || self
                .name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(err(
                "name",
                format!(
                    "expected a non-empty name without spaces, got {:?}",
                    self.name
                ),
            ));
        }
        if self.models.iter().any(|m| m.trim().is_empty()) {
            return Err(err(
                "models",
                "expected model names or globs such as gpt-* (no empty entries)",
            ));
        }
        for (k, v) in [
            ("rpm", self.rpm),
            ("tpm", self.tpm),
            ("max_concurrent", self.max_concurrent),
        ] {
            if v == Some(0) {
                return Err(err(
                    k,
                    "expected a limit greater than 0 (leave it empty for no limit)",
                ));
            }
        }
        Ok(())
    }
}

impl ModelChange {
    /// Whether it changes any price.
    pub fn reprices(&self) -> bool {
        self.input_price.is_some()
            || self.output_price.is_some()
            || self.cached_input_price.is_some()
            || self.cache_write_price.is_some()
            || self.cache_write_1h_price.is_some()
            || self.clear_cached_input_price
            || self.clear_cache_write_price
            || self.clear_cache_write_1h_price
    }

    /// The model's prices with this change made: they become its own (`Source::Set`), list prices that
    /// were in force included; an announced change of the list no longer applies.
    pub fn apply(&self, sheet: &mut crate::pricing::PriceSheet) {
        if !self.reprices() {
            return;
        }
        let now = crate::util::unix_now();
        let current = sheet.in_force(now).clone();
        *sheet = current;
        sheet.source = crate::pricing::Source::Set;
        let b = &mut sheet.base;
        if let Some(p) = self.input_price {
            b.input = p;
        }
        if let Some(p) = self.output_price {
            b.output = p;
        }
        for (slot, set, clear) in [
            (
                &mut b.cached_input,
                self.cached_input_price,
                self.clear_cached_input_price,
            ),
            (
                &mut b.cache_write,
                self.cache_write_price,
                self.clear_cache_write_price,
            ),
            (
                &mut b.cache_write_1h,
                self.cache_write_1h_price,
                self.clear_cache_write_1h_price,
            ),
        ] {
            if set.is_some() {
                *slot = set;
            } else if clear {
                *slot = None;
            }
        }
    }

    /// Checks each price it sets (0 or more, at most `PRICE_DECIMALS` decimals), naming the bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (k, v) in [
            ("input_price", self.input_price),
            ("output_price", self.output_price),
            ("cached_input_price", self.cached_input_price),
            ("cache_write_price", self.cache_write_price),
            ("cache_write_1h_price", self.cache_write_1h_price),
        ] {
            if let Some(p) = v {
                crate::money::check_price(p).map_err(|m| err(k, m.to_string()))?;
            }
        }
        Ok(())
    }
}

impl Overrides {
    /// Reads the overrides in `data_dir` (none when the file is missing).
    pub fn load(data_dir: &Path) -> Result<Overrides, ConfigError> {
        let path = data_dir.join(OVERRIDES_FILE);
        match crate::util::read_owned_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| err("", format!("{}: not valid overrides ({e})", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Overrides::default()),
            Err(e) => Err(err("", format!("cannot read {}: {e}", path.display()))),
        }
    }

    /// Writes the overrides atomically.
    pub fn save(&self, data_dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::util::write_atomic(&data_dir.join(OVERRIDES_FILE), &text)
    }
}

impl Config {
    /// This config with the console's changes applied.
    pub fn with_overrides(&self, o: &Overrides) -> Result<Config, ConfigError> {
        let mut c = self.clone();
        c.groups.retain(|g| !o.deleted_groups.contains(&g.name));
        for g in &o.groups {
            g.validate().map_err(|e| {
                err(
                    format!("overrides.groups[{}].{}", g.name, e.field),
                    e.message,
                )
            })?;
            let group = Group {
                name: g.name.clone(),
                models: g.models.clone(),
                rpm: g.rpm,
                tpm: g.tpm,
                max_concurrent: g.max_concurrent,
                budget: g.budget,
            };
            match c.groups.iter_mut().find(|x| x.name == g.name) {
                Some(existing) => *existing = group,
                None => c.groups.push(group),
            }
        }
        for (name, change) in &o.models {
            change
                .validate()
                .map_err(|e| err(format!("overrides.models.{name}.{}", e.field), e.message))?;
            // Changes for a model the config no longer has are kept (and ignored) in case it comes back.
            let Some(m) = c.models.iter_mut().find(|m| &m.name == name) else {
                continue;
            };
            if let Some(d) = change.disabled {
                m.disabled = d;
            }
            change.apply(&mut m.prices);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_add_and_replace() {
        let base = Config::embedded();
        let mut o = Overrides::default();
        o.groups.push(GroupSpec {
            name: "default".into(),
            models: vec!["m*".into()],
            rpm: Some(5),
            tpm: None,
            max_concurrent: None,
            budget: None,
        });
        o.groups.push(GroupSpec {
            name: "new".into(),
            models: vec!["*".into()],
            rpm: None,
            tpm: None,
            max_concurrent: Some(2),
            budget: None,
        });
        o.models.insert(
            "mock".into(),
            ModelChange {
                disabled: Some(true),
                output_price: Some(Money::credits(3)),
                ..Default::default()
            },
        );
        let c = base.with_overrides(&o).unwrap();
        assert_eq!(c.group("default").unwrap().rpm, Some(5));
        assert_eq!(c.group("new").unwrap().max_concurrent, Some(2));
        assert!(c.model("mock").is_none(), "disabled models are hidden");
        assert_eq!(
            c.model_any("mock").unwrap().prices.base.output,
            Money::credits(3)
        );
        o.groups[0].rpm = Some(0);
        assert!(base.with_overrides(&o).unwrap_err().field.ends_with("rpm"));
    }
}
