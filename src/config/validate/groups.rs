//! The `[[groups]]` entries (name, limits, budget; with none, a `default` group that may use every model),
//! and the warnings for groups and models that do not meet: a group that may use no model, a group listing
//! an alias, a model no group may use.

use std::collections::HashSet;

use super::{Problems, RawGroup};
use crate::config::{err, ConfigError, Group, Model};

/// The `[[groups]]` entries; with none, one `default` group may use every model.
pub(super) fn validate_groups(raw: Vec<RawGroup>, p: &mut Problems) -> Vec<Group> {
    let mut seen = HashSet::new();
    let mut groups = Vec::new();
    for (i, g) in raw.into_iter().enumerate() {
        if let Some(g) = p.take(validate_group(i, g, &mut seen).map(Some), None) {
            groups.push(g);
        }
    }
    if groups.is_empty() {
        groups.push(Group {
            name: "default".into(),
            models: vec!["*".into()],
            rpm: None,
            tpm: None,
            max_concurrent: None,
            budget: None,
        });
    }
    groups
}

fn validate_group(i: usize, g: RawGroup, seen: &mut HashSet<String>) -> Result<Group, ConfigError> {
    let f = |k: &str| format!("groups[{i}].{k}");
    if g.name.is_empty() || g.name.chars().any(char::is_whitespace) {
        return Err(err(
            f("name"),
            format!("expected a non-empty name without spaces, got {:?}", g.name),
        ));
    }
    if !seen.insert(g.name.clone()) {
        return Err(err(f("name"), format!("duplicate group name {:?}", g.name)));
    }
    for (k, v) in [
        ("rpm", g.rpm),
        ("tpm", g.tpm),
        ("max_concurrent", g.max_concurrent),
    ] {
        if v == Some(0) {
            return Err(err(
                f(k),
                "expected a limit greater than 0 (leave it out for no limit)",
            ));
        }
    }
    let budget = match (g.budget, g.budget_period.as_deref()) {
        (None, None) => None,
        (Some(amount), Some(period)) => Some(
            crate::budget::Budget::new(amount, period)
                .map_err(|m| err(f("budget"), m.to_string()))?,
        ),
        _ => {
            return Err(err(
                f("budget"),
                "give both `budget` (credits) and `budget_period` (daily, weekly or monthly), or neither",
            ))
        }
    };
    Ok(Group {
        name: g.name,
        models: g.models,
        rpm: g.rpm,
        tpm: g.tpm,
        max_concurrent: g.max_concurrent,
        budget,
    })
}

/// Groups that may use no model, and models no group may use.
pub(super) fn coverage_warnings(models: &[Model], groups: &[Group], warnings: &mut Vec<String>) {
    // A glob may serve a pattern entry when the two can match a common name (requests are then checked on
    // the name asked for).
    let allows = |g: &Group, m: &Model| {
        g.models.iter().any(|pat| {
            crate::config::names::glob_match(pat, &m.name)
                || (crate::config::names::is_pattern(&m.name)
                    && crate::config::names::globs_overlap(pat, &m.name))
        })
    };
    for g in groups {
        if !models.iter().any(|m| allows(g, m)) {
            warnings.push(format!(
                "group {:?} may use no configured model (its models: [{}]); its keys get 403 on every request",
                g.name,
                g.models.join(", ")
            ));
        }
    }
    for g in groups {
        for name in &g.models {
            let alias_of = models
                .iter()
                .find(|m| m.aliases.contains(name) && !models.iter().any(|x| &x.name == name));
            if let Some(m) = alias_of {
                warnings.push(format!(
                    "group {:?} lists {name:?}, which is only an alias of the model {:?}: aliases never grant \
                     access; list {:?}",
                    g.name, m.name, m.name
                ));
            }
        }
    }
    for m in models {
        if !groups.iter().any(|g| allows(g, m)) {
            warnings.push(format!(
                "model {:?} is in no group's models list, so no key may use it",
                m.name
            ));
        }
    }
}
