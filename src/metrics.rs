//! The numbers an operator watches (`GET /metrics`, the Prometheus text format), kept with the
//! `prometheus-client` crate rather than formatted by hand. A leaf: whoever measures something
//! holds a handle from here; the HTTP side encodes them with what it asks the executor for at
//! scrape time (`Scrape`).
//!
//! Names follow Prometheus's conventions: a `tidepool_` prefix, base units (seconds, bytes),
//! `_total` on counters.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Buckets of a latency in seconds: 10 µs to about 20 s.
fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_01, 2.0, 22)
}

/// A latency histogram in seconds.
#[derive(Clone)]
pub struct Seconds(pub Histogram);

impl Default for Seconds {
    fn default() -> Seconds {
        Seconds(Histogram::new(seconds_buckets()))
    }
}

impl Seconds {
    pub fn observe(&self, d: std::time::Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatus {
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabel {
    pub command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandDb {
    pub command: String,
    pub database: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DbLabel {
    pub database: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

fn histogram_family() -> Histogram {
    Histogram::new(seconds_buckets())
}

/// What is measured as it happens, shared by the HTTP side and the executor.
#[derive(Clone)]
pub struct Live {
    pub http_requests: Family<RouteStatus, Counter>,
    pub command_seconds: Family<CommandLabel, Histogram, fn() -> Histogram>,
    /// Requests answered by one log write (one sync with `always`): group commit at work.
    pub batch_jobs: Histogram,
    /// Delivery attempts by outcome: delivered, retried (failed, to be tried again), failed
    /// (failed for the last time: into the DLQ).
    pub delivery_attempts: Family<OutcomeLabel, Counter>,
    /// How late a message's first attempt started after it was due.
    pub delivery_lateness_seconds: Histogram,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            http_requests: Family::default(),
            command_seconds: Family::new_with_constructor(histogram_family),
            batch_jobs: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            delivery_attempts: Family::default(),
            delivery_lateness_seconds: Histogram::new(seconds_buckets()),
        }
    }
}

/// What the executor reports when asked, at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Records appended to the log since it began (its last sequence number).
    pub log_records: u64,
    pub log_bytes: u64,
    pub log_syncs: u64,
    /// Seconds since the newest snapshot was written (None: none yet).
    pub snapshot_age_s: Option<u64>,
    pub databases: Vec<DbScrape>,
    pub messages_pending: u64,
    pub messages_in_flight: u64,
    pub dlq_entries: u64,
    pub schedules: u64,
}

/// One database at scrape time.
#[derive(Debug, Clone, Default)]
pub struct DbScrape {
    pub name: String,
    pub keys: u64,
    /// Commands by name since the server started.
    pub commands: Vec<(String, u64)>,
}

/// The Prometheus text for `live` and `scrape`, with the fsync latency histogram.
pub fn encode(live: &Live, fsync: &Seconds, scrape: &Scrape) -> Result<String, String> {
    let mut r = Registry::with_prefix("tidepool");
    r.register(
        "http_requests",
        "HTTP requests answered, by route and status",
        live.http_requests.clone(),
    );
    r.register_with_unit(
        "command_duration",
        "Time to run a request's command in the executor, by command",
        Unit::Seconds,
        live.command_seconds.clone(),
    );
    let commands: Family<CommandDb, Counter> = Family::default();
    let keys: Family<DbLabel, Gauge> = Family::default();
    for db in &scrape.databases {
        keys.get_or_create(&DbLabel {
            database: db.name.clone(),
        })
        .set(db.keys as i64);
        for (command, n) in &db.commands {
            commands
                .get_or_create(&CommandDb {
                    command: command.clone(),
                    database: db.name.clone(),
                })
                .inc_by(*n);
        }
    }
    r.register(
        "commands",
        "Commands run since the server started, by command and database",
        commands,
    );
    r.register("keys", "Live keys, by database", keys);
    let counter = |v: u64| {
        let c: Counter = Counter::default();
        c.inc_by(v);
        c
    };
    let gauge = |v: u64| {
        let g: Gauge = Gauge::default();
        g.set(v as i64);
        g
    };
    r.register(
        "log_appends",
        "Records appended to the log since it began",
        counter(scrape.log_records),
    );
    r.register(
        "log_syncs",
        "Syncs of the log since the server started",
        counter(scrape.log_syncs),
    );
    r.register_with_unit(
        "log_size",
        "Bytes of the log on disk",
        Unit::Bytes,
        gauge(scrape.log_bytes),
    );
    r.register_with_unit(
        "log_fsync_duration",
        "Time one sync of the log took",
        Unit::Seconds,
        fsync.0.clone(),
    );
    r.register(
        "group_commit_batch_jobs",
        "Requests one log write (and sync) covered",
        live.batch_jobs.clone(),
    );
    if let Some(age) = scrape.snapshot_age_s {
        r.register_with_unit(
            "snapshot_age",
            "Seconds since the newest snapshot was written",
            Unit::Seconds,
            gauge(age),
        );
    }
    r.register(
        "delivery_messages_pending",
        "Messages waiting for an attempt (due or not yet)",
        gauge(scrape.messages_pending),
    );
    r.register(
        "delivery_messages_in_flight",
        "Delivery attempts running now",
        gauge(scrape.messages_in_flight),
    );
    r.register(
        "delivery_attempts",
        "Delivery attempts since the server started, by outcome",
        live.delivery_attempts.clone(),
    );
    r.register(
        "delivery_dlq_entries",
        "Messages in the dead-letter queue",
        gauge(scrape.dlq_entries),
    );
    r.register("delivery_schedules", "Schedules", gauge(scrape.schedules));
    r.register_with_unit(
        "delivery_lateness",
        "How late an attempt started after its message was due",
        Unit::Seconds,
        live.delivery_lateness_seconds.clone(),
    );
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).map_err(|e| e.to_string())?;
    Ok(out)
}
