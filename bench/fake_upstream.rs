//! A fast fake OpenAI Chat Completions upstream for the benchmarks and the soak: the harness's one fake
//! upstream (`tollgate_harness::upstream`) answering by its benchmark rules (`upstream/bench.rs`: what to
//! answer is read from `bench:key=value,…` markers in the request body).
//!
//! `cargo run --release -p tollgate-bench --bin fake-upstream -- [--listen 127.0.0.1:0]`
//! Prints `fake-upstream listening on http://ADDR` on stdout once it accepts connections.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};

use argh::FromArgs;

#[derive(FromArgs)]
/// A fast fake OpenAI Chat Completions upstream for the benchmarks and the soak.
struct Args {
    /// where to listen (default 127.0.0.1:0: a free port)
    #[argh(option, default = "SocketAddr::from(([127, 0, 0, 1], 0))")]
    listen: SocketAddr,
}

fn main() {
    let args: Args = tollgate_bench::args();
    let listener = TcpListener::bind(args.listen).expect("bind");
    println!(
        "fake-upstream listening on http://{}",
        listener.local_addr().expect("the bound address")
    );
    let _ = std::io::stdout().flush();
    let _upstream = tollgate_harness::upstream::FakeUpstream::start_bench(listener);
    loop {
        std::thread::park();
    }
}
