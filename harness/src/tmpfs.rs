//! A real small file system for the tests of a disk that fills: a tmpfs mounted for one test (CI runs as
//! root; elsewhere the test says it is skipped), unmounted when dropped, also when the test fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted at `dir/disk`; `.0` is where.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it) at `dir/disk`; None (and why, printed) when
    /// this process may not mount.
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let at = dir.join("disk");
        std::fs::create_dir_all(&at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&at)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(at)),
            Ok(o) => {
                println!(
                    "skipped: cannot mount tmpfs ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                println!("skipped: cannot mount tmpfs ({e})");
                None
            }
        }
    }

    /// Fills the file system with a filler file until it refuses more bytes.
    pub fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        for size in [64 * 1024, 4096, 512, 64, 1] {
            let block = vec![7u8; size];
            while f.write_all(&block).is_ok() {}
        }
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
