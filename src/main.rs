//! The `tollgate` binary: parses the command line and hands over to `tollgate::cli`.

fn main() {
    let args: tollgate::cli::Args = argh::from_env();
    std::process::exit(tollgate::cli::run(args));
}
