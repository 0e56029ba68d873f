//! Every limit and default in one place, units last in the name.

use std::net::SocketAddr;
use std::path::PathBuf;

pub const LISTEN_DEFAULT: &str = "127.0.0.1:8079";
pub const DATA_DIR_DEFAULT: &str = "./tidepool-data";

/// Largest request body (and so largest command) accepted, by default (`--max-request-bytes`
/// sets it; at most this much). Upstash's hosted default is 10 MB; a self-hosted server defaults
/// higher and says so in the same words when it refuses.
pub const REQUEST_BYTES_MAX: usize = 64 * 1024 * 1024;
/// One command in this many (of those requests send, counted across requests) is timed for
/// `tidepool_command_duration_seconds`: two clock reads cost about what a small command's
/// own bookkeeping does (measured: timing every command of a pipeline of 100 SETs took 4 %
/// of its throughput). The histogram is a uniform sample; `tidepool_commands_total` counts
/// every command.
pub const COMMAND_TIMING_EVERY: usize = 16;
/// Days of usage counts kept per database (`INFO commandstats`, the admin API).
pub const USAGE_DAYS_KEPT: usize = 31;
/// How often the counted usage is logged (a crash loses at most this much of it).
pub const USAGE_LOG_INTERVAL_MS: u64 = 1_000;
/// Largest string value (Redis's proto-max-bulk-len).
pub const STRING_BYTES_MAX: usize = 512 * 1024 * 1024;
/// Commands waiting for the executor before HTTP handlers wait for room.
pub const EXECUTOR_QUEUE_JOBS_MAX: usize = 8192;
/// Jobs the executor takes in one batch (one write and, with fsync always, one sync).
pub const EXECUTOR_BATCH_JOBS_MAX: usize = 1024;
/// Segment size at which the log moves on to a new file.
pub const SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Events buffered for one monitor or subscriber before it is told it fell behind and closed.
pub const SUBSCRIBER_BUFFER_EVENTS_MAX: usize = 1024;
/// Bytes of events buffered for one monitor or subscriber (events its connection has not
/// taken yet) before it is told it fell behind and closed, as Redis disconnects a subscriber
/// past `client-output-buffer-limit pubsub` (32 MB hard there; streams here are many and
/// cheap, so the bound is per stream and smaller).
pub const SUBSCRIBER_BUFFER_BYTES_MAX: usize = 1024 * 1024;
/// Keep-alive comment interval on event streams.
pub const SSE_PING_INTERVAL_MS: u64 = 15_000;
/// How often the executor removes expired keys (through a logged record).
pub const EXPIRE_CYCLE_INTERVAL_MS: u64 = 100;
/// How often the executor tells `alloc::TrimWatch` what the log took and the data's size.
pub const HEAP_TRIM_INTERVAL_MS: u64 = 1_000;
/// The bytes a burst must write to the log or free of data before the allocator's free memory
/// is given back after it (a trim walks every free chunk: 10-20 ms on a large, holed heap).
pub const HEAP_TRIM_MOVED_BYTES_MIN: u64 = 1 << 20;
/// A run of commands (a replayed record, a request's pipeline or transaction) brings a
/// command's key's slot into the cache this many commands before its turn, and its node this
/// many (`machine::apply_commands`, `command::pipeline::run_request`): far enough ahead that
/// the miss has landed by then, near enough that it has not been pushed out again.
pub const PREFETCH_SLOTS_AHEAD: usize = 16;
pub const PREFETCH_NODES_AHEAD: usize = 8;
/// The longest argument fetched ahead as a key (`command::pipeline::prefetch_key`): the
/// stable hash reads a byte in a few cycles, so past this its two extra hashes cost more than
/// the misses they hide.
pub const PREFETCH_KEY_BYTES_MAX: usize = 128;
/// A snapshot's load reads a key this many keys before inserting it, and fetches its slot
/// then (`snapshot::read`), for the same reason.
pub const SNAPSHOT_PREFETCH_KEYS_AHEAD: usize = 16;
/// The keys a database holds before a pipeline fetches ahead: a smaller keyspace stays in
/// the processor's caches (at 100 hot keys the fetches cost a pipeline of SETs 5 % more
/// instructions and gained nothing; over 1,000,000 keys they gained a third).
pub const PIPELINE_PREFETCH_KEYS_MIN: usize = 1 << 16;
/// A walk of a table (`SortedTable::iter`) fetches what the element this many slots on points
/// to before its turn. At least 1.
pub const WALK_PREFETCH_SLOTS_AHEAD: usize = 16;
/// Keys removed by one expiry cycle at most.
pub const EXPIRE_CYCLE_KEYS_MAX: usize = 2048;
/// How often a delivery attempt waiting for its record to be durable looks again, should a
/// wake-up be missed.
pub const DURABLE_WAIT_RECHECK_MS: u64 = 50;
/// everysec: the longest an acknowledged write waits for its sync.
pub const EVERYSEC_INTERVAL_MS: u64 = 1000;
/// always: the longest key-value writes wait for the runtime's thread to park (which syncs
/// them, `ParkSync`) before the executor syncs them itself. Normally a few hundred
/// microseconds pass; a runtime kept busy by other work reaches this.
pub const PARK_SYNC_WAIT_MAX_US: u64 = 2000;
/// always: the runtime's thread makes a key-value sync itself only while the last sync took
/// less than this; after a slower one the flusher makes them, so that a disk that stalls holds
/// the HTTP thread (health checks included) for one sync at most, until syncs are fast again.
pub const PARK_SYNC_FAST_MAX_US: u64 = 1000;
/// always: a sync this long is a stall of the disk, after which the flusher makes the
/// key-value syncs for `PARK_SYNC_STALL_PAUSE_MS`, so that a disk that stalls now and then holds
/// the HTTP thread once in that time, not at every stall. (A sync between the two bounds sends
/// the next one to the flusher only: a millisecond now and then is usual on a busy disk.)
pub const PARK_SYNC_STALL_US: u64 = 50_000;
pub const PARK_SYNC_STALL_PAUSE_MS: u64 = 10_000;

/// Delivery attempts running at once (the worker pool's bound).
pub const DELIVERY_IN_FLIGHT_MAX: usize = 512;
/// Attempts' results the executor takes into one batch, and due messages it hands to the
/// delivery workers at a time: a key-value request that arrives meanwhile waits for them, so
/// the delivery work in one go is kept short.
pub const DELIVERY_RESULTS_PER_BATCH_MAX: usize = 16;
pub const DELIVERY_DISPATCH_PER_BATCH_MAX: usize = 16;
/// Hand-overs of `DELIVERY_DISPATCH_PER_BATCH_MAX` due messages after one batch. The executor
/// lets the connection tasks run between them, and a waiting request other than a publish
/// ends them. One a batch left the delivery thread short of work once publishing stopped
/// (only results then start batches, each freeing no more room than it fills); halving the
/// messages a round and doubling the rounds cost deliveries a second.
pub const DELIVERY_DISPATCH_ROUNDS_MAX: usize = 4;
/// The nice value of the delivery thread: when a request and a delivery attempt both want a
/// core, the request runs first (Linux's nice is per thread).
pub const DELIVERY_THREAD_NICE: i32 = 10;
/// Retries of a message that sets no `Upstash-Retries` (so up to 4 attempts).
pub const DELIVERY_RETRIES_DEFAULT: u32 = 3;
/// Longest an attempt may take when the message sets no `Upstash-Timeout`.
pub const DELIVERY_ATTEMPT_TIMEOUT_MS_DEFAULT: u64 = 15 * 60 * 1000;
/// Longest wait before a retry: the default backoff's cap, and the most a destination's
/// `Retry-After` or rate-limit reset header may ask for (beyond it the backoff applies).
pub const DELIVERY_RETRY_WAIT_MS_MAX: u64 = 86_400_000;
/// How long a workflow wait (`context.waitForEvent`) lasts when it names no timeout.
pub const WORKFLOW_WAIT_TIMEOUT_MS_DEFAULT: u64 = 7 * 86_400_000;
/// Longest flow-control rate period (`Upstash-Flow-Control-Value: period=...`).
pub const FLOW_CONTROL_PERIOD_MS_MAX: u64 = 7 * 86_400_000;
/// Largest queue parallelism (`POST /v2/queues`).
pub const QUEUE_PARALLELISM_MAX: u64 = 1_000;
/// DLQ entries one `GET /v2/dlq` page holds (its default and its most).
pub const DLQ_PAGE_ENTRIES_MAX: usize = 100;
/// Failed workflow runs one `GET /v2/workflows/dlq` page holds (its default and its most).
pub const WORKFLOW_DLQ_PAGE_ENTRIES_MAX: usize = 50;
/// Log entries one `GET /v2/logs` page holds by default, and at most.
pub const LOG_PAGE_ENTRIES_DEFAULT: usize = 100;
pub const LOG_PAGE_ENTRIES_MAX: usize = 1_000;
/// Runs one `GET /v2/workflows/logs` page holds by default, and at most.
pub const WORKFLOW_LOG_PAGE_RUNS_DEFAULT: usize = 10;
pub const WORKFLOW_LOG_PAGE_RUNS_MAX: usize = 1_000;
/// Longest name of a URL group, queue or schedule id.
pub const DELIVERY_NAME_BYTES_MAX: usize = 200;
/// Redirects (307 and 308, method and body kept) a delivery attempt follows.
pub const DELIVERY_REDIRECTS_MAX: usize = 5;
/// Idle connections the delivery client keeps open to one destination host: as many as
/// attempts may be in flight, so that a burst's connections are reused and not closed and
/// opened again (at 64, connect and shutdown took a sixth of the delivery thread's time at
/// 20,000 deliveries a second, besides the destination's accepts). No more can be open than
/// attempts in flight; idle ones close after `DELIVERY_IDLE_CONNECTION_MS`.
pub const DELIVERY_IDLE_CONNECTIONS_PER_HOST_MAX: usize = DELIVERY_IN_FLIGHT_MAX;
/// Idle connections the delivery client keeps open in all (one file descriptor each): past
/// it, a connection whose attempt ended is closed.
pub const DELIVERY_IDLE_CONNECTIONS_MAX: usize = 1_024;
/// How long an idle delivery connection is kept (reqwest's default, which it had before).
pub const DELIVERY_IDLE_CONNECTION_MS: u64 = 90_000;
/// Destinations the delivery thread keeps parsed, and each HTTP thread keeps as accepted at
/// publish (caches that are emptied when full), each at most this long (a longer one is parsed
/// every time): about 1 MiB at most with the parsed forms (percent-encoding can make one three
/// times its text).
pub const DELIVERY_PARSED_URLS_MAX: usize = 1_024;
pub const DELIVERY_PARSED_URL_BYTES_MAX: usize = 256;
/// Messages a filtered `DELETE /v2/messages` cancels when it names a count of none.
pub const MESSAGES_CANCEL_ENTRIES_DEFAULT: usize = 100;

/// Entries the dead-letter queue holds (`--dlq-max`): a message that fails when it is full
/// pushes the oldest entry out, by a logged removal.
pub const DLQ_ENTRIES_MAX_DEFAULT: usize = 100_000;
/// Workflow waits open at once (`--waiters-max`); past it a wait is refused with 429.
pub const WAITERS_MAX_DEFAULT: usize = 100_000;
/// Lookback notifications kept for runs that do not wait yet (`--notifications-max`); past it
/// such a notify is refused with 429.
pub const NOTIFICATIONS_MAX_DEFAULT: usize = 100_000;
/// Deduplication ids and content hashes inside their window (`--dedup-max`); past it a publish
/// that would add one is refused with 429.
pub const DEDUP_ENTRIES_MAX_DEFAULT: usize = 1_000_000;

/// The bounds of the delivery state that grows with use. They are configuration, not state:
/// every removal they cause is a logged event, so replay needs none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryLimits {
    pub dlq_entries_max: usize,
    pub waiters_max: usize,
    pub notifications_max: usize,
    pub dedup_entries_max: usize,
}

impl Default for DeliveryLimits {
    fn default() -> DeliveryLimits {
        DeliveryLimits {
            dlq_entries_max: DLQ_ENTRIES_MAX_DEFAULT,
            waiters_max: WAITERS_MAX_DEFAULT,
            notifications_max: NOTIFICATIONS_MAX_DEFAULT,
            dedup_entries_max: DEDUP_ENTRIES_MAX_DEFAULT,
        }
    }
}

/// How long a deduplication id (or content hash) keeps a second publish out.
pub const DELIVERY_DEDUP_WINDOW_MS: u64 = 10 * 60 * 1000;
/// Delivery log entries kept in memory for `GET /v2/events` (oldest dropped first).
pub const DELIVERY_LOG_ENTRIES_MAX: usize = 10_000;
/// Ended workflow runs whose step history is kept for `GET /v2/workflows/events` (older ones
/// keep only their id, state and times).
pub const WORKFLOW_ENDED_RUNS_KEPT_MAX: usize = 1_000;
/// Default maximum message size (`--max-message-bytes`): the largest publish body, and where
/// a destination's response body is cut for callbacks and the DLQ. The hosted free plan's 1 MB
/// is a plan limit, not a protocol one.
pub const DELIVERY_MESSAGE_BYTES_MAX_DEFAULT: usize = 10 * 1024 * 1024;

/// The longest name or id a publish may carry in a header: `Upstash-Label` (each label),
/// `Upstash-Workflow-RunId`, `Upstash-Deduplication-Id`, `Upstash-Flow-Control-Key`,
/// `Upstash-Schedule-Id` and `Upstash-Queue-Name`. Each is kept with the message (and logged),
/// and the runs, logs and DLQ are filtered by them: longer is refused with 400.
pub const DELIVERY_ID_BYTES_MAX: usize = 256;

/// Deepest nesting of callbacks a publish may configure: `Upstash-Callback-X` configures the
/// callback as `Upstash-X` configures the message, so `Upstash-Callback-Callback` is the
/// callback's own callback, one level down (the workflow SDK sends two levels,
/// `Upstash-Callback-Failure-Callback-*`). Deeper is refused with 400: the configuration is
/// recursive in memory and in the log, and a log record nested past what its reader decodes
/// would stop the server's restart.
pub const DELIVERY_CALLBACK_NESTING_MAX: usize = 8;

/// Deepest nesting of callbacks the packed form of a pending message (`delivery::packed`)
/// writes and reads. Above every message a log can hold: a publish nests at most
/// `DELIVERY_CALLBACK_NESTING_MAX`, and a log written before that bound holds at most what its
/// reader decodes (1,024 levels of MessagePack, two a callback: 509 callbacks, measured). A
/// test packs and reads one at this bound on an 8 MiB stack (the main thread's, where replay
/// runs; the runtime's threads have `RUNTIME_THREAD_STACK_BYTES`).
pub const DELIVERY_PACKED_NESTING_MAX: usize = 512;

/// Deepest nesting (parentheses, signs, function calls) an `Upstash-Retry-Delay` expression
/// may have; deeper ones are refused with 400.
pub const RETRY_DELAY_EXPRESSION_DEPTH_MAX: usize = 64;

/// Deepest nesting of arrays and objects in a JSON document, in a value passed to a JSON
/// command and in the document a change leaves (RedisJSON's limit and its error text,
/// "recursion limit exceeded"). Every recursive walk of a document relies on it.
pub const JSON_DEPTH_MAX: usize = 128;
/// The bytes one JSON command may add to a document (`Json::mem_bytes` of what it copies,
/// times the matches it copies it to): past it, the command is refused before it changes
/// anything.
pub const JSON_CHANGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Deepest JSONPath nesting (filters and brackets inside each other).
pub const JSON_PATH_NESTING_MAX: usize = 64;
/// lua-cjson's nesting limit for `cjson.encode` / `cjson.decode`.
pub const LUA_CJSON_DEPTH_MAX: usize = 1000;

/// A script (EVAL, FCALL) or a library's loading (FUNCTION LOAD) that runs longer is stopped
/// with an error it cannot catch (Redis's busy-script threshold is 5 s too; Redis then lets
/// other clients SCRIPT KILL it, as tidepool does, and tidepool also stops it itself). Writes
/// it made before stay, as in Redis.
pub const SCRIPT_TIME_LIMIT_MS: u64 = 5_000;
/// The script time limit of a scratch database (`POST /start`), unless set at its creation:
/// anyone who can reach the server may make one, so one call of its scripts holds the single
/// executor, and with it every other database, for at most this long.
pub const SCRATCH_SCRIPT_TIME_LIMIT_MS: u64 = 50;
/// The largest script time limit a database may be created with.
pub const SCRIPT_TIME_LIMIT_MS_MAX: u64 = 60_000;
/// A database whose script runs past its time limit has its scripts and functions refused
/// for a cooling period: this long after the first such run, twice as long after each
/// further one, up to [`SCRIPT_COOLING_MAX_MS`]. A run past the limit more than
/// [`SCRIPT_COOLING_FORGET_MS`] after the last one starts the count again.
pub const SCRIPT_COOLING_MS: u64 = 1_000;
/// A scratch database's requests (its scripts, and every command: a SORT of a large list
/// holds the executor as a script does) may use at most this share of the executor over a
/// window of [`SCRATCH_WINDOW_MS`]; all scratch databases together at most
/// [`SCRATCH_ALL_SHARE_PERCENT`]. Past either, the database cools down as after a script run
/// past its limit: its requests are refused (`executor::shares`).
pub const SCRATCH_SHARE_PERCENT: u32 = 25;
pub const SCRATCH_ALL_SHARE_PERCENT: u32 = 50;
pub const SCRATCH_WINDOW_MS: u64 = 1_000;
/// A scratch database's request runs in a batch of its own, after the other jobs waiting (so
/// another database's reply never waits for it), unless this many batches have run while
/// scratch requests waited: then one joins the next batch, so busy named databases cannot
/// starve them.
pub const SCRATCH_DEFERRED_BATCHES_MAX: u32 = 8;
pub const SCRIPT_COOLING_MAX_MS: u64 = 60_000;
pub const SCRIPT_COOLING_FORGET_MS: u64 = 300_000;
/// `/readyz` answers 503 while the executor has been on one job for longer than this (a
/// script at a named database's limit, a large SAVE): requests of every database wait then.
pub const EXECUTOR_STALL_MS: u64 = 1_000;
/// What the log writer's buffers keep of their capacity after a record: a large one (a
/// pipeline of large values) would otherwise hold its size in memory for good, and a server
/// past `--max-memory` with no data in it would refuse every write.
pub const LOG_BUFFER_KEEP_BYTES: usize = 1 << 20;
/// The most commands a request's vector of logged commands may have had room for and still be
/// kept for the next request (a pipeline's larger one is freed).
pub const LOGGED_COMMANDS_KEEP: usize = 64;
/// Command arguments' buffers kept for reuse on a thread (`spare`): at most this many, each of
/// at most `ARG_SPARE_BUFFER_BYTES_MAX` bytes of room (with the vectors below, about 60 KB a
/// thread for SETs' arguments, 160 KB at most). A store for 50 connections' pipelines at once
/// (16,384) was faster under that load and held a megabyte after it (docs/performance.md)...
pub const ARG_SPARE_BUFFERS_MAX: usize = 1024;
pub const ARG_SPARE_BUFFER_BYTES_MAX: usize = 64;
/// ...and at most this many commands' vectors, each of room for at most
/// `ARG_SPARE_VECTOR_ARGS_MAX` arguments.
pub const ARG_SPARE_VECTORS_MAX: usize = 256;
pub const ARG_SPARE_VECTOR_ARGS_MAX: usize = 8;
/// The most heap replay's decoding buffers may hold and be kept for the next record (after a
/// record with a larger value or more commands, they are freed once it is applied).
pub const REPLAY_SCRATCH_KEEP_BYTES: usize = 1 << 20;
/// The data a scratch database may hold, unless set at its creation (the hosted free plan's
/// data-size limit is 256 MB).
pub const SCRATCH_DATA_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// How often a SCRIPT KILL queued behind a script that has not started yet looks whether it
/// has.
pub const SCRIPT_KILL_POLL_MS: u64 = 10;
/// How often (in Lua VM instructions) a running script checks the time limit and kills.
pub const LUA_HOOK_INSTRUCTIONS: u32 = 10_000;
/// Memory all Lua code together may hold (Redis has no such limit; a server that serves
/// public Read Only tokens needs one). Past it an allocation fails: "not enough memory".
pub const LUA_MEMORY_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Deepest nesting of Lua tables a script's reply may have: deeper, the reply ends in
/// Redis's "reached lua stack limit" error at this depth (Redis's own bound is its Lua
/// stack, about 8,000).
pub const LUA_REPLY_DEPTH_MAX: usize = 1_000;
/// Most elements a script's reply may have (a table reached twice counts twice): more, and
/// the reply is refused whole rather than built (a table that holds itself in two places
/// doubles at each level of nesting, 2^1000 elements at the depth bound). Redis's own bound
/// on the elements of one request (`proto-max-multibulk-len`).
pub const LUA_REPLY_ELEMENTS_MAX: usize = 1 << 20;

/// Longest `Upstash-Delay` accepted (100 years); longer is refused with 400, so that every
/// `notBefore` the API answers stays within JavaScript's safe integers.
pub const DELIVERY_DELAY_MS_MAX: u64 = 100 * 365 * 86_400_000;
/// Latest `Upstash-Not-Before` accepted, in Unix seconds: 9999-12-31T23:59:59Z.
pub const DELIVERY_NOT_BEFORE_S_MAX: u64 = 253_402_300_799;

/// A connection with nothing being answered and no byte moving for this long is closed
/// (an idle keep-alive connection, or one that never sends anything).
pub const HTTP_IDLE_TIMEOUT_MS: u64 = 30_000;
/// A request head must be whole this long after its first byte arrived, or the connection is
/// closed (a client that sends its head a byte at a time holds no descriptor for long).
pub const HTTP_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// How often each connection's watchdog looks at those two (so they hold to within this).
pub const HTTP_WATCHDOG_INTERVAL_MS: u64 = 2_000;
/// Wake-ups a request body may take before its read timer (HTTP_BODY_READ_TIMEOUT_MS) is
/// armed: the usual body arrives within them and never pays for a timer.
pub const HTTP_BODY_WAKEUPS_BEFORE_TIMER: u32 = 2;
/// A request body that has not fully arrived after this long is answered 408.
pub const HTTP_BODY_READ_TIMEOUT_MS: u64 = 60_000;
/// After a failed accept (out of descriptors, say), how long the listener waits before the next.
pub const HTTP_ACCEPT_RETRY_MS: u64 = 50;
/// How long the 503 answer to a connection past the cap may take to write.
pub const HTTP_REFUSAL_WRITE_TIMEOUT_MS: u64 = 1_000;
/// The most a connection buffers, reading (a request head must fit in it) and writing (an
/// event stream whose client does not read holds at most this much of a copy of its events).
pub const HTTP_CONNECTION_BUFFER_BYTES_MAX: usize = 64 * 1024;
/// Connections open at once; past it a new one is answered 503 and closed. Lowered at start
/// to the descriptor limit less [`HTTP_DESCRIPTORS_RESERVED`].
pub const HTTP_CONNECTIONS_MAX: usize = 10_000;
/// Descriptors kept free of client connections (log segments, outbound deliveries, accepts).
pub const HTTP_DESCRIPTORS_RESERVED: usize = 64;

/// An HSCAN, SSCAN or ZSCAN from cursor 0 over at most this many entries answers all of them
/// at once with cursor 0, as Redis does for collections in its compact encodings (whose
/// default bound is 128 entries).
pub const SCAN_WHOLE_ENTRIES_MAX: usize = 128;

/// SCAN over the keyspace answers at most COUNT keys, as the hosted service does, and examines
/// as many keys as it takes to find them, up to this many (or COUNT, if larger) in one call: a
/// `SCAN 0 MATCH p` over a small keyspace answers whole, and one over a large keyspace of few
/// matches still returns to its caller after this much work.
pub const SCAN_KEYS_EXAMINED_MAX: usize = 1_000;

/// Keys MEMORY STATS and MEMORY DOCTOR size to estimate a database's data (their mean, times
/// the number of keys), so that neither walks a large keyspace on the executor.
pub const MEMORY_STATS_SAMPLE_KEYS: usize = 1_000;

/// The largest reply one request may build, all of its commands' replies together; a reply
/// that would pass it is an error instead (and a read whose named string values alone pass
/// it is refused before it runs). It bounds what a small request can make the server
/// allocate (`MGET big big big ...`).
pub const REPLY_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Replies larger than this are encoded off the runtime's threads, so that encoding one
/// cannot hold up other connections.
pub const REPLY_ENCODE_INLINE_BYTES_MAX: usize = 1024 * 1024;

/// lua-cmsgpack's nesting limit when packing: a table this deep encodes as nil (so a table
/// that holds itself ends), as Redis's library does.
pub const LUA_CMSGPACK_NESTING_MAX: usize = 16;
/// How deep `cmsgpack.unpack` follows nested arrays and maps before refusing the input (the C
/// library stops when the Lua stack cannot grow; this bounds the decoder's recursion).
pub const LUA_CMSGPACK_DECODE_DEPTH_MAX: usize = 1_000;
/// The most values one `cmsgpack.unpack` returns at once (Lua's C stack limit, less a margin):
/// past it, the error the C library gives, which names `unpack_one` and `unpack_limit`.
pub const LUA_CMSGPACK_RESULTS_MAX: usize = 7_900;

/// Stack of every runtime thread (the executor runs on them, and scripts beside them). The
/// recursive walks are all bounded by the depth limits here, and the deepest of them,
/// `cjson.encode` at LUA_CJSON_DEPTH_MAX and a script reply at LUA_REPLY_DEPTH_MAX, need more
/// than the 2 MiB default in a debug build. Untouched stack costs no memory.
pub const RUNTIME_THREAD_STACK_BYTES: usize = 32 * 1024 * 1024;

/// Most elements HRANDFIELD, SRANDMEMBER and ZRANDMEMBER return for a negative count
/// (repeats allowed); a larger one is `ERR value is out of range`.
pub const RANDOM_COUNT_REPEATS_MAX: u64 = 10_000_000;

/// Bytes of keys a snapshot puts in one chunk (each chunk is checksummed on its own, and a
/// damaged one is reported with its offset).
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Keys a snapshot puts in one chunk at most: `tidepool-log repair` rebuilds a damaged
/// snapshot from its intact chunks, so one damaged chunk loses at most this many small keys
/// (a keyspace of small keys used to fit in one chunk, and lose everything with it).
pub const SNAPSHOT_CHUNK_KEYS_MAX: u64 = 1_000;
/// `--auto-snapshot-percentage`: a snapshot is taken when the log written since the last one
/// has grown to this percentage of that snapshot's size (Redis's `auto-aof-rewrite-percentage`);
/// 0 turns automatic snapshots off.
pub const AUTO_SNAPSHOT_PERCENTAGE_DEFAULT: u64 = 100;
/// `--auto-snapshot-min-bytes`: no automatic snapshot before the log since the last one has
/// reached this size (Redis's `auto-aof-rewrite-min-size`).
pub const AUTO_SNAPSHOT_MIN_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// `--log-retention`: history kept behind the newest snapshot, for replay and inspection.
pub const LOG_RETENTION_DEFAULT: &str = "1d";

/// How much of the log behind the newest snapshot is kept (`--log-retention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// `0`: nothing beyond what start-up needs.
    Nothing,
    /// A duration: segments whose records are all older than this go.
    Millis(u64),
    /// A size: the newest segments up to this many bytes stay.
    Bytes(u64),
}

impl Retention {
    /// `0`, a duration (`90s`, `30m`, `12h`, `7d`, `2w`) or a size (`500MB`, `10GiB`, `1TB`, or
    /// plain bytes with `B`).
    pub fn parse(s: &str) -> Result<Retention, String> {
        let t = s.trim();
        if t == "0" {
            return Ok(Retention::Nothing);
        }
        let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
            format!("'{s}' needs a unit: a duration such as 7d or a size such as 10GiB")
        })?;
        let (num, unit) = t.split_at(split);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("'{s}' must start with a whole number"))?;
        let scale = |m: u64| {
            n.checked_mul(m)
                .ok_or_else(|| format!("'{s}' is too large"))
        };
        let r = match unit.trim() {
            "s" => Retention::Millis(scale(1000)?),
            "m" | "min" => Retention::Millis(scale(60_000)?),
            "h" => Retention::Millis(scale(3_600_000)?),
            "d" => Retention::Millis(scale(86_400_000)?),
            "w" => Retention::Millis(scale(7 * 86_400_000)?),
            "B" => Retention::Bytes(n),
            "KB" | "kB" => Retention::Bytes(scale(1000)?),
            "MB" => Retention::Bytes(scale(1000 * 1000)?),
            "GB" => Retention::Bytes(scale(1000 * 1000 * 1000)?),
            "TB" => Retention::Bytes(scale(1000 * 1000 * 1000 * 1000)?),
            "KiB" => Retention::Bytes(scale(1 << 10)?),
            "MiB" => Retention::Bytes(scale(1 << 20)?),
            "GiB" => Retention::Bytes(scale(1 << 30)?),
            "TiB" => Retention::Bytes(scale(1 << 40)?),
            other => {
                return Err(format!(
                    "'{s}': unknown unit '{other}' (durations: s, m, h, d, w; sizes: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
                ))
            }
        };
        Ok(match r {
            Retention::Millis(0) | Retention::Bytes(0) => Retention::Nothing,
            r => r,
        })
    }
}

/// When snapshots are taken and what is kept behind them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    pub auto_percentage: u64,
    pub auto_min_bytes: u64,
    pub retention: Retention,
}

impl Default for SnapshotPolicy {
    fn default() -> SnapshotPolicy {
        SnapshotPolicy {
            auto_percentage: AUTO_SNAPSHOT_PERCENTAGE_DEFAULT,
            auto_min_bytes: AUTO_SNAPSHOT_MIN_BYTES_DEFAULT,
            retention: Retention::Millis(86_400_000),
        }
    }
}

/// When a write counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncMode {
    /// Reply only after the record is on disk (group commit: one sync for many writers).
    Always,
    /// Reply after the write reaches the OS; sync at least once a second.
    EverySec,
    /// Reply after the write reaches the OS; the OS decides when it reaches the disk.
    Never,
}

impl FsyncMode {
    pub fn parse(s: &str) -> Option<FsyncMode> {
        match s {
            "always" => Some(FsyncMode::Always),
            "everysec" => Some(FsyncMode::EverySec),
            "never" => Some(FsyncMode::Never),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FsyncMode::Always => "always",
            FsyncMode::EverySec => "everysec",
            FsyncMode::Never => "never",
        }
    }

    /// The same, as Redis's `appendfsync` names it.
    pub fn redis_name(self) -> &'static str {
        match self {
            FsyncMode::Never => "no",
            other => other.name(),
        }
    }
}

/// A command-line word as a flag: `--flag=value` gives the flag and its inline value, anything
/// else the word itself and none.
pub fn split_flag(word: &str) -> (String, Option<String>) {
    match word.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
        _ => (word.to_string(), None),
    }
}

/// The value of the flag at `args[*i]`: its inline value, or the next word. Leaves `*i` at
/// the word after the flag and its value.
pub fn flag_value(
    args: &[String],
    i: &mut usize,
    flag: &str,
    inline: Option<String>,
) -> Result<String, String> {
    let value = match inline {
        Some(v) => v,
        None => {
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or_else(|| format!("flag {flag} needs a value"))?
        }
    };
    *i += 1;
    Ok(value)
}

/// The regions the SDKs' multi-region mode knows, as the `Upstash-Region` header spells them.
pub const REGIONS: [&str; 2] = ["US-EAST-1", "EU-CENTRAL-1"];

/// A `--region` value in the header's spelling (`us_east_1` and `US-EAST-1` alike).
pub fn region(given: &str) -> Result<String, String> {
    let r = given.trim().replace('_', "-").to_ascii_uppercase();
    if REGIONS.contains(&r.as_str()) {
        Ok(r)
    } else {
        Err(format!(
            "invalid --region '{given}': use {} (the regions the SDKs' multi-region mode knows)",
            REGIONS.join(" or ")
        ))
    }
}

/// The server's configuration after flags, environment and defaults are resolved.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The RESP listener's address (`--resp-listen`), if any.
    pub resp_listen: Option<SocketAddr>,
    /// Its TLS certificate chain and key (`--resp-tls-cert`, `--resp-tls-key`), if any.
    pub resp_tls: Option<(PathBuf, PathBuf)>,
    /// This node's place in a cluster (`--node-id` and the rest), if it is in one.
    pub cluster: Option<ClusterConfig>,
    pub data_dir: PathBuf,
    pub token: Option<String>,
    pub read_only_token: Option<String>,
    pub fsync: FsyncMode,
    /// Threads that run HTTP connections (the executor and the flusher have their own).
    pub http_threads: usize,
    /// The region this server stands for (`--region`): every delivery carries it as
    /// `Upstash-Region`, which multi-region SDK receivers pick their signing keys by.
    pub region: Option<String>,
    pub qstash_token: Option<String>,
    /// A delivery-API token that may only read (GET routes).
    pub qstash_read_only_token: Option<String>,
    pub qstash_current_signing_key: Option<String>,
    pub qstash_next_signing_key: Option<String>,
    /// Milliseconds per "second" of the default retry backoff: 1000, except in tests.
    pub retry_backoff_unit_ms: u64,
    /// Maximum message size of the delivery service (`--max-message-bytes`).
    pub message_bytes_max: usize,
    pub delivery_limits: DeliveryLimits,
    /// Open the data directory at this past point of its log, read-only (`--at`).
    pub at: Option<crate::point::Point>,
    pub snapshots: SnapshotPolicy,
    /// Origins a browser may call the REST routes from (`--cors-origin`); none by default.
    pub cors_origins: Vec<String>,
    /// The largest REST request body (`--max-request-bytes`).
    pub request_bytes_max: usize,
    /// The longest key a request may name (`--max-key-bytes`); None: no limit.
    pub key_bytes_max: Option<usize>,
    /// The most a write may store in one go (`--max-value-bytes`); None: no limit.
    pub value_bytes_max: Option<usize>,
    /// Commands one database may run per day (`--max-requests-per-day`); None: no limit.
    pub requests_per_day: Option<u64>,
    /// The script time limit of the default database and of named databases created without
    /// one of their own (`--script-time-limit-ms`).
    pub script_time_limit_ms: u64,
    /// Heap past which writes that may grow memory are refused (`--max-memory`, Redis's
    /// `maxmemory` with `noeviction`); None: no limit.
    pub memory_bytes_max: Option<u64>,
    /// The admin API's token (`--admin-token`); generated on first start when not given.
    pub admin_token: Option<String>,
    /// Where `POST` creates a scratch database (`--start-path`); None: switched off.
    pub start_path: Option<String>,
    /// The web console at `/console` (`--console`).
    pub console: bool,
    /// How long a scratch database lives unless claimed (`--scratch-ttl`).
    pub scratch_ttl_ms: u64,
    /// Scratch databases one client address may create per hour (`--start-per-hour`).
    pub start_per_hour: u32,
    /// `GET /metrics` answers loopback clients without the admin token (`--metrics-open`).
    pub metrics_open: bool,
    /// `serve --dev`: the QStash dev server's four users and a fixed Redis token, on loopback.
    pub dev: bool,
    /// Request logging (`--log-level`, `RUST_LOG` style): None, off.
    pub log_level: Option<String>,
    /// How often usage counts are logged: `USAGE_LOG_INTERVAL_MS`, except in tests
    /// (`TIDEPOOL_USAGE_LOG_INTERVAL_MS`), whose record numbers must not move with the clock.
    pub usage_log_interval_ms: u64,
    /// How long an authenticated RESP connection may stay idle (`RESP_IDLE_TIMEOUT_MS`, or
    /// `TIDEPOOL_RESP_IDLE_TIMEOUT_MS`).
    pub resp_idle_timeout_ms: u64,
    /// How long one console rebuild of a past state may take (`CONSOLE_REBUILD_MS_MAX`, or
    /// `TIDEPOOL_CONSOLE_REBUILD_MS`).
    pub console_rebuild_ms: u64,
}

/// Where `serve --dev` listens (the QStash dev server's address, which the SDKs' dev mode
/// probes).
pub const DEV_LISTEN: &str = "127.0.0.1:8080";
/// The fixed Redis tokens of `serve --dev`.
pub const DEV_REDIS_TOKEN: &str = "dev-token";
pub const DEV_REDIS_READ_ONLY_TOKEN: &str = "dev-read-only-token";
/// What `POST /start` creates a scratch database at, by default.
pub const START_PATH_DEFAULT: &str = "/start";
/// How long a scratch database lives unless claimed, by default (the hosted service's 72 h).
pub const SCRATCH_TTL_MS_DEFAULT: u64 = 72 * 3_600_000;
/// The same, as `--scratch-ttl` spells it.
pub const SCRATCH_TTL_DEFAULT: &str = "72h";
/// Scratch databases one client address may create per hour, by default.
pub const START_PER_HOUR_DEFAULT: u32 = 10;
/// Client addresses whose scratch-database creations are remembered for the rate limit; past
/// it the oldest are forgotten.
pub const START_CLIENTS_TRACKED_MAX: usize = 100_000;
/// Databases one server holds at most (each costs its catalog entry and an empty keyspace).
pub const DATABASES_MAX: usize = 100_000;
/// The largest admin API request body.
pub const ADMIN_BODY_BYTES_MAX: usize = 64 * 1024;
/// How long `tidepool db` waits for the server's answer.
pub const ADMIN_CLIENT_TIMEOUT_MS: u64 = 30_000;
/// The longest database name.
pub const DATABASE_NAME_BYTES_MAX: usize = 64;
/// The prefix of the admin API's routes: no Redis command starts with `_`, so it can never be
/// taken for a command in the path.
pub const ADMIN_PREFIX: &str = "/_admin";

/// RESP (issue 28): the longest inline command line, and the longest `*<count>` or
/// `$<length>` line, before the request is refused (Redis's `PROTO_INLINE_MAX_SIZE`).
pub const RESP_LINE_BYTES_MAX: usize = 64 * 1024;
/// RESP: the longest bulk string of a request (Redis's `proto-max-bulk-len` default).
pub const RESP_BULK_BYTES_MAX: usize = 512 * 1024 * 1024;
/// RESP: the most arguments of one request (Redis refuses a multibulk length above
/// `INT_MAX`).
pub const RESP_ARGS_MAX: usize = i32::MAX as usize;
/// RESP: before AUTH, the most arguments and the longest argument of a request (Redis's
/// limits for a client that has not authenticated).
pub const RESP_UNAUTHENTICATED_ARGS_MAX: usize = 10;
pub const RESP_UNAUTHENTICATED_BULK_BYTES_MAX: usize = 16 * 1024;
/// RESP: the room reserved up front for a request's arguments or a bulk string, whatever its
/// header claims: more is allocated only as the bytes arrive.
pub const RESP_RESERVE_BYTES_MAX: usize = 64 * 1024;
/// RESP: the most connections open at once; one more is answered Redis's `max number of
/// clients reached` and closed (beside `HTTP_CONNECTIONS_MAX`, which HTTP's are held to).
pub const RESP_CONNECTIONS_MAX: usize = 10_000;
/// RESP: what a connection reads at a time, and what its buffers shrink back to when a large
/// request or reply has passed (an idle connection holds at most this much).
pub const RESP_READ_BYTES: usize = 4 * 1024;
/// RESP: the most requests of one read sent to the executor as one job.
pub const RESP_PIPELINE_COMMANDS_MAX: usize = 1024;
/// RESP: a request begun must end within this long (HTTP's `HTTP_HEADER_READ_TIMEOUT_MS`).
pub const RESP_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// RESP: a connection that has not authenticated is closed after this long without a request.
pub const RESP_UNAUTHENTICATED_IDLE_MS: u64 = 10_000;
/// RESP: an authenticated connection is closed after this long without a request, unless it
/// is subscribed or monitoring (clients' pools reconnect; Redis's `timeout` is 0 by default,
/// and the hosted service closes idle connections). `TIDEPOOL_RESP_IDLE_TIMEOUT_MS` sets
/// another (the tests shorten it).
pub const RESP_IDLE_TIMEOUT_MS: u64 = 300_000;

/// The console's time travel: past states rebuilt at once, server-wide (each holds a whole
/// copy of the state while it is built; a request past it answers 429).
pub const CONSOLE_REPLAYS_MAX: usize = 1;
/// How long one rebuild of a past state may take: a key's history then ends where the replay
/// got to (and says so); a point answers 503. `TIDEPOOL_CONSOLE_REBUILD_MS` sets another (the
/// tests shorten it).
pub const CONSOLE_REBUILD_MS_MAX: u64 = 10_000;
/// A rebuild holds about a copy of the state beside the live one: past this much heap in use
/// (`INFO memory`'s `used_memory`) the console refuses to rebuild (503).
pub const CONSOLE_REBUILD_HEAP_BYTES_MAX: u64 = 4 << 30;
/// The newest changes of a key's history the console shows.
pub const CONSOLE_HISTORY_CHANGES_MAX: usize = 200;
/// Commands of one record a key's history shows (a pipeline may write one key many times).
pub const CONSOLE_HISTORY_COMMANDS_MAX: usize = 20;
/// Bytes of one argument of a command a key's history shows.
pub const CONSOLE_HISTORY_ARGUMENT_BYTES_MAX: usize = 256;
/// Items of a collection (64 times as many bytes of a string) a past value shows.
pub const CONSOLE_TRAVEL_ITEMS_MAX: usize = 100;
/// Keys of a past state the console lists at once.
pub const CONSOLE_TRAVEL_KEYS_MAX: usize = 1000;
/// The console's timeline of the log: records per this many milliseconds (a minute)...
pub const CONSOLE_TIMELINE_BUCKET_MS: u64 = 60_000;
/// ... and at most this many bars; a longer log gets bars twice as wide until it fits.
pub const CONSOLE_TIMELINE_BUCKETS_MAX: usize = 1440;

// The cluster (issue 30): Raft's timings and bounds.
/// How often a leader sends heartbeats to its followers.
pub const CLUSTER_HEARTBEAT_MS: u64 = 100;
/// A follower that hears no leader for a time drawn between these two, after openraft 0.9's
/// own leader lease (the maximum: a node refuses to vote for another while it lasts), starts
/// an election: 1.2-1.4 s after the last heartbeat. A leader's lease (`keep_lease`) lasts the
/// minimum. With 1,000 ms as the maximum a leader's `kill -9` took up to 2.0 s to replace.
pub const CLUSTER_ELECTION_TIMEOUT_MIN_MS: u64 = 500;
pub const CLUSTER_ELECTION_TIMEOUT_MAX_MS: u64 = 700;
/// A node with no log and no snapshot (its directory emptied, or a voter that never got an
/// entry) withholds its vote from candidates past the first entry this long after the first
/// asks: time for a node that holds what it may have helped commit to stand and win. A
/// cluster still without a leader after it gets the vote (the node that held the entry is
/// down as well: two faults), so a permanent loss never leaves it without a leader.
pub const CLUSTER_EMPTY_VOTE_HOLD_MS: u64 = 10_000;
/// How long a cluster node holds a request whose `upstash-sync-token` it has not applied yet
/// before it answers 503.
pub const CLUSTER_SYNC_WAIT_MS: u64 = 5_000;
/// A cluster message signed further than this from the receiving node's clock is refused
/// (the nodes' clocks must agree within it).
pub const CLUSTER_AUTH_SKEW_MS: u64 = 60_000;
/// The signed messages' nonces a node remembers to refuse a replay within the skew; past
/// this many, those older than the skew are forgotten, and if none is, messages are refused
/// until some are.
pub const CLUSTER_AUTH_NONCES_MAX: usize = 1_000_000;
/// Requests' publishes waiting to be sent to one peer; past it, a peer that does not keep up
/// (or is down) misses the newer ones.
pub const CLUSTER_PUBLISH_QUEUE_MAX: usize = 1024;
/// Connections the cluster listener holds at once (peers are few); one more is closed.
pub const CLUSTER_CONNECTIONS_MAX: usize = 64;
/// A cluster message's head, and then its body, must come within this long.
pub const CLUSTER_READ_TIMEOUT_MS: u64 = 30_000;
/// How often a RESP `WAIT` on a cluster's leader looks again at how far its followers hold
/// its log, while it waits.
pub const CLUSTER_WAIT_POLL_MS: u64 = 5;
/// RESP connections one follower opens to move to its leader at once; a burst waits its
/// turn (the leader's cluster listener holds `CLUSTER_CONNECTIONS_MAX` connections, Raft's
/// own included).
pub const CLUSTER_MOVES_OPENING_MAX: usize = 16;
/// How long a follower waits for the leader's answer to a request it forwarded.
pub const CLUSTER_FORWARD_TIMEOUT_MS: u64 = 30_000;
/// How often a leader asks a quorum whether it still leads (its lease; see
/// `CLUSTER_ELECTION_TIMEOUT_MIN_MS`, which the lease lasts).
pub const CLUSTER_LEASE_CHECK_MS: u64 = 100;
/// How long a leader waits for a follower to take one chunk of a snapshot it sends (the last
/// chunk's answer comes once the follower has installed the whole state). openraft's default,
/// 200 ms, was shorter than sending a few megabytes takes: the leader gave up on every
/// attempt and sent the snapshot again, forever, while the follower, which had installed the
/// first, waited for entries that never came.
pub const CLUSTER_SNAPSHOT_CHUNK_TIMEOUT_MS: u64 = 30_000;
/// The slowest a peer is expected to take in an append of entries, in bytes a second: an
/// append of N bytes is given one heartbeat plus N / this to be answered (openraft alone
/// gives it one heartbeat, which a batch of tens of megabytes outlasts), and openraft's tries
/// meanwhile wait for it rather than send it again.
pub const CLUSTER_APPEND_BYTES_PER_SEC_MIN: u64 = 4 << 20;
/// A cluster message larger than this is hashed on a blocking thread, not on the runtime's
/// (so heartbeats go on beside it), and an append this large goes out on a task of its own,
/// given the time its size needs (`CLUSTER_APPEND_BYTES_PER_SEC_MIN`).
pub const CLUSTER_LARGE_MESSAGE_BYTES: usize = 256 << 10;
/// How long a node deposed with records the cluster does not hold refuses everything before
/// it restarts itself in place to rebuild its state (time for the refusals to reach the
/// replies that waited for those records; it also bounds how often a node can restart).
pub const CLUSTER_REBUILD_DELAY_MS: u64 = 500;
/// How long a leader whose lease lapsed waits for a quorum's confirmation before it refuses
/// the requests of a batch (`Executor::await_lease`): two rounds of `keep_lease`.
pub const CLUSTER_LEASE_WAIT_MS: u64 = 2 * CLUSTER_ELECTION_TIMEOUT_MIN_MS;
/// A cluster node snapshots its state every this many entries (one entry is one batch).
pub const CLUSTER_SNAPSHOT_EVERY_ENTRIES: u64 = 10_000;
/// Entries kept in the cluster's log behind its snapshot, so a follower a little behind
/// catches up from the log rather than from a snapshot.
pub const CLUSTER_LOG_KEPT_PAST_SNAPSHOT: u64 = 1000;
/// A cluster leader's executor batch (one Raft entry) takes no more requests once those it
/// holds carry this many bytes, so that its records stay well within
/// `CLUSTER_ENTRY_BYTES_MAX` (each request is at most `--max-request-bytes` on its own).
pub const CLUSTER_BATCH_REQUEST_BYTES_MAX: usize = 128 << 20;
/// The largest entry payload (one batch's records, or a membership) the cluster's log writes
/// or reads: a frame declaring more is damage, not a long entry.
pub const CLUSTER_ENTRY_BYTES_MAX: usize = 1 << 30;
/// The largest message one peer may send another on the cluster listener (a batch of entries,
/// or one chunk of a snapshot); a larger body is refused with 413. One entry the log holds
/// (`CLUSTER_ENTRY_BYTES_MAX`) always fits, with its framing: an entry that could not be sent
/// would stop every write after it.
pub const CLUSTER_MESSAGE_BYTES_MAX: usize = CLUSTER_ENTRY_BYTES_MAX + (1 << 20);
/// The most bytes of entries one append carries when it holds more than one: past it, openraft
/// is told to send fewer (`PayloadTooLarge`'s hint).
pub const CLUSTER_APPEND_BYTES_TARGET: usize = 64 << 20;
/// Purged entries that the cluster's log file may still hold before it is rewritten without
/// them (once they are also more than the rest).
pub const CLUSTER_LOG_REWRITE_BYTES_MIN: u64 = 64 << 20;

/// A cluster node's settings (`--node-id`, `--cluster-listen`, `--peers`, `--cluster-secret`).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub node_id: u64,
    pub listen: SocketAddr,
    /// The other nodes' ids and cluster addresses.
    pub peers: Vec<(u64, String)>,
    pub secret: String,
    /// A snapshot every this many entries (`CLUSTER_SNAPSHOT_EVERY_ENTRIES`).
    pub snapshot_every: u64,
    /// TLS on the cluster listener and to the peers: certificate chain, key, and the
    /// authority peers' certificates must chain to (`--cluster-tls-*`).
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

/// The cluster flags, checked together: all of them or none but `--peers`.
pub fn cluster(
    node_id: Option<u64>,
    listen: Option<String>,
    peers: Option<String>,
    secret: Option<String>,
) -> Result<Option<ClusterConfig>, String> {
    let Some(node_id) = node_id else {
        if listen.is_some() || peers.is_some() || secret.is_some() {
            return Err("--cluster-listen, --peers and --cluster-secret need --node-id".into());
        }
        return Ok(None);
    };
    if node_id == 0 {
        return Err("--node-id must be 1 or more".into());
    }
    let listen = listen.ok_or("--node-id needs --cluster-listen (where peers reach this node)")?;
    let listen: SocketAddr = listen.parse().map_err(|_| {
        format!("--cluster-listen '{listen}' is not an address such as 10.0.0.1:7001")
    })?;
    let secret = secret.ok_or("--node-id needs --cluster-secret (shared by every node)")?;
    if secret.len() < 16 {
        return Err("--cluster-secret must be at least 16 characters".into());
    }
    let mut out = Vec::new();
    for p in peers
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.trim().is_empty())
    {
        let (id, addr) = p
            .trim()
            .split_once('=')
            .ok_or_else(|| format!("--peers '{p}' is not ID=HOST:PORT"))?;
        let id: u64 = id
            .parse()
            .map_err(|_| format!("--peers '{p}': '{id}' is not a node id"))?;
        if id == 0 || id == node_id || out.iter().any(|(o, _)| *o == id) {
            return Err(format!(
                "--peers '{p}': node {id} is this node, 0, or named twice"
            ));
        }
        if addr.is_empty() || !addr.contains(':') {
            return Err(format!("--peers '{p}': '{addr}' is not HOST:PORT"));
        }
        out.push((id, addr.to_string()));
    }
    Ok(Some(ClusterConfig {
        node_id,
        listen,
        peers: out,
        secret,
        snapshot_every: CLUSTER_SNAPSHOT_EVERY_ENTRIES,
        tls: None,
    }))
}
