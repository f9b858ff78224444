//! What a resume needs from the journal (`spec/control-dir.md`, "Resume" and
//! "Compaction"): the outstanding checkpoints, and a compaction that keeps
//! them while dropping old attempts.

use crate::support::nz;
use proptest::prelude::*;
use steadfast_protocol::journal::{
    AttemptResult, Record, ResourceRecord, Unfinished, attempts_in, compact, outstanding,
    unfinished,
};

fn checkpoint(attempt: u32, step: &str, id: &str) -> Record {
    Record::Checkpoint {
        attempt: nz(attempt),
        step: step.into(),
        index: 2,
        resource: ResourceRecord {
            kind: "file".into(),
            id: id.into(),
            payload: vec![],
        },
    }
}

fn intent(attempt: u32, step: &str) -> Record {
    Record::Intent {
        attempt: nz(attempt),
        step: step.into(),
        index: 2,
    }
}

fn started(attempt: u32) -> Record {
    Record::AttemptStarted {
        attempt: nz(attempt),
        at_ms: u64::from(attempt),
    }
}

#[test]
fn outstanding_follows_checkpoints_and_clears() {
    let records = vec![
        started(1),
        checkpoint(1, "prepare", "a"),
        checkpoint(1, "open_store", "s"),
        Record::CheckpointCleared {
            step: "open_store".into(),
        },
        started(2),
        checkpoint(2, "prepare", "b"),
        checkpoint(2, "serve", "x"),
    ];
    let left = outstanding(&records);
    let steps: Vec<(&str, &str, u32)> = left
        .iter()
        .map(|o| (o.step.as_str(), o.resource.id.as_str(), o.attempt.get()))
        .collect();
    // "prepare" was checkpointed again by attempt 2: the later record wins
    // and moves to the end; "open_store" was cleared.
    assert_eq!(steps, vec![("prepare", "b", 2), ("serve", "x", 2)]);
}

/// An intent stays unfinished until its step's checkpoint or clear
/// follows; a later intent of a checkpointed step takes its checkpoint's
/// place (the step ran again, its earlier resource observed gone).
#[test]
fn an_intent_is_unfinished_until_its_checkpoint() {
    let records = vec![
        started(1),
        intent(1, "prepare"),
        checkpoint(1, "prepare", "a"),
        intent(1, "lease"),
        started(2),
        intent(2, "spool"),
        Record::CheckpointCleared {
            step: "spool".into(),
        },
        intent(2, "prepare"),
    ];
    let left: Vec<(String, u32)> = unfinished(&records)
        .into_iter()
        .map(|Unfinished { step, attempt, .. }| (step, attempt.get()))
        .collect();
    assert_eq!(left, vec![("lease".into(), 1), ("prepare".into(), 2)]);
    assert_eq!(
        outstanding(&records),
        vec![],
        "prepare's checkpoint gave way"
    );
    let mut finished = records.clone();
    finished.push(checkpoint(2, "prepare", "b"));
    finished.push(checkpoint(2, "lease", "7"));
    assert_eq!(unfinished(&finished), vec![]);
    assert_eq!(outstanding(&finished).len(), 2);
}

#[test]
fn compaction_keeps_the_last_attempts_and_the_outstanding_checkpoints() {
    let records = vec![
        started(1),
        checkpoint(1, "prepare", "a"),
        Record::AttemptEnded {
            attempt: nz(1),
            at_ms: 1,
            result: AttemptResult::Failed,
        },
        started(2),
        checkpoint(2, "open_store", "s"),
        started(3),
        Record::CheckpointCleared {
            step: "open_store".into(),
        },
    ];
    assert_eq!(compact(&records, 3), None, "nothing to drop");
    let compacted = compact(&records, 1).expect("compacted");
    assert_eq!(
        compacted,
        vec![
            checkpoint(1, "prepare", "a"),
            checkpoint(2, "open_store", "s"),
            started(3),
            Record::CheckpointCleared {
                step: "open_store".into(),
            },
        ]
    );
    assert_eq!(outstanding(&compacted), outstanding(&records));
    let none_kept = compact(&records, 0).expect("compacted");
    assert_eq!(none_kept, vec![checkpoint(1, "prepare", "a")]);
}

fn arb_record() -> impl Strategy<Value = Record> {
    let step = prop::sample::select(vec!["prepare", "open_store", "bind", "serve"]);
    prop_oneof![
        (1u32..50).prop_map(started),
        (1u32..50, step.clone(), "[a-z]{1,3}")
            .prop_map(|(attempt, step, id)| checkpoint(attempt, step, &id)),
        step.clone()
            .prop_map(|step| Record::CheckpointCleared { step: step.into() }),
        (1u32..50, step).prop_map(|(attempt, step)| intent(attempt, step)),
        (0u64..1000).prop_map(|at_ms| Record::Transition {
            at_ms,
            from: "booting".into(),
            event: "booted".into(),
            to: "running".into(),
        }),
    ]
}

proptest! {
    /// Compaction never changes what a resume sees, keeps exactly the last
    /// `keep` attempts, and keeps every record from the cut on, in order.
    #[test]
    fn compaction_keeps_what_a_resume_needs(
        records in prop::collection::vec(arb_record(), 0..200),
        keep in 0usize..6,
    ) {
        match compact(&records, keep) {
            None => prop_assert!(attempts_in(&records) <= keep),
            Some(compacted) => {
                prop_assert_eq!(outstanding(&compacted), outstanding(&records));
                prop_assert_eq!(unfinished(&compacted), unfinished(&records));
                prop_assert_eq!(attempts_in(&compacted), keep);
                prop_assert!(compacted.len() <= records.len() + 4);
                let kept_tail: Vec<&Record> = compacted
                    .iter()
                    .skip_while(|r| matches!(r, Record::Checkpoint { .. } | Record::Intent { .. }))
                    .collect();
                let original_tail: Vec<&Record> =
                    records[records.len() - kept_tail.len()..].iter().collect();
                prop_assert_eq!(kept_tail, original_tail);
                // Compacting again with the same bound changes nothing.
                prop_assert_eq!(compact(&compacted, keep), None);
            }
        }
    }
}

/// A child that flaps for days leaves the latest restarts, not all of them:
/// compaction thins them to the last `KEEP_CHILD_RESTARTS`, keeping every
/// other record and their order; once thinned, there is nothing more to do.
#[test]
fn compaction_keeps_the_latest_child_restarts() {
    use steadfast_protocol::journal::{KEEP_CHILD_RESTARTS, child_restarts_in};
    let one = std::num::NonZeroU32::MIN;
    let mut records = vec![Record::AttemptStarted {
        attempt: one,
        at_ms: 0,
    }];
    for n in 0..KEEP_CHILD_RESTARTS * 3 {
        records.push(Record::ChildRestarted {
            attempt: one,
            child: "flaky".into(),
            incarnation: u32::try_from(n + 2).unwrap(),
            reason: "panicked: boom".into(),
            at_ms: n as u64,
        });
        if n == 10 {
            records.push(Record::CheckpointCleared { step: "s".into() });
        }
    }
    let compacted = compact(&records, 3).expect("too many restarts: compacted");
    assert_eq!(child_restarts_in(&compacted), KEEP_CHILD_RESTARTS);
    assert_eq!(compacted[0], records[0]);
    assert!(compacted.contains(&Record::CheckpointCleared { step: "s".into() }));
    let Some(Record::ChildRestarted { incarnation, .. }) = compacted.last() else {
        panic!("the last record is the latest restart");
    };
    assert_eq!(
        *incarnation,
        u32::try_from(KEEP_CHILD_RESTARTS * 3 + 1).unwrap()
    );
    assert_eq!(compact(&compacted, 3), None);
}
