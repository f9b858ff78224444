//! One simulated file's bytes, as Linux keeps them on ext4/xfs: what the
//! page cache holds (what a read, an `fstat` and the next `O_APPEND` write
//! see) and what is durable (what a crash keeps). Shared by the journal's
//! disk (`disk.rs`) and the general file system (`fs.rs`), so the model is
//! written once.
//!
//! - A write lands in the cache.
//! - A successful fsync makes the cache durable ([`Inode::persist`]).
//! - A failed fsync (`EIO`) leaves the durable bytes as they were and, as
//!   Linux does, marks the dirty pages clean ([`Inode::lose`]): their bytes
//!   stay readable but no later fsync writes them (a crash, or a later
//!   successful fsync, leaves zeros in their place).
//! - A truncation not yet synced may or may not survive a crash.
//! - A crash ([`Inode::after_crash`]) keeps the durable bytes, plus any
//!   prefix of the bytes written past them since (the kernel may have
//!   written some back), never a lost byte.
//!
//! The dirty pages are the bytes past the durable length: an overwrite of
//! durable bytes not yet synced is lost to a crash whole (never a mix of
//! old and new) and is not lost to a failed fsync.

use super::rng::Rng;

/// One file's bytes.
#[derive(Debug, Default, Clone)]
pub struct Inode {
    /// What reads see.
    pub cache: Vec<u8>,
    /// What a crash keeps (before any unsynced prefix).
    pub durable: Vec<u8>,
    /// Ranges of `cache` failed fsyncs marked clean, `[from, to)`, in
    /// order and apart: never written by a later fsync (one that succeeds
    /// leaves zeros there). Several, because a file may go on between them
    /// (a service appends past a failed fsync).
    pub lost: Vec<(usize, usize)>,
    /// A truncation below `durable` not yet synced.
    pub truncated: bool,
}

impl Inode {
    /// A file holding `bytes`, all durable.
    pub fn holding(bytes: Vec<u8>) -> Self {
        Self {
            cache: bytes.clone(),
            durable: bytes,
            ..Self::default()
        }
    }

    /// The page cache made durable, lost bytes as zeros.
    pub fn persist(&mut self) {
        let mut durable = self.cache.clone();
        for &(from, to) in &self.lost {
            let to = to.min(durable.len());
            if from < to {
                durable[from..to].fill(0);
            }
        }
        self.durable = durable;
        self.truncated = false;
    }

    /// The dirty pages below `to` lost (a failed fsync).
    pub fn lose(&mut self, to: usize) {
        let from = self.durable.len().min(to);
        if from < to {
            self.lost.push((from, to));
            self.normalize();
        }
    }

    /// Keep `lost` sorted, its ranges apart (overlapping ones merged).
    fn normalize(&mut self) {
        self.lost.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.lost.len());
        for &(from, to) in &self.lost {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        self.lost = merged;
    }

    /// `bytes` written into the cache at `at` (a gap before it reads as
    /// zeros). Bytes rewritten over a lost range's start or end are dirty
    /// again, so no longer lost; a lost range rewritten only in its middle
    /// stays lost whole (the model keeps it one range).
    pub fn write_at(&mut self, at: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let end = at + bytes.len();
        if self.cache.len() < end {
            self.cache.resize(end, 0);
        }
        self.cache[at..end].copy_from_slice(bytes);
        self.lost = self
            .lost
            .iter()
            .filter_map(|&(from, to)| {
                if at >= to || end <= from {
                    Some((from, to))
                } else if at <= from && end >= to {
                    None
                } else if at <= from {
                    Some((end, to))
                } else if end >= to {
                    Some((from, at))
                } else {
                    Some((from, to))
                }
            })
            .collect();
    }

    /// `ftruncate` to `len`: the cache cut (or extended with zeros), a cut
    /// below the durable bytes pending until the next fsync.
    pub fn set_len(&mut self, len: usize) {
        self.cache.resize(len, 0);
        if self.durable.len() > len {
            self.truncated = true;
        }
        self.lost = self
            .lost
            .iter()
            .filter(|&&(from, _)| from < len)
            .map(|&(from, to)| (from, to.min(len)))
            .collect();
    }

    /// What a crash leaves of this file (see the module doc), and whether
    /// it kept unsynced bytes.
    pub fn after_crash(&self, rng: &mut Rng) -> (Vec<u8>, bool) {
        if self.truncated && rng.chance(500) {
            // The truncation never reached the disk.
            return (self.durable.clone(), false);
        }
        let mut kept = self.durable.clone();
        if self.truncated {
            kept.truncate(self.cache.len());
        }
        // A prefix of what was written since the last fsync, up to the
        // first lost byte past the durable ones.
        let base = kept.len();
        let written_up_to = self
            .lost
            .iter()
            .filter(|&&(_, to)| to > base)
            .map(|&(from, _)| from.max(base))
            .min()
            .unwrap_or(self.cache.len());
        let extra = written_up_to.saturating_sub(base);
        let take = if extra == 0 {
            0
        } else {
            rng.below(extra as u64 + 1) as usize
        };
        kept.extend_from_slice(&self.cache[base..base + take]);
        (kept, take > 0)
    }
}
