//! The `tollgate` binary: parses the command line and hands over to `tollgate::cli`.

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let name = argv.first().map(String::as_str).unwrap_or("tollgate");
    let rest: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    if matches!(rest.as_slice(), ["--version"] | ["-V"] | ["version"]) {
        println!("tollgate {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let args = match <tollgate::cli::Args as argh::FromArgs>::from_args(&[name], &rest) {
        Ok(a) => a,
        // `--help` prints to stdout and succeeds; unusable arguments print why and exit 2.
        Err(e) if e.status.is_ok() => {
            println!("{}", e.output);
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{}", e.output);
            std::process::exit(2);
        }
    };
    let code = tollgate::cli::run(args);
    // Log lines still queued for the writer thread are written before the process ends.
    log::logger().flush();
    std::process::exit(code);
}
