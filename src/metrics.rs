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
/// The first latency bucket's upper bound; each next one doubles it.
const FIRST_BOUND_NS: u64 = 10_000;
/// Latency buckets below +Inf: 10 µs up to about 21 s.
const SECONDS_BUCKETS: usize = 22;

fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(FIRST_BOUND_NS as f64 / 1e9, 2.0, SECONDS_BUCKETS as u16)
}

/// A latency histogram kept by one thread (the executor) without locks or atomics, in the
/// buckets of [`Seconds`]: one observation is an index computed from the nanoseconds and two
/// adds, cheap enough for every command of a pipeline.
#[derive(Debug, Clone)]
pub struct LocalSeconds {
    counts: [u64; SECONDS_BUCKETS + 1],
    sum_ns: u64,
    count: u64,
}

impl Default for LocalSeconds {
    fn default() -> LocalSeconds {
        LocalSeconds {
            counts: [0; SECONDS_BUCKETS + 1],
            sum_ns: 0,
            count: 0,
        }
    }
}

impl LocalSeconds {
    pub fn observe(&mut self, d: std::time::Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The smallest i with ns <= 10 µs * 2^i.
        let q = ns.saturating_sub(1) / FIRST_BOUND_NS;
        let i = (64 - q.leading_zeros()) as usize;
        if let Some(c) = self.counts.get_mut(i.min(SECONDS_BUCKETS)) {
            *c += 1;
        }
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Each bucket's upper bound in seconds and its own (not cumulative) count.
    fn buckets(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let bound = if i == SECONDS_BUCKETS {
                    f64::MAX
                } else {
                    (FIRST_BOUND_NS << i) as f64 / 1e9
                };
                (bound, *c)
            })
            .collect()
    }
}

/// The per-command latency histograms, as one family.
#[derive(Debug)]
struct CommandSeconds(Vec<(String, LocalSeconds)>);

impl prometheus_client::collector::Collector for CommandSeconds {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "command_duration",
            "Time to run a request's command in the executor, by command",
            Some(&Unit::Seconds),
            prometheus_client::metrics::MetricType::Histogram,
        )?;
        for (command, h) in &self.0 {
            let label = CommandLabel {
                command: command.clone(),
            };
            family
                .encode_family(&label)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    h.sum_ns as f64 / 1e9,
                    h.count,
                    &h.buckets(),
                    None,
                )?;
        }
        Ok(())
    }
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

/// What is measured as it happens, shared by the HTTP side and the executor.
#[derive(Clone)]
pub struct Live {
    pub http_requests: Family<RouteStatus, Counter>,
    /// Requests answered by one log write (one sync with `always`): group commit at work.
    pub batch_jobs: Histogram,
    /// Delivery attempts by outcome: delivered, retried (failed, to be tried again), failed
    /// (failed for the last time: into the DLQ).
    pub delivery_attempts: Family<OutcomeLabel, Counter>,
    /// How late a message's first attempt started after it was due.
    pub delivery_lateness_seconds: Histogram,
    /// RESP connections open now, opened since start, and the commands they sent.
    pub resp_connections: Gauge,
    pub resp_connections_opened: Counter,
    pub resp_commands: Counter,
    /// RESP connections a follower moved to its leader (a transaction, a watch, a blocking
    /// command, a monitor), counted on the follower.
    pub resp_connections_moved: Counter,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            http_requests: Family::default(),
            batch_jobs: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            delivery_attempts: Family::default(),
            delivery_lateness_seconds: Histogram::new(seconds_buckets()),
            resp_connections: Gauge::default(),
            resp_connections_opened: Counter::default(),
            resp_commands: Counter::default(),
            resp_connections_moved: Counter::default(),
        }
    }
}

/// The routes `tidepool_http_requests_total` names.
pub const ROUTES: [&str; 11] = [
    "command",
    "pipeline",
    "multi-exec",
    "monitor",
    "subscribe",
    "qstash",
    "admin",
    "start",
    "health",
    "metrics",
    "other",
];

/// Indexes into [`ROUTES`].
pub mod route {
    pub const COMMAND: usize = 0;
    pub const PIPELINE: usize = 1;
    pub const MULTI_EXEC: usize = 2;
    pub const MONITOR: usize = 3;
    pub const SUBSCRIBE: usize = 4;
    pub const QSTASH: usize = 5;
    pub const ADMIN: usize = 6;
    pub const START: usize = 7;
    pub const HEALTH: usize = 8;
    pub const METRICS: usize = 9;
}

/// The statuses most requests get, whose counters are kept at hand.
const COMMON_STATUSES: [u16; 3] = [200, 400, 401];

impl Live {
    /// Counts a request of `route` (one of [`ROUTES`]) answered with `status`. The common
    /// pairs' counters are kept at hand, so the usual request costs one atomic add, not a
    /// lock and a hash.
    pub fn count_request(&self, at_hand: &RequestCounters, route: usize, status: u16) {
        let common = COMMON_STATUSES.iter().position(|s| *s == status);
        match (at_hand.0.get(route), common) {
            (Some(row), Some(i)) => {
                row[i].inc();
            }
            _ => {
                self.http_requests
                    .get_or_create(&RouteStatus {
                        route: ROUTES.get(route).copied().unwrap_or("other"),
                        status,
                    })
                    .inc();
            }
        }
    }

    /// The counters of the common route and status pairs.
    pub fn request_counters(&self) -> RequestCounters {
        RequestCounters(
            ROUTES
                .iter()
                .map(|route| {
                    COMMON_STATUSES.map(|status| {
                        self.http_requests
                            .get_or_create(&RouteStatus { route, status })
                            .clone()
                    })
                })
                .collect(),
        )
    }
}

/// Counters of `tidepool_http_requests_total` for each route and common status.
pub struct RequestCounters(Vec<[Counter; 3]>);

/// What the executor reports when asked, at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Records appended to the log since it began (its last sequence number).
    pub log_records: u64,
    pub log_bytes: u64,
    pub log_syncs: u64,
    /// Seconds since the newest snapshot was written (None: none yet).
    pub snapshot_age_s: Option<u64>,
    /// How long the newest snapshot took to write, in ms (None: none yet).
    pub snapshot_took_ms: Option<u64>,
    /// Snapshots written since the server started.
    pub snapshots: u64,
    pub databases: Vec<DbScrape>,
    pub messages_pending: u64,
    pub messages_in_flight: u64,
    pub dlq_entries: u64,
    pub schedules: u64,
    /// Each command's latency, by name.
    pub command_seconds: Vec<(String, LocalSeconds)>,
    /// A cluster node's view of its cluster (filled by the HTTP side, which holds the node).
    pub cluster: Option<ClusterFacts>,
}

/// A cluster node's state for `GET /metrics`.
#[derive(Debug, Clone, Default)]
pub struct ClusterFacts {
    pub node_id: u64,
    /// 1 while this node leads (and has applied its whole log; whether its lease holds is
    /// `/readyz`'s `writable`).
    pub leading: bool,
    pub term: u64,
    /// The leader's id (0: none known).
    pub leader: u64,
    pub last_log_index: u64,
    pub last_applied_index: u64,
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
    r.register(
        "resp_connections",
        "RESP (Redis protocol) connections open now",
        live.resp_connections.clone(),
    );
    r.register(
        "resp_connections_opened",
        "RESP connections opened since the server started",
        live.resp_connections_opened.clone(),
    );
    r.register(
        "resp_commands",
        "Commands received over RESP since the server started",
        live.resp_commands.clone(),
    );
    r.register(
        "resp_connections_moved",
        "RESP connections this follower moved to its leader since the server started",
        live.resp_connections_moved.clone(),
    );
    r.register_collector(Box::new(CommandSeconds(scrape.command_seconds.clone())));
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
    if let Some(c) = &scrape.cluster {
        r.register(
            "cluster_node_id",
            "This node's id in its cluster",
            gauge(c.node_id),
        );
        r.register(
            "cluster_leading",
            "1 while this node leads its cluster (whether its lease holds: /readyz's writable)",
            gauge(u64::from(c.leading)),
        );
        r.register(
            "cluster_term",
            "The cluster's Raft term as this node knows it",
            gauge(c.term),
        );
        r.register(
            "cluster_leader_id",
            "The leader's node id (0: none known)",
            gauge(c.leader),
        );
        r.register(
            "cluster_last_log_index",
            "The last entry of this node's cluster log",
            gauge(c.last_log_index),
        );
        r.register(
            "cluster_last_applied_index",
            "The last entry this node applied to its state",
            gauge(c.last_applied_index),
        );
    }
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
    if let Some(ms) = scrape.snapshot_took_ms {
        let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        g.set(ms as f64 / 1000.0);
        r.register_with_unit(
            "snapshot_duration",
            "How long the newest snapshot took to write",
            Unit::Seconds,
            g,
        );
    }
    r.register(
        "snapshots",
        "Snapshots written since the server started",
        counter(scrape.snapshots),
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn local_histogram_buckets_match_the_bounds() {
        let mut h = LocalSeconds::default();
        for ns in [0, 10_000, 10_001, 20_000, 20_001, 40_000] {
            h.observe(Duration::from_nanos(ns));
        }
        h.observe(Duration::from_secs(1_000_000));
        let b = h.buckets();
        assert_eq!(b[0], (0.000_01, 2));
        assert_eq!(b[1], (0.000_02, 2));
        assert_eq!(b[2], (0.000_04, 2));
        assert_eq!(b[SECONDS_BUCKETS], (f64::MAX, 1));
        assert_eq!(h.count(), 7);
    }
}
