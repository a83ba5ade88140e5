//! Small helpers with no better home: random ids, Unix and RFC 3339 time, token estimates, and the files of
//! the data directory (opened only when they are regular files this user owns, written atomically).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Mode of the files tollgate creates (keys, overrides, locks): owner read/write only.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Mode of the directories tollgate creates (the data directory): owner only.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Creates `dir` and any missing parents with mode 0700 whatever the umask (directories that already exist
/// are left as they are).
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(PRIVATE_DIR_MODE).create(dir) {
        // The umask may have taken bits away from 0700: set them exactly.
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(PRIVATE_DIR_MODE)),
        // Created by someone else meanwhile: theirs to keep as it is.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens (creating when missing) a file private to its owner: mode 0600 whatever the umask, never through a
/// symbolic link, and only when it is a regular file this user owns ([`open_owned`]). For lock files; the
/// content is left as it is.
pub fn open_private(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::PermissionsExt;
    let f = open_owned(
        path,
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true),
    )?;
    if f.metadata()?.permissions().mode() & 0o7777 != PRIVATE_FILE_MODE {
        // Created under a umask that took owner bits away, or left by an older version.
        let _ = f.set_permissions(fs::Permissions::from_mode(PRIVATE_FILE_MODE));
    }
    Ok(f)
}

/// Opens a file of the data directory with `options` (a file it creates gets mode 0600): never through a
/// symbolic link (`O_NOFOLLOW`), and only when what was opened is a regular file owned by the user tollgate
/// runs as. Both are checked on the opened descriptor (`fstat`), so nothing can be swapped in between a
/// check and the open. A FIFO planted at the path does not block the open (`O_NONBLOCK`, cleared once the
/// file is known to be regular). A missing file is still `NotFound`.
pub fn open_owned(path: &Path, options: &mut fs::OpenOptions) -> io::Result<fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = options
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| symlink_error(path, e))?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(not_regular(path));
    }
    if m.uid() != effective_uid() {
        return Err(foreign_owner(path, m.uid()));
    }
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    if let Ok(flags) = fcntl_getfl(&f) {
        if flags.contains(OFlags::NONBLOCK) {
            let _ = fcntl_setfl(&f, flags - OFlags::NONBLOCK);
        }
    }
    Ok(f)
}

/// The whole content of a file of the data directory, opened by [`open_owned`] (a missing file is
/// `NotFound`).
pub fn read_owned(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = open_owned(path, fs::OpenOptions::new().read(true))?;
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// [`read_owned`] as UTF-8 text.
pub fn read_owned_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_owned(path)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not UTF-8 text ({e})", path.display()),
        )
    })
}

/// The user tollgate runs as.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks, without opening them, that those of `names` present in `dir` are regular files this user owns
/// (at start, so a planted link or file stops the start with a clear error before anything is written;
/// every later open checks again on its descriptor). Returns each problem found.
pub fn check_data_files(dir: &Path, names: &[&str]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut problems = Vec::new();
    for name in names {
        let path = dir.join(name);
        let problem = match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => io::Error::new(e.kind(), format!("cannot examine {}: {e}", path.display())),
            Ok(m) if m.file_type().is_symlink() => refused_symlink(&path),
            Ok(m) if !m.file_type().is_file() => not_regular(&path),
            Ok(m) if m.uid() != effective_uid() => foreign_owner(&path, m.uid()),
            Ok(_) => continue,
        };
        problems.push(problem.to_string());
    }
    problems
}

/// A file of the data directory refused before it was used: what it is, and what to do about it. Carried
/// inside the `io::Error`s of [`open_owned`] and [`check_data_files`] (`io::Error::get_ref`), so a caller can
/// tell a refusal from other failures without reading the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRefusal {
    /// A symbolic link.
    Symlink(PathBuf),
    /// Not a regular file (a directory, a FIFO, a device).
    NotRegular(PathBuf),
    /// Another user's file (`uid`), while tollgate runs as `me`.
    ForeignOwner {
        /// The refused file.
        path: PathBuf,
        /// The user id that owns it.
        uid: u32,
        /// The effective user id tollgate runs as.
        me: u32,
    },
}

impl FileRefusal {
    /// Whether `e` is one of these refusals.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<FileRefusal>())
    }

    fn into_io(self) -> io::Error {
        let kind = match self {
            FileRefusal::ForeignOwner { .. } => io::ErrorKind::PermissionDenied,
            FileRefusal::Symlink(_) | FileRefusal::NotRegular(_) => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, self)
    }
}

impl std::fmt::Display for FileRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileRefusal::NotRegular(path) => write!(
                f,
                "{} is not a regular file; refusing to use it (tollgate uses only regular files it owns in its data \
                 directory: remove it)",
                path.display()
            ),
            FileRefusal::ForeignOwner { path, uid, me } => write!(
                f,
                "{} belongs to another user (uid {uid}; tollgate runs as uid {me}); refusing to use it (a file \
                 tollgate did not create may have been planted): check it, then remove it or `chown {me} {}`",
                path.display(),
                path.display()
            ),
            FileRefusal::Symlink(path) => write!(
                f,
                "{} is a symbolic link; refusing to use it (tollgate reads and writes only regular files it owns in \
                 its data directory: remove the link)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for FileRefusal {}

fn not_regular(path: &Path) -> io::Error {
    FileRefusal::NotRegular(path.to_path_buf()).into_io()
}

fn foreign_owner(path: &Path, uid: u32) -> io::Error {
    FileRefusal::ForeignOwner {
        path: path.to_path_buf(),
        uid,
        me: effective_uid(),
    }
    .into_io()
}

/// `O_NOFOLLOW` on a symbolic link fails with ELOOP, whose text ("too many levels of symbolic links")
/// misleads: say what happened.
fn symlink_error(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return refused_symlink(path);
    }
    e
}

fn refused_symlink(path: &Path) -> io::Error {
    FileRefusal::Symlink(path.to_path_buf()).into_io()
}

/// Replaces `path` with `data` so that readers see either the old or the new file, never a mix: the data
/// goes to a new temporary file next to it (an unpredictable name, created exclusively, never through a
/// symbolic link, mode 0600), is synced, and is renamed over `path`; then the directory is synced. A target
/// that is a symbolic link, not a regular file or another user's is refused. On any failure the temporary
/// file is removed and `path` is untouched.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic_then(path, data, || {})
}

/// [`write_atomic`], calling `before_rename` once the temporary file is complete and synced, just before it
/// is renamed into place.
pub fn write_atomic_then(path: &Path, data: &[u8], before_rename: impl FnOnce()) -> io::Result<()> {
    let dir = parent_dir(path);
    create_private_dir_all(dir)?;
    let problems = match path.file_name() {
        Some(name) => check_data_files(dir, &[&name.to_string_lossy()]),
        None => Vec::new(),
    };
    if let Some(p) = problems.into_iter().next() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, p));
    }
    let (tmp, mut file) = private_temp(path, false)?;
    let written = file.write_all(data).and_then(|()| file.sync_all());
    drop(file);
    if written.is_ok() {
        before_rename();
    }
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir);
    Ok(())
}

/// Creates `path` with what `fill` writes, only while nothing is at `path`: the content goes to a new private
/// temporary file next to it, is synced, and is linked into place (a link never replaces what appeared at
/// the path meanwhile, and is never made through a symbolic link); then the directory is synced. Returns the
/// new file, open for reading and appending. On any failure nothing is left at `path` by this call.
pub fn create_filled(
    path: &Path,
    fill: impl FnOnce(&mut fs::File) -> io::Result<()>,
) -> io::Result<fs::File> {
    let (tmp, mut file) = private_temp(path, true)?;
    let made = fill(&mut file)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    made?;
    sync_dir(parent_dir(path));
    Ok(file)
}

fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Makes a directory entry durable (best effort).
fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// A new private file next to `path` with an unpredictable name (created exclusively, never through a
/// symbolic link, mode 0600 whatever the umask), open for reading and writing (appending when `append`).
fn private_temp(path: &Path, append: bool) -> io::Result<(std::path::PathBuf, fs::File)> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = parent_dir(path);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let mut attempt = 0;
    loop {
        let tmp = dir.join(format!(".{name}.{}.tmp", random_base62(16)));
        let mut options = fs::OpenOptions::new();
        if append {
            options.append(true);
        } else {
            options.write(true);
        }
        match options
            .read(true)
            .create_new(true)
            .mode(PRIVATE_FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => {
                if let Err(e) = f.set_permissions(fs::Permissions::from_mode(PRIVATE_FILE_MODE)) {
                    let _ = fs::remove_file(&tmp);
                    return Err(e);
                }
                return Ok((tmp, f));
            }
            // ~95 random bits: a clash is someone guessing; try another name a few times.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// A warning when `data_dir` can be read or entered by other users (group or world permission bits): it
/// holds the usage ledger and the key hashes. None when it is private or does not exist yet.
pub fn data_dir_exposure(dir: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir).ok()?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Some(format!(
                "data_dir {} is open to other users (mode {mode:03o}); it holds the usage ledger and the key \
                 hashes: `chmod 700 {}`",
                dir.display(),
                dir.display()
            ));
        }
    }
    let _ = dir;
    None
}

/// `len` random base62 characters from the OS's CSPRNG.
pub fn random_base62(len: usize) -> String {
    let mut out = String::with_capacity(len);
    push_random_base62(&mut out, len);
    out
}

/// Appends `len` random base62 characters (see [`random_base62`]) to `out`.
fn push_random_base62(out: &mut String, len: usize) {
    let len = out.len() + len;
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
}

/// A fresh id like `req_01Ab...` (24 random base62 characters: ~143 bits).
pub fn new_id(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + 24);
    id.push_str(prefix);
    push_random_base62(&mut id, 24);
    id
}

/// `n` and the noun, plural unless `n` is 1: "1 model", "3 models".
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
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

/// Parses an RFC 3339 timestamp strictly into milliseconds since the Unix epoch: `YYYY-MM-DDTHH:MM:SS`, an
/// optional fraction (1 to 9 digits; below a millisecond truncated), and `Z` or an offset `±HH:MM`, nothing
/// else. Impossible dates (`2026-02-31`) and times are refused; a leap second (`:60`) is read as `:59`.
pub fn parse_rfc3339_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (h, mi, se) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo as u32) || h > 23 || mi > 59 {
        return None;
    }
    let se = match se {
        0..=59 => se,
        60 => 59,
        _ => return None,
    };
    let mut i = 19;
    let mut millis = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n = i - start;
        if n == 0 || n > 9 {
            return None;
        }
        for k in 0..3 {
            millis = millis * 10
                + b.get(start + k)
                    .filter(|_| k < n)
                    .map_or(0, |d| i64::from(d - b'0'));
        }
    }
    let offset_secs = match b.get(i..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let oh = digits(i + 1..i + 3)?;
            let om = digits(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let v = oh * 3600 + om * 60;
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    Some((days * 86_400 + h * 3600 + mi * 60 + se - offset_secs) * 1000 + millis)
}

/// [`parse_rfc3339_millis`] in whole seconds since the Unix epoch (None before 1970).
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    u64::try_from(parse_rfc3339_millis(s)?.div_euclid(1000)).ok()
}

fn days_in_month(y: i64, m: u32) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// (year, month, day) to days since 1970-01-01 (inverse of `civil_from_days`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
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

/// A mutex's guard, also when a thread panicked holding it: tollgate leaves what it guards consistent at
/// every unlock, so the data is used as it is rather than spreading the panic.
pub fn lock<T: ?Sized>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A read guard of a lock, also when a thread panicked holding it (see [`lock`]).
pub fn read_lock<T: ?Sized>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A write guard of a lock, also when a thread panicked holding it (see [`lock`]).
pub fn write_lock<T: ?Sized>(l: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    fn rfc3339_is_parsed_strictly_as_an_instant() {
        let utc = parse_rfc3339_millis("2026-11-24T01:56:06Z").unwrap();
        assert_eq!(
            parse_rfc3339_millis("2026-11-24T03:56:06+02:00"),
            Some(utc),
            "offsets are applied"
        );
        assert_eq!(parse_rfc3339_millis("2026-11-23T20:56:06-05:00"), Some(utc));
        assert_eq!(
            parse_rfc3339_millis("2026-11-24T01:56:06.850Z"),
            Some(utc + 850)
        );
        assert_eq!(
            parse_rfc3339_millis("2026-11-24T01:56:06.8Z"),
            Some(utc + 800)
        );
        assert_eq!(
            parse_rfc3339_millis("2026-11-24T01:56:06.123456789Z"),
            Some(utc + 123)
        );
        assert_eq!(
            parse_rfc3339_millis("2024-02-29T00:00:00Z").map(|m| m > 0),
            Some(true)
        );
        for bad in [
            "2026-02-31T10:00:00Z",
            "2025-02-29T10:00:00Z",
            "2026-11-24T10:00:00garbage",
            "2026-11-24T10:00:00",
            "2026-11-24T24:00:00Z",
            "2026-11-24T10:00:00+24:00",
            "2026-11-24T10:00:00.Z",
            "2026-11-24T10:00:00.1234567890Z",
            "2026-13-01T00:00:00Z",
            "+026-11-24T10:00:00Z",
            "2026-11-24T10:00:00+0200",
        ] {
            assert_eq!(parse_rfc3339_millis(bad), None, "{bad}");
        }
    }

    fn tmpdir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tollgate-util-{tag}-{}", random_base62(8)));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn atomic_writes_are_private_and_leave_nothing_behind() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmpdir("atomic");
        let p = d.join("sub/dir/f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(entries(&d.join("sub/dir")), ["f.json"]);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(&d.join("sub")), 0o700);
        assert_eq!(mode(&d.join("sub/dir")), 0o700);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn data_files_open_only_as_regular_files_this_user_owns() {
        let d = tmpdir("owned");
        let ro = || fs::OpenOptions::new().read(true).clone();
        // A FIFO neither blocks the open nor passes.
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = open_owned(&fifo, &mut ro()).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert_eq!(
            open_owned(&d.join("missing"), &mut ro())
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        let own = d.join("own");
        fs::write(&own, b"mine").unwrap();
        assert_eq!(read_owned(&own).unwrap(), b"mine");
        assert!(check_data_files(&d, &["own", "missing"]).is_empty());
        let problems = check_data_files(&d, &["fifo"]);
        assert!(problems[0].contains("not a regular file"), "{problems:?}");
        if effective_uid() == 0 {
            std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
            let e = open_owned(&own, &mut ro()).unwrap_err();
            assert!(e.to_string().contains("uid 65534"), "{e}");
            assert_eq!(check_data_files(&d, &["own"]).len(), 1);
            let e = write_atomic(&own, b"x").unwrap_err();
            assert!(e.to_string().contains("belongs to another user"), "{e}");
        }
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn atomic_writes_refuse_symlinks_and_clean_up_on_failure() {
        let d = tmpdir("atomic-link");
        let victim = d.join("victim");
        fs::write(&victim, b"precious").unwrap();
        let link = d.join("keys.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = write_atomic(&link, b"evil").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        // A lock file is not opened through a link either.
        let lock = d.join("keys.lock");
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        let e = open_private(&lock).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A target that is not a regular file is refused, and nothing is left behind.
        let target = d.join("dir-target");
        fs::create_dir_all(target.join("x")).unwrap();
        assert!(write_atomic(&target, b"data").is_err());
        assert_eq!(
            entries(&d),
            ["dir-target", "keys.jsonl", "keys.lock", "victim"]
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_refusal_is_told_apart_by_its_type() {
        let d = tmpdir("refused");
        let link = d.join("audit.jsonl");
        std::os::unix::fs::symlink(d.join("elsewhere"), &link).unwrap();
        let e = open_owned(&link, fs::OpenOptions::new().read(true)).unwrap_err();
        assert!(FileRefusal::is(&e), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = open_owned(&d.join("missing"), fs::OpenOptions::new().read(true)).unwrap_err();
        assert!(!FileRefusal::is(&e) && e.kind() == io::ErrorKind::NotFound);
        fs::remove_dir_all(d).unwrap();
    }
}
