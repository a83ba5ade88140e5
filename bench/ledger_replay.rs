//! Ledger replay benchmark: writes a ledger of N realistic records (default 1,000,000) and times the replay
//! tollgate does at start to rebuild balances when there is no checkpoint (the speed a start replays the
//! records after its checkpoint at; `ledger-history` times whole starts with a long history).
//!
//! `cargo run --release -p tollgate-bench --bin ledger-replay [-- N]`

use std::io::Write;
use std::time::{Duration, Instant};

use tollgate::ledger::{Ledger, Record, Status};

#[derive(argh::FromArgs)]
/// Writes a ledger of N realistic records and times its replay at start.
struct Args {
    /// records to write and replay (default 1000000)
    #[argh(positional, default = "1_000_000")]
    n: usize,
}

fn main() {
    let n = tollgate_bench::args::<Args>().n;
    let dir = std::env::temp_dir().join(format!("tollgate-ledger-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(tollgate::ledger::LEDGER_FILE);
    let keys = [
        "default",
        "ci-bot",
        "team-a",
        "team-b",
        "claude-code",
        "codex",
        "scripts",
        "nightly",
    ];
    let models = ["gpt-4o", "claude-sonnet-4-5", "local-llama", "mock"];
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..n {
            let rec = Record {
                ts: tollgate::util::rfc3339_millis(1_790_000_000_000 + i as u64 * 37),
                request_id: format!("req_{:024}", i),
                client_request_id: (i % 3 == 0).then(|| format!("client-{i}")),
                key: keys[i % keys.len()].into(),
                group: "default".into(),
                model: models[i % models.len()].into(),
                protocol: ["chat", "responses", "messages"][i % 3].into(),
                upstream: "up".into(),
                endpoint: None,
                stream: i % 2 == 0,
                status: if i % 50 == 0 {
                    Status::Http(429)
                } else {
                    Status::Http(200)
                },
                input_tokens: 1200 + (i % 700) as u64,
                cached_input_tokens: (i % 5) as u64 * 100,
                cache_write_5m_tokens: 0,
                cache_write_1h_tokens: 0,
                output_tokens: 300 + (i % 400) as u64,
                reasoning_tokens: 0,
                tier_above_input_tokens: None,
                estimated: false,
                cost: tollgate::money::Money::from_units(
                    4_200_000_000 + (i % 10) as i128 * 100_000_000,
                ),
                latency_ms: 800 + (i % 3000) as u64,
                error: None,
                reason: None,
                requested_model: None,
                instance: None,
                hosted_uses: Default::default(),
                service_tier: None,
                surcharge: None,
                cache: None,
            };
            serde_json::to_writer(&mut out, &rec).unwrap();
            out.write_all(b"\n").unwrap();
        }
    }
    let size = std::fs::metadata(&path).unwrap().len();
    // Read it once so the page cache is warm, as on a restart; then time three replays and keep the best.
    let _ = std::fs::read(&path).unwrap();
    let mut best = Duration::MAX;
    let mut records = 0;
    for _ in 0..3 {
        // Every record replayed: no checkpoint (`ledger-history` times starts with one).
        let _ = std::fs::remove_file(dir.join(tollgate::ledger::CHECKPOINT_FILE));
        let t = Instant::now();
        let (ledger, replay) = Ledger::open(&dir, Duration::from_millis(200), false).unwrap();
        best = best.min(t.elapsed());
        records = replay.records;
        drop(ledger);
    }
    println!(
        "ledger replay: {records} records, {:.1} MB, best of 3: {:.3} s ({:.0} records/s)",
        size as f64 / 1e6,
        best.as_secs_f64(),
        records as f64 / best.as_secs_f64()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
