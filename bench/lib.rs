//! What the benchmark programs share beyond the harness (`tollgate-harness`): their arguments.

/// The program's arguments, parsed by `argh`; `--help` prints the usage and exits 0, and an argument that
/// is unknown, missing or unusable (`--duration abc`) is refused with why and the usage (exit 2).
pub fn args<T: argh::FromArgs>() -> T {
    let argv: Vec<String> = std::env::args().collect();
    let name = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("bench")
        .to_string();
    let rest: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    match T::from_args(&[&name], &rest) {
        Ok(args) => args,
        Err(e) if e.status.is_ok() => {
            println!("{}", e.output);
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{}", e.output.trim_end());
            if let Err(help) = T::from_args(&[&name], &["--help"]) {
                eprintln!("\n{}", help.output.trim_end());
            }
            std::process::exit(2);
        }
    }
}
