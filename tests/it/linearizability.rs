//! A linearizability checker for the history of one object (one key of the server): client
//! threads record when each operation was invoked, when its answer came and what it was, and
//! `check` decides whether some sequential order of the operations, consistent with real time,
//! explains every answer under a sequential `Model` of the object.
//!
//! The algorithm is Wing and Gong's ("Testing and verifying concurrent objects", 1993) with
//! Gavin Lowe's memoisation ("Testing for linearizability", 2017), the one Go's porcupine and
//! Jepsen's Knossos ("wgl") implement. The call and return events of all operations form a
//! doubly-linked list in time order. A depth-first search linearizes an operation whose call
//! comes before the first remaining return, lifting both its events out of the list, and
//! backtracks (unlifting them) when no such operation fits. A configuration already searched
//! (the set of linearized operations together with the model's state) is not searched again.
//! The search is a loop over an explicit stack, never a recursion.
//!
//! One pruning is added to the published algorithm: operations with equal inputs and unknown
//! answers are interchangeable, so of two such where one is invoked and returns no later than
//! the other, the search always linearizes that one first (a linearization that has them the
//! other way round stays one when they are swapped). Without it, k increments that timed out
//! make 2^k configurations where k + 1 would do.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;

/// A sequential specification of the object the operations act on.
pub trait Model {
    /// The object's state, compared and hashed to memoise the search.
    type State: Clone + Eq + Hash + Debug;
    /// What a client asked for. Equality lets the search treat two operations with equal
    /// inputs and unknown answers as interchangeable.
    type Input: Debug + Eq;
    /// What the client was answered.
    type Output: Debug;
    /// The state before any operation.
    fn init(&self) -> Self::State;
    /// The state after `input` answered `output` in `state`, or None if that answer is impossible
    /// there. `output` is None when the answer is unknown (the client timed out or the request
    /// failed in a way that does not say whether it took effect): any answer is then allowed.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;
}

/// One client operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// Which client invoked it (only shown in explanations).
    pub client: usize,
    /// What was asked.
    pub input: I,
    /// When it was invoked (any monotonic clock shared by all clients, e.g. nanoseconds).
    pub call: u64,
    /// Its answer, or None if unknown.
    pub output: Option<O>,
    /// When the answer came; None if it never did (the operation may take effect at any time
    /// after `call`, or never: its return is treated as +infinity, as porcupine does). An
    /// operation with a `ret` must take effect between `call` and `ret`; a `ret` earlier than
    /// `call` is taken as equal to it.
    pub ret: Option<u64>,
}

/// The outcome of `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Some order of the operations consistent with real time explains every answer.
    Linearizable,
    /// Not linearizable; `explanation` is a human-readable account: the longest prefix of
    /// operations that could be linearized (in order, with their inputs and outputs), and the
    /// operations that could not be placed after it, in at most about 40 lines.
    Illegal { explanation: String },
    /// The search gave up after `budget` steps without deciding.
    Unknown,
}

/// Whether `history` is linearizable under `model`, searching for at most `budget` steps (one
/// step is one attempt to linearize an operation at some point of the search).
///
/// Two events at the same instant are ordered call first, so operations that merely touch are
/// taken as concurrent: the checker errs towards accepting rather than reporting a violation
/// that the clock's resolution may have invented.
pub fn check<M: Model>(
    model: &M,
    history: &[Operation<M::Input, M::Output>],
    budget: u64,
) -> Verdict {
    let mut events = Events::new(history);
    let waits_for = interchangeable_predecessors(history);
    // The linearized operations, as a bitset.
    let mut linearized = vec![0u64; history.len().div_ceil(64)];
    // Configurations already reached: (linearized operations, state).
    let mut seen: HashSet<(Vec<u64>, M::State)> = HashSet::new();
    // The operations linearized so far, in order, each with the state before it.
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut state = model.init();
    let mut steps = 0u64;
    let mut deepest: Option<DeadEnd<M::State>> = None;
    let mut node = events.next[HEAD];
    while events.next[HEAD] != NIL {
        if let Some(op) = call_of(node) {
            steps += 1;
            if steps > budget {
                return Verdict::Unknown;
            }
            let o = &history[op];
            let mut placed = false;
            let ready = waits_for[op].is_none_or(|earlier| bit(&linearized, earlier));
            if let Some(after) = ready
                .then(|| model.step(&state, &o.input, o.output.as_ref()))
                .flatten()
            {
                let mut key = linearized.clone();
                set_bit(&mut key, op);
                if seen.insert((key, after.clone())) {
                    stack.push((op, std::mem::replace(&mut state, after)));
                    set_bit(&mut linearized, op);
                    events.lift(op);
                    node = events.next[HEAD];
                    placed = true;
                }
            }
            if !placed {
                node = events.next[node];
            }
        } else {
            // `node` is the first remaining return: every operation invoked before it has
            // been tried here and none fits, so undo the last choice.
            if deepest
                .as_ref()
                .is_none_or(|d| stack.len() > d.prefix.len())
            {
                deepest = Some(DeadEnd {
                    prefix: stack.iter().map(|&(op, _)| op).collect(),
                    state: state.clone(),
                    candidates: events
                        .calls_before(node)
                        .into_iter()
                        .map(|op| (op, waits_for[op].filter(|&e| !bit(&linearized, e))))
                        .collect(),
                    blocking: return_of(node),
                });
            }
            let Some((op, before)) = stack.pop() else {
                let dead_end = deepest.expect("a dead end was just recorded");
                return Verdict::Illegal {
                    explanation: explain(model, history, &dead_end),
                };
            };
            state = before;
            clear_bit(&mut linearized, op);
            events.unlift(op);
            node = events.next[call_node(op)];
        }
    }
    Verdict::Linearizable
}

/// For each operation with an unknown answer, the interchangeable operation (equal input,
/// unknown answer) to linearize before it, if any: the one before it in the order of (call,
/// return), provided it returns no later. Swapping two such operations in a linearization
/// keeps it one, so requiring this order loses no linearization.
fn interchangeable_predecessors<I: Eq, O>(history: &[Operation<I, O>]) -> Vec<Option<usize>> {
    let ret = |op: usize| {
        history[op]
            .ret
            .map_or(u64::MAX, |r| r.max(history[op].call))
    };
    // Classes of equal inputs among the operations with unknown answers.
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for (op, o) in history.iter().enumerate() {
        if o.output.is_some() {
            continue;
        }
        match classes.iter_mut().find(|c| history[c[0]].input == o.input) {
            Some(class) => class.push(op),
            None => classes.push(vec![op]),
        }
    }
    let mut waits_for = vec![None; history.len()];
    for mut class in classes {
        class.sort_by_key(|&op| (history[op].call, ret(op), op));
        for pair in class.windows(2) {
            if ret(pair[0]) <= ret(pair[1]) {
                waits_for[pair[1]] = Some(pair[0]);
            }
        }
    }
    waits_for
}

/// The end of the list (and "no node").
const NIL: usize = usize::MAX;
/// The sentinel node in front of the list.
const HEAD: usize = 0;

/// The call and return events of a history as a doubly-linked list over vectors, in time
/// order behind a head sentinel. Node 0 is the head; operation `i` has its call event at node
/// `1 + 2i` and its return event at node `2 + 2i`. A lifted node keeps its own links, so that
/// unlifting in the reverse order (the search's stack order) restores it in place.
struct Events {
    prev: Vec<usize>,
    next: Vec<usize>,
}

impl Events {
    /// The list of `history`'s events, calls before returns at the same instant.
    fn new<I, O>(history: &[Operation<I, O>]) -> Self {
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * history.len());
        for (op, o) in history.iter().enumerate() {
            let ret = o.ret.map_or(u64::MAX, |r| r.max(o.call));
            order.push((o.call, false, call_node(op)));
            order.push((ret, true, call_node(op) + 1));
        }
        order.sort_by_key(|&(time, is_return, _)| (time, is_return));
        let len = 2 * history.len() + 1;
        let mut prev = vec![NIL; len];
        let mut next = vec![NIL; len];
        let mut last = HEAD;
        for &(_, _, node) in &order {
            next[last] = node;
            prev[node] = last;
            last = node;
        }
        Events { prev, next }
    }

    /// Takes `op`'s call and return events out of the list.
    fn lift(&mut self, op: usize) {
        let call = call_node(op);
        let (before, after) = (self.prev[call], self.next[call]);
        // A call always has at least its own return after it.
        self.next[before] = after;
        self.prev[after] = before;
        let ret = call + 1;
        let (before, after) = (self.prev[ret], self.next[ret]);
        self.next[before] = after;
        if after != NIL {
            self.prev[after] = before;
        }
    }

    /// Puts back the events of `op`, the operation lifted last.
    fn unlift(&mut self, op: usize) {
        let call = call_node(op);
        let ret = call + 1;
        let (before, after) = (self.prev[ret], self.next[ret]);
        self.next[before] = ret;
        if after != NIL {
            self.prev[after] = ret;
        }
        let (before, after) = (self.prev[call], self.next[call]);
        self.next[before] = call;
        self.prev[after] = call;
    }

    /// The operations whose calls come before `node` in the list.
    fn calls_before(&self, node: usize) -> Vec<usize> {
        let mut ops = Vec::new();
        let mut at = self.next[HEAD];
        while at != node && at != NIL {
            ops.extend(call_of(at));
            at = self.next[at];
        }
        ops
    }
}

/// The node of operation `op`'s call event.
fn call_node(op: usize) -> usize {
    1 + 2 * op
}

/// The operation whose call event `node` is, or None for a return event.
fn call_of(node: usize) -> Option<usize> {
    (node % 2 == 1).then(|| (node - 1) / 2)
}

/// The operation whose return event `node` is.
fn return_of(node: usize) -> usize {
    (node - 2) / 2
}

fn set_bit(bits: &mut [u64], i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn clear_bit(bits: &mut [u64], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}

/// The deepest point the search reached without being able to go on, for the explanation.
struct DeadEnd<S> {
    /// The operations linearized, in order.
    prefix: Vec<usize>,
    /// The state after them.
    state: S,
    /// The operations that could have come next (invoked before `blocking` returned), each with
    /// the interchangeable operation it waits for, if that is not linearized yet.
    candidates: Vec<(usize, Option<usize>)>,
    /// The pending operation that returned first.
    blocking: usize,
}

/// How many operations of the prefix and of the candidates an explanation shows at most.
const SHOWN_PREFIX: usize = 16;
const SHOWN_CANDIDATES: usize = 12;
/// How long a line of an explanation may be, in characters.
const LINE_MAX: usize = 240;

/// The explanation of an Illegal verdict from the deepest dead end of the search.
fn explain<M: Model>(
    model: &M,
    history: &[Operation<M::Input, M::Output>],
    dead_end: &DeadEnd<M::State>,
) -> String {
    let mut lines = Vec::new();
    let prefix = &dead_end.prefix;
    lines.push(format!(
        "not linearizable: no order of the {} operations explains every answer",
        history.len()
    ));
    let skipped = prefix.len().saturating_sub(SHOWN_PREFIX);
    lines.push(match prefix.len() {
        0 => "longest linearizable prefix found: none".to_string(),
        len if skipped > 0 => format!(
            "longest linearizable prefix found ({len} operations; the first {skipped} omitted):"
        ),
        len => format!("longest linearizable prefix found ({len} operations):"),
    });
    for &op in &prefix[skipped..] {
        lines.push(format!("  {}", describe(history, op)));
    }
    lines.push(format!("state after it: {:?}", dead_end.state));
    let blocking = &history[dead_end.blocking];
    lines.push(match blocking.ret {
        Some(ret) => format!(
            "none of these can come next (one must: they were invoked before #{} returned at {}, \
             the first pending return):",
            dead_end.blocking,
            ret.max(blocking.call),
        ),
        None => "none of the remaining operations (none of them returned) can come next:".into(),
    });
    for &(op, waits_for) in dead_end.candidates.iter().take(SHOWN_CANDIDATES) {
        let o = &history[op];
        let why = match (
            waits_for,
            model.step(&dead_end.state, &o.input, o.output.as_ref()),
        ) {
            (Some(earlier), _) => {
                format!("interchangeable with #{earlier}, which is tried instead")
            }
            (None, None) => "impossible in this state".to_string(),
            (None, Some(_)) => "possible here, but nothing fits after it".to_string(),
        };
        lines.push(format!("  {}: {why}", describe(history, op)));
    }
    if dead_end.candidates.len() > SHOWN_CANDIDATES {
        lines.push(format!(
            "  ... and {} more",
            dead_end.candidates.len() - SHOWN_CANDIDATES
        ));
    }
    let mut text = String::new();
    for line in lines {
        text.push_str(&shortened(line));
        text.push('\n');
    }
    text
}

/// One line about operation `op`: its index, client, interval, input and output.
fn describe<I: Debug, O: Debug>(history: &[Operation<I, O>], op: usize) -> String {
    let o = &history[op];
    let ret = o.ret.map_or("never".to_string(), |r| r.to_string());
    let output = o
        .output
        .as_ref()
        .map_or("unknown".to_string(), |out| format!("{out:?}"));
    format!(
        "#{op} client {} [{}, {ret}] {:?} -> {output}",
        o.client, o.call, o.input
    )
}

/// `line`, cut to `LINE_MAX` characters.
fn shortened(line: String) -> String {
    match line.char_indices().nth(LINE_MAX) {
        Some((cut, _)) => format!("{} ...", &line[..cut]),
        None => line,
    }
}

/// A register holding one string, or nothing (the key is absent); a GET and SET key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Register;

/// An operation on a `Register`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterInput {
    /// Sets the value (SET).
    Write(String),
    /// Reads the value (GET).
    Read,
}

/// An answer of a `Register`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOutput {
    /// The answer to a write.
    Ok,
    /// The answer to a read: the value, or None if the key is absent.
    Value(Option<String>),
}

impl Model for Register {
    type State = Option<String>;
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn init(&self) -> Self::State {
        None
    }

    fn step(
        &self,
        state: &Self::State,
        input: &RegisterInput,
        output: Option<&RegisterOutput>,
    ) -> Option<Self::State> {
        match (input, output) {
            (RegisterInput::Write(value), None | Some(RegisterOutput::Ok)) => {
                Some(Some(value.clone()))
            }
            (RegisterInput::Read, None) => Some(state.clone()),
            (RegisterInput::Read, Some(RegisterOutput::Value(seen))) => {
                (seen == state).then(|| state.clone())
            }
            _ => None,
        }
    }
}

/// A counter that is 0 while absent; an INCR and GET key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter;

/// An operation on a `Counter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterInput {
    /// Adds one (INCR).
    Incr,
    /// Reads the value (GET, 0 when absent).
    Read,
}

/// An answer of a `Counter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterOutput {
    /// The value after an increment, or the value read.
    Value(i64),
}

impl Model for Counter {
    type State = i64;
    type Input = CounterInput;
    type Output = CounterOutput;

    fn init(&self) -> i64 {
        0
    }

    fn step(
        &self,
        state: &i64,
        input: &CounterInput,
        output: Option<&CounterOutput>,
    ) -> Option<i64> {
        let after = match input {
            CounterInput::Incr => state + 1,
            CounterInput::Read => *state,
        };
        match output {
            None => Some(after),
            Some(CounterOutput::Value(value)) => (*value == after).then_some(after),
        }
    }
}

/// A list of strings, empty while absent; an RPUSH and LRANGE 0 -1 key.
#[derive(Debug, Clone, Copy, Default)]
pub struct List;

/// An operation on a `List`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListInput {
    /// Appends one element (RPUSH).
    Append(String),
    /// Reads the whole list (LRANGE 0 -1).
    Read,
}

/// An answer of a `List`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListOutput {
    /// The answer to an append: the length after it.
    Len(usize),
    /// The answer to a read: the elements.
    Items(Vec<String>),
}

impl Model for List {
    type State = Vec<String>;
    type Input = ListInput;
    type Output = ListOutput;

    fn init(&self) -> Vec<String> {
        Vec::new()
    }

    fn step(
        &self,
        state: &Vec<String>,
        input: &ListInput,
        output: Option<&ListOutput>,
    ) -> Option<Vec<String>> {
        match (input, output) {
            (ListInput::Append(item), None) => Some(appended(state, item)),
            (ListInput::Append(item), Some(ListOutput::Len(len))) => {
                (*len == state.len() + 1).then(|| appended(state, item))
            }
            (ListInput::Read, None) => Some(state.clone()),
            (ListInput::Read, Some(ListOutput::Items(items))) => {
                (items == state).then(|| state.clone())
            }
            _ => None,
        }
    }
}

/// `list` with `item` appended.
fn appended(list: &[String], item: &str) -> Vec<String> {
    let mut after = list.to_vec();
    after.push(item.to_string());
    after
}

mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A budget no test history comes near.
    const ENOUGH: u64 = 50_000_000;

    /// A small seeded pseudo-random generator (splitmix64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// A number in 0..n.
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// True with probability `percent`/100.
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }

        /// One element of `items`.
        fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.below(items.len() as u64) as usize]
        }
    }

    /// A model that can also run an operation, giving its answer: builds histories that are
    /// linearizable by construction.
    trait Run: Model {
        fn run(&self, state: &Self::State, input: &Self::Input) -> (Self::State, Self::Output);
    }

    impl Run for Register {
        fn run(
            &self,
            state: &Option<String>,
            input: &RegisterInput,
        ) -> (Option<String>, RegisterOutput) {
            match input {
                RegisterInput::Write(v) => (Some(v.clone()), RegisterOutput::Ok),
                RegisterInput::Read => (state.clone(), RegisterOutput::Value(state.clone())),
            }
        }
    }

    impl Run for Counter {
        fn run(&self, state: &i64, input: &CounterInput) -> (i64, CounterOutput) {
            let after = match input {
                CounterInput::Incr => state + 1,
                CounterInput::Read => *state,
            };
            (after, CounterOutput::Value(after))
        }
    }

    impl Run for List {
        fn run(&self, state: &Vec<String>, input: &ListInput) -> (Vec<String>, ListOutput) {
            match input {
                ListInput::Append(item) => {
                    let after = appended(state, item);
                    let len = after.len();
                    (after, ListOutput::Len(len))
                }
                ListInput::Read => (state.clone(), ListOutput::Items(state.clone())),
            }
        }
    }

    /// An operation with a known answer.
    fn op<I, O>(client: usize, call: u64, ret: u64, input: I, output: O) -> Operation<I, O> {
        Operation {
            client,
            input,
            call,
            output: Some(output),
            ret: Some(ret),
        }
    }

    /// An operation whose answer never came.
    fn lost<I, O>(client: usize, call: u64, input: I) -> Operation<I, O> {
        Operation {
            client,
            input,
            call,
            output: None,
            ret: None,
        }
    }

    fn write(
        client: usize,
        call: u64,
        ret: u64,
        v: &str,
    ) -> Operation<RegisterInput, RegisterOutput> {
        op(
            client,
            call,
            ret,
            RegisterInput::Write(v.into()),
            RegisterOutput::Ok,
        )
    }

    fn read(
        client: usize,
        call: u64,
        ret: u64,
        v: Option<&str>,
    ) -> Operation<RegisterInput, RegisterOutput> {
        let value = RegisterOutput::Value(v.map(str::to_string));
        op(client, call, ret, RegisterInput::Read, value)
    }

    fn incr(client: usize, call: u64, ret: u64, v: i64) -> Operation<CounterInput, CounterOutput> {
        op(
            client,
            call,
            ret,
            CounterInput::Incr,
            CounterOutput::Value(v),
        )
    }

    fn get(client: usize, call: u64, ret: u64, v: i64) -> Operation<CounterInput, CounterOutput> {
        op(
            client,
            call,
            ret,
            CounterInput::Read,
            CounterOutput::Value(v),
        )
    }

    fn append(
        client: usize,
        call: u64,
        ret: u64,
        item: &str,
        len: usize,
    ) -> Operation<ListInput, ListOutput> {
        op(
            client,
            call,
            ret,
            ListInput::Append(item.into()),
            ListOutput::Len(len),
        )
    }

    fn range(
        client: usize,
        call: u64,
        ret: u64,
        items: &[&str],
    ) -> Operation<ListInput, ListOutput> {
        let items = items.iter().map(|s| s.to_string()).collect();
        op(client, call, ret, ListInput::Read, ListOutput::Items(items))
    }

    fn is_illegal(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Illegal { .. })
    }

    fn explanation(verdict: Verdict) -> String {
        match verdict {
            Verdict::Illegal { explanation } => explanation,
            other => panic!("expected Illegal, got {other:?}"),
        }
    }

    #[test]
    fn empty_history_is_linearizable() {
        assert_eq!(check(&Register, &[], 0), Verdict::Linearizable);
    }

    #[test]
    fn sequential_register_history_is_linearizable() {
        let h = [
            read(0, 0, 1, None),
            write(0, 2, 3, "a"),
            read(1, 4, 5, Some("a")),
            write(1, 6, 7, "b"),
            read(0, 8, 9, Some("b")),
        ];
        assert_eq!(check(&Register, &h, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_completed_write_is_illegal() {
        let h = [write(0, 0, 10, "1"), read(1, 11, 12, None)];
        let text = explanation(check(&Register, &h, ENOUGH));
        assert!(
            text.contains("#1 client 1 [11, 12] Read -> Value(None)"),
            "{text}"
        );
        assert!(text.contains("impossible in this state"), "{text}");
        // The same stale read with the old value written first.
        let h = [
            write(0, 0, 1, "0"),
            write(0, 2, 10, "1"),
            read(1, 11, 12, Some("0")),
        ];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
    }

    #[test]
    fn read_overlapping_a_write_may_see_either_value() {
        for seen in [None, Some("1")] {
            let h = [write(0, 0, 10, "1"), read(1, 5, 15, seen)];
            assert_eq!(
                check(&Register, &h, ENOUGH),
                Verdict::Linearizable,
                "{seen:?}"
            );
        }
    }

    #[test]
    fn events_at_the_same_instant_count_as_concurrent() {
        // The read is invoked at the instant the write returns: either order is allowed.
        let h = [write(0, 0, 10, "1"), read(1, 10, 20, None)];
        assert_eq!(check(&Register, &h, ENOUGH), Verdict::Linearizable);
        let h = [read(1, 10, 20, None), write(0, 0, 10, "1")];
        assert_eq!(check(&Register, &h, ENOUGH), Verdict::Linearizable);
        // One instant later it is not.
        let h = [write(0, 0, 10, "1"), read(1, 11, 20, None)];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
    }

    #[test]
    fn read_of_a_value_never_written_is_illegal() {
        let h = [
            write(0, 0, 10, "a"),
            read(1, 5, 15, Some("b")),
            write(2, 0, 20, "c"),
        ];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
    }

    #[test]
    fn ambiguous_write_seen_by_a_later_read_is_linearizable() {
        let h = [
            write(0, 0, 5, "a"),
            lost(1, 10, RegisterInput::Write("b".into())),
            read(2, 100, 110, Some("b")),
            read(0, 120, 130, Some("b")),
        ];
        assert_eq!(check(&Register, &h, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn ambiguous_write_never_seen_is_linearizable() {
        let h = [
            write(0, 0, 5, "a"),
            lost(1, 10, RegisterInput::Write("b".into())),
            read(2, 100, 110, Some("a")),
            read(0, 120, 130, Some("a")),
        ];
        assert_eq!(check(&Register, &h, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn ambiguous_write_cannot_take_effect_before_its_call() {
        let h = [
            read(2, 0, 5, Some("b")),
            lost(1, 10, RegisterInput::Write("b".into())),
        ];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
    }

    #[test]
    fn ambiguous_write_cannot_flicker() {
        // Once a read saw it, a later read cannot see the value from before it again.
        let h = [
            write(0, 0, 5, "a"),
            lost(1, 10, RegisterInput::Write("b".into())),
            read(2, 100, 110, Some("b")),
            read(0, 120, 130, Some("a")),
        ];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
    }

    #[test]
    fn known_answer_without_return_time_must_still_match() {
        // A read whose answer is known but whose return time is not: it may take effect late.
        let mut late = read(1, 1, 0, Some("a"));
        late.ret = None;
        let h = [late, write(0, 50, 60, "a")];
        assert_eq!(check(&Register, &h, ENOUGH), Verdict::Linearizable);
        // But its answer must be one the register held at some point after its call.
        let mut late = read(1, 1, 0, Some("z"));
        late.ret = None;
        let h = [late, write(0, 50, 60, "a")];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
    }

    #[test]
    fn readers_disagreeing_on_the_order_of_concurrent_writes_is_illegal() {
        // Both writes completed before the reads.
        let h = [
            write(0, 0, 10, "a"),
            write(1, 0, 10, "b"),
            read(2, 20, 30, Some("a")),
            read(2, 40, 50, Some("b")),
            read(3, 20, 30, Some("b")),
            read(3, 40, 50, Some("a")),
        ];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
        // The reads during the writes: each reader alone is fine, but not both.
        let h = [
            write(0, 0, 100, "a"),
            write(1, 0, 100, "b"),
            read(2, 20, 30, Some("a")),
            read(2, 40, 50, Some("b")),
            read(3, 20, 30, Some("b")),
            read(3, 40, 50, Some("a")),
        ];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
        assert_eq!(check(&Register, &h[..4], ENOUGH), Verdict::Linearizable);
        let other: Vec<_> = [&h[..2], &h[4..]].concat();
        assert_eq!(check(&Register, &other, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn counter_increments_answering_the_same_value_are_illegal() {
        let h = [incr(0, 0, 10, 1), incr(1, 0, 10, 1)];
        assert!(is_illegal(&check(&Counter, &h, ENOUGH)));
    }

    #[test]
    fn concurrent_counter_increments_in_either_order_are_linearizable() {
        let h = [
            incr(0, 0, 10, 2),
            incr(1, 0, 10, 1),
            get(2, 5, 6, 1),
            get(2, 20, 21, 2),
        ];
        assert_eq!(check(&Counter, &h, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn interchangeable_operations_with_nested_intervals_keep_both_orders() {
        // Two increments with unknown answers, the second's interval inside the first's: the
        // second must come first here, although the first was invoked earlier.
        let mut outer = incr(0, 0, 100, 0);
        outer.output = None;
        let mut inner = incr(1, 10, 20, 0);
        inner.output = None;
        let h = [outer, inner, get(2, 21, 22, 1)];
        assert_eq!(check(&Counter, &h, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn counter_read_going_backwards_is_illegal() {
        let h = [
            incr(0, 0, 10, 1),
            incr(0, 20, 30, 2),
            get(1, 31, 32, 2),
            get(2, 33, 34, 1),
        ];
        assert!(is_illegal(&check(&Counter, &h, ENOUGH)));
    }

    #[test]
    fn counter_ambiguous_increment_may_count_or_not() {
        for final_value in [1, 2] {
            let h = [
                incr(0, 0, 10, 1),
                lost(1, 20, CounterInput::Incr),
                get(2, 100, 110, final_value),
            ];
            assert_eq!(check(&Counter, &h, ENOUGH), Verdict::Linearizable);
        }
        let h = [
            incr(0, 0, 10, 1),
            lost(1, 20, CounterInput::Incr),
            get(2, 100, 110, 3),
        ];
        assert!(is_illegal(&check(&Counter, &h, ENOUGH)));
    }

    #[test]
    fn list_read_showing_an_append_that_started_after_it_is_illegal() {
        let h = [
            append(0, 0, 10, "x", 1),
            range(1, 20, 30, &["x", "y"]),
            append(2, 40, 50, "y", 2),
        ];
        assert!(is_illegal(&check(&List, &h, ENOUGH)));
        // With the append overlapping the read it is fine.
        let h = [
            append(0, 0, 10, "x", 1),
            range(1, 20, 30, &["x", "y"]),
            append(2, 25, 50, "y", 2),
        ];
        assert_eq!(check(&List, &h, ENOUGH), Verdict::Linearizable);
    }

    #[test]
    fn list_appends_and_reads_must_agree_on_one_order() {
        let ok = [
            append(0, 0, 10, "x", 2),
            append(1, 0, 10, "y", 1),
            range(2, 20, 30, &["y", "x"]),
        ];
        assert_eq!(check(&List, &ok, ENOUGH), Verdict::Linearizable);
        let wrong_order = [
            append(0, 0, 10, "x", 2),
            append(1, 0, 10, "y", 1),
            range(2, 20, 30, &["x", "y"]),
        ];
        assert!(is_illegal(&check(&List, &wrong_order, ENOUGH)));
        let lost_element = [append(0, 0, 10, "x", 1), range(2, 20, 30, &[])];
        assert!(is_illegal(&check(&List, &lost_element, ENOUGH)));
    }

    #[test]
    fn wrong_kind_of_answer_is_illegal() {
        let h = [op(0, 0, 1, RegisterInput::Read, RegisterOutput::Ok)];
        assert!(is_illegal(&check(&Register, &h, ENOUGH)));
        let h = [op(0, 0, 1, ListInput::Read, ListOutput::Len(0))];
        assert!(is_illegal(&check(&List, &h, ENOUGH)));
    }

    /// Whether some order of `history` consistent with real time is legal, by trying every
    /// such order (a depth-first search without memoisation, over an explicit stack).
    fn brute_force<M: Model>(model: &M, history: &[Operation<M::Input, M::Output>]) -> bool {
        let n = history.len();
        assert!(n < 32);
        // must_follow[b]: the operations that returned before b was invoked.
        let must_follow: Vec<u32> = (0..n)
            .map(|b| {
                (0..n)
                    .filter(|&a| history[a].ret.is_some_and(|r| r < history[b].call))
                    .fold(0, |mask, a| mask | 1 << a)
            })
            .collect();
        let all = (1u32 << n) - 1;
        // (operations placed, state, next operation to try placing)
        let mut stack = vec![(0u32, model.init(), 0usize)];
        while let Some((placed, state, next)) = stack.last_mut() {
            if *placed == all {
                return true;
            }
            if *next == n {
                stack.pop();
                continue;
            }
            let i = *next;
            *next += 1;
            if *placed & (1 << i) != 0 || must_follow[i] & !*placed != 0 {
                continue;
            }
            let o = &history[i];
            if let Some(after) = model.step(state, &o.input, o.output.as_ref()) {
                let placed = *placed | 1 << i;
                stack.push((placed, after, 0));
            }
        }
        false
    }

    /// Random intervals for `n` operations of 3 clients on a small clock (so that ties are
    /// common), some never returning: (client, call, ret).
    fn random_intervals(rng: &mut Rng, n: usize) -> Vec<(usize, u64, Option<u64>)> {
        (0..n)
            .map(|_| {
                let call = rng.below(12);
                let ret = (!rng.chance(15)).then(|| call + rng.below(6));
                (rng.below(3) as usize, call, ret)
            })
            .collect()
    }

    /// A small random history with arbitrary answers: reads return a written value or the
    /// initial one.
    fn random_register(rng: &mut Rng) -> Vec<Operation<RegisterInput, RegisterOutput>> {
        let n = 1 + rng.below(7) as usize;
        let inputs: Vec<RegisterInput> = (0..n)
            .map(|_| match rng.chance(50) {
                true => RegisterInput::Write(rng.pick(&["a", "b", "c"]).to_string()),
                false => RegisterInput::Read,
            })
            .collect();
        let mut values: Vec<Option<String>> = vec![None];
        for input in &inputs {
            if let RegisterInput::Write(v) = input {
                values.push(Some(v.clone()));
            }
        }
        let intervals = random_intervals(rng, n);
        inputs
            .into_iter()
            .zip(intervals)
            .map(|(input, (client, call, ret))| {
                let output = match input {
                    RegisterInput::Write(_) => RegisterOutput::Ok,
                    RegisterInput::Read => RegisterOutput::Value(rng.pick(&values).clone()),
                };
                let output = (!rng.chance(25)).then_some(output);
                Operation {
                    client,
                    input,
                    call,
                    output,
                    ret,
                }
            })
            .collect()
    }

    fn random_counter(rng: &mut Rng) -> Vec<Operation<CounterInput, CounterOutput>> {
        let n = 1 + rng.below(7) as usize;
        let inputs: Vec<CounterInput> = (0..n)
            .map(|_| match rng.chance(60) {
                true => CounterInput::Incr,
                false => CounterInput::Read,
            })
            .collect();
        let incrs = inputs.iter().filter(|i| **i == CounterInput::Incr).count() as u64;
        let intervals = random_intervals(rng, n);
        inputs
            .into_iter()
            .zip(intervals)
            .map(|(input, (client, call, ret))| {
                let value = match input {
                    CounterInput::Incr => 1 + rng.below(incrs),
                    CounterInput::Read => rng.below(incrs + 1),
                };
                let output = (!rng.chance(25)).then_some(CounterOutput::Value(value as i64));
                Operation {
                    client,
                    input,
                    call,
                    output,
                    ret,
                }
            })
            .collect()
    }

    fn random_list(rng: &mut Rng) -> Vec<Operation<ListInput, ListOutput>> {
        let n = 1 + rng.below(7) as usize;
        let inputs: Vec<ListInput> = (0..n)
            .map(|_| match rng.chance(55) {
                true => ListInput::Append(rng.pick(&["a", "b", "c"]).to_string()),
                false => ListInput::Read,
            })
            .collect();
        let items: Vec<String> = inputs
            .iter()
            .filter_map(|i| match i {
                ListInput::Append(item) => Some(item.clone()),
                ListInput::Read => None,
            })
            .collect();
        let intervals = random_intervals(rng, n);
        inputs
            .into_iter()
            .zip(intervals)
            .map(|(input, (client, call, ret))| {
                let output = match input {
                    ListInput::Append(_) => {
                        ListOutput::Len(1 + rng.below(items.len() as u64) as usize)
                    }
                    ListInput::Read => {
                        // A random prefix of a random shuffle of the appended items.
                        let mut shuffled = items.clone();
                        for i in (1..shuffled.len()).rev() {
                            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
                        }
                        shuffled.truncate(rng.below(items.len() as u64 + 1) as usize);
                        ListOutput::Items(shuffled)
                    }
                };
                let output = (!rng.chance(25)).then_some(output);
                Operation {
                    client,
                    input,
                    call,
                    output,
                    ret,
                }
            })
            .collect()
    }

    /// A history of `clients` clients running `per_client` operations each, one after another
    /// except after a timeout, with answers from a sequential execution in the order of a
    /// random point inside each operation's interval: linearizable by construction. About
    /// `ambiguous` percent of the operations time out (no answer, no return), and half of those
    /// never take effect at all.
    fn concurrent_run<M: Run>(
        model: &M,
        rng: &mut Rng,
        clients: usize,
        per_client: usize,
        ambiguous: u64,
        mut input: impl FnMut(&mut Rng) -> M::Input,
    ) -> Vec<Operation<M::Input, M::Output>> {
        let mut history = Vec::new();
        // (linearization point, operation) of the operations that take effect.
        let mut points = Vec::new();
        for client in 0..clients {
            let mut now = rng.below(5);
            for _ in 0..per_client {
                let call = now;
                let length = 1 + rng.below(20);
                let timed_out = rng.chance(ambiguous);
                let ret = (!timed_out).then_some(call + length);
                if !timed_out {
                    points.push((call + rng.below(length + 1), history.len()));
                } else if rng.chance(50) {
                    // Takes effect late, perhaps after the client's next operations.
                    points.push((call + rng.below(3 * length), history.len()));
                }
                now = call + length + rng.below(3);
                history.push(Operation {
                    client,
                    input: input(rng),
                    call,
                    output: None,
                    ret,
                });
            }
        }
        points.sort();
        let mut state = model.init();
        for (_, i) in points {
            let (after, output) = model.run(&state, &history[i].input);
            if history[i].ret.is_some() {
                history[i].output = Some(output);
            }
            state = after;
        }
        history
    }

    /// A small history that is linearizable by construction, or one answer of it changed to a
    /// random one.
    fn perturbed<M: Run>(
        model: &M,
        rng: &mut Rng,
        input: impl FnMut(&mut Rng) -> M::Input,
        mut answer: impl FnMut(&mut Rng) -> M::Output,
    ) -> Vec<Operation<M::Input, M::Output>> {
        let clients = 1 + rng.below(3) as usize;
        let per_client = 1 + rng.below(7 / clients as u64) as usize;
        let mut history = concurrent_run(model, rng, clients, per_client, 15, input);
        if rng.chance(50) {
            let i = rng.below(history.len() as u64) as usize;
            history[i].output = Some(answer(rng));
        }
        history
    }

    /// Checks `histories` both ways and returns how many were linearizable and illegal.
    fn cross_check<M: Model>(
        model: &M,
        histories: impl Iterator<Item = Vec<Operation<M::Input, M::Output>>>,
    ) -> (usize, usize) {
        let (mut good, mut bad) = (0, 0);
        for history in histories {
            let expected = brute_force(model, &history);
            let verdict = check(model, &history, ENOUGH);
            match verdict {
                Verdict::Linearizable if expected => good += 1,
                Verdict::Illegal { .. } if !expected => bad += 1,
                _ => panic!("brute force says {expected}, check says {verdict:?} for {history:#?}"),
            }
        }
        (good, bad)
    }

    /// Asserts that both verdicts were common, so that the cross-check tested something.
    fn assert_mixed((good, bad): (usize, usize)) {
        let total = good + bad;
        assert!(
            good * 10 > total && bad * 10 > total,
            "{good} linearizable, {bad} illegal"
        );
    }

    const CASES: usize = 1500;

    #[test]
    fn register_agrees_with_brute_force() {
        let mut rng = Rng(1);
        assert_mixed(cross_check(
            &Register,
            (0..CASES).map(|_| random_register(&mut rng)),
        ));
        let mut rng = Rng(2);
        let histories = (0..CASES).map(|_| {
            perturbed(
                &Register,
                &mut rng,
                |rng| match rng.chance(50) {
                    true => RegisterInput::Write(rng.pick(&["a", "b", "c"]).to_string()),
                    false => RegisterInput::Read,
                },
                |rng| RegisterOutput::Value(rng.pick(&[None, Some("a".to_string())]).clone()),
            )
        });
        assert_mixed(cross_check(&Register, histories));
    }

    #[test]
    fn counter_agrees_with_brute_force() {
        let mut rng = Rng(3);
        assert_mixed(cross_check(
            &Counter,
            (0..CASES).map(|_| random_counter(&mut rng)),
        ));
        let mut rng = Rng(4);
        let histories = (0..CASES).map(|_| {
            perturbed(
                &Counter,
                &mut rng,
                |rng| match rng.chance(60) {
                    true => CounterInput::Incr,
                    false => CounterInput::Read,
                },
                |rng| CounterOutput::Value(rng.below(4) as i64),
            )
        });
        assert_mixed(cross_check(&Counter, histories));
    }

    #[test]
    fn list_agrees_with_brute_force() {
        let mut rng = Rng(5);
        assert_mixed(cross_check(
            &List,
            (0..CASES).map(|_| random_list(&mut rng)),
        ));
        let mut rng = Rng(6);
        let histories = (0..CASES).map(|_| {
            perturbed(
                &List,
                &mut rng,
                |rng| match rng.chance(55) {
                    true => ListInput::Append(rng.pick(&["a", "b"]).to_string()),
                    false => ListInput::Read,
                },
                |rng| match rng.chance(50) {
                    true => ListOutput::Len(1 + rng.below(3) as usize),
                    false => ListOutput::Items(vec!["a".to_string()]),
                },
            )
        });
        assert_mixed(cross_check(&List, histories));
    }

    /// Checks a long linearizable-by-construction history, then the same with one read's answer
    /// changed to a value that never existed, and returns the explanation of the latter.
    fn long_history<M: Run>(
        model: &M,
        seed: u64,
        clients: usize,
        per_client: usize,
        input: impl FnMut(&mut Rng) -> M::Input,
        is_read: impl Fn(&M::Input) -> bool,
        impossible: M::Output,
    ) -> String {
        let mut rng = Rng(seed);
        let mut history = concurrent_run(model, &mut rng, clients, per_client, 2, input);
        let started = Instant::now();
        assert_eq!(check(model, &history, ENOUGH), Verdict::Linearizable);
        let readable = |o: &Operation<M::Input, M::Output>| is_read(&o.input) && o.output.is_some();
        let reads: Vec<usize> = (0..history.len())
            .filter(|&i| readable(&history[i]))
            .collect();
        let corrupt = reads[reads.len() * 2 / 3];
        history[corrupt].output = Some(impossible);
        let text = explanation(check(model, &history, ENOUGH));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(text.lines().count() <= 40, "{text}");
        assert!(text.contains(&format!("#{corrupt} ")), "{text}");
        text
    }

    #[test]
    fn long_register_history_is_linearizable_until_a_read_is_corrupted() {
        let text = long_history(
            &Register,
            7,
            6,
            50,
            |rng| match rng.chance(40) {
                true => RegisterInput::Write(rng.below(5).to_string()),
                false => RegisterInput::Read,
            },
            |i| *i == RegisterInput::Read,
            RegisterOutput::Value(Some("never written".into())),
        );
        assert!(
            text.contains("Value(Some(\"never written\")): impossible in this state"),
            "{text}"
        );
    }

    #[test]
    fn long_counter_history_is_linearizable_until_a_read_is_corrupted() {
        long_history(
            &Counter,
            8,
            8,
            60,
            |rng| match rng.chance(50) {
                true => CounterInput::Incr,
                false => CounterInput::Read,
            },
            |i| *i == CounterInput::Read,
            CounterOutput::Value(-1),
        );
    }

    #[test]
    fn long_list_history_is_linearizable_until_a_read_is_corrupted() {
        let mut next = 0;
        long_history(
            &List,
            9,
            5,
            100,
            |rng| match rng.chance(50) {
                true => {
                    next += 1;
                    ListInput::Append(format!("x{next}"))
                }
                false => ListInput::Read,
            },
            |i| *i == ListInput::Read,
            ListOutput::Items(vec!["never appended".into()]),
        );
    }

    #[test]
    fn explanation_names_the_prefix_and_the_stuck_operations() {
        let h = [
            write(0, 0, 10, "1"),
            write(0, 20, 30, "2"),
            read(1, 40, 50, Some("1")),
        ];
        let text = explanation(check(&Register, &h, ENOUGH));
        let expected = "\
not linearizable: no order of the 3 operations explains every answer
longest linearizable prefix found (2 operations):
  #0 client 0 [0, 10] Write(\"1\") -> Ok
  #1 client 0 [20, 30] Write(\"2\") -> Ok
state after it: Some(\"2\")
none of these can come next (one must: they were invoked before #2 returned at 50, the first pending return):
  #2 client 1 [40, 50] Read -> Value(Some(\"1\")): impossible in this state
";
        assert_eq!(text, expected);
    }

    /// Many concurrent writes followed by a read of a value none wrote: every subset of the
    /// writes is a different configuration, so the search is exponential.
    fn adversarial(writes: usize) -> Vec<Operation<RegisterInput, RegisterOutput>> {
        let mut h: Vec<_> = (0..writes)
            .map(|i| write(i, 0, 100, &i.to_string()))
            .collect();
        h.push(read(writes, 200, 210, Some("none")));
        h
    }

    #[test]
    fn adversarial_history_with_a_small_budget_is_unknown() {
        let started = Instant::now();
        assert_eq!(check(&Register, &adversarial(60), 20_000), Verdict::Unknown);
        assert!(started.elapsed() < Duration::from_secs(5));
        // The budget counts: a smaller such history is decided within a large one, and not
        // within a budget smaller than its number of operations.
        assert!(is_illegal(&check(&Register, &adversarial(6), ENOUGH)));
        assert_eq!(check(&Register, &adversarial(6), 5), Verdict::Unknown);
        assert_eq!(
            check(&Register, &[write(0, 0, 1, "a")], 1),
            Verdict::Linearizable
        );
        assert_eq!(
            check(&Register, &[write(0, 0, 1, "a")], 0),
            Verdict::Unknown
        );
    }
}
