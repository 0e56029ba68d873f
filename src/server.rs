//! Start-up and shutdown: the data directory and its lock, the credentials file, replay, the
//! listener, and a clean stop on SIGTERM or SIGINT.

use crate::config::Config;
use crate::delivery::sign::new_key as random_signing_key;
use crate::delivery::sign::SigningKeys;
use crate::executor::{self, Job};
use crate::http::{self, App};
use crate::secret::{random_qstash_token, random_token};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, RwLock};

#[derive(Serialize, Deserialize, Clone)]
struct Credentials {
    token: String,
    read_only_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qstash_token: Option<String>,
    /// The delivery API's read-only token (GET routes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qstash_read_only_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qstash_current_signing_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qstash_next_signing_key: Option<String>,
    /// Keys the MACs of ACL REST tokens (`ACL RESTTOKEN`), and derives the tokens of every
    /// database but the default one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acl_token_secret: Option<String>,
    /// The admin API's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admin_token: Option<String>,
}

/// Every credential the server runs with, after flags and the stored file.
pub struct Resolved {
    pub token: String,
    pub read_only_token: String,
    pub qstash_token: String,
    pub qstash_read_only_token: String,
    pub keys: SigningKeys,
    pub acl_secret: Vec<u8>,
    pub admin_token: String,
}

fn write_credentials(dir: &Path, c: &Credentials) -> Result<(), String> {
    let path = dir.join("credentials.json");
    let tmp = dir.join("credentials.json.tmp");
    let mut f = File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let text = serde_json::to_vec_pretty(c).map_err(|e| e.to_string())?;
    f.write_all(&text)
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, &path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    crate::wal::writer::sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

fn read_credentials(dir: &Path) -> Result<Option<Credentials>, String> {
    let path = dir.join("credentials.json");
    match fs::read(&path) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).map_err(|e| {
            format!(
                "{} is not valid ({e}); fix or remove it (removing it generates new tokens)",
                path.display()
            )
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The tokens: from the flags when given, otherwise from `DIR/credentials.json`, generated and
/// written there on first start. An existing file that cannot be read is an error, never a
/// reason to generate new tokens. A server opened at a past point (`--at`) writes nothing: what
/// is missing is generated for this run only.
fn credentials(dir: &Path, cfg: &Config) -> Result<Resolved, String> {
    let mut stored = match read_credentials(dir)? {
        Some(c) => c,
        None => Credentials {
            token: random_token()?,
            read_only_token: random_token()?,
            qstash_token: None,
            qstash_read_only_token: None,
            qstash_current_signing_key: None,
            qstash_next_signing_key: None,
            acl_token_secret: None,
            admin_token: None,
        },
    };
    // Fill in what is missing (a new directory, or one from before the delivery service) and
    // write it back; what exists is never regenerated.
    let before = serde_json::to_vec(&stored).map_err(|e| e.to_string())?;
    if stored.qstash_token.is_none() {
        stored.qstash_token = Some(random_qstash_token()?);
    }
    if stored.qstash_read_only_token.is_none() {
        stored.qstash_read_only_token = Some(format!("qro_{}", random_token()?));
    }
    if stored.qstash_current_signing_key.is_none() {
        stored.qstash_current_signing_key = Some(random_signing_key()?);
    }
    if stored.qstash_next_signing_key.is_none() {
        stored.qstash_next_signing_key = Some(random_signing_key()?);
    }
    if stored.acl_token_secret.is_none() {
        stored.acl_token_secret = Some(random_token()?);
    }
    if stored.admin_token.is_none() {
        stored.admin_token = Some(format!("admin_{}", random_token()?));
    }
    let exists = dir.join("credentials.json").exists();
    let changed = before != serde_json::to_vec(&stored).map_err(|e| e.to_string())?;
    if cfg.at.is_none() && (!exists || changed) {
        write_credentials(dir, &stored)?;
    }
    if cfg.dev {
        // The QStash dev server's first test user, whose credentials dev-mode SDKs look for;
        // the other three are accepted beside it (`QstashAuth::dev_users`).
        let user = &crate::delivery::sign::DEV_USERS[0];
        stored.qstash_token = Some(user.token.into());
        stored.qstash_current_signing_key = Some(user.current.into());
        stored.qstash_next_signing_key = Some(user.next.into());
    }
    let stored_q = stored.clone();
    let token = cfg.token.clone().unwrap_or(stored.token);
    let ro = cfg
        .read_only_token
        .clone()
        .unwrap_or(stored.read_only_token);
    if token.is_empty() || ro.is_empty() {
        return Err("tokens must not be empty".into());
    }
    if token == ro {
        return Err("the standard and the read-only token must differ".into());
    }
    let pick =
        |flag: &Option<String>, stored: Option<String>| flag.clone().or(stored).unwrap_or_default();
    let resolved = Resolved {
        token,
        read_only_token: ro,
        qstash_token: pick(&cfg.qstash_token, stored_q.qstash_token),
        qstash_read_only_token: pick(&cfg.qstash_read_only_token, stored_q.qstash_read_only_token),
        keys: SigningKeys {
            current: pick(
                &cfg.qstash_current_signing_key,
                stored_q.qstash_current_signing_key,
            ),
            next: pick(
                &cfg.qstash_next_signing_key,
                stored_q.qstash_next_signing_key,
            ),
        },
        acl_secret: stored_q.acl_token_secret.unwrap_or_default().into_bytes(),
        admin_token: pick(&cfg.admin_token, stored_q.admin_token),
    };
    if resolved.qstash_read_only_token == resolved.qstash_token {
        return Err("the delivery token and its read-only token must differ".into());
    }
    if resolved.qstash_token.is_empty()
        || resolved.qstash_read_only_token.is_empty()
        || resolved.keys.current.is_empty()
        || resolved.keys.next.is_empty()
    {
        return Err("the delivery token and signing keys must not be empty".into());
    }
    Ok(resolved)
}

/// Stores rotated signing keys in the credentials file (flags given at start still win).
fn save_keys(dir: &Path, keys: &SigningKeys) -> Result<(), String> {
    let mut c = read_credentials(dir)?.ok_or("the credentials file is gone")?;
    c.qstash_current_signing_key = Some(keys.current.clone());
    c.qstash_next_signing_key = Some(keys.next.clone());
    write_credentials(dir, &c)
}

/// Runs the server until SIGTERM or SIGINT. Errors are one line for the user.
pub fn run(cfg: Config) -> Result<(), String> {
    let dir = &cfg.data_dir;
    let lock_path = dir.join("LOCK");
    let lock = match cfg.at {
        None => {
            fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the data directory {}: {e}", dir.display()))?;
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
        }
        // A past point is read from an existing directory, and nothing is created in it.
        Some(_) => File::open(&lock_path),
    }
    .map_err(|e| format!("cannot use the data directory {}: {e}", dir.display()))?;
    // Servers at a past point share the directory with each other, never with a server that
    // writes into it.
    let locked = match cfg.at {
        None => lock.try_lock(),
        Some(_) => lock.try_lock_shared(),
    };
    match locked {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) if cfg.at.is_some() => {
            return Err(format!(
                "the data directory {} is in use by a running tidepool: stop it, or copy the state out with `tidepool-log replay --to P --out NEWDIR` and open that",
                dir.display()
            ))
        }
        Err(fs::TryLockError::WouldBlock) => {
            return Err(format!(
                "the data directory {} is in use by another tidepool process",
                dir.display()
            ))
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", lock_path.display()))
        }
    }
    crate::fault::init();
    if let Some(level) = &cfg.log_level {
        let filter = tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|e| format!("--log-level '{level}': {e}"))?;
        // Lines go to stderr: stdout carries the start banner that scripts read.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init()
            .map_err(|e| format!("cannot start request logging: {e}"))?;
    }
    let creds = credentials(dir, &cfg)?;
    let (token, ro_token) = (creds.token.clone(), creds.read_only_token.clone());
    let keys = Arc::new(RwLock::new(creds.keys.clone()));
    // A cluster node's directory started as a single server would serve an empty state and
    // write a log beside the cluster's, which the node then refuses.
    if cfg.cluster.is_none() && dir.join("cluster").exists() {
        return Err(format!(
            "{} is a cluster node's data directory (it holds cluster/): start it with its --node-id, --cluster-listen, --peers and --cluster-secret (docs/replication.md)",
            dir.display()
        ));
    }
    let wal_dir = dir.join("wal");
    if cfg.at.is_none() {
        fs::create_dir_all(&wal_dir)
            .map_err(|e| format!("cannot create {}: {e}", wal_dir.display()))?;
    }

    // Key-value writes' syncs with `--fsync always`, made by a runtime thread about to park
    // (executor::ParkSync).
    let park_sync = Arc::new(executor::ParkSync::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.http_threads)
        .on_thread_park({
            let p = park_sync.clone();
            move || p.run()
        })
        .thread_stack_size(crate::config::RUNTIME_THREAD_STACK_BYTES)
        .enable_all()
        .thread_name("http")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let resp_listener = match cfg.resp_listen {
            None => None,
            Some(a) => Some(
                tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(|e| format!("cannot listen for RESP on {a}: {e}"))?,
            ),
        };
        let resp_tls = match &cfg.resp_tls {
            None => None,
            Some((cert, key)) => Some(crate::resp::tls::acceptor(cert, key)?),
        };
        let resp_addr = match &resp_listener {
            Some(l) => Some(l.local_addr().map_err(|e| e.to_string())?),
            None => None,
        };
        // A cluster node: its state starts from the snapshot it kept, in cluster/.
        let cluster_dir = dir.join("cluster");
        let cluster_role = Arc::new(crate::executor::cluster::Role::default());
        let kept = match &cfg.cluster {
            None => None,
            Some(c) => {
                single_node_data(dir)?;
                crate::cluster::log_store::claim_node_id(&cluster_dir, c.node_id)?;
                crate::cluster::state_machine::kept_snapshot(&cluster_dir)
                    .map_err(|e| format!("the cluster's snapshot in {}: {e}", cluster_dir.display()))?
            }
        };
        let setup = executor::Setup {
            acl_secret: creds.acl_secret.clone(),
            default_tokens: executor::tenants::DbTokens {
                standard: token.clone(),
                read_only: ro_token.clone(),
            },
            keys: keys.clone(),
            backoff_unit_ms: cfg.retry_backoff_unit_ms,
            message_bytes_max: cfg.message_bytes_max,
            region: cfg.region.clone(),
            delivery_limits: cfg.delivery_limits,
            at: cfg.at,
            snapshots: cfg.snapshots,
            limits: crate::command::ctx::Limits {
                key_bytes_max: cfg.key_bytes_max,
                value_bytes_max: cfg.value_bytes_max,
                commands_left: None,
                data_bytes_max: None,
                memory_full: false,
                memory_cap_data_bytes: None,
            },
            commands_per_day: cfg.requests_per_day,
            usage_log_interval_ms: cfg.usage_log_interval_ms,
            script_time_limit_ms: cfg.script_time_limit_ms,
            memory_bytes_max: cfg.memory_bytes_max,
            cluster: cfg.cluster.as_ref().map(|_| executor::ClusterStart {
                role: cluster_role.clone(),
                image: kept.as_ref().map(|k| k.1.clone()),
            }),
            park_sync: Some(park_sync),
        };
        let ex = executor::start(dir, cfg.fsync, addr.port(), setup)?;
        // The RESP connections: those of the RESP listener, and on a cluster's leader those
        // its followers move to it.
        let resp = {
            let mut l =
                crate::resp::Listener::new(ex.tx.clone(), ex.shared.clone(), cfg.request_bytes_max);
            l.idle_timeout_ms = cfg.resp_idle_timeout_ms;
            Arc::new(l)
        };
        let node = match &cfg.cluster {
            None => None,
            Some(c) => {
                let tunnel = crate::resp::conn::moved_in(resp.clone());
                let started =
                    start_node(c, addr, &cluster_dir, &ex, cluster_role.clone(), kept, tunnel)
                        .await?;
                let _ = resp.to_leader.set(crate::resp::conn::ToLeader::new(
                    cluster_role.clone(),
                    started.2.clone(),
                ));
                // Connection ids are the cluster's: each node numbers from its own range, so
                // a connection that moves to the leader keeps its id there.
                ex.shared
                    .next_id
                    .fetch_max(c.node_id << 40, std::sync::atomic::Ordering::Relaxed);
                Some(started)
            }
        };
        if let Some(cut) = &ex.report.cut_tail {
            crate::log::line(&format!("warning: {cut}"));
        }
        let url = format!("http://{addr}");
        // After a reset of the default database its tokens are derived ones, not the
        // configured ones.
        let (token, ro_token) = match ex.shared.tokens_of(crate::state::databases::DEFAULT_DB) {
            Some(t) => (t.standard, t.read_only),
            None => (token, ro_token),
        };
        let start_line = match &cfg.start_path {
            Some(p) => format!("  scratch databases: curl -X POST {url}{p}\n"),
            None => String::new(),
        };
        let console_line = if cfg.console {
            format!("  console: {url}{}/\n", http::console::PREFIX)
        } else {
            String::new()
        };
        // The handlers go in before the banner announces the server: a SIGTERM sent as soon
        // as the banner is read stops it cleanly instead of killing it. (Before, during a
        // long replay, the default action still ends the process at once.)
        let shutdown = shutdown_signal();
        // The banner goes out with errors ignored: a closed stdout (`tidepool serve | head -1`)
        // must not take the server down, and println! would panic on EPIPE.
        let state = match cfg.at {
            None => format!(
                "fsync {}; {}replayed {} records from {} segments",
                cfg.fsync.name(),
                match ex.report.snapshot {
                    Some(seq) => format!("loaded the snapshot at record #{seq}, "),
                    None => String::new(),
                },
                ex.report.records,
                ex.report.segments
            ),
            Some(p) => format!(
                "read-only, as of {p}: record #{} of {} segments",
                ex.report.last_seq, ex.report.segments
            ),
        };
        let resp_line = match resp_addr {
            Some(a) => format!(
                "  RESP (Redis protocol) on {a}: redis-cli -h {} -p {}{} --pass <token>\n",
                a.ip(),
                a.port(),
                if cfg.resp_tls.is_some() { " --tls" } else { "" }
            ),
            None => String::new(),
        };
        let banner = format!(
            "tidepool {} listening on {url}\n{resp_line}  data: {} ({state})\n  UPSTASH_REDIS_REST_URL={url}\n  UPSTASH_REDIS_REST_TOKEN={token}\n  read-only token: {ro_token}\n  QSTASH_URL={url}\n  QSTASH_TOKEN={}\n  QStash read-only token: {}\n  QSTASH_CURRENT_SIGNING_KEY={}\n  QSTASH_NEXT_SIGNING_KEY={}\n  admin token: {} (databases: {url}{}/databases, or `tidepool db`)\n{start_line}{console_line}",
            env!("CARGO_PKG_VERSION"),
            dir.display(),
            creds.qstash_token,
            creds.qstash_read_only_token,
            creds.keys.current,
            creds.keys.next,
            creds.admin_token,
            crate::config::ADMIN_PREFIX,
        );
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes()).and_then(|_| out.flush());
        drop(out);

        let key_dir = dir.to_path_buf();
        let qstash = crate::http::qstash::QstashAuth {
            token: creds.qstash_token.clone(),
            read_only_token: creds.qstash_read_only_token.clone(),
            dev_users: cfg.dev,
            keys,
            save_keys: match cfg.at {
                None => Box::new(move |k: &SigningKeys| save_keys(&key_dir, k)),
                Some(_) => Box::new(|_: &SigningKeys| {
                    Err("this server shows a past point of its log, read-only (--at)".into())
                }),
            },
            message_bytes_max: cfg.message_bytes_max,
        };
        let mut app = App::new(ex.tx.clone(), ex.shared.clone(), Some(qstash));
        app.admin_token = creds.admin_token.clone();
        app.start = cfg.start_path.clone().map(|path| http::StartConfig {
            path,
            ttl_ms: cfg.scratch_ttl_ms,
            per_hour: cfg.start_per_hour,
        });
        app.cors_origins = cfg.cors_origins.clone();
        app.metrics_open = cfg.metrics_open;
        app.console = cfg.console;
        app.data_dir = dir.to_path_buf();
        app.console_rebuild_ms = cfg.console_rebuild_ms;
        app.request_bytes_max = cfg.request_bytes_max;
        app.read_only = cfg.at.is_some();
        app.url = url.clone();
        app.cluster = node.as_ref().map(|(n, members, network)| http::ClusterHandle {
            node_id: n.id,
            network: network.clone(),
            raft: n.raft.clone(),
            role: cluster_role.clone(),
            members: members.clone(),
        });
        // The per-hour limit of `/start` counts what the catalog says each address created in
        // the last hour, so a restart does not reset it.
        if app.start.is_some() {
            let list = http::admin::catalog(&ex.tx).await;
            app.started = std::sync::Mutex::new(http::admin::StartLog::from_catalog(
                &list,
                crate::clock::wall_unix_ms(),
            ));
        }
        let app = Arc::new(app);
        tokio::spawn(crate::executor::watch_executor(
            ex.shared.clone(),
            std::time::Duration::from_millis(crate::config::EXPIRE_CYCLE_INTERVAL_MS),
        ));
        let ticker = ex.tx.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(std::time::Duration::from_millis(
                crate::config::EXPIRE_CYCLE_INTERVAL_MS,
            ));
            loop {
                iv.tick().await;
                if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                    ticker.try_send(Job::Tick)
                {
                    return;
                }
            }
        });
        let resp_stop = tokio::sync::oneshot::channel::<()>();
        if let Some(l) = resp_listener {
            let stop = resp_stop.1;
            tokio::spawn(crate::resp::serve(l, resp, resp_tls, async move {
                let _ = stop.await;
            }));
        }
        http::serve(listener, app, shutdown).await;
        crate::executor::cluster::stopping();
        let _ = resp_stop.0.send(());
        if let Some((n, _, _)) = node {
            n.stop().await;
        }
        let (done, wait) = tokio::sync::oneshot::channel();
        if ex.tx.send(Job::Shutdown { done }).await.is_ok() {
            let _ = wait.await;
        }
        let _ = ex.task.await;
        drop(lock);
        crate::log::line("tidepool: stopped cleanly; the log is synced");
        Ok::<(), String>(())
    })
}

type Members = std::collections::BTreeMap<u64, openraft::BasicNode>;

/// Starts this cluster node's Raft on the executor, the proposer of its batches and the
/// watcher of its role; the node and the members `--peers` names with it.
async fn start_node(
    c: &crate::config::ClusterConfig,
    http_addr: std::net::SocketAddr,
    cluster_dir: &Path,
    ex: &executor::ExecutorHandle,
    role: Arc<crate::executor::cluster::Role>,
    kept: Option<(openraft::SnapshotMeta<u64, openraft::BasicNode>, Vec<u8>)>,
    tunnel: crate::cluster::network::Tunnel,
) -> Result<
    (
        crate::cluster::Node<crate::executor::cluster::ExecutorApplier>,
        Members,
        crate::cluster::network::Network,
    ),
    String,
> {
    use crate::executor::cluster;
    let config = crate::cluster::raft_config(c.snapshot_every)?;
    let applier = cluster::ExecutorApplier { tx: ex.tx.clone() };
    let listen = c.listen.to_string();
    let tls = match &c.tls {
        Some((cert, key, ca)) => Some(crate::cluster::network::Tls::load(
            cert,
            key,
            ca,
            Some(c.listen),
        )?),
        None => None,
    };
    let network = crate::cluster::network::Network::new(&c.secret, tls.as_ref())?;
    let at = crate::cluster::Start {
        id: c.node_id,
        dir: cluster_dir,
        listen: &listen,
        secret: &c.secret,
        config,
        local_http: Some(http_addr),
        tls,
        tunnel: Some(tunnel),
    };
    let node = crate::cluster::Node::start(
        at,
        applier,
        kept,
        Some(cluster::forward_handler(
            ex.tx.clone(),
            role.clone(),
            ex.shared.scripts.clone(),
        )),
    )
    .await?;
    let (proposer, proposals) = tokio::sync::mpsc::unbounded_channel();
    ex.tx
        .send(Job::Cluster(cluster::ClusterJob::Attach {
            proposer,
            network: network.clone(),
        }))
        .await
        .map_err(|_| "the executor stopped at start".to_string())?;
    tokio::spawn(cluster::propose(
        node.raft.clone(),
        proposals,
        ex.shared.log.clone(),
        role.clone(),
    ));
    let mut members: Members = c
        .peers
        .iter()
        .map(|(id, addr)| (*id, openraft::BasicNode::new(addr.clone())))
        .collect();
    members.insert(c.node_id, openraft::BasicNode::new(c.listen.to_string()));
    let addrs = members
        .iter()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    tokio::spawn(cluster::keep_lease(node.raft.clone(), role.clone()));
    tokio::spawn(cluster::follow_role(
        node.raft.clone(),
        role,
        addrs,
        ex.shared.log.clone(),
    ));
    crate::log::line(&format!(
        "cluster node {} listening for its peers on {} (members: {}); `POST /_admin/cluster/init` on one node starts a new cluster",
        c.node_id,
        node.addr,
        members.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
    ));
    Ok((node, members, network))
}

/// A cluster node starts from an empty directory or a cluster node's: a single server's
/// log or snapshots are refused rather than set aside (`tidepool cluster convert` makes a
/// single server's directory a cluster's first node).
fn single_node_data(dir: &Path) -> Result<(), String> {
    for sub in ["wal", "snapshots"] {
        let holds = fs::read_dir(dir.join(sub))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        if holds {
            return Err(format!(
                "{} holds a single server's {sub}; a cluster node starts from an empty data directory, or one that `tidepool cluster convert` made the first node of a cluster (docs/replication.md)",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Installs the SIGTERM and SIGINT handlers now; the future ends at the first of them.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut t), Ok(mut i)) => {
                tokio::select! {
                    _ = t.recv() => {}
                    _ = i.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
