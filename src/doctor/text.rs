//! Short texts of the doctor's output: clipped details and durations.

use std::time::Duration;

pub(super) use crate::protocol::client::clip;

/// `850 ms`, `12.3 s`.
pub(super) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_and_durations() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("héllo", 2), "h… (6 bytes in all)");
        assert_eq!(fmt_duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(fmt_duration(Duration::from_millis(12_340)), "12.3 s");
    }
}
