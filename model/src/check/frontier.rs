//! The search frontier: the states of one breadth-first level still to be expanded, in the
//! order they were first generated, held as compact bytes ([`super::codec`]) in blocks, and
//! spilled block by block to a caller-supplied [`SpillStore`] past a memory budget (as TLC's
//! disk queue does). The visited set stays in memory as fingerprints ([`super::search`]).
//!
//! Invariants:
//! - First in, first out, whatever was spilled: blocks are read back in the order written, so
//!   the search's order — and with it every count and shortest trace — does not depend on the
//!   memory budget.
//! - A record is the state's fingerprint (8 bytes), its encoded length and its encoding; a
//!   record never spans two blocks.
//! - This crate does no I/O: the store is the caller's (the binary's writes files into a
//!   directory of its own and deletes them); a store that fails, or the disk limit, stops the
//!   run with [`super::Stop::Disk`] and keeps what was found.
//! - A model without a codec keeps its frontier as full states and never spills (the search
//!   then stops at the memory limit, as before the frontier could spill).

use super::codec::{self, CodecError};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// How a model's states are written into the frontier and read back.
pub struct StateCodec<S> {
    pub encode: fn(&S, &mut Vec<u8>) -> Result<(), CodecError>,
    pub decode: fn(&[u8]) -> Result<S, CodecError>,
}

impl<S> Clone for StateCodec<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for StateCodec<S> {}

impl<S: Serialize + DeserializeOwned> StateCodec<S> {
    /// The in-house compact binary encoding of the state's serde derive.
    pub fn serde() -> StateCodec<S> {
        StateCodec {
            encode: |state, out| codec::encode(state, out),
            decode: codec::decode,
        }
    }
}

/// Where a frontier too large for its memory budget keeps blocks of encoded states.
pub trait SpillStore: Send + Sync {
    /// Keeps `bytes` until taken back; answers the block's id.
    fn put(&self, bytes: &[u8]) -> std::io::Result<u64>;
    /// The bytes of a block put earlier; the store keeps it.
    fn read(&self, id: u64) -> std::io::Result<Vec<u8>>;
    /// Fills `bytes` from a block put earlier, starting `offset` bytes into it; the store keeps
    /// it. A store that can read part of a block should (the liveness graph reads its spilled
    /// edges a row at a time); by default the whole block is read. A block shorter than asked
    /// is an `UnexpectedEof` error.
    fn read_at(&self, id: u64, offset: u64, bytes: &mut [u8]) -> std::io::Result<()> {
        let block = self.read(id)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let part = start
            .checked_add(bytes.len())
            .and_then(|end| block.get(start..end))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "spilled block {id} ends before byte {}",
                        start.saturating_add(bytes.len())
                    ),
                )
            })?;
        bytes.copy_from_slice(part);
        Ok(())
    }
    /// Forgets a block put earlier.
    fn remove(&self, id: u64) -> std::io::Result<()>;
    /// The bytes of a block put earlier; the store forgets it.
    fn take(&self, id: u64) -> std::io::Result<Vec<u8>> {
        let bytes = self.read(id)?;
        self.remove(id)?;
        Ok(bytes)
    }
}

/// A store in this process's memory: what tests use to see that spilling changes nothing.
#[derive(Default)]
pub struct MemorySpill {
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
    next_id: Mutex<u64>,
    /// Blocks ever put.
    puts: Mutex<usize>,
}

impl MemorySpill {
    pub fn new() -> Arc<MemorySpill> {
        Arc::new(MemorySpill::default())
    }

    /// How many blocks were put over the store's life.
    pub fn puts(&self) -> usize {
        *self.puts.lock().expect("the lock is never poisoned")
    }

    /// How many blocks are still held.
    pub fn held(&self) -> usize {
        self.blocks
            .lock()
            .expect("the lock is never poisoned")
            .len()
    }
}

impl SpillStore for MemorySpill {
    fn put(&self, bytes: &[u8]) -> std::io::Result<u64> {
        let mut next_id = self.next_id.lock().expect("the lock is never poisoned");
        let id = *next_id;
        *next_id += 1;
        self.blocks
            .lock()
            .expect("the lock is never poisoned")
            .insert(id, bytes.to_vec());
        *self.puts.lock().expect("the lock is never poisoned") += 1;
        Ok(id)
    }

    fn read(&self, id: u64) -> std::io::Result<Vec<u8>> {
        self.blocks
            .lock()
            .expect("the lock is never poisoned")
            .get(&id)
            .cloned()
            .ok_or_else(|| std::io::Error::other(format!("no spilled block {id}")))
    }

    fn remove(&self, id: u64) -> std::io::Result<()> {
        self.blocks
            .lock()
            .expect("the lock is never poisoned")
            .remove(&id)
            .map(drop)
            .ok_or_else(|| std::io::Error::other(format!("no spilled block {id}")))
    }
}

/// Why the frontier could not spill or read back a block.
#[derive(Debug)]
pub(crate) enum SpillFailure {
    /// The block would take the spilled bytes past `disk_bytes_max`.
    Limit,
    Io(std::io::Error),
    /// A block read back does not decode (a damaged store).
    Damaged,
}

/// The spill store of a run with its disk budget, shared by the levels of one search.
pub(crate) struct Spill {
    pub store: Arc<dyn SpillStore>,
    pub disk_bytes_max: Option<u64>,
    /// Bytes of blocks put and not yet taken back.
    pub spilled_bytes: u64,
}

impl Spill {
    /// Puts one block within the disk limit; answers its id.
    pub(crate) fn put(&mut self, bytes: &[u8]) -> Result<u64, SpillFailure> {
        let len = bytes.len() as u64;
        if self
            .disk_bytes_max
            .is_some_and(|max| self.spilled_bytes + len > max)
        {
            return Err(SpillFailure::Limit);
        }
        let id = self.store.put(bytes).map_err(SpillFailure::Io)?;
        self.spilled_bytes += len;
        Ok(id)
    }
}

enum Block {
    Memory(Vec<u8>),
    Spilled { id: u64, len: u64 },
}

/// The encoded frontier: `reading` (oldest, partly consumed), then `full`, then `writing`.
struct Blocks {
    full: VecDeque<Block>,
    reading: Vec<u8>,
    reading_offset: usize,
    writing: Vec<u8>,
    writing_count: usize,
    block_bytes: usize,
}

enum Storage<S> {
    Plain(VecDeque<(S, u64)>),
    Encoded(Blocks),
}

/// What a thread expands: a run of frontier records, as states or as encoded records.
pub(crate) enum Part<S> {
    States(Vec<(S, u64)>),
    Encoded { bytes: Vec<u8>, count: usize },
}

impl<S> Part<S> {
    pub fn new() -> Part<S> {
        Part::States(Vec::new())
    }

    /// Calls `each` with every state of the part, in order, emptying it (decoding as it goes:
    /// each state is dropped before the next is decoded).
    pub fn drain(
        &mut self,
        codec: Option<&StateCodec<S>>,
        mut each: impl FnMut(S, u64),
    ) -> Result<(), CodecError> {
        match self {
            Part::States(states) => {
                for (state, fingerprint) in states.drain(..) {
                    each(state, fingerprint);
                }
            }
            Part::Encoded { bytes, count } => {
                let codec = codec.expect("an encoded part has a codec");
                let mut input: &[u8] = bytes;
                for _ in 0..*count {
                    let (fingerprint, encoded) = split_record(&mut input)?;
                    each((codec.decode)(encoded)?, fingerprint);
                }
                bytes.clear();
                *count = 0;
            }
        }
        Ok(())
    }
}

impl<S> Part<S> {
    /// Moves the states whose fingerprint `keep` accepts into `into`, in order, emptying the
    /// part (records are moved as they are, never decoded).
    pub fn retain_into(
        &mut self,
        into: &mut Frontier<S>,
        mut keep: impl FnMut(u64) -> bool,
    ) -> Result<(), CodecError> {
        match self {
            Part::States(states) => {
                for (state, fingerprint) in states.drain(..) {
                    if keep(fingerprint) {
                        into.push_state(state, fingerprint);
                    }
                }
            }
            Part::Encoded { bytes, count } => {
                let mut input: &[u8] = bytes;
                for _ in 0..*count {
                    let before = input;
                    let (fingerprint, _) = split_record(&mut input)?;
                    if keep(fingerprint) {
                        into.push_record(&before[..before.len() - input.len()]);
                    }
                }
                bytes.clear();
                *count = 0;
            }
        }
        Ok(())
    }
}

/// Appends a state to `level`: as an encoded record when there is a codec, else whole.
/// `encoded` and `record` are scratch buffers the caller keeps across calls.
pub(crate) fn push_state_or_record<S>(
    level: &mut Frontier<S>,
    codec: Option<&StateCodec<S>>,
    state: S,
    fingerprint: u64,
    encoded: &mut Vec<u8>,
    record: &mut Vec<u8>,
) {
    match codec {
        Some(codec) => {
            encoded.clear();
            (codec.encode)(&state, encoded)
                .unwrap_or_else(|error| panic!("a state that does not encode: {error}"));
            record.clear();
            put_record(record, fingerprint, encoded);
            level.push_record(record);
        }
        None => level.push_state(state, fingerprint),
    }
}

/// Appends one record (fingerprint, length, encoding) to `out`.
pub(crate) fn put_record(out: &mut Vec<u8>, fingerprint: u64, encoded: &[u8]) {
    out.extend_from_slice(&fingerprint.to_le_bytes());
    codec::put_varint(out, encoded.len() as u64);
    out.extend_from_slice(encoded);
}

/// Splits the record at the front of `input` off it: (fingerprint, encoding).
pub(crate) fn split_record<'a>(input: &mut &'a [u8]) -> Result<(u64, &'a [u8]), CodecError> {
    if input.len() < 8 {
        return Err(CodecError(
            "a frontier record ends inside its fingerprint".into(),
        ));
    }
    let (head, rest) = input.split_at(8);
    let fingerprint = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    *input = rest;
    let len = codec::take_varint(input)? as usize;
    if len > input.len() {
        return Err(CodecError("a frontier record ends inside its state".into()));
    }
    let (encoded, rest) = input.split_at(len);
    *input = rest;
    Ok((fingerprint, encoded))
}

/// The length of the record at the front of `bytes`.
fn record_len(bytes: &[u8]) -> Result<usize, CodecError> {
    let mut input = bytes;
    split_record(&mut input)?;
    Ok(bytes.len() - input.len())
}

/// One level's states, first in, first out.
pub(crate) struct Frontier<S> {
    len: usize,
    storage: Storage<S>,
}

impl<S> Frontier<S> {
    /// An empty frontier: encoded in blocks of `block_bytes` when there is a codec.
    pub fn new(encoded: bool, block_bytes: usize) -> Frontier<S> {
        let storage = if encoded {
            Storage::Encoded(Blocks {
                full: VecDeque::new(),
                reading: Vec::new(),
                reading_offset: 0,
                writing: Vec::new(),
                writing_count: 0,
                block_bytes,
            })
        } else {
            Storage::Plain(VecDeque::new())
        };
        Frontier { len: 0, storage }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a state (a frontier without a codec).
    pub fn push_state(&mut self, state: S, fingerprint: u64) {
        match &mut self.storage {
            Storage::Plain(states) => states.push_back((state, fingerprint)),
            Storage::Encoded(_) => unreachable!("an encoded frontier takes records"),
        }
        self.len += 1;
    }

    /// Appends one encoded record (`put_record`'s bytes) to the frontier.
    pub fn push_record(&mut self, record: &[u8]) {
        let Storage::Encoded(blocks) = &mut self.storage else {
            unreachable!("a frontier without a codec takes states");
        };
        if blocks.writing_count > 0 && blocks.writing.len() + record.len() > blocks.block_bytes {
            let bytes =
                std::mem::replace(&mut blocks.writing, Vec::with_capacity(blocks.block_bytes));
            blocks.full.push_back(Block::Memory(bytes));
            blocks.writing_count = 0;
        }
        if blocks.writing.capacity() == 0 {
            blocks.writing.reserve_exact(blocks.block_bytes);
        }
        blocks.writing.extend_from_slice(record);
        blocks.writing_count += 1;
        self.len += 1;
    }

    /// Bytes of encoded records held in memory (0 for a frontier of states, which cannot spill).
    pub fn memory_bytes(&self) -> usize {
        match &self.storage {
            Storage::Plain(_) => 0,
            Storage::Encoded(blocks) => {
                let full: usize = blocks
                    .full
                    .iter()
                    .map(|block| match block {
                        Block::Memory(bytes) => bytes.len(),
                        Block::Spilled { .. } => 0,
                    })
                    .sum();
                full + blocks.writing.len() + blocks.reading.len() - blocks.reading_offset
            }
        }
    }

    /// Moves up to `count` of the oldest states into `part`, reading spilled blocks back.
    pub fn take(
        &mut self,
        count: usize,
        part: &mut Part<S>,
        spill: Option<&mut Spill>,
    ) -> Result<(), SpillFailure> {
        let count = count.min(self.len);
        match &mut self.storage {
            Storage::Plain(states) => {
                let Part::States(into) = part else {
                    unreachable!("a frontier of states fills parts of states");
                };
                into.extend(states.drain(..count));
            }
            Storage::Encoded(blocks) => {
                if !matches!(part, Part::Encoded { .. }) {
                    *part = Part::Encoded {
                        bytes: Vec::new(),
                        count: 0,
                    };
                }
                let Part::Encoded {
                    bytes: into,
                    count: taken,
                } = part
                else {
                    unreachable!("just made encoded");
                };
                let mut spill = spill;
                for _ in 0..count {
                    if blocks.reading_offset == blocks.reading.len() {
                        blocks.next_reading(spill.as_deref_mut())?;
                    }
                    let len = record_len(&blocks.reading[blocks.reading_offset..])
                        .map_err(|_| SpillFailure::Damaged)?;
                    into.extend_from_slice(
                        &blocks.reading[blocks.reading_offset..blocks.reading_offset + len],
                    );
                    blocks.reading_offset += len;
                    *taken += 1;
                }
                if blocks.reading_offset == blocks.reading.len() {
                    // Give the exhausted block's memory back before the next is read.
                    blocks.reading = Vec::new();
                    blocks.reading_offset = 0;
                }
            }
        }
        self.len -= count;
        Ok(())
    }

    /// Writes every block held in memory but the one being read to the store. Answers the
    /// bytes written.
    pub fn spill(&mut self, spill: &mut Spill) -> Result<u64, SpillFailure> {
        let Storage::Encoded(blocks) = &mut self.storage else {
            return Ok(0);
        };
        if blocks.writing_count > 0 {
            let bytes = std::mem::take(&mut blocks.writing);
            blocks.full.push_back(Block::Memory(bytes));
            blocks.writing_count = 0;
        }
        let mut written = 0;
        for block in blocks.full.iter_mut() {
            let Block::Memory(bytes) = block else {
                continue;
            };
            let len = bytes.len() as u64;
            let id = spill.put(bytes)?;
            written += len;
            *block = Block::Spilled { id, len };
        }
        Ok(written)
    }
}

impl Blocks {
    /// Makes the oldest full block (or the one being written) the block being read.
    fn next_reading(&mut self, spill: Option<&mut Spill>) -> Result<(), SpillFailure> {
        self.reading_offset = 0;
        match self.full.pop_front() {
            Some(Block::Memory(bytes)) => self.reading = bytes,
            Some(Block::Spilled { id, len, .. }) => {
                let spill = spill.expect("a spilled block has a store");
                self.reading = spill.store.take(id).map_err(SpillFailure::Io)?;
                spill.spilled_bytes -= len;
                if self.reading.len() as u64 != len {
                    return Err(SpillFailure::Damaged);
                }
            }
            None => {
                self.reading = std::mem::take(&mut self.writing);
                self.writing_count = 0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> StateCodec<Vec<u32>> {
        StateCodec::serde()
    }

    fn frontier_of(states: &[Vec<u32>], block_bytes: usize) -> Frontier<Vec<u32>> {
        let mut frontier = Frontier::new(true, block_bytes);
        let mut encoded = Vec::new();
        let mut record = Vec::new();
        for (index, state) in states.iter().enumerate() {
            encoded.clear();
            record.clear();
            (codec().encode)(state, &mut encoded).unwrap();
            put_record(&mut record, index as u64, &encoded);
            frontier.push_record(&record);
        }
        frontier
    }

    fn drain_all(
        frontier: &mut Frontier<Vec<u32>>,
        mut spill: Option<&mut Spill>,
        step: usize,
    ) -> Vec<(Vec<u32>, u64)> {
        let mut out = Vec::new();
        let mut part = Part::new();
        while !frontier.is_empty() {
            frontier
                .take(step, &mut part, spill.as_deref_mut())
                .unwrap();
            part.drain(Some(&codec()), |state, fingerprint| {
                out.push((state, fingerprint))
            })
            .unwrap();
        }
        out
    }

    fn states() -> Vec<Vec<u32>> {
        (0..500u32)
            .map(|n| (0..n % 17).map(|k| k * n).collect())
            .collect()
    }

    #[test]
    fn the_frontier_is_first_in_first_out_across_blocks() {
        let mut frontier = frontier_of(&states(), 64);
        assert_eq!(frontier.len(), 500);
        let out = drain_all(&mut frontier, None, 7);
        let expected: Vec<(Vec<u32>, u64)> = states()
            .into_iter()
            .enumerate()
            .map(|(index, state)| (state, index as u64))
            .collect();
        assert_eq!(out, expected);
        assert_eq!(frontier.memory_bytes(), 0);
    }

    #[test]
    fn a_spilled_frontier_reads_back_in_the_same_order_and_frees_its_store() {
        let store = MemorySpill::new();
        let mut spill = Spill {
            store: store.clone(),
            disk_bytes_max: None,
            spilled_bytes: 0,
        };
        let mut frontier = frontier_of(&states()[..250], 64);
        let written = frontier.spill(&mut spill).unwrap();
        assert!(written > 0);
        assert_eq!(frontier.memory_bytes(), 0);
        assert!(store.held() > 10);
        // Appending after a spill goes on in memory, behind the spilled blocks.
        let mut more = frontier_of(&states()[250..], 64);
        let mut part = Part::new();
        more.take(250, &mut part, None).unwrap();
        let Part::Encoded { bytes, count } = &part else {
            panic!("an encoded frontier gives encoded parts")
        };
        assert_eq!(*count, 250);
        let mut input: &[u8] = bytes;
        let mut record = Vec::new();
        while !input.is_empty() {
            let (fingerprint, encoded) = split_record(&mut input).unwrap();
            record.clear();
            put_record(&mut record, fingerprint + 250, encoded);
            frontier.push_record(&record);
        }
        let out = drain_all(&mut frontier, Some(&mut spill), 5);
        assert_eq!(out.len(), 500);
        for (index, (state, fingerprint)) in out.iter().enumerate() {
            assert_eq!(*fingerprint, index as u64);
            assert_eq!(*state, states()[index]);
        }
        assert_eq!(store.held(), 0);
        assert_eq!(spill.spilled_bytes, 0);
    }

    #[test]
    fn the_disk_limit_refuses_a_block_past_it() {
        let mut spill = Spill {
            store: MemorySpill::new(),
            disk_bytes_max: Some(100),
            spilled_bytes: 0,
        };
        let mut frontier = frontier_of(&states(), 64);
        assert!(matches!(
            frontier.spill(&mut spill),
            Err(SpillFailure::Limit)
        ));
        assert!(spill.spilled_bytes <= 100);
    }
}
