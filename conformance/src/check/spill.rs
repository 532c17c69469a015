//! The directory the checker's frontier and parent log spill into past their memory budget
//! (`oncecheck check --spill-dir`, the model crate's `SpillStore`): one file per block, written
//! once; a frontier block is read back once and deleted, a parent-log block is read when traces
//! are rebuilt and deleted when the search is done, a block of the liveness graph's edges is read
//! a row at a time through a file kept open until the block is removed.
//!
//! Invariants: the directory is this run's own (created fresh under the parent the user named,
//! removed with everything in it when the store is dropped, also after a stopped run); a
//! frontier block's file is deleted as soon as it is read back, so the disk holds the frontier
//! not yet expanded and the parent log; every failure is an `io::Error` the checker turns into
//! its disk stop.

use oncecheck_model::check::SpillStore;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub struct DirectorySpill {
    directory: PathBuf,
    next_id: AtomicU64,
    /// Blocks read in part, open: a row of edges is one read, not an open, a read and a close.
    open: Mutex<HashMap<u64, File>>,
}

impl DirectorySpill {
    /// A fresh directory under `parent` (`oncecheck-spill-<pid>-<n>`).
    pub fn create(parent: &Path) -> std::io::Result<DirectorySpill> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let directory = parent.join(format!("oncecheck-spill-{}-{run}", std::process::id()));
        std::fs::create_dir_all(parent)?;
        std::fs::create_dir(&directory)?;
        Ok(DirectorySpill {
            directory,
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    pub fn directory(&self) -> &Path {
        &self.directory
    }

    fn file(&self, id: u64) -> PathBuf {
        self.directory.join(format!("block-{id:08}"))
    }
}

impl SpillStore for DirectorySpill {
    fn put(&self, bytes: &[u8]) -> std::io::Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let file = self.file(id);
        let written = std::fs::File::create_new(&file).and_then(|mut out| {
            out.write_all(bytes)?;
            out.flush()
        });
        if let Err(error) = written {
            // A block half written (a full disk) is no use to anyone.
            let _ = std::fs::remove_file(&file);
            return Err(error);
        }
        Ok(id)
    }

    fn read(&self, id: u64) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.file(id))
    }

    fn read_at(&self, id: u64, offset: u64, bytes: &mut [u8]) -> std::io::Result<()> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| std::io::Error::other("a reader of the spill store panicked"))?;
        let file = match open.entry(id) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(File::open(self.file(id))?)
            }
        };
        file.read_exact_at(bytes, offset)
    }

    fn remove(&self, id: u64) -> std::io::Result<()> {
        if let Ok(mut open) = self.open.lock() {
            open.remove(&id);
        }
        std::fs::remove_file(self.file(id))
    }
}

impl Drop for DirectorySpill {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_comes_back_once_and_the_directory_goes_with_the_store() {
        let parent = std::env::temp_dir().join(format!("spill-test-{}", std::process::id()));
        let store = DirectorySpill::create(&parent).unwrap();
        let directory = store.directory().to_path_buf();
        let first = store.put(b"first block").unwrap();
        let second = store.put(b"second").unwrap();
        assert_eq!(store.take(first).unwrap(), b"first block");
        assert!(store.take(first).is_err(), "a block is taken back once");
        assert_eq!(std::fs::read_dir(&directory).unwrap().count(), 1);
        // A parent-log block is read in place, as often as traces are rebuilt, then removed.
        for _ in 0..2 {
            assert_eq!(store.read(second).unwrap(), b"second");
        }
        store.remove(second).unwrap();
        assert!(store.read(second).is_err());
        assert_eq!(std::fs::read_dir(&directory).unwrap().count(), 0);
        let kept = store.put(b"kept").unwrap();
        assert_eq!(store.read(kept).unwrap(), b"kept");
        // A block of edges is read a row at a time; past its end is an error, not a short row.
        let edges = store.put(b"0123456789").unwrap();
        let mut row = [0u8; 3];
        for (offset, expected) in [(4, b"456"), (0, b"012"), (7, b"789")] {
            store.read_at(edges, offset, &mut row).unwrap();
            assert_eq!(&row, expected, "offset {offset}");
        }
        let past = store.read_at(edges, 8, &mut row).unwrap_err();
        assert_eq!(past.kind(), std::io::ErrorKind::UnexpectedEof);
        store.remove(edges).unwrap();
        assert!(
            store.read_at(edges, 0, &mut row).is_err(),
            "a removed block is not read through the file kept open"
        );
        drop(store);
        assert!(!directory.exists(), "the store's directory goes with it");
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
