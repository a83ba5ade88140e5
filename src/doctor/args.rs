//! The command line of `tollgate doctor`.

use std::path::PathBuf;

use argh::FromArgs;

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
pub enum ArgError {
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
