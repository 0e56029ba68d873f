//! The cluster's figures (`tidepool-bench --cluster`, issue 30): three nodes on this machine
//! (one disk, two cores, so reported, not gated) against one node, in the same run:
//!
//! - durable SET (`--fsync always`, wrk at C connections) on the leader, against one node;
//! - GET on a follower, against one node;
//! - the time from a leader's `kill -9` to the first write acknowledged through a surviving
//!   node (a follower forwards it to whichever node leads), over R rounds: the killed node
//!   comes back on its directory before the next;
//! - the time an empty fourth node takes to join and catch up at 1,000,000 keys.

use super::{free_port, request, tidepool_with, wrk, Proc};
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

const ADMIN: &str = "bench-admin";
const SECRET: &str = "bench-cluster-secret-0123456789";

/// One request on a fresh connection, with a deadline; its status and body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok();
    s.write_all(request(method, path, token, body).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    super::read_response(&mut s, &mut buf)
        .map(|(status, b)| (status, String::from_utf8_lossy(&b).into_owned()))
}

struct Node {
    proc: Option<Proc>,
    port: u16,
}

fn start(bin: &Path, dir: &Path, id: usize, cports: &[u16; 3]) -> Result<Node, String> {
    let peers: Vec<String> = (0..3)
        .filter(|j| *j + 1 != id)
        .map(|j| format!("{}=127.0.0.1:{}", j + 1, cports[j]))
        .collect();
    let (id_s, listen, peers) = (
        id.to_string(),
        format!("127.0.0.1:{}", cports[id - 1]),
        peers.join(","),
    );
    let (proc, port) = tidepool_with(
        bin,
        dir,
        "always",
        &[
            "--admin-token",
            ADMIN,
            "--node-id",
            &id_s,
            "--cluster-listen",
            &listen,
            "--peers",
            &peers,
            "--cluster-secret",
            SECRET,
        ],
    )?;
    Ok(Node {
        proc: Some(proc),
        port,
    })
}

/// The index of the node that takes writes, within 20 s.
fn leader(nodes: &[Node]) -> Result<usize, String> {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        for (i, n) in nodes.iter().enumerate() {
            if n.proc.is_none() {
                continue;
            }
            if let Ok((200, b)) = http(n.port, "GET", "/_admin/cluster/status", ADMIN, "") {
                if b.contains("\"takes_writes\":true") {
                    return Ok(i);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("no leader within 20 s".into())
}

pub fn run(bin: &Path, tmp: &Path, rounds: usize, seconds: u64, conns: u32) -> Result<(), String> {
    let cports = [free_port(), free_port(), free_port()];
    let dirs: Vec<_> = (1..=3).map(|i| tmp.join(format!("node{i}"))).collect();
    let mut nodes = vec![start(bin, &dirs[0], 1, &cports)?];
    for d in &dirs[1..] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
        std::fs::copy(dirs[0].join("credentials.json"), d.join("credentials.json"))
            .map_err(|e| e.to_string())?;
    }
    nodes.push(start(bin, &dirs[1], 2, &cports)?);
    nodes.push(start(bin, &dirs[2], 3, &cports)?);
    let (s, b) = http(nodes[0].port, "POST", "/_admin/cluster/init", ADMIN, "")?;
    if s != 200 {
        return Err(format!("cluster init answered {s}: {b}"));
    }
    let li = leader(&nodes)?;
    let fi = (li + 1) % 3;
    http(nodes[li].port, "GET", "/set/k/v", "bench", "")?;
    std::thread::sleep(Duration::from_millis(300));

    // One node beside it, same flags but no cluster.
    let single_dir = tmp.join("single");
    let (single, sport) = tidepool_with(bin, &single_dir, "always", &[])?;
    http(sport, "GET", "/set/k/v", "bench", "")?;
    let url = |p: u16, path: &str| format!("http://127.0.0.1:{p}{path}");
    let set_one = wrk(&url(sport, "/set/k/v"), seconds, conns, None, Some("bench"))?;
    let set_three = wrk(
        &url(nodes[li].port, "/set/k/v"),
        seconds,
        conns,
        None,
        Some("bench"),
    )?;
    let get_one = wrk(&url(sport, "/get/k"), seconds, conns, None, Some("bench"))?;
    let get_follower = wrk(
        &url(nodes[fi].port, "/get/k"),
        seconds,
        conns,
        None,
        Some("bench"),
    )?;
    drop(single);

    // Failover: kill -9 the leader, then write through a surviving node until one is
    // acknowledged.
    let mut failovers = Vec::new();
    for round in 0..rounds {
        let li = leader(&nodes)?;
        let survivor = (li + 1) % 3;
        nodes[li].proc = None;
        let killed = Instant::now();
        loop {
            if killed.elapsed() > Duration::from_secs(30) {
                return Err(format!("round {round}: no write acknowledged within 30 s"));
            }
            if let Ok((200, b)) = http(
                nodes[survivor].port,
                "GET",
                &format!("/set/after/{round}"),
                "bench",
                "",
            ) {
                if b.contains("OK") {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        failovers.push(killed.elapsed().as_secs_f64() * 1000.0);
        nodes[li] = start(bin, &dirs[li], li + 1, &cports)?;
        // Back as a follower, and caught up, before the next kill.
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let last = http(nodes[li].port, "GET", "/get/after", "bench", "");
            if let Ok((200, b)) = &last {
                let want = format!("\"{round}\"");
                if b.contains(&want) {
                    break;
                }
            }
            if Instant::now() > until {
                return Err(format!(
                    "round {round}: the killed node did not catch up (it answered {last:?})"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Catch-up: 1,000,000 keys written, then a fourth node, empty, joins and catches up
    // (from the leader's snapshot and the log after it).
    let li = leader(&nodes)?;
    let mut body = String::from("[");
    for batch in 0..1000u64 {
        body.clear();
        body.push('[');
        for i in 0..1000u64 {
            if i > 0 {
                body.push(',');
            }
            let k = batch * 1000 + i;
            body.push_str(&format!("[\"SET\",\"key:{k}\",\"value:{k}\"]"));
        }
        body.push(']');
        let (s, b) = http(nodes[li].port, "POST", "/pipeline", "bench", &body)?;
        if s != 200 {
            return Err(format!("filling: {s} {b}"));
        }
    }
    let p4 = free_port();
    let dir4 = tmp.join("node4");
    std::fs::create_dir_all(&dir4).map_err(|e| e.to_string())?;
    std::fs::copy(
        dirs[0].join("credentials.json"),
        dir4.join("credentials.json"),
    )
    .map_err(|e| e.to_string())?;
    let peers: Vec<String> = (0..3)
        .map(|j| format!("{}=127.0.0.1:{}", j + 1, cports[j]))
        .collect();
    let (listen4, peers4) = (format!("127.0.0.1:{p4}"), peers.join(","));
    let (_fourth, port4) = tidepool_with(
        bin,
        &dir4,
        "always",
        &[
            "--admin-token",
            ADMIN,
            "--node-id",
            "4",
            "--cluster-listen",
            &listen4,
            "--peers",
            &peers4,
            "--cluster-secret",
            SECRET,
        ],
    )?;
    let joined = Instant::now();
    let add = format!("{{\"id\":4,\"address\":\"{listen4}\"}}");
    let mut s = TcpStream::connect(("127.0.0.1", nodes[li].port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(600))).ok();
    s.write_all(request("POST", "/_admin/cluster/nodes", ADMIN, &add).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let (status, answer) = super::read_response(&mut s, &mut buf)?;
    if status != 200 {
        return Err(format!(
            "add-node answered {status}: {}",
            String::from_utf8_lossy(&answer)
        ));
    }
    // add-node answers once the new node's log has caught up; it serves the last key once
    // it has applied it too.
    loop {
        if let Ok((200, b)) = http(port4, "GET", "/get/key:999999", "bench", "") {
            if b.contains("value:999999") {
                break;
            }
        }
        if joined.elapsed() > Duration::from_secs(600) {
            return Err("the new node did not catch up within 600 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let catch_up = joined.elapsed().as_secs_f64();
    failovers.sort_by(f64::total_cmp);
    let median = failovers[failovers.len() / 2];
    let max = failovers.last().copied().unwrap_or(0.0);

    println!("| measure | three nodes | one node | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| durable SET (`--fsync always`), {conns} connections, on the leader | {:.0} req/s, p99 {:.2} ms | {:.0} req/s, p99 {:.2} ms | {:.2}x |",
        set_three.rps, set_three.p99_ms, set_one.rps, set_one.p99_ms, set_three.rps / set_one.rps
    );
    println!(
        "| GET, {conns} connections, on a follower | {:.0} req/s, p99 {:.2} ms | {:.0} req/s, p99 {:.2} ms | {:.2}x |",
        get_follower.rps, get_follower.p99_ms, get_one.rps, get_one.p99_ms, get_follower.rps / get_one.rps
    );
    println!(
        "| leader `kill -9` to the first write acknowledged through a surviving node, {rounds} rounds | median {median:.0} ms, max {max:.0} ms | | target <= 2,000 ms |"
    );
    println!(
        "| an empty node joining at 1,000,000 keys: from `add-node` until it serves the last key | {catch_up:.1} s | | |"
    );
    Ok(())
}
