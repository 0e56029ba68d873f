//! Property tests over every parser that input reaches, and over the log reader: random and
//! adversarial inputs never panic and never overflow the stack (a stack overflow aborts this
//! whole test binary, so it cannot pass unnoticed). Each parser also gets inputs nested far
//! past its depth limit.
//!
//! CI runs proptest's default budget (256 cases a property). A long run:
//! `PROPTEST_CASES=100000 cargo test --release --features fault-injection --test it properties::`.

use proptest::prelude::*;
use tidepool::command::{args, longdouble};
use tidepool::delivery::{conf, cron, retry};
use tidepool::http::request;
use tidepool::rdb;
use tidepool::record::{self, Record};
use tidepool::state::json::{Json, Path};
use tidepool::state::Value;
use tidepool::wal::format::{self, SegmentHeader};
use tidepool::wal::reader;

/// Text made of a parser's own punctuation, so that random cases reach deep into it.
fn tokens(alphabet: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet), 0..max).prop_map(|v| v.concat())
}

const RETRY_TOKENS: &[&str] = &[
    "(", ")", "-", "+", "*", "/", "%", ",", " ", "1", "2.5", "retried", "pow(", "min(", "max(",
    "abs(", "exp(", "sqrt(", "x", "1e308",
];
const JSON_TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "\"a\"",
    "\"",
    "1",
    "-0.5e3",
    "true",
    "null",
    " ",
    "\\u12",
    "18446744073709551616",
    "1e999",
];
const PATH_TOKENS: &[&str] = &[
    "$", ".", "..", "[", "]", "*", "?(", ")", "@", "@.a", "==", "!=", "<", ">=", "&&", "||", "!",
    "'x'", "\"y\"", "0", "-1", ":", "1:2:-1", ",", "a", " ", "(", "=~", "\"^a.*\"", "true",
];
const CRON_TOKENS: &[&str] = &[
    "*",
    "/",
    "-",
    ",",
    " ",
    "0",
    "59",
    "7",
    "60",
    "L",
    "#",
    "?",
    "MON",
    "JAN",
    "CRON_TZ=",
    "Europe/Paris",
    "@daily",
    "@every",
    "1h",
];

proptest! {
    #[test]
    fn retry_delay_expressions_never_panic(s in tokens(RETRY_TOKENS, 400), r in 0u32..50) {
        let _ = retry::eval(&s, r);
        let _ = retry::expression_delay_ms(&s, r);
        let _ = retry::check_expression(&s);
    }

    #[test]
    fn retry_delay_expressions_of_random_text_never_panic(s in ".{0,300}") {
        let _ = retry::eval(&s, 3);
    }

    #[test]
    fn durations_never_panic(s in "[0-9a-z. ]{0,40}") {
        let _ = conf::duration_ms(&s);
    }

    #[test]
    fn cron_expressions_never_panic(s in tokens(CRON_TOKENS, 40), after in any::<u64>()) {
        if let Ok(c) = cron::CronSpec::parse(&s) {
            let _ = c.next_after(after % 4_102_444_800_000);
        }
    }

    #[test]
    fn json_documents_never_panic(s in tokens(JSON_TOKENS, 600)) {
        if let Ok(j) = Json::parse(&s) {
            prop_assert!(j.depth() <= tidepool::config::JSON_DEPTH_MAX);
            let _ = j.to_text();
        }
    }

    #[test]
    fn json_paths_never_panic(s in tokens(PATH_TOKENS, 120), doc in tokens(JSON_TOKENS, 120)) {
        if let Ok(p) = Path::compile(&s) {
            if let Ok(d) = Json::parse(&doc) {
                let _ = p.select(&d);
            }
        }
    }

    #[test]
    fn request_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = request::parse_single(&body);
        let _ = request::parse_batch(&body);
    }

    #[test]
    fn json_request_bodies_never_panic(s in tokens(JSON_TOKENS, 300)) {
        let _ = request::parse_single(s.as_bytes());
        let _ = request::parse_batch(s.as_bytes());
    }

    #[test]
    fn paths_and_queries_never_panic(s in "[%0-9a-fA-F+&=_/a-z]{0,100}") {
        let _ = request::percent_decode(&s, true);
        let _ = request::query_args(Some(&s));
        let _ = request::presented_token(&Default::default(), Some(&s), "_token");
    }

    #[test]
    fn numbers_and_globs_never_panic(
        b in prop::collection::vec(any::<u8>(), 0..60),
        p in "[*?\\[\\]^a\\\\-]{0,40}",
    ) {
        let _ = tidepool::num::parse_i64(&b);
        let _ = tidepool::num::parse_f64(&b);
        let _ = tidepool::num::parse_double(&b);
        let _ = args::parse_cursor(&b);
        let _ = longdouble::parse(&b);
        let _ = tidepool::glob::glob_match(p.as_bytes(), &b, false);
        let _ = tidepool::glob::glob_match(p.as_bytes(), &b, true);
    }

    #[test]
    fn restore_payloads_never_panic(b in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = rdb::restore(&b);
        let _ = rdb::restore_functions(&b);
    }

    /// A valid DUMP payload with bytes changed and its checksum made right again, so that
    /// the decoder itself (not the checksum) meets the damage.
    #[test]
    fn mutated_restore_payloads_never_panic(
        value in prop::collection::vec(any::<u8>(), 0..300),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let Ok(mut payload) = rdb::dump(&Value::Str(value.into())) else {
            return Ok(());
        };
        let body = payload.len() - 8;
        for (at, x) in flips {
            payload[at % body] ^= x;
        }
        let crc = rdb::crc64(&payload[..body]);
        payload[body..].copy_from_slice(&crc.to_le_bytes());
        let _ = rdb::restore(&payload);
    }

    #[test]
    fn record_payloads_never_panic(kind in any::<u8>(), b in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = Record::decode(kind, &b);
    }

    #[test]
    fn frames_never_panic(b in prop::collection::vec(any::<u8>(), 0..200), at in 0usize..220) {
        let _ = format::read_frame(&b, at);
        let _ = SegmentHeader::decode(&b);
    }

    /// A log directory holding a segment of valid records with random damage, or of random
    /// bytes behind a valid header: the scan reports, never panics, and never delivers a
    /// record past damage it refuses.
    #[test]
    fn damaged_segments_never_panic(
        records in 1u64..40,
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        random_tail in prop::collection::vec(any::<u8>(), 0..300),
        use_random in any::<bool>(),
    ) {
        let mut seg = SegmentHeader { first_seq: 1, created_unix_ms: 1 }.encode().to_vec();
        if use_random {
            seg.extend_from_slice(&random_tail);
        } else {
            for seq in 1..=records {
                let mut payload = Vec::new();
                record::encode_kv_commands(&mut payload, &[vec![b"SET".to_vec(), seq.to_string().into_bytes()]]);
                format::encode_frame(&mut seg, seq, seq, Record::KvCommands(Vec::new()).kind(), &payload);
            }
            let len = seg.len();
            for (at, x) in flips {
                seg[at % len] ^= x;
            }
        }
        seg.resize(seg.len() + 4096, 0);
        let dir = std::env::temp_dir().join(format!(
            "tidepool-prop-wal-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(format::segment_file_name(1)), &seg).expect("write");
        let scanned = reader::scan(&dir, |_, _, f| {
            Record::decode(f.kind, f.payload).map(|_| ()).map_err(|e| e.to_string())
        });
        let _ = std::fs::remove_dir_all(&dir);
        if let Ok(summary) = scanned {
            prop_assert!(summary.records <= records.max(1) || use_random);
        }
    }
}

/// A small snapshot of every value type, its bytes, and where each chunk starts.
fn sample_snapshot() -> (Vec<u8>, Vec<usize>) {
    use tidepool::command::pipeline;
    let mut db = tidepool::state::Db::new();
    let mut rng = tidepool::rng::Rng::new(3);
    for cmd in [
        &["SET", "s", "v", "PXAT", "4102444800000"][..],
        &["RPUSH", "l", "a", "b"],
        &["SADD", "t", "1", "x"],
        &["ZADD", "z", "1.5", "m"],
        &["HSET", "h", "f", "v"],
        &["HPEXPIREAT", "h", "4102444800000", "FIELDS", "1", "f"],
        &["XADD", "x", "1-1", "f", "v"],
        &["XGROUP", "CREATE", "x", "g", "0"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", ">"],
        &["JSON.SET", "j", "$", r#"{"a":[1,2.5,{"b":null}]}"#],
        &["ACL", "SETUSER", "u", "on", ">p", "~k*", "+@read"],
    ] {
        let args: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
        pipeline::replay(&mut db, &mut rng, 1_767_225_600_000, &args);
    }
    let header = tidepool::snapshot::format::SnapshotHeader {
        seq: 11,
        record_unix_ms: 1_767_225_600_000,
        created_unix_ms: 1_767_225_600_000,
    };
    let mut bytes = Vec::new();
    tidepool::snapshot::write(
        &mut bytes,
        &tidepool::state::databases::Databases::with_default(db),
        &tidepool::delivery::Delivery::new(),
        header,
        |_| {},
    )
    .expect("write");
    let mut starts = Vec::new();
    let mut at = tidepool::snapshot::format::SNAPSHOT_HEADER_BYTES;
    while let Ok(c) = tidepool::snapshot::format::read_chunk(&bytes, at) {
        starts.push(at);
        at += tidepool::snapshot::format::CHUNK_HEADER_BYTES + c.payload.len();
    }
    (bytes, starts)
}

proptest! {
    /// A damaged snapshot, read as start-up reads it and salvaged as `repair` does, is an error
    /// or a state, never a panic: bytes flipped anywhere; and bytes changed inside a chunk
    /// whose checksum is then made to match, so the decoders themselves see the damage.
    #[test]
    fn damaged_snapshots_never_panic(
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        fix_crc in any::<bool>(),
        cut in any::<Option<usize>>(),
    ) {
        let (mut b, starts) = sample_snapshot();
        for (at, x) in &flips {
            let i = at % b.len();
            b[i] ^= x | 1;
        }
        if fix_crc {
            for s in &starts {
                let len = u32::from_le_bytes([b[*s], b[s + 1], b[s + 2], b[s + 3]]) as usize;
                let end = s + 9 + len;
                if end <= b.len() {
                    let crc = crc32fast::hash(&b[s + 8..end]);
                    b[s + 4..s + 8].copy_from_slice(&crc.to_le_bytes());
                }
            }
        }
        if let Some(c) = cut {
            b.truncate(c % (b.len() + 1));
        }
        let path = std::path::Path::new("fuzzed.snap");
        let _ = tidepool::snapshot::read(path, &b, |_| {});
        let _ = tidepool::snapshot::salvage(path, &b);
    }
}

/// Each recursive parser at ten times its depth limit: an error, not a stack overflow.
#[test]
fn ten_times_every_depth_limit() {
    let d = tidepool::config::RETRY_DELAY_EXPRESSION_DEPTH_MAX * 10;
    assert!(retry::eval(&("(".repeat(d) + "1" + &")".repeat(d)), 0).is_err());
    assert!(retry::eval(&("-".repeat(d) + "1"), 0).is_err());
    let d = tidepool::config::JSON_DEPTH_MAX * 10;
    assert!(Json::parse(&("[".repeat(d) + &"]".repeat(d))).is_err());
    assert!(Json::parse(&("{\"a\":".repeat(d) + "1" + &"}".repeat(d))).is_err());
    assert!(request::parse_single(("[".repeat(d) + &"]".repeat(d)).as_bytes()).is_err());
    assert!(request::parse_batch(("[".repeat(d) + &"]".repeat(d)).as_bytes()).is_err());
    let d = tidepool::config::JSON_PATH_NESTING_MAX * 10;
    assert!(Path::compile(&("$".to_string() + &"[?(".repeat(d) + "@" + &")]".repeat(d))).is_err());
    assert!(
        Path::compile(&("$[?(".to_string() + &"!(".repeat(d) + "@.a" + &")".repeat(d) + ")]"))
            .is_err()
    );
}

/// Arguments that reach deep into the commands' own parsing: numbers, options, paths, IDs.
const ARG_TOKENS: &[&str] = &[
    "k",
    "k2",
    "f",
    "v",
    "0",
    "1",
    "-1",
    "2",
    "100",
    "4294967295",
    "-9223372036854775808",
    "1.5",
    "inf",
    "nan",
    "x",
    "",
    "$",
    "$..a",
    "[1]",
    "{\"a\":1}",
    "*",
    "1-1",
    "0-1",
    ">",
    "NX",
    "XX",
    "GT",
    "EX",
    "PX",
    "KEEPTTL",
    "GET",
    "LIMIT",
    "COUNT",
    "WITHSCORES",
    "BYSCORE",
    "REV",
    "MAXLEN",
    "~",
    "=",
    "MINID",
    "STREAMS",
    "GROUP",
    "g",
    "c",
    "NOACK",
    "FIELDS",
    "SET",
    "u8",
    "#1",
    "i64",
    "OVERFLOW",
    "SAT",
    "LEFT",
    "RIGHT",
    "BEFORE",
    "AGGREGATE",
    "SUM",
    "WEIGHTS",
    "STORE",
    "ASC",
    "ALPHA",
    "BY",
    "nosort",
    "MATCH",
    "TYPE",
    "FROMLONLAT",
    "BYRADIUS",
    "km",
    "IDLE",
    "JUSTID",
    "MKSTREAM",
    "ENTRIESREAD",
    "ID",
    "IDS",
    "KEEPREF",
    "ACKED",
];

proptest! {
    /// Issue 26: replay ran logged commands without the checks the live path makes, and a
    /// record holding `["SET","k"]` panicked start-up. Any well-framed record of commands,
    /// names from the command table and arguments of any shape, is either refused by
    /// the state machine's `apply` (as start-up and `tidepool-log verify` do) or applied without a panic,
    /// on a state that holds values of every type.
    #[test]
    fn replayed_commands_never_panic(
        picks in prop::collection::vec(
            (any::<prop::sample::Index>(), prop::collection::vec(prop::sample::select(ARG_TOKENS), 0..8)),
            1..12,
        ),
    ) {
        use tidepool::command::table;
        use tidepool::machine::{Machine, Position};
        let names: Vec<&str> = table::global()
            .all()
            .filter(|i| !i.has_subcommands)
            .map(|i| i.name.as_str())
            .collect();
        let mut machine = Machine::new();
        let setup: Vec<Vec<Vec<u8>>> = [
            &["SET", "k", "1"][..],
            &["RPUSH", "l", "a", "b"],
            &["HSET", "h", "f", "v"],
            &["SADD", "s", "a"],
            &["ZADD", "z", "1", "a"],
            &["XADD", "x", "1-1", "f", "v"],
            &["XGROUP", "CREATE", "x", "g", "0"],
            &["JSON.SET", "j", "$", "{\"a\":[1,{\"a\":2}]}"],
            &["PFADD", "p", "a"],
        ]
        .iter()
        .map(|c| c.iter().map(|a| a.as_bytes().to_vec()).collect())
        .collect();
        let at = |seq| Position { seq, unix_ms: 1_000 + seq };
        prop_assert!(machine.apply(at(1), &Record::KvCommands(setup)).is_ok());
        let cmds: Vec<Vec<Vec<u8>>> = picks
            .iter()
            .map(|(i, args)| {
                let name = names[i.index(names.len())];
                let mut c: Vec<Vec<u8>> =
                    name.split('|').map(|p| p.to_ascii_uppercase().into_bytes()).collect();
                c.extend(args.iter().map(|a| a.as_bytes().to_vec()));
                c
            })
            .collect();
        for (i, cmd) in cmds.into_iter().enumerate() {
            // Refused (as start-up and `verify` refuse it) or applied: never a panic.
            let _ = machine.apply(at(2 + i as u64), &Record::KvCommands(vec![cmd]));
        }
    }
}

/// Real records of every kind, from a server's own log: key-value commands in the default and
/// a named database, catalog events, and delivery events (publishes, attempts, the DLQ, a
/// schedule, a queue, a URL group). The mutations below start from them.
fn seed_records() -> &'static [(u8, Vec<u8>)] {
    use crate::common::*;
    static SEEDS: std::sync::OnceLock<Vec<(u8, Vec<u8>)>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = TempDir::new("seeds");
        let data = dir.path().join("data");
        let server = Server::start_delivery_with(&data, &["--admin-token", "seed-admin"]);
        let mut c = server.client();
        for cmd in [
            &["SET", "k", "v", "PX", "100000"][..],
            &["RPUSH", "l", "a", "b"],
            &["HSET", "h", "f", "v"],
            &["ZADD", "z", "1", "a"],
            &["XADD", "x", "*", "f", "v"],
            &["XGROUP", "CREATE", "x", "g", "0"],
            &["JSON.SET", "j", "$", "{\"a\":[1]}"],
            &["SADD", "s", "a", "b", "c"],
            &["SPOP", "s"],
        ] {
            assert!(!c.cmd_str(cmd).is_err(), "{cmd:?}");
        }
        let mut a = Http::connect(&server.addr, "seed-admin");
        let r = a.post("/_admin/databases", br#"{"name":"app"}"#);
        assert_eq!(r.status, 201, "{}", r.text());
        let token = r.json()["token"].as_str().expect("token").to_string();
        let mut app = Http::connect(&server.addr, &token);
        assert!(!app.cmd_str(&["SET", "in-app", "1"]).is_err());
        let mut q = server.qstash();
        let dest = format!("http://127.0.0.1:{}/", free_port());
        let ok = |r: Resp| assert!(r.status < 300, "{} {}", r.status, r.text());
        ok(q.request(
            "POST",
            &format!("/v2/publish/{dest}"),
            &[("Upstash-Retries", "0")],
            b"x",
        ));
        ok(q.request(
            "POST",
            &format!("/v2/schedules/{dest}"),
            &[("Upstash-Cron", "0 0 1 1 *")],
            b"y",
        ));
        ok(q.post("/v2/queues", br#"{"queueName":"q","parallelism":1}"#));
        ok(q.request(
            "POST",
            &format!("/v2/enqueue/q/{dest}"),
            &[("Upstash-Retries", "0")],
            b"z",
        ));
        let group = serde_json::json!({ "endpoints": [{ "url": dest }] });
        ok(q.post("/v2/topics/grp/endpoints", group.to_string().as_bytes()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while q.get("/v2/dlq").json()["messages"]
            .as_array()
            .map_or(0, Vec::len)
            < 1
        {
            assert!(std::time::Instant::now() < deadline, "the DLQ never filled");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop((c, a, app, q));
        assert_eq!(server.terminate(), Some(0));
        let mut seeds = Vec::new();
        reader::scan(&data.join("wal"), |_, _, f| {
            seeds.push((f.kind, f.payload.to_vec()));
            Ok(())
        })
        .expect("scan");
        let kinds: std::collections::BTreeSet<u8> = seeds.iter().map(|s| s.0).collect();
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            vec![
                record::KIND_KV_COMMANDS,
                record::KIND_KV_COMMANDS_IN,
                record::KIND_DATABASES,
                record::KIND_DELIVERY_EVENTS
            ]
        );
        seeds
    })
}

/// A record's payload, changed: bytes overwritten, inserted, removed, or the tail cut.
#[derive(Debug, Clone)]
enum Mutation {
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    Cut(prop::sample::Index),
}

fn mutate(payload: &mut Vec<u8>, m: &Mutation) {
    if payload.is_empty() {
        return;
    }
    match m {
        Mutation::Set(i, b) => {
            let i = i.index(payload.len());
            payload[i] = *b;
        }
        Mutation::Insert(i, b) => {
            let i = i.index(payload.len());
            payload.insert(i, *b)
        }
        Mutation::Remove(i) => {
            let i = i.index(payload.len());
            payload.remove(i);
        }
        Mutation::Cut(i) => {
            let i = i.index(payload.len());
            payload.truncate(i)
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Remove),
        any::<prop::sample::Index>().prop_map(Mutation::Cut),
    ]
}

/// Cases of the property below that also run every `tidepool-log` command and `tidepool
/// serve` on the directory (processes: slower than the in-process recovery every case runs).
static TOOL_CASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(24);

proptest! {
    /// Issue 26: no input from the log panics the process. Well-framed records (valid
    /// checksums) with arbitrary payloads: real records of every kind, mutated, and random
    /// bytes under any kind byte. Recovery either rebuilds a state or refuses with an error;
    /// every `tidepool-log` command and the server's start-up end without a panic.
    #[test]
    fn well_framed_arbitrary_records_never_panic(
        records in prop::collection::vec(
            prop_oneof![
                3 => (any::<prop::sample::Index>(), prop::collection::vec(mutation(), 0..4))
                    .prop_map(|(i, ms)| {
                        let seeds = seed_records();
                        let (kind, mut payload) = seeds[i.index(seeds.len())].clone();
                        for m in &ms {
                            mutate(&mut payload, m);
                        }
                        (kind, payload)
                    }),
                1 => (
                    prop_oneof![
                        Just(record::KIND_KV_COMMANDS),
                        Just(record::KIND_KV_COMMANDS_IN),
                        Just(record::KIND_DATABASES),
                        Just(record::KIND_DELIVERY_EVENTS),
                        any::<u8>(),
                    ],
                    prop::collection::vec(any::<u8>(), 0..64),
                ),
            ],
            1..10,
        ),
    ) {
        use crate::common::*;
        let dir = TempDir::new("arbitrary-records");
        let data = dir.path().join("data");
        let wal = data.join("wal");
        std::fs::create_dir_all(&wal).expect("wal dir");
        let ts = 1_767_225_600_000u64;
        let mut seg = SegmentHeader { first_seq: 1, created_unix_ms: ts }.encode().to_vec();
        for (i, (kind, payload)) in records.iter().enumerate() {
            format::encode_frame(&mut seg, i as u64 + 1, ts + i as u64, *kind, payload);
        }
        std::fs::write(wal.join(format::segment_file_name(1)), &seg).expect("segment");
        let recovered = tidepool::machine::recover(
            &data,
            tidepool::machine::Recover::read(tidepool::machine::Start::Newest),
        );
        if let Ok(r) = &recovered {
            prop_assert_eq!(r.machine.replay_draws(), 0);
        }
        // Recovery with an observer decodes each record whole (`Machine::apply_frame`), and
        // without one into kept buffers (`Machine::apply_logged`): the same records applied,
        // the same state, the same refusal.
        let mut observe = |_: &mut tidepool::machine::Machine,
                           _: tidepool::machine::Position,
                           _: &tidepool::record::Record| {};
        let mut how = tidepool::machine::Recover::read(tidepool::machine::Start::Newest);
        how.observe = Some(&mut observe);
        let observed = tidepool::machine::recover(&data, how);
        match (&recovered, &observed) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(a.changes, b.changes);
                prop_assert_eq!(a.errors, b.errors);
                prop_assert_eq!(a.machine.position(), b.machine.position());
                prop_assert_eq!(a.machine.dbs().difference(b.machine.dbs()), None);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "{:?} against {:?}", a.as_ref().err(), b.as_ref().err()),
        }
        let tools = TOOL_CASES
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |n| n.checked_sub(1),
            )
            .is_ok();
        if tools {
            let d = data.to_str().expect("path");
            let out_dir = dir.path().join("replayed");
            let o = out_dir.to_str().expect("path");
            for args in [
                &["verify", d][..],
                &["stats", d],
                &["dump", d],
                &["dump", "--json", d],
                &["history", d, "k"],
                &["history", "--values", d, "k"],
                &["replay", "--to", "2", "--out", o, d],
                &["snapshot", d],
                &["repair", "--yes", d],
            ] {
                let (code, out) = log_tool(args);
                prop_assert!(code == 0 || code == 1 || code == 2, "{args:?} exited {code}: {out}");
                prop_assert!(!out.contains("panicked"), "{args:?}: {out}");
            }
            match Server::try_start(&data, &[]) {
                Ok(s) => prop_assert_eq!(s.terminate(), Some(0)),
                Err(e) => prop_assert!(!e.contains("panicked"), "{}", e),
            }
        }
    }
}
