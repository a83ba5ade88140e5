//! Small helpers with no better home: random ids, Unix and RFC 3339 time, token estimates.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Replaces `path` with `data` so that readers see either the old or the new file, never a mix.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(fs::Permissions::from_mode(0o600))?;
        }
        f.write_all(data)?;
        f.sync_all()?;
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// `len` random base62 characters from the OS's CSPRNG.
pub fn random_base62(len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut bytes = [0u8; 64];
    while out.len() < len {
        if getrandom::fill(&mut bytes).is_err() {
            // The OS RNG failing is not recoverable in a sane way; fall back to time-seeded mixing
            // would weaken keys, so make it loud.
            panic!("the operating system's random number generator failed");
        }
        for &b in bytes.iter() {
            // Rejection sampling keeps the distribution uniform: 248 = 4 * 62.
            if b < 248 && out.len() < len {
                out.push(BASE62[(b % 62) as usize] as char);
            }
        }
    }
    out
}

/// A fresh id like `req_01Ab...` (24 random base62 characters: ~143 bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", random_base62(24))
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch.
pub fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// RFC 3339 UTC timestamp with milliseconds, e.g. `2026-11-22T10:04:05.123Z`.
pub fn rfc3339_millis(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms % 1000
    )
}

/// RFC 3339 UTC timestamp to the second.
pub fn rfc3339(secs: u64) -> String {
    let s = rfc3339_millis(secs * 1000);
    format!("{}Z", &s[..19])
}

/// Parses an RFC 3339 UTC timestamp (`2026-11-22T10:04:05Z`, fractions and `+00:00` accepted) into seconds
/// since the Unix epoch.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b' ')
        || b[13] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se;
    u64::try_from(secs).ok()
}

/// (year, month, day) to days since 1970-01-01 (inverse of `civil_from_days`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// An estimate of how many tokens a BPE tokenizer would make of `text`: each run of letters or digits
/// costs one token per started 4 characters, every other visible character one token. Deterministic; used
/// where an upstream reports no usage (and by the mock model).
pub fn estimate_tokens(text: &str) -> u64 {
    let mut tokens = 0u64;
    let mut run = 0u64;
    for c in text.chars() {
        if c.is_alphanumeric() {
            run += 1;
        } else {
            tokens += run.div_ceil(4);
            run = 0;
            if !c.is_whitespace() {
                tokens += 1;
            }
        }
    }
    tokens + run.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_and_well_formed() {
        let a = new_id("req_");
        let b = new_id("req_");
        assert_ne!(a, b);
        assert_eq!(a.len(), 28);
        assert!(a[4..].chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn dates_format() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        for t in [0, 951_782_400, 1_700_000_000, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        assert_eq!(
            parse_rfc3339("2026-11-22T10:04:05.123+00:00"),
            Some(parse_rfc3339("2026-11-22T10:04:05Z").unwrap())
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn token_estimates() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("Hello, world!"), 6);
        assert_eq!(estimate_tokens("a b c"), 3);
    }
}
