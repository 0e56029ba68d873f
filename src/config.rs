//! Every limit and default in one place, units last in the name.

use std::net::SocketAddr;
use std::path::PathBuf;

pub const LISTEN_DEFAULT: &str = "127.0.0.1:8079";
pub const DATA_DIR_DEFAULT: &str = "./tidepool-data";

/// Largest request body (and so largest command) accepted. Upstash's hosted default is 10 MB;
/// a self-hosted server defaults higher and says so in the same words when it refuses.
pub const REQUEST_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest string value (Redis's proto-max-bulk-len).
pub const STRING_BYTES_MAX: usize = 512 * 1024 * 1024;
/// Commands waiting for the executor before HTTP handlers wait for room.
pub const EXECUTOR_QUEUE_JOBS_MAX: usize = 8192;
/// Jobs the executor takes in one batch (one write and, with fsync always, one sync).
pub const EXECUTOR_BATCH_JOBS_MAX: usize = 1024;
/// Segment size at which the log moves on to a new file.
pub const SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Events buffered for one monitor or subscriber before it is told it fell behind and closed.
pub const SUBSCRIBER_BUFFER_EVENTS_MAX: usize = 4096;
/// Keep-alive comment interval on event streams.
pub const SSE_PING_INTERVAL_MS: u64 = 15_000;
/// How often the executor removes expired keys (through a logged record).
pub const EXPIRE_CYCLE_INTERVAL_MS: u64 = 100;
/// Keys removed by one expiry cycle at most.
pub const EXPIRE_CYCLE_KEYS_MAX: usize = 2048;
/// everysec: the longest an acknowledged write waits for its sync.
pub const EVERYSEC_INTERVAL_MS: u64 = 1000;

/// Delivery attempts running at once (the worker pool's bound).
pub const DELIVERY_IN_FLIGHT_MAX: usize = 512;
/// Retries of a message that sets no `Upstash-Retries` (so up to 4 attempts).
pub const DELIVERY_DEFAULT_RETRIES: u32 = 3;

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

/// The server's configuration after flags, environment and defaults are resolved.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub token: Option<String>,
    pub read_only_token: Option<String>,
    pub fsync: FsyncMode,
    /// Threads that run HTTP connections (the executor and the flusher have their own).
    pub http_threads: usize,
    pub qstash_token: Option<String>,
    pub qstash_current_signing_key: Option<String>,
    pub qstash_next_signing_key: Option<String>,
    /// Milliseconds per "second" of the default retry backoff: 1000, except in tests.
    pub retry_backoff_unit_ms: u64,
    /// Maximum message size of the delivery service.
    pub max_message_bytes: usize,
}
