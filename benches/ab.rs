//! An A/B of the single server: this build's tidepool against another binary (`--against
//! PATH`, for example the main before a change), same machine, same run, on the load form's
//! workloads: GET, SET (`--fsync never`), durable SET (`--fsync always`) and `/pipeline` of 100
//! SETs, wrk at C connections. Each round runs both, the first of the two alternating from one
//! round to the next; the median round of each is reported.
//!
//!     target/release/tidepool-bench --against OTHER [--rounds R] [--seconds N]

use super::{median, tidepool, wrk, Result_};
use std::path::Path;

/// Both binaries on one workload: the median of each, ours first.
fn alternate(
    rounds: usize,
    ours: &dyn Fn() -> Result<Result_, String>,
    theirs: &dyn Fn() -> Result<Result_, String>,
) -> Result<(Result_, Result_), String> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        if r % 2 == 0 {
            a.push(ours()?);
            b.push(theirs()?);
        } else {
            b.push(theirs()?);
            a.push(ours()?);
        }
    }
    Ok((median(a), median(b)))
}

pub fn run(
    bin: &Path,
    other: &Path,
    tmp: &Path,
    pipeline_script: &Path,
    rounds: usize,
    seconds: u64,
    conns: u32,
) -> Result<(), String> {
    let bench = Some("bench");
    let mut rows = Vec::new();
    for fsync in ["never", "always"] {
        let (_a, aport) = tidepool(bin, &tmp.join(format!("ab-ours-{fsync}")), fsync)?;
        let (_b, bport) = tidepool(other, &tmp.join(format!("ab-theirs-{fsync}")), fsync)?;
        let (a, b) = (
            format!("http://127.0.0.1:{aport}"),
            format!("http://127.0.0.1:{bport}"),
        );
        for url in [&a, &b] {
            wrk(&format!("{url}/set/key/value"), 1, conns, None, bench)?; // warm up
        }
        let workloads: Vec<(&str, &str, Option<&Path>)> = if fsync == "never" {
            vec![
                ("GET", "/get/key", None),
                ("SET", "/set/key/value", None),
                (
                    "/pipeline of 100 SETs (commands/s)",
                    "/pipeline",
                    Some(pipeline_script),
                ),
            ]
        } else {
            vec![("durable SET (--fsync always)", "/set/key/value", None)]
        };
        for (name, path, script) in workloads {
            let (ours, theirs) = alternate(
                rounds,
                &|| wrk(&format!("{a}{path}"), seconds, conns, script, bench),
                &|| wrk(&format!("{b}{path}"), seconds, conns, script, bench),
            )?;
            // A pipeline request holds 100 commands.
            let per = if script.is_some() { 100.0 } else { 1.0 };
            rows.push((name, ours, theirs, per));
        }
    }
    println!(
        "| workload | this build req/s | p50 / p99 ms | {} req/s | p50 / p99 ms | ratio |",
        other.display()
    );
    println!("|---|---|---|---|---|---|");
    for (name, a, b, per) in rows {
        println!(
            "| {name} | {:.0} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} | {:.2}x |",
            a.rps * per,
            a.p50_ms,
            a.p99_ms,
            b.rps * per,
            b.p50_ms,
            b.p99_ms,
            a.rps / b.rps
        );
    }
    Ok(())
}
