//! Start-up and shutdown: the data directory and its lock, the credentials file, replay, the
//! listener, and a clean stop on SIGTERM or SIGINT.

use crate::config::Config;
use crate::executor::{self, Job};
use crate::http::{self, App};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

#[derive(Serialize, Deserialize)]
struct Credentials {
    token: String,
    read_only_token: String,
}

fn random_token() -> Result<String, String> {
    let mut b = [0u8; 30];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("cannot read /dev/urandom to generate a token: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// The tokens: from the flags when given, otherwise from `DIR/credentials.json`, generated and
/// written there on first start. An existing file that cannot be read is an error, never a
/// reason to generate new tokens.
fn credentials(dir: &Path, cfg: &Config) -> Result<(String, String), String> {
    let path = dir.join("credentials.json");
    let stored: Option<Credentials> = match fs::read(&path) {
        Ok(b) => Some(serde_json::from_slice(&b).map_err(|e| {
            format!(
                "{} is not valid ({e}); fix or remove it (removing it generates new tokens)",
                path.display()
            )
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let stored = match stored {
        Some(c) => c,
        None => {
            let c = Credentials {
                token: random_token()?,
                read_only_token: random_token()?,
            };
            let tmp = dir.join("credentials.json.tmp");
            let mut f =
                File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
            let text = serde_json::to_vec_pretty(&c).map_err(|e| e.to_string())?;
            f.write_all(&text)
                .and_then(|_| f.sync_all())
                .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
            fs::rename(&tmp, &path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            crate::wal::writer::sync_dir(dir)
                .map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
            c
        }
    };
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
    Ok((token, ro))
}

/// Runs the server until SIGTERM or SIGINT. Errors are one line for the user.
pub fn run(cfg: Config) -> Result<(), String> {
    let dir = &cfg.data_dir;
    fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create the data directory {}: {e}", dir.display()))?;
    let lock_path = dir.join("LOCK");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("cannot use the data directory {}: {e}", dir.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
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
    let (token, ro_token) = credentials(dir, &cfg)?;
    let wal_dir = dir.join("wal");
    fs::create_dir_all(&wal_dir)
        .map_err(|e| format!("cannot create {}: {e}", wal_dir.display()))?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.http_threads)
        .enable_all()
        .thread_name("http")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let ex = executor::start(&wal_dir, cfg.fsync, addr.port())?;
        if let Some(cut) = &ex.report.cut_tail {
            crate::log::line(&format!("warning: {cut}"));
        }
        let url = format!("http://{addr}");
        // The banner goes out with errors ignored: a closed stdout (`tidepool serve | head -1`)
        // must not take the server down, and println! would panic on EPIPE.
        let banner = format!(
            "tidepool {} listening on {url}\n  data: {} (fsync {}; replayed {} records from {} segments)\n  UPSTASH_REDIS_REST_URL={url}\n  UPSTASH_REDIS_REST_TOKEN={token}\n  read-only token: {ro_token}\n",
            env!("CARGO_PKG_VERSION"),
            dir.display(),
            cfg.fsync.name(),
            ex.report.records,
            ex.report.segments
        );
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes()).and_then(|_| out.flush());
        drop(out);

        let app = Arc::new(App::new(ex.tx.clone(), ex.shared.clone(), token, ro_token));
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
        http::serve(listener, app, shutdown_signal()).await;
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

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
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
