//! Finding a model by the name a client asks for: exact names and aliases in one hash map (O(1) however
//! many models), then name patterns (`claude-*`, `?` and `*`), the most specific first (the longest
//! literal prefix, then the most literal characters).

use std::collections::HashMap;

use super::{glob_match, Model};

/// The lookup built from the models (their order in the config).
#[derive(Debug, Clone, Default)]
pub struct ModelIndex {
    exact: HashMap<String, usize>,
    /// Pattern entries, most specific first.
    patterns: Vec<usize>,
}

/// Whether a model name is a pattern.
pub fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?'])
}

/// How specific a pattern is: its literal prefix's length, then its literal characters.
pub fn specificity(pattern: &str) -> (usize, usize) {
    let prefix = pattern.find(['*', '?']).unwrap_or(pattern.len());
    let literal = pattern.chars().filter(|c| !matches!(c, '*' | '?')).count();
    (prefix, literal)
}

impl ModelIndex {
    pub fn build(models: &[Model]) -> ModelIndex {
        let mut exact = HashMap::new();
        let mut patterns = Vec::new();
        for (i, m) in models.iter().enumerate() {
            if is_pattern(&m.name) {
                patterns.push(i);
            } else {
                exact.entry(m.name.clone()).or_insert(i);
            }
            for a in &m.aliases {
                exact.entry(a.clone()).or_insert(i);
            }
        }
        patterns.sort_by_key(|&i| std::cmp::Reverse(specificity(&models[i].name)));
        ModelIndex { exact, patterns }
    }

    /// The entry serving `requested`: an exact name or alias, else the most specific matching pattern.
    pub fn resolve(&self, models: &[Model], requested: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(requested) {
            return Some(i);
        }
        self.patterns
            .iter()
            .copied()
            .find(|&i| glob_match(&models[i].name, requested))
    }

    /// Pairs of patterns equally specific that can match the same names: which one serves is then only
    /// their order in the file (`check` warns).
    pub fn ties<'m>(&self, models: &'m [Model]) -> Vec<(&'m str, &'m str)> {
        let mut out = Vec::new();
        for (k, &i) in self.patterns.iter().enumerate() {
            for &j in &self.patterns[k + 1..] {
                let (a, b) = (&models[i].name, &models[j].name);
                if specificity(a) == specificity(b)
                    && (glob_match(a, b) || glob_match(b, a) || overlap(a, b))
                {
                    out.push((a.as_str(), b.as_str()));
                }
            }
        }
        out
    }
}

/// Whether two equally specific patterns can match a common name: their literal prefixes agree (a cheap,
/// conservative test).
fn overlap(a: &str, b: &str) -> bool {
    let pa = &a[..a.find(['*', '?']).unwrap_or(a.len())];
    let pb = &b[..b.find(['*', '?']).unwrap_or(b.len())];
    pa.starts_with(pb) || pb.starts_with(pa)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn models(names: &[(&str, &[&str])]) -> Vec<Model> {
        let base = Config::embedded().models[0].clone();
        names
            .iter()
            .map(|(n, aliases)| Model {
                name: n.to_string(),
                aliases: aliases.iter().map(|a| a.to_string()).collect(),
                ..base.clone()
            })
            .collect()
    }

    #[test]
    fn exact_names_and_aliases_beat_patterns_and_specific_patterns_win() {
        let ms = models(&[
            ("claude-*", &[]),
            ("claude-sonnet-*", &[]),
            ("sonnet", &["fast", "claude-sonnet-4-6"]),
        ]);
        let ix = ModelIndex::build(&ms);
        assert_eq!(ix.resolve(&ms, "sonnet"), Some(2));
        assert_eq!(ix.resolve(&ms, "fast"), Some(2));
        assert_eq!(
            ix.resolve(&ms, "claude-sonnet-4-6"),
            Some(2),
            "an alias beats a pattern"
        );
        assert_eq!(
            ix.resolve(&ms, "claude-sonnet-4-5"),
            Some(1),
            "the most specific pattern"
        );
        assert_eq!(ix.resolve(&ms, "claude-opus-4-6"), Some(0));
        assert_eq!(ix.resolve(&ms, "gpt-5"), None);
        assert!(ix.ties(&ms).is_empty());
        let tied = models(&[("gpt-*", &[]), ("gpt-?", &[])]);
        assert_eq!(ModelIndex::build(&tied).ties(&tied).len(), 1);
    }

    #[test]
    fn a_thousand_models_are_found_by_hash() {
        let names: Vec<String> = (0..1000).map(|i| format!("model-{i}")).collect();
        let pairs: Vec<(&str, &[&str])> = names.iter().map(|n| (n.as_str(), &[][..])).collect();
        let ms = models(&pairs);
        let ix = ModelIndex::build(&ms);
        assert_eq!(ix.resolve(&ms, "model-999"), Some(999));
        assert!(ix.patterns.is_empty(), "no pattern to scan");
    }
}
