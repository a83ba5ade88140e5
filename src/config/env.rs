//! Where a configuration's environment variables are read (upstream credentials, the admin token, the
//! store's passwords): the process's environment, with some names set or unset on top. The binary reads
//! the process's as it is; a server run inside another program (a test starting several gateways in one
//! process) is given its own names without changing the process's environment, which other threads read.

use std::collections::BTreeMap;

/// Where a configuration's environment variables are read: the process's environment, with names set or unset
/// on top ([`Env::set`], [`Env::unset`]).
#[derive(Debug, Clone, Default)]
pub struct Env {
    over: BTreeMap<String, Option<String>>,
}

impl Env {
    /// The process's environment as it is.
    pub fn process() -> Env {
        Env::default()
    }

    /// `name` reads as `value`, whatever the process's environment says.
    pub fn set(mut self, name: &str, value: &str) -> Env {
        self.over.insert(name.to_string(), Some(value.to_string()));
        self
    }

    /// `name` reads as unset, whatever the process's environment says.
    pub fn unset(mut self, name: &str) -> Env {
        self.over.insert(name.to_string(), None);
        self
    }

    /// The value of `name`; None when it is unset (or not valid Unicode).
    pub fn var(&self, name: &str) -> Option<String> {
        match self.over.get(name) {
            Some(v) => v.clone(),
            None => std::env::var(name).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_set_or_unset_on_top_win() {
        let env = Env::process().set("TG_ENV_TEST_SET", "x").unset("PATH");
        assert_eq!(env.var("TG_ENV_TEST_SET").as_deref(), Some("x"));
        assert_eq!(env.var("PATH"), None);
        assert_eq!(Env::process().var("TG_ENV_TEST_SET"), None);
    }
}
