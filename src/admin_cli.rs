//! `tidepool db ...`: the admin API from the command line, talking to a running server.
//!
//! The admin token comes from `--admin-token`, `TIDEPOOL_ADMIN_TOKEN`, or the server's data
//! directory (`--data`, `TIDEPOOL_DATA`, `./tidepool-data`), whose `credentials.json` holds it.

use crate::config;
use std::path::PathBuf;

/// Runs one `tidepool cluster` command; prints the server's JSON answer.
pub fn cluster(c: crate::cli::Cluster) -> Result<(), String> {
    use crate::cli::ClusterAction;
    if let ClusterAction::Convert {
        node_id,
        cluster_listen,
    } = &c.action
    {
        // Offline: the directory, not a running server.
        let done = crate::cluster::convert::convert(
            std::path::Path::new(&c.server.data),
            *node_id,
            cluster_listen,
        )?;
        println!("{done}");
        return Ok(());
    }
    let (url, token) = target(c.server)?;
    let (method, what, body) = match c.action {
        ClusterAction::Init => ("POST", "init".to_string(), String::new()),
        ClusterAction::Status => ("GET", "status".to_string(), String::new()),
        ClusterAction::AddNode { id, address } => (
            "POST",
            "nodes".to_string(),
            serde_json::json!({ "id": id, "address": address }).to_string(),
        ),
        ClusterAction::RemoveNode { id } => ("DELETE", format!("nodes/{id}"), String::new()),
        ClusterAction::Convert { .. } => return Err("convert runs offline".into()),
    };
    let target = format!("{url}{}/cluster/{what}", config::ADMIN_PREFIX);
    call(&url, &token, method, &target, body)
}

/// The server's URL and the admin token to show it.
fn target(t: crate::cli::AdminTarget) -> Result<(String, String), String> {
    let url = t.url.trim_end_matches('/').to_string();
    let token = match t.admin_token.filter(|t| !t.is_empty()) {
        Some(t) => t,
        None => stored_admin_token(PathBuf::from(&t.data))?,
    };
    Ok((url, token))
}

/// Runs one `tidepool db` command; prints the server's JSON answer.
pub fn run(db: crate::cli::Db) -> Result<(), String> {
    use crate::cli::DbAction;
    let (url, token) = target(db.server)?;
    let base = format!("{url}{}/databases", config::ADMIN_PREFIX);
    let enc = |n: &str| -> String {
        n.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    };
    let (method, target, body) = match db.action {
        DbAction::Create {
            name,
            script_time_limit_ms,
            max_data_bytes,
        } => {
            let mut settings = serde_json::Map::new();
            if let Some(n) = name {
                settings.insert("name".into(), n.into());
            }
            if let Some(ms) = script_time_limit_ms {
                settings.insert("script_time_limit_ms".into(), ms.into());
            }
            if let Some(b) = max_data_bytes {
                settings.insert("max_data_bytes".into(), b.into());
            }
            (
                "POST",
                base,
                serde_json::Value::Object(settings).to_string(),
            )
        }
        DbAction::List => ("GET", base, String::new()),
        DbAction::Get { name } => ("GET", format!("{base}/{}", enc(&name)), String::new()),
        DbAction::Delete { name } => ("DELETE", format!("{base}/{}", enc(&name)), String::new()),
        DbAction::Reset { name } => (
            "POST",
            format!("{base}/{}/reset", enc(&name)),
            String::new(),
        ),
        DbAction::Claim { name } => (
            "POST",
            format!("{base}/{}/claim", enc(&name)),
            String::new(),
        ),
    };
    call(&url, &token, method, &target, body)
}

/// Sends one admin request; prints the JSON answer, or fails with the status and answer.
fn call(url: &str, token: &str, method: &str, target: &str, body: String) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let (status, text) = rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(
                config::ADMIN_CLIENT_TIMEOUT_MS,
            ))
            .build()
            .map_err(|e| e.to_string())?;
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let resp = client
            .request(method, target)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("cannot reach the server at {url}: {e}"))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, text))
    })?;
    let shown = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(text);
    if status.is_success() {
        println!("{shown}");
        Ok(())
    } else {
        Err(format!("the server answered {status}: {shown}"))
    }
}

/// The admin token in a data directory's `credentials.json`.
fn stored_admin_token(dir: PathBuf) -> Result<String, String> {
    let path = dir.join("credentials.json");
    let text = std::fs::read(&path).map_err(|e| {
        format!(
            "no admin token: give --admin-token or TIDEPOOL_ADMIN_TOKEN, or --data DIR of the server ({}: {e})",
            path.display()
        )
    })?;
    let v: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
    v.get("admin_token")
        .and_then(|t| t.as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "{} holds no admin token; start the server once",
                path.display()
            )
        })
}
