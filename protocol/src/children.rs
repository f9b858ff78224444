//! The children of a runtime: which to stop and start when one ends, when
//! the failures are too many, and what a significant child's end means.
//!
//! A [`Group`] is one supervised group of a runtime's children, as OTP's
//! `supervisor` defines it: each child has a [`Restart`] type (permanent,
//! transient, temporary) and may be *significant*; the group has a
//! [`Strategy`] (one_for_one, one_for_all, rest_for_one), an
//! [`Intensity`] (at most `restarts` restarts within `period`) and an
//! [`AutoShutdown`] (what a significant child's end does). The group is a
//! pure machine: [`Group::on`] takes an [`Event`] (a child's exit with its
//! incarnation and timestamp, an operator's command, the runtime's
//! shutdown) and hands back a [`Decision`] the runtime executes, in the
//! order it says; the runtime decides nothing. Held to
//! `protocol/spec/children.md` (`tests/it/children_table.rs`) and to its
//! properties (`tests/it/children_props.rs`):
//!
//! - no period holds more than `restarts` automatic restarts: the one that
//!   would is a [`Decision::Meltdown`] instead, and the group stops;
//! - rest_for_one never touches a sibling declared before the failed child;
//! - stops run in the reverse of start (declaration) order, starts in it;
//! - nothing starts once the shutdown has begun or the group has ended;
//! - an exit of an incarnation that is no longer current changes nothing.
//!
//! Operator commands ([`ChildOp`]) act on one child alone and never count
//! against the intensity (as OTP's `restart_child`); an operator's stop of
//! a significant child is not its end. Where the machine departs from OTP
//! (a strategy takes only the siblings that run; the intensity's window is
//! half-open, in milliseconds) is listed in the spec.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::{Timestamp, duration_ms};

/// The longest child name, in bytes.
pub const MAX_NAME: usize = 64;

/// When a child that ended is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// Always (whatever its end).
    Permanent,
    /// Only after an abnormal end (an error, a panic, a failed start); a
    /// normal return ends it for good.
    Transient,
    /// Never, not even when a sibling's failure stops it.
    Temporary,
}

impl Restart {
    /// Its spelling in status and the spec.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Permanent => "permanent",
            Self::Transient => "transient",
            Self::Temporary => "temporary",
        }
    }

    /// Whether a child of this type that ended with `exit` is restarted.
    #[must_use]
    pub const fn restarts_after(self, exit: &ChildExit) -> bool {
        match self {
            Self::Permanent => true,
            Self::Transient => !exit.is_normal(),
            Self::Temporary => false,
        }
    }
}

/// Which siblings a child's restart takes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The child alone.
    OneForOne,
    /// Every running child: all are stopped (last declared first) and
    /// started again (first declared first).
    OneForAll,
    /// The child and the running children declared after it.
    RestForOne,
}

impl Strategy {
    /// Its spelling in status and the spec.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OneForOne => "one_for_one",
            Self::OneForAll => "one_for_all",
            Self::RestForOne => "rest_for_one",
        }
    }
}

/// What the end of a significant child (one that is not restarted) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoShutdown {
    /// Nothing: a group with this may have no significant child.
    Never,
    /// The first significant child's end ends the runtime.
    AnySignificant,
    /// The end of the last running significant child ends the runtime.
    AllSignificant,
}

/// At most `restarts` automatic restarts within any `period`; one more is
/// a meltdown. `restarts` 0 makes any failure a meltdown (the period is
/// then unused, and may be 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Intensity {
    /// Restarts allowed within the period.
    pub restarts: u32,
    /// The period, in milliseconds.
    pub period_ms: u64,
}

impl Intensity {
    /// `restarts` within `period`.
    #[must_use]
    pub fn new(restarts: u32, period: Duration) -> Self {
        Self {
            restarts,
            period_ms: duration_ms(period),
        }
    }
}

impl Default for Intensity {
    /// OTP's default: 1 restart within 5 seconds.
    fn default() -> Self {
        Self {
            restarts: 1,
            period_ms: 5_000,
        }
    }
}

/// What a child is, as status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildKind {
    /// An async task.
    Task,
    /// A ractor actor.
    Actor,
}

impl ChildKind {
    /// Its spelling in status.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Actor => "actor",
        }
    }
}

/// The old name of [`ChildKind`].
#[deprecated(since = "0.1.0", note = "renamed to `ChildKind`")]
pub type Kind = ChildKind;

/// One child as its group declares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSpec {
    /// Unique in its runtime; see [`check_name`].
    pub name: String,
    /// A task or an actor.
    pub kind: ChildKind,
    /// When it is started again.
    pub restart: Restart,
    /// Whether its end (when not restarted) may end the runtime
    /// ([`AutoShutdown`]).
    pub significant: bool,
    /// How long it is given to stop before it is aborted, in milliseconds.
    pub shutdown_ms: u64,
}

/// A group as declared: its children in start order and its policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSpec {
    /// Which siblings a restart takes.
    pub strategy: Strategy,
    /// How many restarts within what period.
    pub intensity: Intensity,
    /// What a significant child's end does.
    pub auto_shutdown: AutoShutdown,
    /// The children, in start order.
    pub children: Vec<ChildSpec>,
}

/// A group that cannot be started as declared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A child has an empty name.
    #[error("a child's name is empty")]
    EmptyName,
    /// A child's name is longer than [`MAX_NAME`] bytes.
    #[error("child name {0:?} is longer than {MAX_NAME} bytes")]
    NameTooLong(String),
    /// A child's name holds a control character or a space (shown escaped).
    #[error("child name {0:?} holds a control character or whitespace")]
    NameNotPrintable(String),
    /// Two children of one runtime share a name.
    #[error("two children are named {0:?}: a child's name is unique in its runtime")]
    DuplicateName(String),
    /// Restarts are allowed within a period of 0, which holds none.
    #[error(
        "an intensity of {0} restarts within 0 ms allows none: give a period, or 0 restarts for none"
    )]
    ZeroPeriod(u32),
    /// A significant child in a group whose auto-shutdown is `never`.
    #[error("child {0:?} is significant, but the group's auto-shutdown is never")]
    SignificantWithoutAutoShutdown(String),
    /// A significant child that is permanent (it never ends for good).
    #[error(
        "child {0:?} is significant and permanent: only a transient or temporary child can end for good"
    )]
    SignificantPermanent(String),
}

/// Whether `name` can name a child: 1 to [`MAX_NAME`] bytes, no control
/// character and no whitespace (it is shown in logs, status and metrics
/// labels, and typed on a command line).
///
/// # Errors
/// Which rule it breaks.
pub fn check_name(name: &str) -> Result<(), SpecError> {
    if name.is_empty() {
        return Err(SpecError::EmptyName);
    }
    if name.len() > MAX_NAME {
        return Err(SpecError::NameTooLong(name.to_owned()));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(SpecError::NameNotPrintable(name.to_owned()));
    }
    Ok(())
}

impl GroupSpec {
    /// Check the group as declared: names ([`check_name`], unique in the
    /// group), intensity, significant children.
    ///
    /// # Errors
    /// The first rule broken, in declaration order.
    pub fn check(&self) -> Result<(), SpecError> {
        if self.intensity.restarts > 0 && self.intensity.period_ms == 0 {
            return Err(SpecError::ZeroPeriod(self.intensity.restarts));
        }
        for (i, child) in self.children.iter().enumerate() {
            check_name(&child.name)?;
            if self.children[..i].iter().any(|c| c.name == child.name) {
                return Err(SpecError::DuplicateName(child.name.clone()));
            }
            if child.significant {
                if self.auto_shutdown == AutoShutdown::Never {
                    return Err(SpecError::SignificantWithoutAutoShutdown(
                        child.name.clone(),
                    ));
                }
                if child.restart == Restart::Permanent {
                    return Err(SpecError::SignificantPermanent(child.name.clone()));
                }
            }
        }
        Ok(())
    }
}

/// How a child's incarnation ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildExit {
    /// It returned `Ok` (an actor: stopped on its own).
    Normal,
    /// It returned an error (an actor: stopped with a reason).
    Error(String),
    /// It panicked.
    Panicked(String),
    /// Its factory failed: it never ran.
    StartFailed(String),
}

impl ChildExit {
    /// Whether this is a normal end (a transient child's end for good).
    #[must_use]
    pub const fn is_normal(&self) -> bool {
        matches!(self, Self::Normal)
    }
}

impl fmt::Display for ChildExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Normal => f.write_str("returned"),
            Self::Error(e) => write!(f, "failed: {e}"),
            Self::Panicked(p) => write!(f, "panicked: {p}"),
            Self::StartFailed(e) => write!(f, "could not start: {e}"),
        }
    }
}

/// The old name of [`ChildExit`].
#[deprecated(since = "0.1.0", note = "renamed to `ChildExit`")]
pub type Exit = ChildExit;

/// An operator's command about one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildOp {
    /// Stop it if it runs, then start it.
    Restart,
    /// Stop it; it stays stopped until started.
    Stop,
    /// Start it (it is not running).
    Start,
}

impl ChildOp {
    /// Its spelling on the wire and the command line.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Restart => "restart",
            Self::Stop => "stop",
            Self::Start => "start",
        }
    }
}

/// The old name of [`ChildOp`].
#[deprecated(since = "0.1.0", note = "renamed to `ChildOp`")]
pub type Op = ChildOp;

/// What happens to a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Incarnation `incarnation` of child `child` ended.
    Exited {
        /// The child's index (declaration order).
        child: usize,
        /// Which incarnation (from 1).
        incarnation: u32,
        /// How.
        exit: ChildExit,
        /// When.
        at: Timestamp,
    },
    /// An operator's command about child `child`.
    Operator {
        /// The child's index.
        child: usize,
        /// What to do.
        op: ChildOp,
        /// When.
        at: Timestamp,
    },
    /// The runtime's shutdown began: stop every child.
    Shutdown,
}

/// Why an operator's command changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum OpRefused {
    /// The child is already running (`start`).
    #[error("it is already running")]
    Running,
    /// The child is not running (`stop`).
    #[error("it is not running")]
    NotRunning,
    /// The group is shutting down or has ended: nothing starts.
    #[error("its runtime is shutting down")]
    ShuttingDown,
}

/// One child started again: a journal record and a log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restarted {
    /// The child's name.
    pub child: String,
    /// The incarnation now starting (from 2).
    pub incarnation: u32,
    /// Why: its own end, the sibling whose failure took it, or an operator.
    pub reason: String,
}

/// What the runtime does, in this order: stop `stop` (each within its
/// shutdown timeout, one after another), then start `start` (in order),
/// then journal `restarted` (no fsync of its own: a child dies with the
/// process).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Children to stop, by index, last declared first.
    pub stop: Vec<usize>,
    /// Children to start, by index, first declared first, each with its
    /// new incarnation.
    pub start: Vec<(usize, u32)>,
    /// A record for each restart (not for a first start).
    pub restarted: Vec<Restarted>,
}

/// The group gave up: the restart that was due would have exceeded the
/// intensity. Its children are stopped (`stop`), and the runtime ends with
/// this as its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meltdown {
    /// The child whose end would have been one restart too many.
    pub child: String,
    /// Restarts within the period, counting the one refused.
    pub restarts: u32,
    /// The intensity's period, in milliseconds.
    pub period_ms: u64,
    /// That child's end.
    pub reason: String,
}

impl fmt::Display for Meltdown {
    /// The count first, as the group's (the restarts may be of any of its
    /// children), then the end that would have been one too many.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.restarts <= 1 {
            f.write_str("the group allows no restarts")?;
        } else {
            write!(
                f,
                "{} restarts within {}, one more than the group allows",
                self.restarts,
                Period(self.period_ms)
            )?;
        }
        write!(f, ": child {} {}", self.child, self.reason)
    }
}

/// A period in milliseconds, in the largest unit that says it exactly.
struct Period(u64);

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1_000 && self.0.is_multiple_of(1_000) {
            write!(f, "{} s", self.0 / 1_000)
        } else {
            write!(f, "{} ms", self.0)
        }
    }
}

/// What the runtime does about an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: the exit of an incarnation that is no longer current, or
    /// any event once the group has ended or its shutdown has begun.
    Ignore,
    /// The child ended for good (its state says how); nothing else moves.
    Ended,
    /// Stop and start these ([`Plan`]).
    Restart(Plan),
    /// The intensity is exceeded: stop these (last declared first) and end
    /// the runtime with the [`Meltdown`] as its reason.
    Meltdown {
        /// Why.
        meltdown: Meltdown,
        /// The running children, to stop.
        stop: Vec<usize>,
    },
    /// A significant child's end ends the runtime (its [`AutoShutdown`]):
    /// stop these and end the runtime, naming the child.
    SignificantEnded {
        /// The child's name.
        child: String,
        /// Its end.
        exit: ChildExit,
        /// The running children, to stop.
        stop: Vec<usize>,
    },
    /// The shutdown began: stop these, last declared first.
    Shutdown {
        /// The running children.
        stop: Vec<usize>,
    },
    /// An operator's command that changes nothing, and why.
    Refused(OpRefused),
}

/// Where one child stands, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "exit")]
pub enum ChildState {
    /// Declared, not started yet.
    NotStarted,
    /// Its current incarnation runs.
    Running,
    /// It ended and is not restarted: how.
    Ended(ChildExit),
    /// Stopped by an operator or by a sibling's restart that does not
    /// restart it (a temporary child).
    Stopped,
}

impl ChildState {
    /// Its spelling in status.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::NotStarted => "not_started",
            Self::Running => "running",
            Self::Ended(ChildExit::Normal) => "ended",
            Self::Ended(_) => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// The group's own phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Its children run and are restarted.
    Running,
    /// The runtime's shutdown began: nothing starts.
    ShuttingDown,
    /// It melted down or a significant child ended it: nothing starts.
    Ended,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Child {
    spec: ChildSpec,
    state: ChildState,
    /// The current (or last) incarnation; 0 before the first start.
    incarnation: u32,
    /// When its automatic restarts happened, within the period.
    restarts: VecDeque<Timestamp>,
    /// Every restart since the group started (automatic and operator).
    restarts_total: u64,
}

/// One child as status shows it ([`Group::view`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildView {
    /// Its name.
    pub name: String,
    /// Task or actor.
    pub kind: ChildKind,
    /// Its restart type.
    pub restart: Restart,
    /// Whether it is significant.
    pub significant: bool,
    /// Where it stands.
    pub state: ChildState,
    /// Its current (or last) incarnation, from 1; 0 before its first start.
    pub incarnation: u32,
    /// Its automatic restarts within the group's period, as of the view.
    pub restarts_in_period: u32,
    /// Every restart of it since the group started.
    pub restarts_total: u64,
}

/// One supervised group: the pure machine. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    strategy: Strategy,
    intensity: Intensity,
    auto_shutdown: AutoShutdown,
    children: Vec<Child>,
    /// Every automatic restart's moment within the period (the group's
    /// intensity counts them all, whichever child).
    restarts: VecDeque<Timestamp>,
    phase: Phase,
}

impl Group {
    /// A group as declared, nothing started yet.
    ///
    /// # Errors
    /// [`GroupSpec::check`]'s.
    pub fn new(spec: GroupSpec) -> Result<Self, SpecError> {
        spec.check()?;
        Ok(Self {
            strategy: spec.strategy,
            intensity: spec.intensity,
            auto_shutdown: spec.auto_shutdown,
            children: spec
                .children
                .into_iter()
                .map(|spec| Child {
                    spec,
                    state: ChildState::NotStarted,
                    incarnation: 0,
                    restarts: VecDeque::new(),
                    restarts_total: 0,
                })
                .collect(),
            restarts: VecDeque::new(),
            phase: Phase::Running,
        })
    }

    /// Start every child, first declared first (incarnation 1 each).
    /// Called once; later calls plan nothing.
    pub fn start(&mut self) -> Plan {
        let mut plan = Plan::default();
        if self.phase != Phase::Running {
            return plan;
        }
        for (i, child) in self.children.iter_mut().enumerate() {
            if child.state == ChildState::NotStarted {
                child.incarnation = child.incarnation.saturating_add(1);
                child.state = ChildState::Running;
                plan.start.push((i, child.incarnation));
            }
        }
        plan
    }

    /// The group's phase.
    #[must_use]
    pub const fn phase(&self) -> Phase {
        self.phase
    }

    /// The group's strategy.
    #[must_use]
    pub const fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The group's intensity.
    #[must_use]
    pub const fn intensity(&self) -> Intensity {
        self.intensity
    }

    /// How many children it declares.
    #[must_use]
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether it declares none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Child `i`'s declaration.
    #[must_use]
    pub fn spec(&self, i: usize) -> Option<&ChildSpec> {
        self.children.get(i).map(|c| &c.spec)
    }

    /// The index of the child named `name`.
    #[must_use]
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.children.iter().position(|c| c.spec.name == name)
    }

    /// Child `i`'s state and incarnation.
    #[must_use]
    pub fn state(&self, i: usize) -> Option<(&ChildState, u32)> {
        self.children.get(i).map(|c| (&c.state, c.incarnation))
    }

    /// Every child as status shows it, its restarts counted within the
    /// period ending at `at`.
    #[must_use]
    pub fn view(&self, at: Timestamp) -> Vec<ChildView> {
        self.children
            .iter()
            .map(|c| ChildView {
                name: c.spec.name.clone(),
                kind: c.spec.kind,
                restart: c.spec.restart,
                significant: c.spec.significant,
                state: c.state.clone(),
                incarnation: c.incarnation,
                restarts_in_period: u32::try_from(
                    c.restarts
                        .iter()
                        .filter(|t| self.within_period(**t, at))
                        .count(),
                )
                .unwrap_or(u32::MAX),
                restarts_total: c.restarts_total,
            })
            .collect()
    }

    fn within_period(&self, t: Timestamp, at: Timestamp) -> bool {
        at.0.saturating_sub(t.0) < self.intensity.period_ms
    }

    /// Decide what `event` means; the group's state moves as the decision
    /// says (the runtime then carries the decision out).
    pub fn on(&mut self, event: &Event) -> Decision {
        if self.phase != Phase::Running {
            return match event {
                Event::Operator { .. } => Decision::Refused(OpRefused::ShuttingDown),
                Event::Exited {
                    child,
                    incarnation,
                    exit,
                    ..
                } => {
                    // A child stopped by the shutdown or the meltdown ends:
                    // recorded, nothing moves.
                    self.ended_quietly(*child, *incarnation, exit);
                    Decision::Ignore
                }
                // A group that ended stays ended (its status says why); one
                // already shutting down has nothing more to stop.
                Event::Shutdown => Decision::Ignore,
            };
        }
        match event {
            Event::Shutdown => {
                self.phase = Phase::ShuttingDown;
                Decision::Shutdown {
                    stop: self.stop_running(0..self.children.len()),
                }
            }
            Event::Exited {
                child,
                incarnation,
                exit,
                at,
            } => self.exited(*child, *incarnation, exit, *at),
            Event::Operator { child, op, .. } => self.operator(*child, *op),
        }
    }

    fn ended_quietly(&mut self, i: usize, incarnation: u32, exit: &ChildExit) {
        if let Some(child) = self.children.get_mut(i)
            && child.incarnation == incarnation
            && child.state == ChildState::Running
        {
            child.state = ChildState::Ended(exit.clone());
        }
    }

    fn exited(&mut self, i: usize, incarnation: u32, exit: &ChildExit, at: Timestamp) -> Decision {
        let Some(child) = self.children.get_mut(i) else {
            return Decision::Ignore;
        };
        if child.incarnation != incarnation || child.state != ChildState::Running {
            return Decision::Ignore;
        }
        if !child.spec.restart.restarts_after(exit) {
            child.state = ChildState::Ended(exit.clone());
            return self.ended_for_good(i, exit);
        }
        // A restart is due: does it fit the intensity?
        let period = self.intensity.period_ms;
        while let Some(first) = self.restarts.front() {
            if at.0.saturating_sub(first.0) >= period {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
        let within = u32::try_from(self.restarts.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let child = &mut self.children[i];
        if within > self.intensity.restarts {
            child.state = ChildState::Ended(exit.clone());
            let meltdown = Meltdown {
                child: child.spec.name.clone(),
                restarts: within,
                period_ms: period,
                reason: exit.to_string(),
            };
            self.phase = Phase::Ended;
            return Decision::Meltdown {
                meltdown,
                stop: self.stop_running(0..self.children.len()),
            };
        }
        self.restarts.push_back(at);
        // The failed child is no longer running; it is restarted with the
        // siblings its strategy takes.
        child.state = ChildState::Stopped;
        let name = child.spec.name.clone();
        let taken = match self.strategy {
            Strategy::OneForOne => i..i + 1,
            Strategy::OneForAll => 0..self.children.len(),
            Strategy::RestForOne => i..self.children.len(),
        };
        let siblings: Vec<usize> = taken.clone().filter(|j| *j != i).collect();
        let stop = self.stop_running(siblings.iter().copied());
        let mut plan = Plan {
            stop,
            ..Plan::default()
        };
        for j in taken {
            let restart_it = j == i || plan.stop.contains(&j);
            let child = &mut self.children[j];
            if !restart_it || child.spec.restart == Restart::Temporary {
                continue;
            }
            child.incarnation = child.incarnation.saturating_add(1);
            child.state = ChildState::Running;
            child.restarts_total += 1;
            if j == i {
                child.restarts.push_back(at);
            }
            while let Some(first) = child.restarts.front() {
                if at.0.saturating_sub(first.0) >= period {
                    child.restarts.pop_front();
                } else {
                    break;
                }
            }
            plan.start.push((j, child.incarnation));
            plan.restarted.push(Restarted {
                child: child.spec.name.clone(),
                incarnation: child.incarnation,
                reason: if j == i {
                    exit.to_string()
                } else {
                    format!("{} restarted with {name}", self.strategy.as_str())
                },
            });
        }
        Decision::Restart(plan)
    }

    /// Child `i` ended and is not restarted: does its end end the runtime?
    fn ended_for_good(&mut self, i: usize, exit: &ChildExit) -> Decision {
        let child = &self.children[i];
        if !child.spec.significant {
            return Decision::Ended;
        }
        let ends = match self.auto_shutdown {
            AutoShutdown::Never => false,
            AutoShutdown::AnySignificant => true,
            AutoShutdown::AllSignificant => !self
                .children
                .iter()
                .any(|c| c.spec.significant && c.state == ChildState::Running),
        };
        if !ends {
            return Decision::Ended;
        }
        let name = child.spec.name.clone();
        self.phase = Phase::Ended;
        Decision::SignificantEnded {
            child: name,
            exit: exit.clone(),
            stop: self.stop_running(0..self.children.len()),
        }
    }

    fn operator(&mut self, i: usize, op: ChildOp) -> Decision {
        let Some(child) = self.children.get_mut(i) else {
            return Decision::Ignore;
        };
        let running = child.state == ChildState::Running;
        match (op, running) {
            (ChildOp::Start, true) => Decision::Refused(OpRefused::Running),
            (ChildOp::Stop, false) => Decision::Refused(OpRefused::NotRunning),
            (ChildOp::Stop, true) => {
                child.state = ChildState::Stopped;
                Decision::Restart(Plan {
                    stop: vec![i],
                    ..Plan::default()
                })
            }
            (ChildOp::Start | ChildOp::Restart, _) => {
                let stop = if running { vec![i] } else { Vec::new() };
                let first = child.incarnation == 0;
                child.incarnation = child.incarnation.saturating_add(1);
                child.state = ChildState::Running;
                let restarted = if first {
                    Vec::new()
                } else {
                    child.restarts_total += 1;
                    vec![Restarted {
                        child: child.spec.name.clone(),
                        incarnation: child.incarnation,
                        reason: format!("operator {}", op.as_str()),
                    }]
                };
                Decision::Restart(Plan {
                    stop,
                    start: vec![(i, child.incarnation)],
                    restarted,
                })
            }
        }
    }

    /// Mark the running children among `which` stopped; their indices,
    /// last declared first.
    fn stop_running(&mut self, which: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let mut stop: Vec<usize> = which
            .into_iter()
            .filter(|j| self.children[*j].state == ChildState::Running)
            .collect();
        stop.sort_unstable_by(|a, b| b.cmp(a));
        for j in &stop {
            self.children[*j].state = ChildState::Stopped;
        }
        stop
    }
}

#[cfg(test)]
mod tests;
