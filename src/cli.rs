//! The `tidepool` command line: every flag declared once, with its environment variable, its
//! default and one line of help (clap reads all three); `--help` per subcommand; an unknown
//! flag is named, with the nearest known one suggested. `serve`'s values are then checked and
//! turned into a [`Config`] here, with errors that name the flag.
//!
//! The README's flag table is checked against [`command`] by a test, so the two cannot drift.

use crate::config::{self, Config, FsyncMode};
use clap::builder::FalseyValueParser;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "tidepool",
    about = "A durable Redis-over-HTTP server (the Upstash Redis REST dialect) and a message-delivery \
             service (the QStash v2 dialect), on one write-ahead log.",
    disable_version_flag = true
)]
pub struct Cli {
    /// Print the version, and the log and snapshot formats it writes.
    #[arg(short = 'V', long = "version", global = false)]
    pub version: bool,
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run the server.
    // A flag given twice takes its last value (the harness's default, then a test's own).
    #[command(args_override_self = true)]
    Serve(Box<Serve>),
    /// Create, list, get, delete, reset or claim a database of a running server (the admin API).
    Db(Db),
    /// Start a cluster of running servers, or look at one (replication: docs/replication.md).
    Cluster(Cluster),
}

/// `tidepool serve`'s flags. Defaults that are not fixed values (generated credentials, the
/// address with `--dev`) are named in the help line.
#[derive(Args, Debug)]
pub struct Serve {
    /// The address to listen on [default: 127.0.0.1:8079; 127.0.0.1:8080 with --dev]
    #[arg(long, env = "TIDEPOOL_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Also listen for the Redis protocol (RESP) on this address, for redis-cli and every Redis client [default: off]
    #[arg(long, env = "TIDEPOOL_RESP_LISTEN", value_name = "ADDR")]
    pub resp_listen: Option<String>,
    /// The RESP listener speaks TLS with this certificate chain (PEM) [default: plain TCP]
    #[arg(long, env = "TIDEPOOL_RESP_TLS_CERT", value_name = "PEM")]
    pub resp_tls_cert: Option<String>,
    /// The private key (PEM) of --resp-tls-cert
    #[arg(long, env = "TIDEPOOL_RESP_TLS_KEY", value_name = "PEM")]
    pub resp_tls_key: Option<String>,
    /// This node's id in a cluster (replication: docs/replication.md) [default: a single server]
    #[arg(long, env = "TIDEPOOL_NODE_ID", value_name = "N")]
    pub node_id: Option<u64>,
    /// Where this node listens for its peers' Raft messages (with --node-id)
    #[arg(long, env = "TIDEPOOL_CLUSTER_LISTEN", value_name = "ADDR")]
    pub cluster_listen: Option<String>,
    /// The other nodes: ID=HOST:PORT of their --cluster-listen, comma-separated (with --node-id)
    #[arg(long, env = "TIDEPOOL_PEERS", value_name = "ID=ADDR,...")]
    pub peers: Option<String>,
    /// The cluster listener speaks TLS with this certificate chain (PEM), and so do the node's requests to its peers [default: plain HTTP]
    #[arg(long, env = "TIDEPOOL_CLUSTER_TLS_CERT", value_name = "PEM")]
    pub cluster_tls_cert: Option<String>,
    /// The private key (PEM) of --cluster-tls-cert
    #[arg(long, env = "TIDEPOOL_CLUSTER_TLS_KEY", value_name = "PEM")]
    pub cluster_tls_key: Option<String>,
    /// The certificate authority (PEM) the peers' certificates must chain to, and the only one trusted [default: --cluster-tls-cert itself]
    #[arg(long, env = "TIDEPOOL_CLUSTER_TLS_CA", value_name = "PEM")]
    pub cluster_tls_ca: Option<String>,
    /// The secret every node of the cluster shares; it signs each message between nodes and never travels (with --node-id)
    #[arg(
        long,
        env = "TIDEPOOL_CLUSTER_SECRET",
        value_name = "S",
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,
    /// The data directory: the log, snapshots and credentials.json
    #[arg(long, env = "TIDEPOOL_DATA", value_name = "DIR", default_value = config::DATA_DIR_DEFAULT)]
    pub data: String,
    /// The Standard token [default: generated on first start, kept in DIR/credentials.json]
    #[arg(long, env = "TIDEPOOL_TOKEN", value_name = "T")]
    pub token: Option<String>,
    /// The Read Only token [default: generated on first start, kept in DIR/credentials.json]
    #[arg(long, env = "TIDEPOOL_READ_ONLY_TOKEN", value_name = "R")]
    pub read_only_token: Option<String>,
    /// When a write is acknowledged: always (after fdatasync), everysec or never
    #[arg(
        long,
        env = "TIDEPOOL_FSYNC",
        value_name = "MODE",
        default_value = "always"
    )]
    pub fsync: String,
    /// The delivery API's token [default: generated, as @upstash/workflow decodes it]
    #[arg(long, env = "TIDEPOOL_QSTASH_TOKEN", value_name = "Q")]
    pub qstash_token: Option<String>,
    /// A delivery-API token for the GET routes only [default: generated qro_...]
    #[arg(long, env = "TIDEPOOL_QSTASH_READ_ONLY_TOKEN", value_name = "QR")]
    pub qstash_read_only_token: Option<String>,
    /// The current signing key of deliveries [default: generated sig_...]
    #[arg(long, env = "TIDEPOOL_QSTASH_CURRENT_SIGNING_KEY", value_name = "K")]
    pub qstash_current_signing_key: Option<String>,
    /// The next signing key of deliveries [default: generated sig_...]
    #[arg(long, env = "TIDEPOOL_QSTASH_NEXT_SIGNING_KEY", value_name = "N")]
    pub qstash_next_signing_key: Option<String>,
    /// US-EAST-1 or EU-CENTRAL-1: every delivery carries Upstash-Region [default: none]
    #[arg(long, env = "TIDEPOOL_REGION", value_name = "R")]
    pub region: Option<String>,
    /// The largest publish body, and where a destination's response is cut (10 MiB)
    #[arg(long, env = "TIDEPOOL_MAX_MESSAGE_BYTES", value_name = "B", default_value_t = config::DELIVERY_MESSAGE_BYTES_MAX_DEFAULT as u64)]
    pub max_message_bytes: u64,
    /// DLQ entries kept; a failure past it pushes the oldest out
    #[arg(long, env = "TIDEPOOL_DLQ_MAX", value_name = "N", default_value_t = config::DLQ_ENTRIES_MAX_DEFAULT as u64)]
    pub dlq_max: u64,
    /// Open workflow waits; past it a wait answers 429
    #[arg(long, env = "TIDEPOOL_WAITERS_MAX", value_name = "N", default_value_t = config::WAITERS_MAX_DEFAULT as u64)]
    pub waiters_max: u64,
    /// Lookback notifications kept for runs that do not wait yet; past it 429
    #[arg(long, env = "TIDEPOOL_NOTIFICATIONS_MAX", value_name = "N", default_value_t = config::NOTIFICATIONS_MAX_DEFAULT as u64)]
    pub notifications_max: u64,
    /// Deduplication ids inside their 10-minute window; past it a publish answers 429
    #[arg(long, env = "TIDEPOOL_DEDUP_MAX", value_name = "N", default_value_t = config::DEDUP_ENTRIES_MAX_DEFAULT as u64)]
    pub dedup_max: u64,
    /// Open DIR read-only as it was at a record (sequence number) or a time (RFC 3339, Unix ms)
    #[arg(long, env = "TIDEPOOL_AT", value_name = "SEQ|TIME")]
    pub at: Option<String>,
    /// Log kept behind the newest snapshot: 0, a duration (7d) or a size (10GiB)
    #[arg(long, env = "TIDEPOOL_LOG_RETENTION", value_name = "R", default_value = config::LOG_RETENTION_DEFAULT)]
    pub log_retention: String,
    /// Snapshot when the log since the last one reaches P % of its size; 0: only on SAVE
    #[arg(long, env = "TIDEPOOL_AUTO_SNAPSHOT_PERCENTAGE", value_name = "P", default_value_t = config::AUTO_SNAPSHOT_PERCENTAGE_DEFAULT)]
    pub auto_snapshot_percentage: u64,
    /// But not before the log since the last snapshot has B bytes (64 MiB)
    #[arg(long, env = "TIDEPOOL_AUTO_SNAPSHOT_MIN_BYTES", value_name = "B", default_value_t = config::AUTO_SNAPSHOT_MIN_BYTES_DEFAULT)]
    pub auto_snapshot_min_bytes: u64,
    /// Origins (comma-separated, or *) whose web pages may call the REST routes [default: none]
    #[arg(long, env = "TIDEPOOL_CORS_ORIGIN", value_name = "O")]
    pub cors_origin: Option<String>,
    /// The largest REST request body, at most 64 MiB; past it 413
    #[arg(long, env = "TIDEPOOL_MAX_REQUEST_BYTES", value_name = "B", default_value_t = config::REQUEST_BYTES_MAX as u64)]
    pub max_request_bytes: u64,
    /// The longest key a write may store at (the hosted service's: 32 KB) [default: no limit]
    #[arg(long, env = "TIDEPOOL_MAX_KEY_BYTES", value_name = "B")]
    pub max_key_bytes: Option<String>,
    /// The most one write may store (the hosted service's: 100 MB) [default: no limit]
    #[arg(long, env = "TIDEPOOL_MAX_VALUE_BYTES", value_name = "B")]
    pub max_value_bytes: Option<String>,
    /// Redis's maxmemory with noeviction: 4GiB, 500MB or bytes [default: no limit]
    #[arg(long, env = "TIDEPOOL_MAX_MEMORY", value_name = "B")]
    pub max_memory: Option<String>,
    /// How long one script or function call may run (scratch databases: 50); at most 60000
    #[arg(long, env = "TIDEPOOL_SCRIPT_TIME_LIMIT_MS", value_name = "MS", default_value_t = config::SCRIPT_TIME_LIMIT_MS)]
    pub script_time_limit_ms: u64,
    /// Commands one database may run per UTC day [default: no limit]
    #[arg(long, env = "TIDEPOOL_MAX_REQUESTS_PER_DAY", value_name = "N")]
    pub max_requests_per_day: Option<String>,
    /// The admin API's and /metrics' token [default: generated, kept in DIR/credentials.json]
    #[arg(long, env = "TIDEPOOL_ADMIN_TOKEN", value_name = "A")]
    pub admin_token: Option<String>,
    /// Where POST creates a scratch database, or off [default: /start on loopback, else off]
    #[arg(long, env = "TIDEPOOL_START_PATH", value_name = "PATH")]
    pub start_path: Option<String>,
    /// The web console at /console: on or off [default: on on loopback, else off]
    #[arg(long, env = "TIDEPOOL_CONSOLE", value_name = "on|off")]
    pub console: Option<String>,
    /// How long a scratch database lives unless claimed
    #[arg(long, env = "TIDEPOOL_SCRATCH_TTL", value_name = "D", default_value = config::SCRATCH_TTL_DEFAULT)]
    pub scratch_ttl: String,
    /// Scratch databases one client address may create per hour
    #[arg(long, env = "TIDEPOOL_START_PER_HOUR", value_name = "N", default_value_t = config::START_PER_HOUR_DEFAULT)]
    pub start_per_hour: u32,
    /// GET /metrics answers clients on loopback without the admin token
    #[arg(long, env = "TIDEPOOL_METRICS_OPEN", value_parser = FalseyValueParser::new(), num_args = 0, default_missing_value = "1")]
    pub metrics_open: bool,
    /// One line per request on stderr, RUST_LOG syntax (info, tidepool=debug) [default: off]
    #[arg(long, env = "TIDEPOOL_LOG_LEVEL", value_name = "L")]
    pub log_level: Option<String>,
    /// Loopback only, with the dev tokens and the QStash dev server's four users
    #[arg(long, env = "TIDEPOOL_DEV", value_parser = FalseyValueParser::new(), num_args = 0, default_missing_value = "1")]
    pub dev: bool,
}

/// `tidepool db`'s flags.
#[derive(Args, Debug)]
pub struct Db {
    #[command(subcommand)]
    pub action: DbAction,
    #[command(flatten)]
    pub server: AdminTarget,
}

/// The running server an admin command talks to, and its admin token.
#[derive(Args, Debug)]
pub struct AdminTarget {
    /// The server's URL
    #[arg(
        long,
        global = true,
        env = "TIDEPOOL_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8079"
    )]
    pub url: String,
    /// The admin token [default: the one in DIR/credentials.json]
    #[arg(long, global = true, env = "TIDEPOOL_ADMIN_TOKEN", value_name = "A")]
    pub admin_token: Option<String>,
    /// The server's data directory, to read the admin token from
    #[arg(long, global = true, env = "TIDEPOOL_DATA", value_name = "DIR", default_value = config::DATA_DIR_DEFAULT)]
    pub data: String,
}

/// `tidepool cluster`'s flags.
#[derive(Args, Debug)]
pub struct Cluster {
    #[command(subcommand)]
    pub action: ClusterAction,
    #[command(flatten)]
    pub server: AdminTarget,
}

#[derive(Subcommand, Debug)]
pub enum ClusterAction {
    /// Make the node at --url and its --peers the first members of a new cluster
    Init,
    /// The node's view of its cluster: role, term, leader, members, log
    Status,
    /// Add a node (started with its --node-id and --cluster-listen): it catches up, then votes
    AddNode {
        id: u64,
        /// Its --cluster-listen address
        address: String,
    },
    /// Take a node out of the cluster's voters
    RemoveNode { id: u64 },
    /// Make a single server's data directory (--data; the server stopped) the first node of
    /// a new cluster, of this node alone, holding the server's state; then start it with
    /// these --node-id and --cluster-listen, and add the others with add-node
    Convert {
        /// This node's id
        #[arg(long, value_name = "N")]
        node_id: u64,
        /// The address it will listen on for its peers (its serve --cluster-listen)
        #[arg(long, value_name = "ADDR")]
        cluster_listen: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum DbAction {
    /// Create a database (a name is generated when none is given)
    Create {
        name: Option<String>,
        /// Its script time limit [default: the server's --script-time-limit-ms]
        #[arg(long, value_name = "MS")]
        script_time_limit_ms: Option<u64>,
        /// Its data quota [default: none]
        #[arg(long, value_name = "B")]
        max_data_bytes: Option<u64>,
    },
    /// List the databases
    List,
    /// Show one database, with its tokens
    Get { name: String },
    /// Delete a database and its data
    Delete { name: String },
    /// Replace a database's tokens (every stream opened with the old ones ends)
    Reset { name: String },
    /// Keep a scratch database (it no longer expires)
    Claim { name: String },
}

/// The command line's definition. An environment variable set to the empty string counts as
/// unset (as a shell's `TIDEPOOL_FSYNC= tidepool serve` means), not as an empty value.
pub fn command() -> clap::Command {
    ignore_empty_env(Cli::command())
}

fn ignore_empty_env(mut cmd: clap::Command) -> clap::Command {
    let empty: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| {
            a.get_env()
                .is_some_and(|e| std::env::var_os(e).is_some_and(|v| v.is_empty()))
        })
        .map(|a| a.get_id().clone())
        .collect();
    for id in empty {
        cmd = cmd.mut_arg(id, |a| a.env(None));
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, ignore_empty_env);
    }
    cmd
}

/// The version line: the crate's version and the formats it writes.
pub fn version_line() -> String {
    format!(
        "tidepool {} (log format {}, snapshot format {})",
        env!("CARGO_PKG_VERSION"),
        crate::wal::format::FORMAT_VERSION,
        crate::snapshot::format::SNAPSHOT_VERSION
    )
}

/// Parses the process's arguments; clap prints help and argument errors itself and exits.
pub fn parse() -> Cli {
    let matches = command().get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    }
}

impl Serve {
    /// The checked configuration, or an error naming the flag.
    pub fn config(self) -> Result<Config, String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let Serve {
            listen,
            resp_listen,
            resp_tls_cert,
            resp_tls_key,
            node_id,
            cluster_listen,
            peers,
            cluster_secret,
            cluster_tls_cert,
            cluster_tls_key,
            cluster_tls_ca,
            data,
            mut token,
            read_only_token: mut ro,
            fsync,
            qstash_token: qtoken,
            qstash_read_only_token: qro,
            qstash_current_signing_key: qcurrent,
            qstash_next_signing_key: qnext,
            region,
            max_message_bytes,
            dlq_max,
            waiters_max,
            notifications_max,
            dedup_max,
            at,
            log_retention,
            auto_snapshot_percentage,
            auto_snapshot_min_bytes,
            cors_origin,
            max_request_bytes,
            max_key_bytes,
            max_value_bytes,
            max_memory,
            script_time_limit_ms,
            max_requests_per_day,
            admin_token,
            start_path,
            console,
            scratch_ttl,
            start_per_hour,
            metrics_open,
            log_level,
            dev,
        } = self;
        let log_level = log_level.or_else(|| env("RUST_LOG"));
        let listen_default = if dev {
            config::DEV_LISTEN
        } else {
            config::LISTEN_DEFAULT
        };
        let listen_text = listen.unwrap_or_else(|| listen_default.into());
        let listen: std::net::SocketAddr = listen_text.parse().map_err(|_| {
            format!("--listen '{listen_text}' is not an address such as 127.0.0.1:8079")
        })?;
        let resp_listen: Option<std::net::SocketAddr> = match resp_listen {
            None => None,
            Some(t) => Some(t.parse().map_err(|_| {
                format!("--resp-listen '{t}' is not an address such as 127.0.0.1:6379")
            })?),
        };
        let resp_tls = match (resp_tls_cert, resp_tls_key) {
            (None, None) => None,
            (Some(c), Some(k)) if resp_listen.is_some() => {
                Some((PathBuf::from(c), PathBuf::from(k)))
            }
            (Some(_), Some(_)) => {
                return Err("--resp-tls-cert and --resp-tls-key need --resp-listen".into())
            }
            _ => return Err("--resp-tls-cert and --resp-tls-key go together".into()),
        };
        let cluster = config::cluster(node_id, cluster_listen, peers, cluster_secret)?;
        if dev && resp_listen.is_some_and(|a| !a.ip().is_loopback()) {
            return Err(
                "--dev uses public, well-known credentials: --resp-listen must be a loopback address"
                    .into(),
            );
        }
        if dev && !listen.ip().is_loopback() {
            return Err(format!(
                "--dev uses public, well-known credentials: it listens on loopback only, not on {listen}"
            ));
        }
        if dev
            && (token.is_some()
                || ro.is_some()
                || qtoken.is_some()
                || qro.is_some()
                || qcurrent.is_some()
                || qnext.is_some())
        {
            return Err("--dev sets the credentials itself: leave out --token, --read-only-token and the --qstash-* flags".into());
        }
        if dev {
            token = Some(config::DEV_REDIS_TOKEN.into());
            ro = Some(config::DEV_REDIS_READ_ONLY_TOKEN.into());
        }
        let fsync = FsyncMode::parse(&fsync)
            .ok_or_else(|| format!("--fsync '{fsync}' must be always, everysec or never"))?;
        // Durations the tests shorten, from the environment only.
        let env_ms = |name: &str, default: u64, zero_ok: bool| -> Result<u64, String> {
            match env(name) {
                None => Ok(default),
                Some(u) => u
                    .parse::<u64>()
                    .ok()
                    .filter(|n| zero_ok || *n > 0)
                    .ok_or_else(|| {
                        let kind = if zero_ok { "a" } else { "a positive" };
                        format!("{name} '{u}' must be {kind} number of milliseconds")
                    }),
            }
        };
        let usage_log_interval_ms = env_ms(
            "TIDEPOOL_USAGE_LOG_INTERVAL_MS",
            config::USAGE_LOG_INTERVAL_MS,
            false,
        )?;
        let resp_idle_timeout_ms = env_ms(
            "TIDEPOOL_RESP_IDLE_TIMEOUT_MS",
            config::RESP_IDLE_TIMEOUT_MS,
            false,
        )?;
        // How often a cluster node snapshots (entries; the tests shorten it).
        let cluster_snapshot_every = env_ms(
            "TIDEPOOL_CLUSTER_SNAPSHOT_EVERY",
            config::CLUSTER_SNAPSHOT_EVERY_ENTRIES,
            false,
        )?;
        let console_rebuild_ms = env_ms(
            "TIDEPOOL_CONSOLE_REBUILD_MS",
            config::CONSOLE_REBUILD_MS_MAX,
            true,
        )?;
        let retry_backoff_unit_ms = env_ms("TIDEPOOL_RETRY_BACKOFF_UNIT_MS", 1000, true)?;
        let positive = |flag: &str, n: u64| -> Result<usize, String> {
            usize::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} '{n}' must be a positive number"))
        };
        let message_bytes_max = positive("--max-message-bytes", max_message_bytes)?;
        let delivery_limits = config::DeliveryLimits {
            dlq_entries_max: positive("--dlq-max", dlq_max)?,
            waiters_max: positive("--waiters-max", waiters_max)?,
            notifications_max: positive("--notifications-max", notifications_max)?,
            dedup_entries_max: positive("--dedup-max", dedup_max)?,
        };
        let at = at
            .map(|p| crate::point::Point::parse(&p).map_err(|e| format!("--at {e}")))
            .transpose()?;
        let snapshots = config::SnapshotPolicy {
            auto_percentage: auto_snapshot_percentage,
            auto_min_bytes: auto_snapshot_min_bytes,
            retention: config::Retention::parse(&log_retention)
                .map_err(|e| format!("--log-retention {e}"))?,
        };
        let cors_origins: Vec<String> = cors_origin
            .iter()
            .flat_map(|c| c.split(','))
            .map(|o| o.trim().trim_end_matches('/').to_string())
            .filter(|o| !o.is_empty())
            .collect();
        if let Some(bad) = cors_origins
            .iter()
            .find(|o| *o != "*" && !(o.starts_with("http://") || o.starts_with("https://")))
        {
            return Err(format!(
                "--cors-origin '{bad}' must be * or an origin such as https://app.example.com"
            ));
        }
        let request_bytes_max = usize::try_from(max_request_bytes)
            .ok()
            .filter(|n| (1..=config::REQUEST_BYTES_MAX).contains(n))
            .ok_or_else(|| {
                format!(
                    "--max-request-bytes '{max_request_bytes}' must be a number from 1 to {}",
                    config::REQUEST_BYTES_MAX
                )
            })?;
        let optional = |flag: &str, v: Option<String>| -> Result<Option<u64>, String> {
            v.map(|m| {
                m.parse()
                    .ok()
                    .filter(|n: &u64| *n > 0)
                    .ok_or_else(|| format!("{flag} '{m}' must be a positive number"))
            })
            .transpose()
        };
        let key_bytes_max = optional("--max-key-bytes", max_key_bytes)?.map(|n| n as usize);
        let value_bytes_max = optional("--max-value-bytes", max_value_bytes)?.map(|n| n as usize);
        let requests_per_day = optional("--max-requests-per-day", max_requests_per_day)?;
        let memory_bytes_max = match max_memory {
            None => None,
            Some(m) => match m.parse::<u64>() {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => match config::Retention::parse(&m) {
                    Ok(config::Retention::Bytes(n)) if n > 0 => Some(n),
                    _ => {
                        return Err(format!(
                            "--max-memory '{m}' must be a size such as 4GiB or 500MB, or bytes"
                        ))
                    }
                },
            },
        };
        if script_time_limit_ms == 0 || script_time_limit_ms > config::SCRIPT_TIME_LIMIT_MS_MAX {
            return Err(format!(
                "--script-time-limit-ms '{script_time_limit_ms}' must be a positive number, at most {}",
                config::SCRIPT_TIME_LIMIT_MS_MAX
            ));
        }
        let start_path = match start_path.as_deref() {
            // Open by default only where no one else can reach it: on loopback (and so with
            // --dev). On any other address anyone who reaches the server could create
            // databases; --start-path opens it there on purpose.
            None if listen.ip().is_loopback() => Some(config::START_PATH_DEFAULT.to_string()),
            None => None,
            Some("off") => None,
            Some(p)
                if p.starts_with('/')
                    && p.len() > 1
                    && !p.starts_with("/v2")
                    && !p.starts_with(config::ADMIN_PREFIX) =>
            {
                Some(p.trim_end_matches('/').to_string())
            }
            Some(p) => {
                return Err(format!(
                    "--start-path '{p}' must be off or a path such as /start (not under /v2 or {})",
                    config::ADMIN_PREFIX
                ))
            }
        };
        let console = match console.as_deref() {
            // As /start: on by default only where no one else can reach it.
            None => listen.ip().is_loopback(),
            Some("on") => true,
            Some("off") => false,
            Some(c) => return Err(format!("--console '{c}' must be on or off")),
        };
        let scratch_ttl_ms = match config::Retention::parse(&scratch_ttl) {
            Ok(config::Retention::Millis(ms)) if ms > 0 => ms,
            _ => {
                return Err(format!(
                    "--scratch-ttl '{scratch_ttl}' must be a duration such as 72h or 30m"
                ))
            }
        };
        if let Some(level) = &log_level {
            tracing_subscriber::EnvFilter::try_new(level).map_err(|e| {
                format!("--log-level '{level}' is not a level such as info or tidepool=debug: {e}")
            })?;
        }
        if admin_token.as_deref().is_some_and(str::is_empty) {
            return Err("--admin-token must not be empty".into());
        }
        Ok(Config {
            usage_log_interval_ms,
            resp_idle_timeout_ms,
            console_rebuild_ms,
            metrics_open,
            dev,
            log_level,
            value_bytes_max,
            requests_per_day,
            memory_bytes_max,
            script_time_limit_ms,
            admin_token,
            start_path,
            console,
            scratch_ttl_ms,
            start_per_hour,
            key_bytes_max,
            request_bytes_max,
            cors_origins,
            snapshots,
            at,
            delivery_limits,
            message_bytes_max,
            region: match region {
                None => None,
                Some(r) => Some(config::region(&r)?),
            },
            qstash_token: qtoken,
            qstash_read_only_token: qro,
            qstash_current_signing_key: qcurrent,
            qstash_next_signing_key: qnext,
            retry_backoff_unit_ms,
            listen,
            resp_listen,
            resp_tls,
            cluster: match cluster {
                None if cluster_tls_cert.is_some() || cluster_tls_key.is_some() => {
                    return Err("--cluster-tls-cert and --cluster-tls-key need --node-id".into())
                }
                None => None,
                Some(c) => Some(config::ClusterConfig {
                    snapshot_every: cluster_snapshot_every,
                    tls: match (cluster_tls_cert, cluster_tls_key) {
                        (None, None) => None,
                        (Some(cert), Some(key)) => {
                            let ca = cluster_tls_ca.unwrap_or_else(|| cert.clone());
                            Some((PathBuf::from(cert), PathBuf::from(key), PathBuf::from(ca)))
                        }
                        _ => {
                            return Err(
                                "--cluster-tls-cert and --cluster-tls-key go together".into()
                            )
                        }
                    },
                    ..c
                }),
            },
            data_dir: PathBuf::from(data),
            token,
            read_only_token: ro,
            fsync,
            http_threads: match env("TIDEPOOL_HTTP_THREADS") {
                // One core is left to the flusher, the OS and (in benchmarks) the load
                // generator: on 2 cores one HTTP thread measured faster than two.
                None => std::thread::available_parallelism()
                    .map(|n| n.get().saturating_sub(1).max(1))
                    .unwrap_or(1),
                Some(t) => t.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("TIDEPOOL_HTTP_THREADS '{t}' must be a positive number")
                })?,
            },
        })
    }
}

/// The flag table of `tidepool serve`, as the README shows it (between its `flags` markers):
/// one row a flag, with its environment variable, its default and its help line, all read from
/// the parser's own declarations.
pub fn flag_table() -> String {
    let cmd = command();
    let mut out =
        String::from("| flag | environment | default | what it sets |\n|---|---|---|---|\n");
    let Some(serve) = cmd.find_subcommand("serve") else {
        return out;
    };
    for a in serve.get_arguments() {
        let Some(long) = a.get_long() else {
            continue;
        };
        if long == "help" {
            continue;
        }
        let value = a
            .get_value_names()
            .and_then(|v| v.first())
            .filter(|_| a.get_num_args().is_none_or(|n| n.max_values() > 0))
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        let (help, inline_default) = match help.split_once(" [default: ") {
            Some((h, d)) => (h.to_string(), Some(d.trim_end_matches(']').to_string())),
            None => (help, None),
        };
        let default = match (a.get_default_values().first(), inline_default) {
            (Some(d), _) => format!("`{}`", d.to_string_lossy()),
            (None, Some(d)) => d,
            (None, None) => "off".into(),
        };
        out.push_str(&format!(
            "| `--{long}{}` | {env} | {default} | {} |\n",
            value.replace('|', "\\|"),
            help.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    /// Prints the table, for pasting into the README when a flag changes:
    /// `cargo test --lib cli::tests::print_flag_table -- --nocapture`.
    #[test]
    fn print_flag_table() {
        let t = super::flag_table();
        println!("{t}");
        assert!(t.contains("| `--listen ADDR` | `TIDEPOOL_LISTEN` |"), "{t}");
        assert!(t.contains("| `--dev` | `TIDEPOOL_DEV` | off |"), "{t}");
    }
}
