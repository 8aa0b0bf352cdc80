//! Mnemosyne's torn-bit raw word log (Volos et al., ASPLOS 2011; the
//! `mnemosyne-gcc` sources `phlog_tornbit.c` / `tmlog_tornbit.c`), one per
//! worker, each in a pool chunk of its own.
//!
//! **Words.** The log is a circular array of 64-bit words. Each word holds
//! 63 bits of payload and a *torn bit* (bit 63); the payload is one bit
//! stream, so a logical 64-bit value spans two words. Positions are
//! absolute (they only grow); position `p` is word `p % words` of lap
//! `p / words`, and every word written in lap `l` carries the torn bit
//! `1 - l % 2`: lap 0 writes ones over the zeroed chunk, lap 1 zeros over
//! lap 0's ones, and so on.
//!
//! **Why one fence.** A fragment's words go out as non-temporal stores in
//! any order, followed by one fence. A word that did not reach the media
//! before a crash still holds the previous lap's torn bit, so recovery
//! finds the *stable tail* (the first word whose torn bit is wrong for its
//! lap) without a fence between the payload and the commit marker: a
//! fragment counts only if all its words, marker included, carry the right
//! bit.
//!
//! **Fragments.** Logical values `[FRAGMENT | n, v1 .. vn, COMMIT, sqn]`,
//! packed from the fragment's first word (each fragment starts on a word).
//!
//! **Head.** The chunk's first word holds the head position: words before
//! it are truncated (their data is durable in place). It is advanced with
//! one 8-byte store and a fence, after the caller made the truncated
//! fragments' in-place writes durable.
//!
//! **After recovery** every word past the stable tail (up to a ring past the
//! head) is rewritten with the torn bit that is *wrong* for its lap, fenced,
//! and only then the head moves to the stable tail. Words of a crashed,
//! partly persisted fragment can then never look valid to the next life,
//! and a crash during the reset is harmless: the rewrite only turns words
//! invalid and never touches the committed fragments before the tail, so a
//! recovery from any subset of it finds the same fragments, and replaying
//! them again is idempotent (their TIDs are checked per slot). (Filling the
//! ring with the *current* lap's torn bit before the head moves would let a
//! partly filled ring pass zero-payload words off as a committed
//! fragment's.)
//!
//! Explained in docs/engines/mnemosyne.md ("Torn-bit log").

use pmtx_pm::{ChunkId, ChunkOwner, PmBackend, Pool};
use std::sync::Arc;

/// Owner kind of the logs' chunks ("MT": Mnemosyne's tmlog).
pub const TORNBIT_LOG_CHUNK_KIND: u16 = 0x4D54;

/// Torn bit of a word.
const TORN: u64 = 1 << 63;
/// Payload bits of a word.
const PAYLOAD: u64 = !TORN;
/// Tag of a fragment's first value (upper 16 bits; the rest: value count).
const FRAGMENT: u64 = 0x4D46 << 48;
/// Mnemosyne's commit marker (the value follows the payload).
pub(crate) const COMMIT_MARKER: u64 = 0xC0AA_17ED_C0AA_17ED;
/// Truncates the log whose head word is at `head_offset` up to
/// `position` (the caller made the truncated fragments' in-place writes
/// durable): one store of the head word and a fence.
pub(crate) fn persist_head<B: PmBackend>(backend: &B, head_offset: u64, position: u64) {
    backend.write_non_temporal(head_offset, &position.to_le_bytes());
    backend.fence();
}

/// Offset of the ring in the chunk (the head word has the first line).
const RING: u64 = 64;

/// The torn bit words of lap `lap` carry.
#[inline]
pub(crate) fn torn_bit_of_lap(lap: u64) -> u64 {
    if lap.is_multiple_of(2) {
        TORN
    } else {
        0
    }
}

/// Physical words `values` logical values take.
#[inline]
pub(crate) fn words_for(values: u64) -> u64 {
    (values * 64).div_ceil(63)
}

/// Packs logical values into 63-bit payloads (torn bits added by the
/// writer).
pub(crate) fn pack_values(values: impl Iterator<Item = u64>, out: &mut Vec<u64>) {
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for value in values {
        acc |= u128::from(value) << bits;
        bits += 64;
        while bits >= 63 {
            out.push(acc as u64 & PAYLOAD);
            acc >>= 63;
            bits -= 63;
        }
    }
    if bits > 0 {
        out.push(acc as u64 & PAYLOAD);
    }
}

/// Unpacks `count` logical values from 63-bit payloads.
pub(crate) fn unpack(words: &[u64], count: usize, out: &mut Vec<u64>) {
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    let mut words = words.iter();
    while out.len() < count {
        while bits < 64 {
            let Some(word) = words.next() else { return };
            acc |= u128::from(word & PAYLOAD) << bits;
            bits += 63;
        }
        out.push(acc as u64);
        acc >>= 64;
        bits -= 64;
    }
}

/// A committed fragment found by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fragment {
    /// Its commit sequence number.
    pub(crate) sqn: u64,
    /// Its payload values.
    pub(crate) values: Vec<u64>,
}

/// What a scan found.
#[derive(Debug, Default)]
pub(crate) struct Scanned {
    /// The committed fragments from the head, in log order.
    pub(crate) fragments: Vec<Fragment>,
    /// Position after the last committed fragment.
    pub(crate) tail: u64,
    /// Whether something followed that was not a whole committed fragment
    /// (a torn fragment: wrong torn bits, or no marker).
    pub(crate) torn_tail: bool,
}

/// One worker's log.
pub(crate) struct TornBitLog<B: PmBackend> {
    pool: Arc<Pool<B>>,
    /// Offset of the head word.
    base: u64,
    /// Ring words.
    words: u64,
    /// Durable head position.
    head: u64,
    /// Next position to write.
    tail: u64,
    /// Scratch for the packed words.
    packed: Vec<u64>,
    /// Whether the scan trusts the commit marker alone (tests: what a
    /// recovery without torn bits would accept).
    trust_marker: bool,
}

impl<B: PmBackend> TornBitLog<B> {
    /// The log of worker `worker` in `pool`, allocated zeroed if the pool
    /// has none, with at most `max_words` ring words (0: the whole chunk).
    pub(crate) fn open(pool: Arc<Pool<B>>, worker: usize, max_words: u64) -> pmtx_pm::PoolResult<Self> {
        let owner = ChunkOwner::compose(TORNBIT_LOG_CHUNK_KIND, 0, worker as u16);
        let chunk = match pool.chunks_owned_by(owner).first() {
            Some(chunk) => *chunk,
            None => {
                let chunk = pool.allocate_chunk(owner, true)?;
                pool.backend().fence();
                chunk
            }
        };
        Ok(Self::at(pool, chunk, max_words))
    }

    fn at(pool: Arc<Pool<B>>, chunk: ChunkId, max_words: u64) -> Self {
        let base = pool.chunk_offset(chunk);
        let mut words = (pool.geometry().chunk_size - RING) / 8;
        if max_words > 0 {
            words = words.min(max_words);
        }
        let head = pool.backend().load_u64(base);
        Self { pool, base, words, head, tail: head, packed: Vec::new(), trust_marker: false }
    }

    /// Recovery ignores the torn bits (what a recovery that trusts the
    /// commit marker alone would accept; tests).
    #[cfg(test)]
    pub(crate) fn set_trust_marker(&mut self, trust: bool) {
        self.trust_marker = trust;
    }

    /// The pool's backend.
    pub(crate) fn backend(&self) -> &B {
        self.pool.backend()
    }

    /// Ring words.
    pub(crate) fn capacity(&self) -> u64 {
        self.words
    }

    /// Words in use (head to tail).
    pub(crate) fn used(&self) -> u64 {
        self.tail - self.head
    }

    /// The next position to write.
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Words a fragment of `payload` values takes.
    pub(crate) fn fragment_words(payload: usize) -> u64 {
        words_for(payload as u64 + 3)
    }

    /// Whether a fragment of `payload` values fits without truncation.
    pub(crate) fn fits(&self, payload: usize) -> bool {
        self.used() + Self::fragment_words(payload) <= self.words
    }

    #[inline]
    fn offset_of(&self, position: u64) -> u64 {
        self.base + RING + (position % self.words) * 8
    }

    /// Writes the fragment of `payload` committed with `sqn` as
    /// non-temporal stores and, if `fence`, issues the commit's one fence
    /// (durable on return). The caller checked [`TornBitLog::fits`].
    pub(crate) fn append(&mut self, payload: &[u64], sqn: u64, fence: bool) {
        assert!(self.fits(payload.len()), "the caller truncates first");
        let values =
            std::iter::once(FRAGMENT | payload.len() as u64).chain(payload.iter().copied()).chain([COMMIT_MARKER, sqn]);
        self.packed.clear();
        pack_values(values, &mut self.packed);
        let backend = self.pool.backend();
        // One 8-byte non-temporal store per word, each with its lap's torn
        // bit, last word first: the order is free (that is the point of the
        // torn bits), and marker-first lets a crash leave the marker
        // durable before the payload, the case recovery must refuse.
        let start = self.tail;
        // One division per fragment, not two per word (a 64-bit division
        // costs tens of cycles; `words` need not be a power of two).
        let (start_lap, start_index) = (start / self.words, start % self.words);
        let ring = self.base + RING;
        for (index, word) in self.packed.iter().enumerate().rev() {
            let mut slot = start_index + index as u64;
            let mut lap = start_lap;
            if slot >= self.words {
                // A fragment is at most a ring long (`fits`): one wrap.
                slot -= self.words;
                lap += 1;
            }
            debug_assert_eq!(ring + slot * 8, self.offset_of(start + index as u64));
            let word = word | torn_bit_of_lap(lap);
            backend.write_non_temporal(ring + slot * 8, &word.to_le_bytes());
        }
        let position = start + self.packed.len() as u64;
        self.tail = position;
        // A crash here may leave any subset of the fragment's lines
        // durable: the torn bits must tell.
        backend.crash_point("mnemosyne: fragment written, not fenced");
        if fence {
            // The one fence of a commit: payload and marker together.
            backend.fence();
        }
    }

    /// Truncates every fragment before `position` (the caller made their
    /// in-place writes durable): one store of the head word and a fence.
    pub(crate) fn truncate_to(&mut self, position: u64) {
        debug_assert!(position >= self.head && position <= self.tail);
        persist_head(self.pool.backend(), self.base, position);
        self.head = position;
    }

    /// Offset of the head word (for a truncation on another thread:
    /// [`persist_head`], then [`TornBitLog::adopt_head`]).
    pub(crate) fn head_offset(&self) -> u64 {
        self.base
    }

    /// Takes `position` as the head another thread made durable with
    /// [`persist_head`].
    pub(crate) fn adopt_head(&mut self, position: u64) {
        debug_assert!(position >= self.head && position <= self.tail);
        self.head = position;
    }

    /// The committed fragments from the head up to the stable tail.
    pub(crate) fn scan(&self) -> Scanned {
        let backend = self.pool.backend();
        let mut scanned = Scanned { tail: self.head, ..Scanned::default() };
        let mut position = self.head;
        let read = |position: u64| backend.load_u64(self.offset_of(position));
        let stable = |position: u64, word: u64| word & TORN == torn_bit_of_lap(position / self.words);
        loop {
            if position + 2 > self.head + self.words {
                break;
            }
            let first = [read(position), read(position + 1)];
            if !(self.trust_marker || stable(position, first[0]) && stable(position + 1, first[1])) {
                // The stable tail (an older lap's words, or nothing).
                break;
            }
            let mut header = Vec::with_capacity(1);
            unpack(&first, 1, &mut header);
            let header = header[0];
            let count = header & ((1 << 48) - 1);
            if header & !((1 << 48) - 1) != FRAGMENT || count > self.words {
                scanned.torn_tail = header != 0;
                break;
            }
            let total = words_for(count + 3);
            if position + total > self.head + self.words {
                scanned.torn_tail = true;
                break;
            }
            let words: Vec<u64> = (position..position + total).map(read).collect();
            if !self.trust_marker && !words.iter().zip(position..).all(|(word, at)| stable(at, *word)) {
                scanned.torn_tail = true;
                break;
            }
            let mut values = Vec::with_capacity(count as usize + 3);
            unpack(&words, count as usize + 3, &mut values);
            if values.len() != count as usize + 3 || values[count as usize + 1] != COMMIT_MARKER {
                scanned.torn_tail = true;
                break;
            }
            let sqn = values[count as usize + 2];
            values.truncate(count as usize + 1);
            values.remove(0);
            scanned.fragments.push(Fragment { sqn, values });
            position += total;
            scanned.tail = position;
        }
        scanned
    }

    /// After recovery applied every fragment durably: invalidates every
    /// word past the stable tail, then truncates to it (module docs),
    /// durable on return.
    pub(crate) fn reset_after_recovery(&mut self) {
        let tail = self.scan().tail;
        self.invalidate_beyond(tail, |_| true);
        self.pool.backend().fence();
        self.tail = tail;
        self.truncate_to(tail);
    }

    /// Writes, for every position from `tail` up to a ring past the head
    /// whose line `write_line` accepts, a word whose torn bit is wrong for
    /// its lap (no fence). Tests pass a subset of lines to stand for a crash
    /// during the rewrite.
    fn invalidate_beyond(&self, tail: u64, write_line: impl Fn(u64) -> bool) {
        let backend = self.pool.backend();
        let end = self.head + self.words;
        let mut position = tail;
        while position < end {
            // One contiguous physical run: up to the ring's end or `end`.
            let index = position % self.words;
            let run = (self.words - index).min(end - position);
            let lap = position / self.words;
            let words = vec![(torn_bit_of_lap(lap) ^ TORN).to_le_bytes(); run as usize].concat();
            let offset = self.offset_of(position);
            let mut at = 0u64;
            while at < run * 8 {
                // Line by line, so a test can leave any line out.
                let line_end = ((offset + at) / 64 + 1) * 64 - offset;
                let len = line_end.min(run * 8) - at;
                if write_line((offset + at) / 64) {
                    backend.write_non_temporal(offset + at, &words[at as usize..(at + len) as usize]);
                }
                at += len;
            }
            position += run;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_pm::{Direct, PmOptions};

    fn pool() -> Arc<Pool<Direct>> {
        Arc::new(Pool::create_in_memory(4 << 20, 256 << 10, &PmOptions::default()).expect("pool"))
    }

    #[test]
    fn packing_round_trips_across_word_boundaries() {
        let values: Vec<u64> = (0..200u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | (i << 63)).collect();
        let mut words = Vec::new();
        pack_values(values.iter().copied(), &mut words);
        assert_eq!(words.len() as u64, words_for(values.len() as u64));
        assert!(words.iter().all(|word| word & TORN == 0), "the torn bit is the writer's");
        let mut back = Vec::new();
        unpack(&words, values.len(), &mut back);
        assert_eq!(back, values);
    }

    #[test]
    fn committed_fragments_are_found_in_order() {
        let pool = pool();
        let mut log = TornBitLog::open(Arc::clone(&pool), 0, 0).expect("log");
        log.append(&[1, 2, 3], 10, true);
        log.append(&[u64::MAX, 0], 11, true);
        let scanned = TornBitLog::open(pool, 0, 0).expect("reopen").scan();
        assert_eq!(
            scanned.fragments,
            [Fragment { sqn: 10, values: vec![1, 2, 3] }, Fragment { sqn: 11, values: vec![u64::MAX, 0] }]
        );
        assert!(!scanned.torn_tail);
    }

    /// A fragment one of whose words still carries the old lap's torn bit
    /// (an unpersisted store) ends the stable tail: it and everything after
    /// it are ignored, even though its commit marker is there.
    #[test]
    fn a_torn_word_ends_the_stable_tail() {
        let pool = pool();
        let mut log = TornBitLog::open(Arc::clone(&pool), 0, 0).expect("log");
        log.append(&[7; 4], 1, true);
        let second = log.tail();
        log.append(&[8; 4], 2, true);
        // The second fragment's third word never reached the media: it
        // holds the zeroed chunk's word (torn bit 0, lap 0 expects 1).
        let offset = log.offset_of(second + 2);
        pool.backend().write(offset, &0u64.to_le_bytes());
        let scanned = TornBitLog::open(Arc::clone(&pool), 0, 0).expect("reopen").scan();
        assert_eq!(scanned.fragments, [Fragment { sqn: 1, values: vec![7; 4] }]);
        assert!(scanned.torn_tail);
        assert_eq!(scanned.tail, second);
        // Trusting the marker alone accepts the torn fragment.
        let mut trusting = TornBitLog::open(pool, 0, 0).expect("reopen");
        trusting.set_trust_marker(true);
        assert_eq!(trusting.scan().fragments.len(), 2);
    }

    /// The torn bit flips on every wrap: words of the previous lap (still
    /// in the ring past the tail) are never read as current.
    #[test]
    fn wrapping_flips_the_torn_bit() {
        let pool = pool();
        let mut log = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("log");
        assert_eq!(log.capacity(), 64);
        let mut sqn = 0;
        while log.tail() < 64 + 10 {
            sqn += 1;
            if !log.fits(5) {
                let tail = log.tail();
                log.truncate_to(tail);
            }
            log.append(&[sqn; 5], sqn, true);
        }
        // The last fragment crossed into lap 1 (or lies in it).
        let lap1 = log.offset_of(64);
        assert_eq!(pool.backend().load_u64(lap1) & TORN, 0, "lap 1 writes torn bit 0");
        let scanned = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("reopen").scan();
        assert_eq!(scanned.fragments.last().map(|f| f.sqn), Some(sqn));
        assert!(!scanned.torn_tail, "{scanned:?}");
        // Lap 0's words beyond the tail have torn bit 1: stale in lap 1.
        let tail = scanned.tail;
        let stale = pool.backend().load_u64(log.offset_of(tail));
        assert_eq!(stale & TORN, TORN);
    }

    #[test]
    fn reset_after_recovery_leaves_nothing_valid() {
        let pool = pool();
        let mut log = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("log");
        log.append(&[1; 5], 1, true);
        log.append(&[2; 5], 2, true);
        let tail = log.tail();
        log.reset_after_recovery();
        let mut reopened = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("reopen");
        assert_eq!(reopened.head, tail);
        let scanned = reopened.scan();
        assert!(scanned.fragments.is_empty() && !scanned.torn_tail, "{scanned:?}");
        // The next life's fragments are found, and nothing after them.
        reopened.append(&[3; 5], 3, true);
        let scanned = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("reopen").scan();
        assert_eq!(scanned.fragments, [Fragment { sqn: 3, values: vec![3; 5] }]);
        assert!(!scanned.torn_tail, "{scanned:?}");
    }

    /// A crash during the reset (any subset of its lines durable, head not
    /// moved) leaves recovery the same committed fragments, even with a
    /// torn fragment past the tail and words of an older lap in the ring.
    #[test]
    fn a_crash_during_the_reset_keeps_the_committed_fragments() {
        let pool = pool();
        let mut log = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("log");
        // Lap 0 filled, truncated, then lap 1 partly: lap 0's words past
        // the tail are stale, and a torn fragment follows the last one.
        while log.tail() < 60 {
            if !log.fits(5) {
                let tail = log.tail();
                log.truncate_to(tail);
            }
            let sqn = log.tail();
            log.append(&[sqn; 5], sqn, true);
        }
        let tail = log.tail();
        log.truncate_to(tail);
        log.append(&[77; 4], 100, true);
        log.append(&[88; 4], 101, true);
        let committed_tail = log.tail();
        log.append(&[99; 4], 102, true);
        // The torn fragment: its third word never reached the media.
        let lap = (committed_tail + 2) / 64;
        pool.backend().write(log.offset_of(committed_tail + 2), &(torn_bit_of_lap(lap) ^ TORN).to_le_bytes());
        let before = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("reopen").scan();
        assert_eq!(before.fragments.iter().map(|f| f.sqn).collect::<Vec<_>>(), [100, 101]);
        assert!(before.torn_tail);
        let ring: Vec<u64> = (0..64).map(|at| pool.backend().load_u64(log.offset_of(at))).collect();
        for pattern in [0b0101u64, 0b1010, 0b0011, 0b1100, 0b1111, 0b0110] {
            for (at, word) in ring.iter().enumerate() {
                pool.backend().write(log.offset_of(at as u64), &word.to_le_bytes());
            }
            let crashed = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("reopen");
            crashed.invalidate_beyond(crashed.scan().tail, |line| pattern >> (line % 4) & 1 == 1);
            let after = TornBitLog::open(Arc::clone(&pool), 0, 64).expect("reopen").scan();
            assert_eq!(after.fragments, before.fragments, "lines {pattern:#b} of the reset durable");
        }
    }
}
