//! The shipper: one ledger's files shipped for one instance, a step at a time ([`Shipper`]), by the
//! shipper thread ([`follow`]), a usage query or a shutdown ([`catch_up`]) and `store rebuild`
//! ([`ship_all`]). How shipping keeps every record once and in order, and the store's calls it makes, are
//! in `ship.rs`.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use super::ship::{Cursor, Shipped, BATCH, READ_MAX};
use super::{Store, StoreError};
use crate::ledger::{History, SyncedLine};

/// How many times the cursor is read again when it moved before the shipper could set it.
const RESOLVE_TRIES: usize = 8;

/// Test hook: with `TOLLGATE_TEST_SHIP_PAUSE_MS=N`, a shipper that is not the shipper thread (the catch-up
/// of a usage query or a shutdown) waits N ms between reading the cursor and setting it: the moment in which
/// the shipper thread may move it.
pub(crate) const SHIP_PAUSE_ENV: &str = "TOLLGATE_TEST_SHIP_PAUSE_MS";

fn pause_for_a_test() {
    let Some(ms) = std::env::var(SHIP_PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    if std::thread::current().name() != Some("tollgate-shipper") {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Where shipping stands in a ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pos {
    /// In what files deleted by retention (up to `through`) held: `index` items shipped.
    Retired { through: u64, index: u64 },
    /// In file `seq`: `offset` bytes shipped.
    File { seq: u64, offset: u64 },
}

/// A rotated file's reader left where the last read ended (a compressed file cannot seek): the offset of
/// `carry` (bytes read past the last whole line), and the reader after it.
struct Open {
    seq: u64,
    at: u64,
    carry: Vec<u8>,
    reader: Box<dyn Read + Send>,
}

/// Ships one ledger's files for one instance, a step at a time.
pub(crate) struct Shipper {
    instance: String,
    pos: Option<Pos>,
    /// Fingerprints of files by seq (a file's first line never changes).
    fps: HashMap<u64, String>,
    open: Option<Open>,
    /// Lines the ledger writer synced and handed over (`follow`), not yet shipped or passed.
    fed: VecDeque<SyncedLine>,
    /// Records (and retired items) shipped, and how often the cursor was found elsewhere.
    pub shipped: u64,
    pub moved: u64,
    /// Records of them shipped from the writer's memory.
    pub shipped_fed: u64,
}

fn io_error(e: std::io::Error) -> StoreError {
    StoreError {
        unavailable: false,
        message: format!("cannot read the ledger: {e}"),
    }
}

impl Shipper {
    pub(crate) fn new(instance: &str) -> Shipper {
        Shipper {
            instance: instance.to_string(),
            pos: None,
            fps: HashMap::new(),
            open: None,
            fed: VecDeque::new(),
            shipped: 0,
            moved: 0,
            shipped_fed: 0,
        }
    }

    /// Ships the lines the ledger writer handed over that continue exactly where shipping stands (in the
    /// same file, from the same offset), a batch at a time, without reading the file; lines before that
    /// point are dropped (shipped from the file already). None: they do not continue it (not yet resolved
    /// from the cursor, a rotation to move past, lines the feed left out): the file is read instead
    /// (`step`), and the lines it covers are dropped at the next call. Some(false): nothing to ship.
    pub(crate) fn ship_fed(
        &mut self,
        store: &Store,
        ledger: &crate::ledger::Ledger,
    ) -> Result<Option<bool>, StoreError> {
        if self.fed.len() < BATCH {
            self.fed.extend(ledger.take_synced(4 * BATCH));
        }
        let Some(Pos::File { seq, offset }) = self.pos else {
            return Ok(None);
        };
        while self
            .fed
            .front()
            .is_some_and(|l| l.seq < seq || l.seq == seq && l.offset < offset)
        {
            self.fed.pop_front();
        }
        let Some(front) = self.fed.front() else {
            return Ok(Some(false));
        };
        let Some(fp) = self.fps.get(&seq).cloned() else {
            return Ok(None);
        };
        if front.seq != seq || front.offset != offset {
            return Ok(None);
        }
        let mut end = offset;
        let run = self
            .fed
            .iter()
            .take(BATCH)
            .take_while(|l| {
                let next = l.seq == seq && l.offset == end;
                end += l.line.len() as u64;
                next
            })
            .count();
        let items = store.fed_items(self.fed.iter().take(run));
        match store.ship_items(&self.instance, &fp, offset, &items)? {
            Shipped::Upto(n) => {
                let done = items.iter().take_while(|i| i.next <= n).count() as u64;
                self.shipped += done;
                self.shipped_fed += done;
                self.pos = Some(Pos::File { seq, offset: n });
                Ok(Some(n > offset))
            }
            Shipped::Moved => {
                self.moved += 1;
                self.reset();
                Ok(Some(true))
            }
        }
    }

    /// Forgets the position: the next step reads the cursor again.
    pub(crate) fn reset(&mut self) {
        self.pos = None;
        self.open = None;
    }

    /// Every file before this seq is shipped.
    pub(crate) fn shipped_before(&self) -> u64 {
        match self.pos {
            Some(Pos::File { seq, .. }) => seq,
            Some(Pos::Retired { through, .. }) => through + 1,
            None => 0,
        }
    }

    fn fp(&mut self, h: &History, seq: u64) -> Result<String, StoreError> {
        if let Some(f) = self.fps.get(&seq) {
            return Ok(f.clone());
        }
        let f = h.fingerprint(seq).map_err(io_error)?;
        if !f.is_empty() {
            self.fps.insert(seq, f.clone());
        }
        Ok(f)
    }

    fn cursor_of(&mut self, h: &History, pos: &Pos) -> Result<Cursor, StoreError> {
        Ok(match *pos {
            Pos::Retired { through, index } => Cursor {
                offset: index,
                fingerprint: format!("retired:{through}"),
            },
            Pos::File { seq, offset } => Cursor {
                offset,
                fingerprint: self.fp(h, seq)?,
            },
        })
    }

    /// One step: finds the position (from the store's cursor) if needed, then ships what follows it, or
    /// moves to the next file at the end of a rotated one. Ok(false): nothing to ship now.
    pub(crate) fn step(&mut self, store: &Store, h: &History) -> Result<bool, StoreError> {
        let pos = match self.pos.clone() {
            Some(p) => p,
            None => {
                let p = self.resolve(store, h)?;
                self.pos = Some(p.clone());
                p
            }
        };
        let moved = match pos {
            Pos::Retired { through, index } => self.ship_retired(store, h, through, index)?,
            Pos::File { seq, offset } => self.ship_file(store, h, seq, offset)?,
        };
        if moved.is_none() {
            self.moved += 1;
            self.reset();
            return Ok(true);
        }
        Ok(moved == Some(true))
    }

    /// Where the store's cursor says shipping stands; a ledger it never counted is shipped from its start
    /// (and the cursor set there). The cursor is only ever moved from where it was read (another shipper of
    /// this instance, such as `catch_up` beside `follow`, may move it meanwhile: set outright, it would go
    /// back and what was shipped in between would be shipped, and counted, again); read again when it moved.
    fn resolve(&mut self, store: &Store, h: &History) -> Result<Pos, StoreError> {
        for _ in 0..RESOLVE_TRIES {
            if let Some(pos) = self.resolve_once(store, h)? {
                return Ok(pos);
            }
        }
        Err(StoreError {
            unavailable: true,
            message: format!(
                "the shipping cursor of instance {:?} kept moving while it was read",
                self.instance
            ),
        })
    }

    /// [`resolve`](Self::resolve) from one reading of the cursor; None: it moved before it could be set.
    fn resolve_once(&mut self, store: &Store, h: &History) -> Result<Option<Pos>, StoreError> {
        let c = store.cursor(&self.instance)?;
        pause_for_a_test();
        let begin = match (&h.retired, h.seqs().first()) {
            (Some(_), _) => Pos::Retired {
                through: h.retired_through,
                index: 0,
            },
            (None, first) => Pos::File {
                seq: first.copied().unwrap_or(h.active.seq),
                offset: 0,
            },
        };
        if c.offset == 0 && c.fingerprint.is_empty() {
            // Named, so every later step (moving on from retired totals too) finds the cursor where it is.
            let to = self.cursor_of(h, &begin)?;
            if to != c && !store.move_cursor(&self.instance, &c, &to)? {
                return Ok(None);
            }
            return Ok(Some(begin));
        }
        if let Some(t) = c.fingerprint.strip_prefix("retired:") {
            if h.retired.is_some() && t.parse() == Ok(h.retired_through) {
                return Ok(Some(Pos::Retired {
                    through: h.retired_through,
                    index: c.offset,
                }));
            }
            log::error!(
                "store: instance {:?} was shipping what retired ledger files held ({}), which this ledger no longer \
                 matches; shipping the ledger from its start",
                self.instance,
                c.fingerprint
            );
        } else {
            for seq in h.seqs().into_iter().rev() {
                if self.fp(h, seq)? != c.fingerprint {
                    continue;
                }
                if seq == h.active.seq && c.offset > h.active.len {
                    log::error!(
                        "store: the ledger {} is shorter ({} bytes) than the {} bytes already shipped from it (was it \
                         cut by hand?); shipping continues from its end",
                        crate::ledger::LEDGER_FILE,
                        h.active.len,
                        c.offset
                    );
                    let to = Cursor {
                        offset: h.active.len,
                        fingerprint: c.fingerprint.clone(),
                    };
                    if !store.move_cursor(&self.instance, &c, &to)? {
                        return Ok(None);
                    }
                    return Ok(Some(Pos::File {
                        seq,
                        offset: h.active.len,
                    }));
                }
                return Ok(Some(Pos::File {
                    seq,
                    offset: c.offset,
                }));
            }
            log::error!(
                "store: the ledger in {} is not the one instance {:?} shipped before (no file of it has the first \
                 record the cursor names); shipping it from its start. If two instances share the name {:?}, give \
                 each its own `instance`.",
                h.dir.display(),
                self.instance,
                self.instance
            );
        }
        let to = self.cursor_of(h, &begin)?;
        if !store.move_cursor(&self.instance, &c, &to)? {
            return Ok(None);
        }
        Ok(Some(begin))
    }

    /// Ships the retired items after `index`; at their end, moves to the first file after them. None: the
    /// cursor was elsewhere.
    fn ship_retired(
        &mut self,
        store: &Store,
        h: &History,
        through: u64,
        index: u64,
    ) -> Result<Option<bool>, StoreError> {
        let Some(t) = h.retired.as_ref().filter(|_| h.retired_through == through) else {
            return Ok(None);
        };
        let items = store.retired_items(through, t);
        let fp = format!("retired:{through}");
        if (index as usize) < items.len() {
            return match store.ship_items(&self.instance, &fp, index, &items[index as usize..])? {
                Shipped::Upto(n) => {
                    self.shipped += n - index;
                    self.pos = Some(Pos::Retired { through, index: n });
                    Ok(Some(true))
                }
                Shipped::Moved => Ok(None),
            };
        }
        let from = Cursor {
            offset: index,
            fingerprint: fp,
        };
        let next = h.seqs().into_iter().find(|s| *s > through);
        self.advance(store, h, from, next)
    }

    /// Moves the cursor from `from` (the end of what was shipped) to the start of file `next`, once it has a
    /// first line.
    fn advance(
        &mut self,
        store: &Store,
        h: &History,
        from: Cursor,
        next: Option<u64>,
    ) -> Result<Option<bool>, StoreError> {
        let Some(next) = next else {
            return Ok(Some(false));
        };
        let fp = self.fp(h, next)?;
        if fp.is_empty() {
            return Ok(Some(false));
        }
        let to = Cursor {
            offset: 0,
            fingerprint: fp,
        };
        if !store.move_cursor(&self.instance, &from, &to)? {
            return Ok(None);
        }
        self.pos = Some(Pos::File {
            seq: next,
            offset: 0,
        });
        self.open = None;
        Ok(Some(true))
    }

    /// Ships the complete lines of file `seq` after `offset`; at the end of a rotated file, moves to the next.
    fn ship_file(
        &mut self,
        store: &Store,
        h: &History,
        seq: u64,
        offset: u64,
    ) -> Result<Option<bool>, StoreError> {
        if seq != h.active.seq && h.segment(seq).is_none() {
            return Err(StoreError {
                unavailable: false,
                message: format!(
                    "ledger file {seq} is gone before it was shipped whole (deleted by hand?); its records after \
                     byte {offset} cannot be shipped"
                ),
            });
        }
        let bytes = self.read(h, seq, offset).map_err(io_error)?;
        let fp = self.fp(h, seq)?;
        if bytes.is_empty() {
            if seq == h.active.seq {
                return Ok(Some(false));
            }
            let from = Cursor {
                offset,
                fingerprint: fp,
            };
            return self.advance(store, h, from, h.next_after(seq));
        }
        match store.ship_lines(&self.instance, &fp, offset, &bytes)? {
            Shipped::Upto(n) => {
                let done = (n - offset) as usize;
                self.shipped += bytes[..done.min(bytes.len())]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count() as u64;
                self.pos = Some(Pos::File { seq, offset: n });
                Ok(Some(n > offset))
            }
            Shipped::Moved => Ok(None),
        }
    }

    /// The whole lines of file `seq` from `offset`, up to `READ_MAX` bytes.
    fn read(&mut self, h: &History, seq: u64, offset: u64) -> std::io::Result<Vec<u8>> {
        let (mut buf, mut reader) = match self.open.take() {
            Some(o) if seq != h.active.seq && o.seq == seq && o.at == offset => (o.carry, o.reader),
            _ => (Vec::new(), h.open_at(seq, offset)?),
        };
        let have = buf.len();
        buf.resize(READ_MAX.max(have), 0);
        let mut n = have;
        while n < buf.len() {
            match reader.read(&mut buf[n..])? {
                0 => break,
                k => n += k,
            }
        }
        buf.truncate(n);
        let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if seq != h.active.seq {
            self.open = Some(Open {
                seq,
                at: offset + whole as u64,
                carry: buf[whole..].to_vec(),
                reader,
            });
        }
        buf.truncate(whole);
        Ok(buf)
    }
}

/// Ships what is left of `ledger` now, retrying until everything synced is shipped or `within` has passed.
pub(crate) fn catch_up(
    store: &Store,
    ledger: &crate::ledger::Ledger,
    within: Duration,
) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + within;
    let mut sh = Shipper::new(store.instance());
    let mut last: Option<StoreError> = None;
    while std::time::Instant::now() < deadline {
        let step = ledger
            .history()
            .map_err(io_error)
            .and_then(|h| sh.step(store, &h));
        match step {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => {
                last = Some(e);
                sh.reset();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Err(last.unwrap_or(StoreError {
        unavailable: true,
        message: "out of time".into(),
    }))
}

/// Follows `ledger` and ships what it syncs, until the store is told to stop shipping. Runs on its own
/// thread; tells the ledger which files are shipped (compression and retention wait for that).
pub(crate) fn follow(store: Arc<Store>, ledger: &crate::ledger::Ledger) {
    let wake = ledger.follow();
    let mut sh = Shipper::new(store.instance());
    let mut failing = false;
    let mut last_read = std::time::Instant::now();
    let mut fed_once = false;
    while !store.stopping() {
        if store.lost() {
            // Nothing is shipped into a store that lost its data until it is rebuilt.
            sh.reset();
            std::thread::sleep(Duration::from_millis(250));
            continue;
        }
        // The lines the writer handed over first; the files when they do not continue where shipping stands
        // (at the start, after a rotation, past lines the feed left out), and at least once a second.
        let fed = if last_read.elapsed() < Duration::from_secs(1) {
            sh.ship_fed(&store, ledger)
        } else {
            Ok(None)
        };
        let step = match fed {
            Ok(Some(moved)) => {
                // Said once something was shipped that way (a step that found the cursor elsewhere ships
                // nothing, though it moved on).
                if sh.shipped_fed > 0 && !fed_once {
                    fed_once = true;
                    log::info!(
                        "store: usage records shipped from the ledger writer's memory as it syncs them (the \
                         files are read only to catch up)"
                    );
                }
                Ok(moved)
            }
            Ok(None) => {
                last_read = std::time::Instant::now();
                ledger
                    .history()
                    .map_err(io_error)
                    .and_then(|h| sh.step(&store, &h))
            }
            Err(e) => Err(e),
        };
        match step {
            Ok(moved) => {
                if failing {
                    failing = false;
                    log::info!("store: usage records shipped again");
                }
                ledger.shipped_before(sh.shipped_before());
                if !moved {
                    let _ = wake.recv_timeout(Duration::from_secs(1));
                }
            }
            Err(e) => {
                if !failing {
                    log::warn!(
                        "store: usage records wait in the local ledger until the store answers ({e})"
                    );
                }
                failing = true;
                sh.reset();
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// Ships a whole ledger (what retired files held, then every file in order) for `instance` from nothing
/// (`store rebuild`, after every cursor was deleted). Returns how many records; an error when the cursor
/// moves under it (an instance of that name running and shipping too).
pub(crate) fn ship_all(store: &Store, instance: &str, h: &History) -> Result<u64, StoreError> {
    let mut sh = Shipper::new(instance);
    while sh.step(store, h)? {
        if sh.moved > 0 {
            return Err(StoreError {
                unavailable: false,
                message: format!(
                    "shipping stopped early: the cursor of {instance:?} moved meanwhile (is an instance of that name \
                     running and shipping it too? stop it, or leave its ledger out: it ships its own)"
                ),
            });
        }
    }
    Ok(sh.shipped)
}
