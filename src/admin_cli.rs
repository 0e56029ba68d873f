//! `tidepool db ...`: the admin API from the command line, talking to a running server.
//!
//! The admin token comes from `--admin-token`, `TIDEPOOL_ADMIN_TOKEN`, or the server's data
//! directory (`--data`, `TIDEPOOL_DATA`, `./tidepool-data`), whose `credentials.json` holds it.

use crate::config;
use std::path::PathBuf;

const USAGE: &str = "usage: tidepool db create [NAME] [--script-time-limit-ms MS] [--max-data-bytes B] | list | get NAME | delete NAME | reset NAME | claim NAME [--url URL] [--admin-token A] [--data DIR]";

/// Runs one `tidepool db` command; prints the server's JSON answer.
pub fn run(args: &[String]) -> Result<(), String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut url = env("TIDEPOOL_URL");
    let mut token = env("TIDEPOOL_ADMIN_TOKEN");
    let mut data = env("TIDEPOOL_DATA");
    let mut script_ms = None;
    let mut max_data = None;
    let mut words = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let (flag, inline) = config::split_flag(&args[i]);
        let slot = match flag.as_str() {
            "--url" => &mut url,
            "--admin-token" => &mut token,
            "--data" => &mut data,
            "--script-time-limit-ms" => &mut script_ms,
            "--max-data-bytes" => &mut max_data,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            f if f.starts_with("--") => return Err(format!("usage: unknown flag '{f}'")),
            _ => {
                words.push(args[i].clone());
                i += 1;
                continue;
            }
        };
        *slot = Some(config::flag_value(args, &mut i, &flag, inline)?);
    }
    let url = url
        .unwrap_or_else(|| format!("http://{}", config::LISTEN_DEFAULT))
        .trim_end_matches('/')
        .to_string();
    let token = match token {
        Some(t) => t,
        None => stored_admin_token(PathBuf::from(
            data.unwrap_or_else(|| config::DATA_DIR_DEFAULT.into()),
        ))?,
    };
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
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
    let number = |flag: &str, v: &Option<String>| -> Result<Option<u64>, String> {
        v.as_deref()
            .map(|t| {
                t.parse::<u64>()
                    .map_err(|_| format!("usage: {flag} takes a whole number, not '{t}'"))
            })
            .transpose()
    };
    let mut settings = serde_json::Map::new();
    if let Some(ms) = number("--script-time-limit-ms", &script_ms)? {
        settings.insert("script_time_limit_ms".into(), ms.into());
    }
    if let Some(b) = number("--max-data-bytes", &max_data)? {
        settings.insert("max_data_bytes".into(), b.into());
    }
    if !settings.is_empty() && words.first() != Some(&"create") {
        return Err(
            "usage: --script-time-limit-ms and --max-data-bytes are set when a database is created"
                .into(),
        );
    }
    let (method, target, body) = match words.as_slice() {
        ["create"] => (
            "POST",
            base,
            serde_json::Value::Object(settings).to_string(),
        ),
        ["create", name] => {
            settings.insert("name".into(), (*name).into());
            (
                "POST",
                base,
                serde_json::Value::Object(settings).to_string(),
            )
        }
        ["list"] => ("GET", base, String::new()),
        ["get", name] => ("GET", format!("{base}/{}", enc(name)), String::new()),
        ["delete", name] => ("DELETE", format!("{base}/{}", enc(name)), String::new()),
        ["reset", name] => ("POST", format!("{base}/{}/reset", enc(name)), String::new()),
        ["claim", name] => ("POST", format!("{base}/{}/claim", enc(name)), String::new()),
        _ => return Err(USAGE.to_string()),
    };
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
            .request(method, &target)
            .bearer_auth(&token)
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
