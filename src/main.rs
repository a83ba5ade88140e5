//! The `tollgate` binary: parses the command line and hands over to `tollgate::cli`.

fn main() {
    let args: tollgate::cli::Args = argh::from_env();
    let code = tollgate::cli::run(args);
    // Log lines still queued for the writer thread are written before the process ends.
    log::logger().flush();
    std::process::exit(code);
}
