//! The command line of `tollgate doctor`, and the key, model and protocols as given, checked before anything is sent.

use std::path::PathBuf;

use argh::FromArgs;

use super::url::{Finding, Severity};
use crate::protocol::{Protocol, ALL};

#[derive(FromArgs)]
/// Check a gateway (tollgate or any other speaking these protocols) with minimal requests per protocol,
/// non-streaming and streaming; prints each step with its likely cause, then a support report. Exit code 0
/// only when every step passed, 1 when a step failed, 2 for unusable arguments.
#[argh(subcommand, name = "doctor")]
pub struct DoctorArgs {
    /// the base URL a client is given: http://host:port or http://host:port/v1
    #[argh(option)]
    pub base_url: String,
    /// the API key to check (never printed; a key on the command line shows in `ps`: prefer --key-env)
    #[argh(option)]
    pub key: Option<String>,
    /// the environment variable holding the API key to check
    #[argh(option)]
    pub key_env: Option<String>,
    /// the model to ask
    #[argh(option)]
    pub model: String,
    /// also check embeddings (`POST /v1/embeddings`) with this model (an embedding model)
    #[argh(option)]
    pub embed_model: Option<String>,
    /// also check text completions (`POST /v1/completions`) with this model
    #[argh(option)]
    pub completion_model: Option<String>,
    /// chat, responses, messages or all (default), or a comma-separated list
    #[argh(option, default = "String::from(\"all\")")]
    pub protocol: String,
    /// the config file of a tollgate on this machine: its data directory's permissions are checked too
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// print one JSON document (the setup check, each step, the result and the support report) instead
    #[argh(switch)]
    pub json: bool,
}

/// Arguments the doctor cannot use: it prints this and exits with 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ArgError {
    /// `--protocol` names one the gateway does not know (as given).
    UnknownProtocol(String),
    /// `--key-env` names a variable that is not set.
    KeyEnvUnset(String),
    /// Both `--key` and `--key-env`.
    KeyTwice,
    /// Neither `--key` nor `--key-env`.
    NoKey,
    /// The key is empty.
    EmptyKey,
    /// The model is empty.
    EmptyModel,
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgError::UnknownProtocol(given) => {
                let names: Vec<&str> = crate::protocol::ALL.iter().map(|p| p.name).collect();
                write!(
                    f,
                    "--protocol: unknown protocol {given:?}; expected {} or all",
                    names.join(", ")
                )
            }
            ArgError::KeyEnvUnset(var) => write!(
                f,
                "--key-env: the environment variable {var} is not set (export it, or pass --key)"
            ),
            ArgError::KeyTwice => write!(f, "give either --key or --key-env, not both"),
            ArgError::NoKey => write!(
                f,
                "--key-env NAME (the variable holding the key) or --key KEY is required"
            ),
            ArgError::EmptyKey => write!(f, "the key is empty"),
            ArgError::EmptyModel => write!(f, "--model: the model name is empty"),
        }
    }
}

impl std::error::Error for ArgError {}

/// The key to check: `--key`, or the variable `--key-env` names (exactly one of them).
pub(super) fn key_argument(args: &DoctorArgs) -> Result<String, ArgError> {
    let key = match (&args.key, &args.key_env) {
        (Some(k), None) => k.clone(),
        (None, Some(var)) => std::env::var(var).map_err(|_| ArgError::KeyEnvUnset(var.clone()))?,
        (Some(_), Some(_)) => return Err(ArgError::KeyTwice),
        (None, None) => return Err(ArgError::NoKey),
    };
    if key.trim().is_empty() {
        return Err(ArgError::EmptyKey);
    }
    Ok(key)
}

/// A protocol's short name (`chat`, `responses`, `messages`), `all`, or a comma-separated list.
pub(super) fn parse_protocols(s: &str) -> Result<Vec<Protocol>, ArgError> {
    let mut out = Vec::new();
    for part in s.split(',').map(|p| p.trim().to_ascii_lowercase()) {
        let add: Vec<Protocol> = match part.as_str() {
            "all" => ALL.to_vec(),
            name => match Protocol::named(name) {
                Some(p) => vec![p],
                None => return Err(ArgError::UnknownProtocol(part)),
            },
        };
        for p in add {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

fn error(text: String) -> Finding {
    Finding {
        severity: Severity::Error,
        text,
    }
}

/// The key as a client should send it, and what is wrong with the given form.
pub(super) fn check_key(given: &str) -> (String, Vec<Finding>) {
    let mut findings = Vec::new();
    let mut key = given.to_string();
    if key.trim().len() != key.len() {
        findings.push(error(
            "the key has leading or trailing whitespace (a copied line break?); a key with spaces gives 401. \
             The doctor sent it without."
                .into(),
        ));
        key = key.trim().to_string();
    }
    for q in ['"', '\''] {
        if key.len() >= 2 && key.starts_with(q) && key.ends_with(q) {
            findings.push(error(
                "the key is wrapped in quotes, which become part of the key (401). The doctor sent it without."
                    .into(),
            ));
            key = key[1..key.len() - 1].to_string();
        }
    }
    if key.len() > 7
        && key
            .get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("bearer "))
    {
        findings.push(error(
            "the key starts with `Bearer `: clients add that word themselves, so the header would read \
             `Bearer Bearer …` (401). Give the key alone. The doctor sent it without."
                .into(),
        ));
        key = key[7..].trim_start().to_string();
    }
    if key.contains(char::is_whitespace) {
        findings.push(error(
            "the key contains whitespace inside it: keys have none; a key with spaces or line breaks gives 401 \
             (was it wrapped or pasted in pieces?). The doctor sent it without."
                .into(),
        ));
        key.retain(|c| !c.is_whitespace());
    }
    if key.chars().any(|c| !c.is_ascii_graphic()) {
        findings.push(error(
            "the key has characters keys never contain (not plain ASCII: a typographic quote or dash from a \
             document?); HTTP headers cannot carry it as it is."
                .into(),
        ));
    } else if key.starts_with("tg_") && key.len() != 43 {
        findings.push(error(format!(
            "the key looks like a tollgate key but has {} characters where tollgate keys have 43 (`tg_` and 40 \
             more): it was cut off or joined with something when copied.",
            key.len()
        )));
    }
    (key, findings)
}

/// The model as a client should send it.
pub(super) fn check_model(given: &str) -> (String, Vec<Finding>) {
    let model = given.trim();
    if model.len() == given.len() {
        return (model.to_string(), Vec::new());
    }
    (
        model.to_string(),
        vec![error(
            "the model name has leading or trailing whitespace; gateways compare names exactly (404 or 403). \
             The doctor sent it without."
                .into(),
        )],
    )
}
