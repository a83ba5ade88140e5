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
}
