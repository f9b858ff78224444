//! Journaling a transition: appended and awaited, or written ahead of its
//! fsync (group commit) with its publish and answers deferred until durable.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A transition written ahead of its fsync (group commit): its effect
/// runs; its publish, the answer to the command that caused it and the
/// run marker naming its attempt wait until it is durable.
pub(super) struct Deferred {
    /// Commands answered once it is durable (with the snapshot published
    /// then) or not (with the durability error).
    pub(super) replies: Vec<RpcReplyPort<Result<Snapshot, CommandError>>>,
    /// The run marker naming the attempt it started (a marker never refers
    /// to a record that is not durable).
    pub(super) note: Option<RunMarker>,
    /// The commit window's timer.
    pub(super) flush: tokio::task::AbortHandle,
    /// Why it is not durable, once known.
    pub(super) error: Option<String>,
}

impl LifecycleActorState {
    /// Append `records`; whether they are durable. A failure is reported
    /// in the snapshot's `error`; the next append that succeeds clears it.
    /// On failure the records of a step that stands only once durable
    /// (`durable_or_nothing`: a command's) are dropped (its transition is
    /// not adopted); a fact's are staged in the Journal actor, so they are
    /// written, in order, before whatever comes next (a boot's progress,
    /// its checkpoints) once the disk lets the journal repair itself, and
    /// the error stands until then (a sync does not write them).
    pub(super) async fn record(&mut self, records: Vec<Record>, durable_or_nothing: bool) -> bool {
        if records.is_empty() {
            return true;
        }
        let timeout = self.shared.timings.journal_timeout;
        let note = self.deferred_note();
        match journal::append(&self.children.journal, records.clone(), note, timeout).await {
            Ok(()) => {
                self.noted();
                self.durability.facts_unwritten = false;
                self.journal_written();
                self.settle(None);
                true
            }
            Err(error) => {
                self.journal_failed(error, records, durable_or_nothing);
                self.sync_deferred().await;
                false
            }
        }
    }

    /// Whether a step the machine says to write ahead of its fsync
    /// ([`Journaling::WrittenAhead`], see [`Deferred`]) can be: while the
    /// journal writes and the commit window is not zero; otherwise it is
    /// awaited.
    pub(super) fn can_write_ahead(&self) -> bool {
        self.view.journal_error.is_none() && !self.shared.timings.commit_window.is_zero()
    }

    /// Write `records` without waiting for their fsync, and open (or
    /// extend) the deferral that waits for it; whether they were written.
    pub(super) async fn write_ahead(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        records: Vec<Record>,
        durable_or_nothing: bool,
    ) -> bool {
        let timeout = self.shared.timings.journal_timeout;
        match journal::write(&self.children.journal, records.clone(), timeout).await {
            Ok(()) => {
                if self.durability.deferred.is_none() {
                    let flush = myself
                        .send_after(self.shared.timings.commit_window, || LifecycleMsg::Flush)
                        .abort_handle();
                    self.durability.deferred = Some(Deferred {
                        replies: Vec::new(),
                        note: None,
                        flush,
                        error: None,
                    });
                }
                true
            }
            Err(error) => {
                self.journal_failed(error, records, durable_or_nothing);
                self.sync_deferred().await;
                false
            }
        }
    }

    /// The commit window passed: make the deferred transitions durable and
    /// publish them (at once, with no fsync, when an append since, such as
    /// a boot's checkpoint, made them durable already).
    pub(super) async fn flush(&mut self) {
        if self.durability.deferred.is_some() {
            self.sync_deferred().await;
            self.publish();
        }
    }

    /// Make the deferred transitions durable (an fsync of what was written;
    /// after a failed write, its bytes are cut back first, which makes the
    /// records written before it durable) and settle them.
    pub(super) async fn sync_deferred(&mut self) {
        if self.durability.deferred.is_none() {
            return;
        }
        let timeout = self.shared.timings.journal_timeout;
        let note = self.deferred_note();
        match journal::sync(&self.children.journal, note, timeout).await {
            Ok(()) => {
                self.noted();
                // Durable: what was written. A fact's staged records are
                // not, so their error stands until an append writes them.
                if !self.durability.facts_unwritten {
                    self.journal_written();
                }
                self.settle(None);
            }
            Err(error) => {
                let error = format!("the journal could not be written: {error}");
                self.fail_durability(ErrorSource::Journal, error.clone());
                self.view.journal_error = Some(error.clone());
                self.settle(Some(error));
            }
        }
    }

    /// The run marker the deferred transitions' attempt waits for, which
    /// the Journal actor notes as soon as they are durable.
    fn deferred_note(&self) -> Option<RunMarker> {
        self.durability.deferred.as_ref()?.note.clone()
    }

    /// The deferred transitions are durable and the Journal actor noted
    /// their run marker: [`Self::settle`] has none left to note.
    fn noted(&mut self) {
        if let Some(deferred) = self.durability.deferred.as_mut() {
            deferred.note = None;
        }
    }

    /// An append or fsync succeeded: a journal error it left is cleared.
    pub(super) fn journal_written(&mut self) {
        if self.view.journal_error.take().is_some() && self.clear_error(ErrorSource::Journal) {
            tracing::info!("the journal is written again; clearing the error");
        }
    }

    /// An append or a write failed: reported, and `records` (a fact's)
    /// staged again unless they stand only once durable (a command's: not
    /// adopted).
    pub(super) fn journal_failed(
        &mut self,
        error: String,
        records: Vec<Record>,
        durable_or_nothing: bool,
    ) {
        let error = format!("the journal could not be written: {error}");
        self.fail_durability(ErrorSource::Journal, error.clone());
        self.view.journal_error = Some(error);
        if !durable_or_nothing && !records.is_empty() {
            self.durability.facts_unwritten = true;
            let _ = self.children.journal.cast(JournalMsg::Stage(records));
        }
    }

    /// The deferred transitions are durable (`None`) or not: the run marker
    /// naming their attempt is written (only if durable), and their
    /// commands wait for the next publish to be answered.
    pub(super) fn settle(&mut self, error: Option<String>) {
        let Some(mut deferred) = self.durability.deferred.take() else {
            return;
        };
        deferred.flush.abort();
        if let Some(marker) = deferred.note.take()
            && error.is_none()
        {
            let _ = self.children.journal.cast(JournalMsg::NoteRun(marker));
        }
        deferred.error = error;
        match self.durability.settled.as_mut() {
            Some(settled) => {
                settled.replies.append(&mut deferred.replies);
                if settled.error.is_none() {
                    settled.error = deferred.error;
                }
            }
            None => self.durability.settled = Some(deferred),
        }
    }
}
