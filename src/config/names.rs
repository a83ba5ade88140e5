//! Finding a model by the name a client asks for, in a fixed order that no caller can change:
//!
//! 1. configured exact names and aliases (one hash map: O(1) however many models);
//! 2. configured name patterns (`claude-*`, `?` and `*`), the most specific first (the longest literal
//!    prefix, then the most literal characters); a name that itself holds `*` or `?` is never matched
//!    against them, it finds only the pattern entry of exactly that text (records and the console name
//!    entries so; no group glob matches such a name, so a client asking for one is refused);
//! 3. models discovery found on local servers (`upstream/discovery.rs`), by their exact name only.
//!
//! So a configured entry, exact, alias or pattern, always beats a discovered one, and a discovered model is
//! never a pattern (one whose id holds `*` or `?` is not indexed at all): no local process can take over
//! names the operator configured, nor become a catch-all.

use std::collections::HashMap;

use super::Model;

/// The lookup built from the models (their order in the config).
#[derive(Debug, Clone, Default)]
pub struct ModelIndex {
    /// Configured names and aliases.
    exact: HashMap<String, usize>,
    /// Configured pattern entries, most specific first.
    patterns: Vec<usize>,
    /// The same by their own text (`gpt-*`), for finding an entry by its name (records, the console): a
    /// name holding `*` or `?` is looked up only here, literally, never matched against a glob.
    pattern_names: HashMap<String, usize>,
    /// Discovered models, by their exact name; asked only when no configured entry matches.
    discovered: HashMap<String, usize>,
}

/// Whether a model name is a pattern.
pub(crate) fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?'])
}

/// How specific a pattern is: its literal prefix's length, then its literal characters.
pub(crate) fn specificity(pattern: &str) -> (usize, usize) {
    let prefix = pattern.find(['*', '?']).unwrap_or(pattern.len());
    let literal = pattern.chars().filter(|c| !matches!(c, '*' | '?')).count();
    (prefix, literal)
}

/// Whether two globs can match a common name (for `check`'s warnings; requests never compare globs). A walk
/// over both at once: `?` and a literal each take one character, `*` takes any run.
pub(crate) fn globs_overlap(a: &str, b: &str) -> bool {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut seen = vec![false; (a.len() + 1) * (b.len() + 1)];
    let mut todo = vec![(0usize, 0usize)];
    while let Some((i, j)) = todo.pop() {
        let at = i * (b.len() + 1) + j;
        if seen[at] {
            continue;
        }
        seen[at] = true;
        let (x, y) = (a.get(i).copied(), b.get(j).copied());
        match (x, y) {
            (None, None) => return true,
            (Some('*'), _) | (_, Some('*')) => {
                if x == Some('*') {
                    todo.push((i + 1, j));
                    if y.is_some() {
                        todo.push((i, j + 1));
                    }
                }
                if y == Some('*') {
                    todo.push((i, j + 1));
                    if x.is_some() {
                        todo.push((i + 1, j));
                    }
                }
            }
            (Some(x), Some(y)) if x == '?' || y == '?' || x == y => todo.push((i + 1, j + 1)),
            _ => {}
        }
    }
    false
}

impl ModelIndex {
    pub fn build(models: &[Model]) -> ModelIndex {
        let mut exact = HashMap::new();
        let mut patterns = Vec::new();
        let mut pattern_names = HashMap::new();
        let mut discovered = HashMap::new();
        for (i, m) in models.iter().enumerate() {
            if m.discovered.is_some() {
                // Only ever an exact name, never a pattern.
                if !is_pattern(&m.name) {
                    discovered.entry(m.name.clone()).or_insert(i);
                }
                continue;
            }
            if is_pattern(&m.name) {
                patterns.push(i);
                pattern_names.entry(m.name.clone()).or_insert(i);
            } else {
                exact.entry(m.name.clone()).or_insert(i);
            }
            for a in &m.aliases {
                exact.entry(a.clone()).or_insert(i);
            }
        }
        patterns.sort_by_key(|&i| std::cmp::Reverse(specificity(&models[i].name)));
        ModelIndex {
            exact,
            patterns,
            pattern_names,
            discovered,
        }
    }

    /// The entry serving `requested`: a configured exact name or alias, else the most specific configured
    /// pattern that matches it, else a discovered model of exactly that name.
    pub fn resolve(&self, models: &[Model], requested: &str) -> Option<usize> {
        self.configured(models, requested)
            .or_else(|| self.discovered.get(requested).copied())
    }

    /// The configured entry serving `requested`, if any (discovered models left out). A name holding `*` or
    /// `?` is a pattern entry's own name or nothing (group globs never match it, so a client asking for one
    /// is refused).
    pub fn configured(&self, models: &[Model], requested: &str) -> Option<usize> {
        if is_pattern(requested) {
            return self.pattern_names.get(requested).copied();
        }
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
                if specificity(a) == specificity(b) && globs_overlap(a, b) {
                    out.push((a.as_str(), b.as_str()));
                }
            }
        }
        out
    }
}

/// Glob match with `*` (any run) and `?` (one character), as used in group model lists and model name
/// patterns. Globs match concrete names only: a `name` holding `*` or `?` is never matched (not even by `*`),
/// so a glob can never be stretched over another pattern's text (`o?` does not match the entry `o*`).
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    if is_pattern(name) {
        return false;
    }
    if pattern == "*" {
        return true;
    }
    if !pattern.contains(['*', '?']) {
        return pattern == name;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
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
    fn overlapping_globs() {
        assert!(globs_overlap("gpt-*", "gpt-?"));
        assert!(globs_overlap("o?", "o*"));
        assert!(globs_overlap("*", "x"));
        assert!(globs_overlap("a*c", "ab*"));
        assert!(globs_overlap("*x*", "*y*"));
        assert!(!globs_overlap("a*x", "a*y"));
        assert!(!globs_overlap("o?", "o??*"));
        assert!(!globs_overlap("gpt-*", "claude-*"));
        assert!(!globs_overlap("ab", "a"));
    }

    /// Configured entries (exact, alias, any pattern) always beat discovered ones, and a discovered entry
    /// named like a pattern is never indexed.
    #[test]
    fn configured_names_beat_discovered_ones() {
        let mut ms = models(&[("gpt-*", &[]), ("sonnet", &["fast"])]);
        let base = ms[0].clone();
        for name in ["gpt-4o", "fast", "*", "gpt-4*", "qwen3"] {
            ms.push(Model {
                name: name.to_string(),
                discovered: Some("http://127.0.0.1:11434/v1".into()),
                ..base.clone()
            });
        }
        let ix = ModelIndex::build(&ms);
        assert_eq!(ix.resolve(&ms, "gpt-4o"), Some(0), "the configured pattern");
        assert_eq!(ix.resolve(&ms, "gpt-4omni"), Some(0));
        assert_eq!(ix.resolve(&ms, "fast"), Some(1), "the configured alias");
        assert_eq!(
            ix.resolve(&ms, "qwen3"),
            Some(6),
            "a discovered model by its name"
        );
        assert_eq!(ix.resolve(&ms, "llama"), None, "no discovered catch-all");
        assert_eq!(
            ix.resolve(&ms, "*"),
            None,
            "no discovered pattern is indexed"
        );
        assert_eq!(ix.resolve(&ms, "gpt-4*"), None);
        assert_eq!(
            ix.resolve(&ms, "gpt-*"),
            Some(0),
            "an entry by its own name"
        );
        assert_eq!(ix.resolve(&ms, "gpt-?"), None, "never by globbing");
        assert_eq!(ix.configured(&ms, "qwen3"), None);
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
