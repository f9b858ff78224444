//! The Journal actor: the one writer of the journal, and of the run, hold
//! and identity markers and the override tier, once the supervisor runs
//! (the launch's own run marker is written while it is built,
//! `ControlDir::write_run_settling`; the status record has a writer of its
//! own, `status_record`).
//!
//! Every record and marker a supervisor writes goes through this actor, one
//! at a time, and is acknowledged only after its fsync returned. Records
//! that need no acknowledgement (a boot's progress) are staged and ride
//! along with the next acknowledged append, so one fsync covers them. An
//! fsync runs on a blocking thread, so the tokio workers never wait on the
//! disk; a write without one is a copy into the page cache, made in place.
//!
//! A transition whose effect may run before it is durable (entering a boot
//! or a drain) is written without an fsync (`Write`): a full disk refuses
//! it before the effect starts, and the next fsync (`Append`, or `Sync`
//! when its commit window passes) makes it durable together with what the
//! effect brought; until then nobody is told of it.
//!
//! A failed write or fsync is never acknowledged: the append is answered
//! with the error, and the journal file cuts the failed append's bytes back
//! before its next append (`JournalFile::append`), so the next append
//! starts on a record boundary and recovers the journal as soon as the disk
//! lets it (`control_dir` tests,
//! `enospc::a_journal_append_that_hit_enospc_recovers_without_a_relaunch`).
//! Staged records an append failed to write stay staged, in front, for the
//! next one (at most 4,096 are kept); the caller's own records are not
//! resent by this actor (the Lifecycle actor decides what a failed append
//! means for its transition, and stages a fact's records again).
//! Records written ahead that a failure cut back (a failed fsync takes
//! every byte not yet durable) are written again, first, by the next
//! `Sync` or `Append`: their transition stands (its effect ran), so the
//! journal must hold it, and no one was told they were durable (the sync
//! that failed answered their commands with its error).
//! If this actor panics, Root restarts it over a freshly reopened journal.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use steadfast_protocol::journal::Record;

use crate::control_dir::{ControlDir, JournalFile, RunMarker};

/// The Journal actor.
#[derive(Debug, Default)]
pub(crate) struct JournalActor;

/// The Journal actor's arguments: the control directory and the journal
/// file opened (and repaired) at startup.
pub(crate) struct JournalArgs {
    /// The locked control directory.
    pub control: Arc<ControlDir>,
    /// The open journal, or `None` to reopen it (after a restart).
    pub file: Option<JournalFile>,
    /// Where appends are counted and timed.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// The Journal actor's state.
pub(crate) struct JournalState {
    control: Arc<ControlDir>,
    /// Where appends are counted and timed.
    metrics: Arc<crate::metrics::Metrics>,
    /// `None` only while a blocking write has it.
    file: Option<JournalFile>,
    /// Records staged for the next append.
    staged: Vec<Record>,
    /// Batches written ahead of their fsync and not yet durable, each with
    /// the offset its bytes begin at, oldest first.
    ahead: Vec<(u64, Vec<Record>)>,
    /// Records written ahead that a failure cut back, to be written again
    /// before anything else (by the next `Sync` or `Append`).
    cut_ahead: Vec<Record>,
    /// The run-marker note being written ([`JournalMsg::NoteRun`]), which
    /// appends do not wait for; the next marker write of the run marker
    /// waits for it, so run markers land in the order they were asked.
    note: Option<tokio::task::JoinHandle<()>>,
    /// The identity being written ([`JournalMsg::EnsureIdentity`]), off
    /// the mailbox; the next one waits for it.
    identity: Option<tokio::task::JoinHandle<()>>,
}

/// How many staged records are kept while appends fail (a full disk for a
/// long time); the oldest beyond this are dropped: history no one was told
/// was durable.
const STAGED_KEPT: usize = 4096;

/// Whether a write is made durable before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Write, then fsync (everything written so far).
    Sync,
    /// Write only; a later `Sync` or `Append` makes it durable.
    Later,
    /// As `Sync`, and a writer a failed write poisoned is repaired first
    /// even with nothing to write (the failed write's bytes, whole frames
    /// among them, cut back for good): every byte left in the file is
    /// durable, as `released` promises the next launch.
    Whole,
}

impl JournalState {
    /// Write the staged records and `records`, then (for [`Commit::Sync`])
    /// fsync. A [`Commit::Sync`] with nothing to write and nothing written
    /// since the last fsync does no I/O.
    ///
    /// A [`Commit::Later`] write is one `write` into the page cache, made
    /// here on the actor's own thread: a thread hop would cost more than
    /// the copy, twice per stop+start. Whatever waits on the
    /// disk (an fsync, a compaction, the cut and fsync that repair a writer
    /// a failure poisoned) runs on a blocking thread, so a runtime worker
    /// never waits for the device.
    async fn write(
        &mut self,
        records: Vec<Record>,
        commit: Commit,
    ) -> Result<Durable, ActorProcessingErr> {
        let mut all = std::mem::take(&mut self.cut_ahead);
        let rewritten = all.len();
        all.append(&mut self.staged);
        let staged = all.len();
        all.extend(records);
        let records = all;
        let mut file = self.file.take().ok_or("the journal file is in use")?;
        let nothing_to_do = !file.has_unsynced()
            && (commit == Commit::Sync || (commit == Commit::Whole && !file.is_poisoned()));
        if records.is_empty() && nothing_to_do {
            self.file = Some(file);
            return Ok(Ok(()));
        }
        let (mut file, result, records) = match commit {
            Commit::Later if !file.is_poisoned() => {
                let result = file.write(&records);
                self.metrics.journal_written(records.len(), result.is_ok());
                (file, result, records)
            }
            Commit::Later => {
                let metrics = Arc::clone(&self.metrics);
                crate::device::run(move || {
                    let result = file.write(&records);
                    metrics.journal_written(records.len(), result.is_ok());
                    (file, result, records)
                })
                .await?
            }
            Commit::Sync | Commit::Whole
                if crate::planted::planted(crate::planted::Defect::JournalAcksBeforeFsync) =>
            {
                let result = file.write(&records).map(|_| None);
                (file, result, records)
            }
            Commit::Sync | Commit::Whole => {
                let metrics = Arc::clone(&self.metrics);
                crate::device::run(move || {
                    let started = tokio::time::Instant::now();
                    let result = file.append(&records).map(|()| None);
                    if result.is_ok() {
                        crate::launch::mark_first("first journal record durable");
                    }
                    metrics.journal_append(
                        records.len(),
                        file.durable_len(),
                        started.elapsed(),
                        result.is_ok(),
                    );
                    // Keep the journal bounded. The append above is durable
                    // whatever compaction does; a compaction that fails
                    // before its rename leaves the old journal in use, one
                    // that fails after it poisons the writer. Never while
                    // written records wait for their fsync
                    // (`wants_compaction`).
                    if result.is_ok() && file.wants_compaction() {
                        match file.compact() {
                            Ok(compacted) => tracing::debug!(?compacted, "compacted the journal"),
                            Err(error) => tracing::error!(%error, "journal compaction failed"),
                        }
                    }
                    (file, result, records)
                })
                .await?
            }
        };
        // Written-ahead batches a failure cut back go again, first (the cut
        // comes before the next write, so nothing is written twice); once
        // everything written is durable, none is waiting.
        let mut cut = Vec::new();
        if let Some(from) = file.take_cut_from() {
            let at = self.ahead.partition_point(|(start, _)| *start < from);
            cut.extend(self.ahead.drain(at..).flat_map(|(_, batch)| batch));
        }
        if file.all_durable() || (commit != Commit::Later && result.is_ok()) {
            self.ahead.clear();
        }
        self.file = Some(file);
        let mut records = records;
        match &result {
            Ok(Some(start)) => self.ahead.push((*start, records)),
            Ok(None) => {}
            Err(_) => {
                // The staged and cut records were never acknowledged; they
                // go again, first, with the next append (the failed bytes
                // are cut back before it, so nothing is written twice).
                // The caller's own records are the caller's to resend.
                records.truncate(staged);
                let mut staged = records.split_off(rewritten);
                cut.append(&mut records);
                staged.append(&mut self.staged);
                self.staged = staged;
                self.bound_staged();
            }
        }
        cut.append(&mut self.cut_ahead);
        self.cut_ahead = cut;
        Ok(result.map(drop).map_err(|e| e.to_string()))
    }

    /// Note `marker` in the run marker ([`JournalMsg::NoteRun`]).
    fn note_run(&mut self, marker: RunMarker) {
        // Off the mailbox: the appends behind it (the boot's
        // checkpoints, the `booted` transition) touch another file
        // and do not wait for it.
        let previous = self.note.take().filter(|note| !note.is_finished());
        // The usual note is one `pwrite` over the marker in place:
        // made here, without a thread hop, unless an earlier note
        // is still being written (order) or cannot be made so.
        if previous.is_none()
            && let Some(written) = self.control.note_run_in_place(&marker)
        {
            if let Err(error) = written {
                tracing::warn!(%error, "the run marker could not name the attempt");
            }
            return;
        }
        let control = Arc::clone(&self.control);
        self.note = Some(tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            let written = crate::device::run(move || control.note_run(&marker))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(error) = written {
                tracing::warn!(%error, "the run marker could not name the attempt");
            }
        }));
    }

    /// Keep at most [`STAGED_KEPT`] staged records, dropping the oldest.
    fn bound_staged(&mut self) {
        if self.staged.len() > STAGED_KEPT {
            let excess = self.staged.len() - STAGED_KEPT;
            tracing::warn!(
                dropped = excess,
                "the journal cannot be written; dropping the oldest staged records"
            );
            self.staged.drain(..excess);
        }
    }
}

/// What a journal write answers: `Ok` once durable, or the error rendered.
pub(crate) type Durable<T = ()> = Result<T, String>;

/// What the Journal actor is asked.
pub enum JournalMsg {
    /// Append records; answered after the fsync. Staged records go first.
    /// Once they are durable, the run marker given is noted
    /// ([`JournalMsg::NoteRun`]) in the same turn: a note sent after the
    /// answer would wait behind whatever this actor takes next (a boot's
    /// checkpoint on a slow disk), and a crash meanwhile would report the
    /// attempt before the one published.
    Append(Vec<Record>, Option<RunMarker>, RpcReplyPort<Durable>),
    /// Write records (staged records first) without an fsync: in the file,
    /// not yet durable. Answered after the write; nothing may acknowledge
    /// them until a later `Append` or `Sync` returns (group commit: a
    /// transition whose effect runs while its record waits, the effect's
    /// outcome then made durable with it in one fsync).
    Write(Vec<Record>, RpcReplyPort<Durable>),
    /// Make every record written so far durable (staged records are not
    /// written: they ride the next `Append`); answered at once, without an
    /// fsync, when they are durable already (another append's fsync
    /// covered them). The run marker given is noted once they are, as
    /// [`JournalMsg::Append`]'s is.
    Sync(Option<RunMarker>, RpcReplyPort<Durable>),
    /// Stage records that need no acknowledgement of their own (a boot's
    /// progress): they are written, in order, with the next `Append` and
    /// made durable by its fsync. A crash before then loses only records
    /// nobody was told were durable.
    Stage(Vec<Record>),
    /// Replace the run marker.
    WriteRun(RunMarker, RpcReplyPort<Durable>),
    /// Replace the run marker with no one waiting and without fsyncs
    /// ([`ControlDir::note_run`]): the attempt a boot is on, which only the
    /// report of a crash depends on (a failed write is logged). Usually
    /// one `pwrite` over the marker, made at once
    /// ([`ControlDir::note_run_in_place`]); otherwise written in a task of
    /// its own, which appends do not wait for, and a later run marker
    /// write (`WriteRun`) waits for it.
    NoteRun(RunMarker),
    /// Set (`true`) or clear the hold marker.
    SetHold(bool, RpcReplyPort<Durable>),
    /// The identity, created now (at this many ms) if it does not exist.
    /// Written in a task of its own (another file than the journal: no
    /// record refers to it), so the append sent after it, the `booted`
    /// transition, does not wait for it and their fsyncs overlap; a later
    /// `EnsureIdentity` waits for it.
    EnsureIdentity(u64, RpcReplyPort<Durable<String>>),
    /// Make the override tier durable (`(leaf, TOML value)`).
    WriteOverrides(Vec<(String, String)>, RpcReplyPort<Durable>),
}

impl Actor for JournalActor {
    type Msg = JournalMsg;
    type State = JournalState;
    type Arguments = JournalArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<JournalMsg>,
        args: JournalArgs,
    ) -> Result<JournalState, ActorProcessingErr> {
        let file = match args.file {
            Some(file) => file,
            None => {
                let control = Arc::clone(&args.control);
                crate::device::run(move || control.open_journal()).await??.0
            }
        };
        Ok(JournalState {
            metrics: args.metrics,
            control: args.control,
            file: Some(file),
            staged: Vec::new(),
            ahead: Vec::new(),
            cut_ahead: Vec::new(),
            note: None,
            identity: None,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<JournalMsg>,
        msg: JournalMsg,
        state: &mut JournalState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            JournalMsg::Stage(records) => {
                state.staged.extend(records);
                state.bound_staged();
            }
            JournalMsg::Append(records, note, reply) => {
                let result = state.write(records, Commit::Sync).await?;
                if let (Ok(()), Some(marker)) = (&result, note) {
                    state.note_run(marker);
                }
                let _ = reply.send(result);
            }
            JournalMsg::Write(records, reply) => {
                let result = state.write(records, Commit::Later).await?;
                let _ = reply.send(result);
            }
            JournalMsg::Sync(note, reply) => {
                // Staged records stay staged: they ride the next append (a
                // fact staged after a failed write would fail this fsync
                // again on a full disk, and no one waits on them).
                let staged = std::mem::take(&mut state.staged);
                let result = state.write(Vec::new(), Commit::Sync).await;
                let mut later = std::mem::replace(&mut state.staged, staged);
                state.staged.append(&mut later);
                let result = result?;
                if let (Ok(()), Some(marker)) = (&result, note) {
                    state.note_run(marker);
                }
                let _ = reply.send(result);
            }
            JournalMsg::WriteRun(marker, reply) => {
                if let Some(note) = state.note.take() {
                    let _ = note.await;
                }
                // `released` tells the next launch that every record this
                // process wrote is durable (it then skips the journal's
                // fsync at open, `ControlDir::open_journal`): so it is
                // written only once they are. Staged facts stay staged,
                // as for `Sync`; without them the journal is whole.
                if matches!(marker, RunMarker::Released { .. }) {
                    let staged = std::mem::take(&mut state.staged);
                    let synced = state.write(Vec::new(), Commit::Whole).await;
                    let mut later = std::mem::replace(&mut state.staged, staged);
                    state.staged.append(&mut later);
                    if let Err(error) = synced? {
                        let _ = reply.send(Err(format!(
                            "not released: the journal could not be made durable first: {error}"
                        )));
                        return Ok(());
                    }
                }
                let control = Arc::clone(&state.control);
                let result = crate::device::run(move || control.write_run(&marker)).await?;
                let _ = reply.send(result.map_err(|e| e.to_string()));
            }
            JournalMsg::NoteRun(marker) => state.note_run(marker),
            JournalMsg::SetHold(hold, reply) => {
                let control = Arc::clone(&state.control);
                let result = crate::device::run(move || {
                    if hold {
                        control.set_hold()
                    } else {
                        control.clear_hold()
                    }
                })
                .await?;
                let _ = reply.send(result.map_err(|e| e.to_string()));
            }
            JournalMsg::EnsureIdentity(now_ms, reply) => {
                let previous = state.identity.take();
                let control = Arc::clone(&state.control);
                state.identity = Some(tokio::spawn(async move {
                    if let Some(previous) = previous {
                        let _ = previous.await;
                    }
                    let result = crate::device::run(move || control.ensure_identity(now_ms))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map(|identity| identity.id).map_err(|e| e.to_string()));
                    let _ = reply.send(result);
                }));
            }
            JournalMsg::WriteOverrides(leaves, reply) => {
                let control = Arc::clone(&state.control);
                let result = crate::device::run(move || control.write_overrides(&leaves)).await?;
                let _ = reply.send(result.map_err(|e| e.to_string()));
            }
        }
        Ok(())
    }
}

/// Ask `journal` to do something and wait for the durable answer.
pub(crate) async fn ask<T: Send + 'static>(
    journal: &ActorRef<JournalMsg>,
    timeout: Duration,
    msg: impl FnOnce(RpcReplyPort<Durable<T>>) -> JournalMsg,
) -> Durable<T> {
    match journal.call(msg, Some(timeout)).await {
        Ok(ractor::rpc::CallResult::Success(answer)) => answer,
        Ok(ractor::rpc::CallResult::Timeout) => {
            Err(format!("the journal did not answer within {timeout:?}"))
        }
        Ok(ractor::rpc::CallResult::SenderError) | Err(_) => {
            Err("the journal is not running".to_owned())
        }
    }
}

/// Write `records` without waiting for an fsync ([`JournalMsg::Write`]).
pub(crate) async fn write(
    journal: &ActorRef<JournalMsg>,
    records: Vec<Record>,
    timeout: Duration,
) -> Durable {
    ask(journal, timeout, |reply| JournalMsg::Write(records, reply)).await
}

/// Make everything written so far durable ([`JournalMsg::Sync`]), then
/// note `note` in the run marker.
pub(crate) async fn sync(
    journal: &ActorRef<JournalMsg>,
    note: Option<RunMarker>,
    timeout: Duration,
) -> Durable {
    ask(journal, timeout, |reply| JournalMsg::Sync(note, reply)).await
}

/// Append `records` and wait until they are durable, then note `note` in
/// the run marker.
pub(crate) async fn append(
    journal: &ActorRef<JournalMsg>,
    records: Vec<Record>,
    note: Option<RunMarker>,
    timeout: Duration,
) -> Durable {
    ask(journal, timeout, |reply| {
        JournalMsg::Append(records, note, reply)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use steadfast_protocol::time::Timestamp;

    /// The journal's fsyncs so far, as the metrics count them.
    fn fsyncs(metrics: &crate::metrics::Metrics) -> u64 {
        metrics
            .render(Timestamp(0))
            .lines()
            .find_map(|l| {
                l.strip_prefix("steadfast_journal_fsync_duration_seconds_count ")?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// `released` tells the next launch it need not fsync the journal at
    /// open: a record written ahead of its fsync is made durable before
    /// the marker is written, and a journal with nothing unsynced costs no
    /// fsync for it.
    #[tokio::test]
    async fn released_is_written_only_once_the_journal_is_durable() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let control = Arc::new(ControlDir::open(&tmp.path().join("data")).expect("open"));
        let (file, _, _) = control.open_journal().expect("journal");
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let (journal, _task) = Actor::spawn(
            None,
            JournalActor,
            JournalArgs {
                control: Arc::clone(&control),
                file: Some(file),
                metrics: Arc::clone(&metrics),
            },
        )
        .await
        .expect("spawn");
        let timeout = Duration::from_secs(10);
        let record = Record::AttemptStarted {
            attempt: std::num::NonZeroU32::MIN,
            at_ms: 1,
        };
        write(&journal, vec![record], timeout)
            .await
            .expect("written ahead");
        assert_eq!(fsyncs(&metrics), 0, "written, not yet durable");
        let released = RunMarker::Released { at_ms: 2, epoch: 1 };
        ask(&journal, timeout, |r| JournalMsg::WriteRun(released, r))
            .await
            .expect("released");
        assert_eq!(fsyncs(&metrics), 1, "the record was made durable first");
        assert!(matches!(
            control.read_run().expect("read"),
            crate::control_dir::MarkerRead::Valid(RunMarker::Released { .. })
        ));
        ask(&journal, timeout, |r| {
            JournalMsg::WriteRun(RunMarker::Released { at_ms: 3, epoch: 1 }, r)
        })
        .await
        .expect("released again");
        assert_eq!(fsyncs(&metrics), 1, "nothing left to make durable");
        journal.stop(None);
    }
}
