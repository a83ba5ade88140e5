//! The integration tests' harness: `tollgate-harness` (harness/), which the benchmarks share. Gateways start
//! in this process by default (`Gateway::start_*`, `restart`), as the binary with `spawn_*`, `respawn` and
//! `start_command`.
#![allow(unused_imports)]

pub(crate) use tollgate_harness::*;
