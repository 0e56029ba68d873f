//! Reading the `Upstash-*` configuration of a publish: from HTTP headers, from lowercase query
//! parameters, or from a batch item's `headers` object, all into one `Conf`.
//!
//! The prefixes nest: `Upstash-Callback-X` configures the callback message exactly as
//! `Upstash-X` configures the message itself (the workflow SDK sends
//! `Upstash-Callback-Failure-Callback-*`), so `parse` calls itself on the stripped names, at most
//! `DELIVERY_CALLBACK_NESTING_MAX` levels down.

use super::model::{Conf, Hook};
use crate::config::{
    DELIVERY_CALLBACK_NESTING_MAX, DELIVERY_DELAY_MS_MAX, DELIVERY_NOT_BEFORE_S_MAX,
    DELIVERY_PARSED_URLS_MAX, DELIVERY_PARSED_URL_BYTES_MAX,
};

/// What a publish request says besides the per-message configuration.
#[derive(Debug, Default)]
pub struct Extra {
    pub cron: Option<String>,
    pub schedule_id: Option<String>,
    pub queue_name: Option<String>,
    /// `Upstash-Header-Forward: true`: forward every incoming header.
    pub header_forward: bool,
}

/// Go's `CanonicalMIMEHeaderKey`: first letter and each letter after `-` upper-case, the rest
/// lower-case. Names with characters outside a token are returned unchanged, as Go does.
pub fn canonical(name: &str) -> String {
    let ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !ok {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
        upper = c == '-';
    }
    out
}

/// A duration such as `10s`, `1d10h30m`, `500ms`; a bare number is seconds. Returns ms.
pub fn duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || {
        format!("invalid duration '{text}': use a number of seconds or a form such as 10s, 5m, 1h or 1d10h30m")
    };
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = t.parse::<u64>() {
        return n.checked_mul(1000).ok_or_else(bad);
    }
    let mut total: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit_ms: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

fn is_true(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

/// Parses configuration pairs whose names are already lower-case and stripped of `upstash-`.
/// Names that are not configuration (telemetry, unknown) are ignored, never forwarded.
pub fn parse(pairs: &[(String, String)], extra: &mut Extra) -> Result<Conf, String> {
    parse_nested(pairs, extra, 0)
}

/// `parse` for a configuration `depth` callbacks down from the message's own.
fn parse_nested(
    pairs: &[(String, String)],
    extra: &mut Extra,
    depth: usize,
) -> Result<Conf, String> {
    let mut c = Conf::default();
    let mut cb: Vec<(String, String)> = Vec::new();
    let mut fcb: Vec<(String, String)> = Vec::new();
    let mut cb_url = None;
    let mut fcb_url = None;
    for (name, value) in pairs {
        let v = value.trim();
        let id_like = matches!(
            name.as_str(),
            "workflow-runid"
                | "deduplication-id"
                | "flow-control-key"
                | "schedule-id"
                | "queue-name"
        );
        let too_long = if name == "label" {
            v.split(',')
                .any(|l| l.trim().len() > crate::config::DELIVERY_ID_BYTES_MAX)
        } else {
            id_like && v.len() > crate::config::DELIVERY_ID_BYTES_MAX
        };
        if too_long {
            return Err(format!(
                "invalid Upstash-{}: longer than {} bytes",
                canonical(name),
                crate::config::DELIVERY_ID_BYTES_MAX
            ));
        }
        if let Some(rest) = name.strip_prefix("failure-callback-") {
            fcb.push((rest.to_string(), value.clone()));
            continue;
        }
        if let Some(rest) = name.strip_prefix("callback-") {
            cb.push((rest.to_string(), value.clone()));
            continue;
        }
        if let Some(h) = name.strip_prefix("forward-") {
            if !h.is_empty() {
                c.forward.push((canonical(h), value.clone()));
            }
            continue;
        }
        match name.as_str() {
            "method" => {
                let m = v.to_ascii_uppercase();
                if !matches!(
                    m.as_str(),
                    "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS"
                ) {
                    return Err(format!("invalid method '{v}'"));
                }
                c.method = Some(m);
            }
            "retries" => {
                c.retries = Some(
                    v.parse()
                        .map_err(|_| format!("invalid Upstash-Retries '{v}': not a number"))?,
                )
            }
            "retry-delay" => {
                super::retry::check_expression(v)?;
                c.retry_delay = Some(v.to_string());
            }
            "timeout" => c.timeout_ms = Some(duration_ms(v)?),
            "delay" => {
                let ms = duration_ms(v)?;
                if ms > DELIVERY_DELAY_MS_MAX {
                    return Err(format!(
                        "invalid Upstash-Delay '{v}': longer than the longest delay, {} days",
                        DELIVERY_DELAY_MS_MAX / 86_400_000
                    ));
                }
                c.delay_ms = Some(ms);
            }
            "not-before" => {
                let s: u64 = v
                    .parse()
                    .map_err(|_| format!("invalid Upstash-Not-Before '{v}': use unix seconds"))?;
                if s > DELIVERY_NOT_BEFORE_S_MAX {
                    return Err(format!(
                        "invalid Upstash-Not-Before '{v}': later than the last accepted time, {DELIVERY_NOT_BEFORE_S_MAX} (9999-12-31)"
                    ));
                }
                c.not_before_ms = Some(s * 1000);
            }
            "callback" => cb_url = Some(v.to_string()),
            "failure-callback" => fcb_url = Some(v.to_string()),
            "deduplication-id" => c.dedup_id = Some(v.to_string()),
            "content-based-deduplication" => c.content_dedup = is_true(v),
            "label" => {
                c.labels = v
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            }
            "flow-control-key" => c.flow_key = Some(v.to_string()),
            "flow-control-value" => flow_value(v, &mut c)?,
            "cron" => extra.cron = Some(v.to_string()),
            "schedule-id" => extra.schedule_id = Some(v.to_string()),
            "queue-name" => extra.queue_name = Some(v.to_string()),
            "header-forward" => extra.header_forward = is_true(v),
            "redact-fields" => {
                for f in v.split(',').map(str::trim).filter(|f| !f.is_empty()) {
                    let lower = f.to_ascii_lowercase();
                    let field = if lower == "headers" || lower == "header" {
                        "header".to_string()
                    } else if let Some(name) = lower
                        .strip_prefix("header[")
                        .or_else(|| lower.strip_prefix("headers["))
                        .and_then(|n| n.strip_suffix(']'))
                    {
                        format!("header[{}]", canonical(name))
                    } else if lower == "body" {
                        "body".to_string()
                    } else {
                        return Err(format!(
                            "invalid Upstash-Redact-Fields entry '{f}': use body, header or header[Name]"
                        ));
                    };
                    c.redact.push(field);
                }
            }
            n if n.starts_with("workflow-") || n == "feature-set" => c
                .workflow
                .push((canonical(&format!("upstash-{n}")), value.clone())),
            _ => {}
        }
    }
    if (cb_url.is_some() || fcb_url.is_some()) && depth >= DELIVERY_CALLBACK_NESTING_MAX {
        return Err(format!(
            "invalid callback configuration: callbacks nest at most {DELIVERY_CALLBACK_NESTING_MAX} levels deep (Upstash-Callback-Callback-...)"
        ));
    }
    if let Some(url) = cb_url {
        check_url(&url)?;
        let conf = parse_nested(&cb, &mut Extra::default(), depth + 1)?;
        c.callback = Some(Box::new(Hook { url, conf }));
    }
    if let Some(url) = fcb_url {
        check_url(&url)?;
        let conf = parse_nested(&fcb, &mut Extra::default(), depth + 1)?;
        c.failure_callback = Some(Box::new(Hook { url, conf }));
    }
    if c.flow_key.is_some() && c.period_s.is_none() && (c.rate.is_some() || c.parallelism.is_some())
    {
        c.period_s = Some(1);
    }
    Ok(c)
}

fn flow_value(v: &str, c: &mut Conf) -> Result<(), String> {
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, val) = part
            .split_once('=')
            .ok_or_else(|| format!("invalid flow control value '{part}': use key=value"))?;
        let (k, val) = (k.trim().to_ascii_lowercase(), val.trim());
        let num = || {
            val.parse::<u32>()
                .map_err(|_| format!("invalid flow control {k} '{val}'"))
        };
        match k.as_str() {
            "parallelism" => c.parallelism = Some(num()?),
            "rate" => c.rate = Some(num()?),
            "period" => {
                let ms = duration_ms(val)?;
                if ms > crate::config::FLOW_CONTROL_PERIOD_MS_MAX {
                    return Err("flow control period is at most one week".into());
                }
                c.period_s = Some((ms / 1000).max(1));
            }
            _ => return Err(format!("unknown flow control key '{k}'")),
        }
    }
    Ok(())
}

/// A destination must be an absolute http(s) URL with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            format!("invalid destination url '{url}': endpoint has invalid scheme, add http:// or https://")
        })?;
    let host = rest.split(['/', '?']).next().unwrap_or("");
    if host.is_empty() {
        return Err(format!("invalid destination url '{url}': no host"));
    }
    // The whole URL as the outbound client will read it: a bracket left open, a port past
    // 65535 or a character no URL may hold is refused now, not at delivery time.
    remembered(&ACCEPTED_URLS, url, || match reqwest::Url::parse(url) {
        Ok(u) if u.host().is_some() => Ok(()),
        Ok(_) => Err(format!("invalid destination url '{url}': no host")),
        Err(e) => Err(format!("invalid destination url '{url}': {e}")),
    })
}

/// A thread's cache of what URLs gave: keyed by the URL's text, emptied when it holds
/// `DELIVERY_PARSED_URLS_MAX`.
pub(crate) type UrlCache<V> =
    std::thread::LocalKey<std::cell::RefCell<std::collections::HashMap<Box<str>, V>>>;

/// What `make` gives for `url`, from `cache` when an earlier call kept it. Only answers that
/// are `Ok` are kept, and none for a URL longer than `DELIVERY_PARSED_URL_BYTES_MAX`: a bad or
/// a very long URL is worked out every time. Used by the HTTP threads (`check_url`) and the
/// delivery thread (its parsed destinations), each with a cache of its own.
pub(crate) fn remembered<V: Clone, E>(
    cache: &'static UrlCache<V>,
    url: &str,
    make: impl FnOnce() -> Result<V, E>,
) -> Result<V, E> {
    if url.len() > DELIVERY_PARSED_URL_BYTES_MAX {
        return make();
    }
    if let Some(v) = cache.with(|c| c.try_borrow().ok()?.get(url).cloned()) {
        return Ok(v);
    }
    let v = make()?;
    cache.with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            if c.len() >= DELIVERY_PARSED_URLS_MAX {
                c.clear();
            }
            c.insert(url.into(), v.clone());
        }
    });
    Ok(v)
}

thread_local! {
    /// Destinations `check_url` accepted before on this thread: a burst of publishes to one
    /// URL parses it once, not once a publish (2 % of the HTTP thread in such a burst).
    static ACCEPTED_URLS: std::cell::RefCell<std::collections::HashMap<Box<str>, ()>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The `Upstash-*` pairs of an HTTP request: headers, then lowercase query parameters (which
/// win). Names come back lower-case without the `upstash-` prefix.
pub fn pairs_from_request(
    headers: &hyper::HeaderMap,
    query: &[(String, String)],
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in headers {
        if let Some(rest) = name.as_str().strip_prefix("upstash-") {
            out.push((
                rest.to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            ));
        }
    }
    for (k, v) in query {
        if let Some(rest) = k.to_ascii_lowercase().strip_prefix("upstash-") {
            out.push((rest.to_string(), v.clone()));
        }
    }
    out
}

/// A header's value as a JSON object gives it (a batch item's or a URL group's headers, an
/// invoker's): a string, or an array of strings joined by commas; None for null.
pub fn header_value(v: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    Some(match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        Value::Null => return None,
        other => other.to_string(),
    })
}

/// Headers given as a JSON object (a batch item's, an invoker's), read once: the `Upstash-*`
/// configuration pairs (prefix gone, lower case), the content type, and every header as given.
#[derive(Default)]
pub struct JsonHeaders {
    pub pairs: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub all: Vec<(String, String)>,
}

pub fn json_headers(h: Option<&serde_json::Map<String, serde_json::Value>>) -> JsonHeaders {
    let mut out = JsonHeaders::default();
    for (k, v) in h.into_iter().flatten() {
        let Some(val) = header_value(v) else {
            continue;
        };
        let lk = k.to_ascii_lowercase();
        if lk == "content-type" {
            out.content_type = Some(val.clone());
        } else if let Some(rest) = lk.strip_prefix("upstash-") {
            out.pairs.push((rest.to_string(), val.clone()));
        }
        out.all.push((k.clone(), val));
    }
    out
}

/// A message body given as a JSON value: a string as its bytes, nothing for null or absent,
/// anything else as its JSON text.
pub fn json_body(v: Option<&serde_json::Value>) -> Vec<u8> {
    match v {
        Some(serde_json::Value::String(s)) => s.clone().into_bytes(),
        Some(serde_json::Value::Null) | None => Vec::new(),
        Some(other) => other.to_string().into_bytes(),
    }
}

/// Headers as given (a URL group's default headers) as configuration pairs: `Upstash-` gone,
/// lower case, others dropped.
pub fn default_pairs(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| {
            let lk = k.to_ascii_lowercase();
            lk.strip_prefix("upstash-")
                .map(|r| (r.to_string(), v.clone()))
        })
        .collect()
}

/// Names that are valid for queues and schedule ids: letters, digits, `-`, `_`, `.`.
/// The error for a name `valid_name` refused (`what`: "queue", "URL group"), showing at most
/// 64 characters of it: a request may send a name of any length.
pub fn invalid_name(what: &str, name: &str) -> String {
    let shown: String = name.chars().take(64).collect();
    let more = if shown.len() < name.len() { "..." } else { "" };
    format!(
        "invalid {what} name '{shown}{more}': use letters, digits, '-', '_' and '.', at most {} bytes",
        crate::config::DELIVERY_NAME_BYTES_MAX
    )
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= crate::config::DELIVERY_NAME_BYTES_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the cache of accepted destinations: a URL accepted before is accepted again, a
    /// bad one is refused however often it comes (only accepted ones are kept), and one longer
    /// than the cache keeps is checked in full every time.
    #[test]
    fn check_url_answers_the_same_from_its_cache() {
        for _ in 0..3 {
            assert_eq!(check_url("http://127.0.0.1:9/a"), Ok(()));
            assert!(check_url("http://[::1/a").is_err());
            assert!(check_url("http://h:99999/").is_err());
        }
        let long = format!("http://h/{}", "a".repeat(DELIVERY_PARSED_URL_BYTES_MAX));
        assert_eq!(check_url(&long), Ok(()));
        assert_eq!(check_url(&long), Ok(()));
        let long_bad = format!(
            "http://h:99999/{}",
            "a".repeat(DELIVERY_PARSED_URL_BYTES_MAX)
        );
        assert!(check_url(&long_bad).is_err());
        for i in 0..DELIVERY_PARSED_URLS_MAX + 5 {
            assert_eq!(check_url(&format!("http://h/{i}")), Ok(()));
        }
        assert!(ACCEPTED_URLS.with(|c| c.borrow().len()) <= DELIVERY_PARSED_URLS_MAX);
        assert!(check_url("http://h:99999/").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms("10s"), Ok(10_000));
        assert_eq!(duration_ms("30"), Ok(30_000));
        assert_eq!(
            duration_ms("1d10h30m"),
            Ok(86_400_000 + 36_000_000 + 1_800_000)
        );
        assert_eq!(duration_ms("250ms"), Ok(250));
        assert!(duration_ms("10x").is_err());
        assert!(duration_ms("").is_err());
        assert!(duration_ms("s").is_err());
    }

    #[test]
    fn canonical_names() {
        assert_eq!(
            canonical("upstash-workflow-runid"),
            "Upstash-Workflow-Runid"
        );
        assert_eq!(canonical("content-TYPE"), "Content-Type");
        assert_eq!(canonical("x y"), "x y");
    }

    #[test]
    fn nested_callbacks() {
        let p = |k: &str, v: &str| (k.to_string(), v.to_string());
        let pairs = vec![
            p("callback", "http://cb"),
            p("callback-retries", "1"),
            p("callback-failure-callback", "http://fcb"),
            p("callback-forward-x-a", "1"),
            p("forward-x-tenant", "42"),
            p("telemetry-sdk", "js"),
            p("flow-control-key", "k"),
            p("flow-control-value", "parallelism=2, rate=10"),
        ];
        let c = parse(&pairs, &mut Extra::default()).expect("parses");
        assert_eq!(c.forward, vec![("X-Tenant".to_string(), "42".to_string())]);
        let cb = c.callback.expect("callback");
        assert_eq!(cb.url, "http://cb");
        assert_eq!(cb.conf.retries, Some(1));
        assert_eq!(cb.conf.forward, vec![("X-A".to_string(), "1".to_string())]);
        assert_eq!(cb.conf.failure_callback.expect("nested").url, "http://fcb");
        assert_eq!(
            (c.parallelism, c.rate, c.period_s),
            (Some(2), Some(10), Some(1))
        );
    }

    /// Guards the callback nesting bound: a publish with callbacks nested deeper than
    /// `DELIVERY_CALLBACK_NESTING_MAX` once got into the log, and its record then stopped the
    /// restart (past the log reader's decoding depth); now it is refused, through either prefix.
    #[test]
    fn callbacks_nest_only_to_the_bound() {
        let chain = |levels: usize, prefix: &str| -> Vec<(String, String)> {
            (1..=levels)
                .map(|d| (prefix.repeat(d - 1) + "callback", format!("http://cb{d}")))
                .collect()
        };
        let max = crate::config::DELIVERY_CALLBACK_NESTING_MAX;
        let mut c = parse(&chain(max, "callback-"), &mut Extra::default()).expect("at the bound");
        for d in 1..=max {
            let hook = c.callback.take().expect("a level");
            assert_eq!(hook.url, format!("http://cb{d}"));
            c = hook.conf;
        }
        assert!(c.callback.is_none());
        let err = parse(&chain(max + 1, "callback-"), &mut Extra::default()).expect_err("deeper");
        assert!(err.contains("nest at most"), "{err}");
        // A failure callback's callbacks count the same.
        let mut deep = chain(max, "callback-");
        deep.push((
            "callback-".repeat(max) + "failure-callback",
            "http://f".into(),
        ));
        assert!(parse(&deep, &mut Extra::default()).is_err());
        let fcb: Vec<_> = (1..=max + 1)
            .map(|d| {
                (
                    "failure-callback-".repeat(d - 1) + "failure-callback",
                    "http://f".into(),
                )
            })
            .collect();
        assert!(parse(&fcb, &mut Extra::default()).is_err());
        assert!(parse(&fcb[..max], &mut Extra::default()).is_ok());
    }
}
