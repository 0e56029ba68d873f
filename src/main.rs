//! `tidepool serve`: command line -> config -> server.

use std::path::PathBuf;
use tidepool::config::{self, Config, FsyncMode};

const USAGE: &str = "usage: tidepool serve [--listen ADDR] [--data DIR] [--token T] [--read-only-token R] [--fsync always|everysec|never]
                                            [--qstash-token Q] [--qstash-read-only-token QR]
                                            [--qstash-current-signing-key K] [--qstash-next-signing-key N]
                      [--max-message-bytes B] [--dlq-max N] [--waiters-max N] [--notifications-max N]
                      [--dedup-max N] [--at SEQ|TIME] [--log-retention 0|DURATION|SIZE]
                      [--auto-snapshot-percentage P] [--auto-snapshot-min-bytes B] [--cors-origin O]
                      [--max-request-bytes B] [--max-key-bytes B] [--max-value-bytes B]
                      [--max-requests-per-day N] [--script-time-limit-ms MS] [--max-memory B]
                      [--admin-token A] [--start-path PATH|off]
                      [--scratch-ttl DURATION] [--start-per-hour N] [--metrics-open]
                      [--region US-EAST-1|EU-CENTRAL-1] [--log-level LEVEL] [--dev]
       tidepool db create [NAME] | list | get NAME | delete NAME | reset NAME | claim NAME
                      [--url URL] [--admin-token A] [--data DIR]

Every flag can also come from the environment: TIDEPOOL_LISTEN, TIDEPOOL_DATA, TIDEPOOL_TOKEN,
TIDEPOOL_READ_ONLY_TOKEN, TIDEPOOL_FSYNC, TIDEPOOL_QSTASH_TOKEN, TIDEPOOL_QSTASH_READ_ONLY_TOKEN
(a delivery-API token for GET routes only; generated and printed like the others),
TIDEPOOL_QSTASH_CURRENT_SIGNING_KEY, TIDEPOOL_QSTASH_NEXT_SIGNING_KEY,
TIDEPOOL_MAX_MESSAGE_BYTES (default 10 MiB), TIDEPOOL_DLQ_MAX (DLQ entries kept, oldest
dropped first; default 100000), TIDEPOOL_WAITERS_MAX (open workflow waits; 100000),
TIDEPOOL_NOTIFICATIONS_MAX (lookback notifications; 100000), TIDEPOOL_DEDUP_MAX
(deduplication ids within their window; 1000000), TIDEPOOL_AT (open DIR as it was at a record's
sequence number or a time, RFC 3339 or Unix milliseconds, read-only: writes are refused and
nothing is written into DIR), TIDEPOOL_LOG_RETENTION (log history kept behind the newest
snapshot: 0, a duration such as 7d or a size such as 10GiB; default 1d),
TIDEPOOL_AUTO_SNAPSHOT_PERCENTAGE (take a snapshot when the log since the last one reaches this
percentage of its size; default 100, 0 = never automatically), TIDEPOOL_AUTO_SNAPSHOT_MIN_BYTES
(but not before the log since the last one has this many bytes; default 64 MiB),
TIDEPOOL_CORS_ORIGIN (origins, comma-separated, or *, that browsers may call the REST routes
from; default none), TIDEPOOL_MAX_REQUEST_BYTES (the largest REST request body; default and
most 64 MiB; the hosted service's is 10 MB), TIDEPOOL_MAX_KEY_BYTES (the longest key a command
may name; default no limit; the hosted service's is 32 KB), TIDEPOOL_MAX_VALUE_BYTES (the most
one write may store: its arguments besides the keys, or the length a string grows to; default no
limit; the hosted service's is 100 MB), TIDEPOOL_MAX_REQUESTS_PER_DAY (commands one database may
run per UTC day; default no limit), TIDEPOOL_MAX_MEMORY (Redis's maxmemory with noeviction: past this much heap, such as 4GiB,
writes that may grow memory answer OOM; default no limit), TIDEPOOL_SCRIPT_TIME_LIMIT_MS (how long one script or
function call of the default database, and of a named database created without a limit of its
own, may hold the server; default 5000, Redis's; scratch databases: 50), TIDEPOOL_ADMIN_TOKEN (the admin API's token, for
/_admin/databases and `tidepool db`), TIDEPOOL_START_PATH (where POST creates a scratch
database; default /start on a loopback address, off on any other unless given; off switches
it off), TIDEPOOL_SCRATCH_TTL (how long a scratch
database lives unless claimed; default 72h), TIDEPOOL_START_PER_HOUR (scratch databases one
client address may create per hour; default 10), TIDEPOOL_METRICS_OPEN=1 (GET /metrics answers
clients on loopback without the admin token), TIDEPOOL_LOG_LEVEL or RUST_LOG (one line per
request at info, e.g. info or tidepool=debug; default off), TIDEPOOL_DEV=1 (--dev: listen on
127.0.0.1:8080 with the QStash dev server's four users and the fixed Redis token `dev-token`;
refused on any address but loopback).
Defaults: 127.0.0.1:8079,
./tidepool-data, tokens and keys generated on first start and kept in DIR/credentials.json,
fsync always.";

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("tidepool: {e}");
            std::process::exit(2);
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => tidepool::server::run(parse_serve(&args[1..])?),
        Some("db") => tidepool::admin_cli::run(&args[1..]).map_err(|e| {
            if e.starts_with("usage") {
                format!("{e}\n{USAGE}")
            } else {
                e
            }
        }),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some("-V" | "--version") => {
            println!(
                "tidepool {} (log format {}, snapshot format {})",
                env!("CARGO_PKG_VERSION"),
                tidepool::wal::format::FORMAT_VERSION,
                tidepool::snapshot::format::SNAPSHOT_VERSION
            );
            Ok(())
        }
        Some(other) => Err(format!("unknown command '{other}'\n{USAGE}")),
        None => Err(format!("missing command\n{USAGE}")),
    }
}

fn parse_serve(args: &[String]) -> Result<Config, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut listen = env("TIDEPOOL_LISTEN");
    let mut data = env("TIDEPOOL_DATA");
    let mut token = env("TIDEPOOL_TOKEN");
    let mut ro = env("TIDEPOOL_READ_ONLY_TOKEN");
    let mut fsync = env("TIDEPOOL_FSYNC");
    let mut qtoken = env("TIDEPOOL_QSTASH_TOKEN");
    let mut qro = env("TIDEPOOL_QSTASH_READ_ONLY_TOKEN");
    let mut qcurrent = env("TIDEPOOL_QSTASH_CURRENT_SIGNING_KEY");
    let mut qnext = env("TIDEPOOL_QSTASH_NEXT_SIGNING_KEY");
    let mut max_msg = env("TIDEPOOL_MAX_MESSAGE_BYTES");
    let mut dlq_max = env("TIDEPOOL_DLQ_MAX");
    let mut waiters_max = env("TIDEPOOL_WAITERS_MAX");
    let mut notifications_max = env("TIDEPOOL_NOTIFICATIONS_MAX");
    let mut dedup_max = env("TIDEPOOL_DEDUP_MAX");
    let mut at = env("TIDEPOOL_AT");
    let mut retention = env("TIDEPOOL_LOG_RETENTION");
    let mut region = env("TIDEPOOL_REGION");
    let mut auto_pct = env("TIDEPOOL_AUTO_SNAPSHOT_PERCENTAGE");
    let mut auto_min = env("TIDEPOOL_AUTO_SNAPSHOT_MIN_BYTES");
    let mut cors = env("TIDEPOOL_CORS_ORIGIN");
    let mut max_request = env("TIDEPOOL_MAX_REQUEST_BYTES");
    let mut max_key = env("TIDEPOOL_MAX_KEY_BYTES");
    let mut max_value = env("TIDEPOOL_MAX_VALUE_BYTES");
    let mut per_day = env("TIDEPOOL_MAX_REQUESTS_PER_DAY");
    let mut script_ms = env("TIDEPOOL_SCRIPT_TIME_LIMIT_MS");
    let mut max_memory = env("TIDEPOOL_MAX_MEMORY");
    let mut admin_token = env("TIDEPOOL_ADMIN_TOKEN");
    let mut start_path = env("TIDEPOOL_START_PATH");
    let mut scratch_ttl = env("TIDEPOOL_SCRATCH_TTL");
    let mut start_per_hour = env("TIDEPOOL_START_PER_HOUR");
    let truthy = |v: Option<String>| v.is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let mut metrics_open = truthy(env("TIDEPOOL_METRICS_OPEN"));
    let mut dev = truthy(env("TIDEPOOL_DEV"));
    let mut log_level = env("TIDEPOOL_LOG_LEVEL").or_else(|| env("RUST_LOG"));
    let mut i = 0;
    while i < args.len() {
        let (flag, inline) = config::split_flag(&args[i]);
        match flag.as_str() {
            "--metrics-open" if inline.is_none() => {
                metrics_open = true;
                i += 1;
                continue;
            }
            "--dev" if inline.is_none() => {
                dev = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        let slot = match flag.as_str() {
            "--log-level" => &mut log_level,
            "--listen" => &mut listen,
            "--data" => &mut data,
            "--token" => &mut token,
            "--read-only-token" => &mut ro,
            "--fsync" => &mut fsync,
            "--qstash-token" => &mut qtoken,
            "--qstash-read-only-token" => &mut qro,
            "--qstash-current-signing-key" => &mut qcurrent,
            "--qstash-next-signing-key" => &mut qnext,
            "--max-message-bytes" => &mut max_msg,
            "--dlq-max" => &mut dlq_max,
            "--waiters-max" => &mut waiters_max,
            "--notifications-max" => &mut notifications_max,
            "--dedup-max" => &mut dedup_max,
            "--at" => &mut at,
            "--log-retention" => &mut retention,
            "--region" => &mut region,
            "--auto-snapshot-percentage" => &mut auto_pct,
            "--auto-snapshot-min-bytes" => &mut auto_min,
            "--cors-origin" => &mut cors,
            "--max-request-bytes" => &mut max_request,
            "--max-key-bytes" => &mut max_key,
            "--max-value-bytes" => &mut max_value,
            "--max-requests-per-day" => &mut per_day,
            "--script-time-limit-ms" => &mut script_ms,
            "--max-memory" => &mut max_memory,
            "--admin-token" => &mut admin_token,
            "--start-path" => &mut start_path,
            "--scratch-ttl" => &mut scratch_ttl,
            "--start-per-hour" => &mut start_per_hour,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag '{other}'\n{USAGE}")),
        };
        *slot = Some(config::flag_value(args, &mut i, &flag, inline)?);
    }
    let listen_default = if dev {
        config::DEV_LISTEN
    } else {
        config::LISTEN_DEFAULT
    };
    let listen_text = listen.unwrap_or_else(|| listen_default.into());
    let listen: std::net::SocketAddr = listen_text.parse().map_err(|_| {
        format!("--listen '{listen_text}' is not an address such as 127.0.0.1:8079")
    })?;
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
    let fsync_text = fsync.unwrap_or_else(|| "always".into());
    let fsync = FsyncMode::parse(&fsync_text)
        .ok_or_else(|| format!("--fsync '{fsync_text}' must be always, everysec or never"))?;
    let usage_log_interval_ms = match env("TIDEPOOL_USAGE_LOG_INTERVAL_MS") {
        None => config::USAGE_LOG_INTERVAL_MS,
        Some(u) => u.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            format!(
                "TIDEPOOL_USAGE_LOG_INTERVAL_MS '{u}' must be a positive number of milliseconds"
            )
        })?,
    };
    let unit = env("TIDEPOOL_RETRY_BACKOFF_UNIT_MS");
    let retry_backoff_unit_ms = match unit {
        None => 1000,
        Some(u) => u.parse().map_err(|_| {
            format!("TIDEPOOL_RETRY_BACKOFF_UNIT_MS '{u}' must be a number of milliseconds")
        })?,
    };
    let message_bytes_max = match max_msg {
        None => config::DELIVERY_MESSAGE_BYTES_MAX_DEFAULT,
        Some(m) => m
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("--max-message-bytes '{m}' must be a positive number"))?,
    };
    let count = |flag: &str, v: Option<String>, default: usize| -> Result<usize, String> {
        match v {
            None => Ok(default),
            Some(n) => n
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} '{n}' must be a positive number")),
        }
    };
    let delivery_limits = config::DeliveryLimits {
        dlq_entries_max: count("--dlq-max", dlq_max, config::DLQ_ENTRIES_MAX_DEFAULT)?,
        waiters_max: count("--waiters-max", waiters_max, config::WAITERS_MAX_DEFAULT)?,
        notifications_max: count(
            "--notifications-max",
            notifications_max,
            config::NOTIFICATIONS_MAX_DEFAULT,
        )?,
        dedup_entries_max: count("--dedup-max", dedup_max, config::DEDUP_ENTRIES_MAX_DEFAULT)?,
    };
    let at = at
        .map(|p| tidepool::point::Point::parse(&p).map_err(|e| format!("--at {e}")))
        .transpose()?;
    let whole = |flag: &str, v: Option<String>, default: u64| -> Result<u64, String> {
        match v {
            None => Ok(default),
            Some(n) => n
                .parse()
                .map_err(|_| format!("{flag} '{n}' must be a whole number")),
        }
    };
    let snapshots = config::SnapshotPolicy {
        auto_percentage: whole(
            "--auto-snapshot-percentage",
            auto_pct,
            config::AUTO_SNAPSHOT_PERCENTAGE_DEFAULT,
        )?,
        auto_min_bytes: whole(
            "--auto-snapshot-min-bytes",
            auto_min,
            config::AUTO_SNAPSHOT_MIN_BYTES_DEFAULT,
        )?,
        retention: config::Retention::parse(
            retention
                .as_deref()
                .unwrap_or(config::LOG_RETENTION_DEFAULT),
        )
        .map_err(|e| format!("--log-retention {e}"))?,
    };
    let cors_origins: Vec<String> = cors
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
    let request_bytes_max = match max_request {
        None => config::REQUEST_BYTES_MAX,
        Some(m) => m
            .parse()
            .ok()
            .filter(|n| (1..=config::REQUEST_BYTES_MAX).contains(n))
            .ok_or_else(|| {
                format!(
                    "--max-request-bytes '{m}' must be a number from 1 to {}",
                    config::REQUEST_BYTES_MAX
                )
            })?,
    };
    let key_bytes_max = match max_key {
        None => None,
        Some(m) => Some(
            m.parse()
                .ok()
                .filter(|n: &usize| *n > 0)
                .ok_or_else(|| format!("--max-key-bytes '{m}' must be a positive number"))?,
        ),
    };
    let positive = |flag: &str, v: Option<String>| -> Result<Option<u64>, String> {
        v.map(|m| {
            m.parse()
                .ok()
                .filter(|n: &u64| *n > 0)
                .ok_or_else(|| format!("{flag} '{m}' must be a positive number"))
        })
        .transpose()
    };
    let value_bytes_max = positive("--max-value-bytes", max_value)?.map(|n| n as usize);
    let requests_per_day = positive("--max-requests-per-day", per_day)?;
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
    let script_time_limit_ms = match positive("--script-time-limit-ms", script_ms)? {
        None => config::SCRIPT_TIME_LIMIT_MS,
        Some(ms) if ms <= config::SCRIPT_TIME_LIMIT_MS_MAX => ms,
        Some(ms) => {
            return Err(format!(
                "--script-time-limit-ms '{ms}' must be at most {}",
                config::SCRIPT_TIME_LIMIT_MS_MAX
            ))
        }
    };
    let start_path = match start_path.as_deref() {
        // Open by default only where no one else can reach it: on loopback (and so with
        // --dev). On any other address anyone who reaches the server could create databases;
        // --start-path opens it there on purpose.
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
    let scratch_ttl_ms = match scratch_ttl {
        None => config::SCRATCH_TTL_MS_DEFAULT,
        Some(t) => match config::Retention::parse(&t) {
            Ok(config::Retention::Millis(ms)) if ms > 0 => ms,
            _ => {
                return Err(format!(
                    "--scratch-ttl '{t}' must be a duration such as 72h or 30m"
                ))
            }
        },
    };
    let start_per_hour = match start_per_hour {
        None => config::START_PER_HOUR_DEFAULT,
        Some(n) => n
            .parse()
            .map_err(|_| format!("--start-per-hour '{n}' must be a whole number"))?,
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
        metrics_open,
        dev,
        log_level,
        value_bytes_max,
        requests_per_day,
        memory_bytes_max,
        script_time_limit_ms,
        admin_token,
        start_path,
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
        data_dir: PathBuf::from(data.unwrap_or_else(|| config::DATA_DIR_DEFAULT.into())),
        token,
        read_only_token: ro,
        fsync,
        http_threads: match env("TIDEPOOL_HTTP_THREADS") {
            // One core is left to the flusher, the OS and (in benchmarks) the load generator:
            // on 2 cores one HTTP thread measured faster than two.
            None => std::thread::available_parallelism()
                .map(|n| n.get().saturating_sub(1).max(1))
                .unwrap_or(1),
            Some(t) => {
                t.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("TIDEPOOL_HTTP_THREADS '{t}' must be a positive number")
                })?
            }
        },
    })
}
