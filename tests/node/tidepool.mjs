// Starts the tidepool binary (TIDEPOOL_BIN) on a free loopback port with a fresh data directory
// for one SDK test, and kills it and removes the directory when the test process exits.
//
// With TIDEPOOL_CLUSTER=follower it starts a cluster of three nodes instead (each with the
// test's flags, on loopback) and answers a follower's URL: every request of the test goes
// through a node that forwards writes to the leader and answers reads itself.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

export const BIN = process.env.TIDEPOOL_BIN ?? path.resolve("../../target/debug/tidepool");
const CLUSTER = process.env.TIDEPOOL_CLUSTER === "follower";
const servers = [];
const dirs = [];
process.on("exit", () => {
  for (const s of servers) s.kill("SIGKILL");
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

/** One `tidepool serve`; resolves to its base URL once it prints its listening line. */
function serveOne(data, args, env) {
  dirs.push(data);
  const server = spawn(BIN, ["serve", "--listen", "127.0.0.1:0", "--data", data, ...args],
    { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] });
  servers.push(server);
  return new Promise((resolve, reject) => {
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on("exit", (c) => reject(new Error(`tidepool exited with ${c}`)));
  });
}

// A loopback port nobody listens on, for a cluster node told its peers' ports in advance. It
// is taken from below the kernel's ephemeral range, each port once: a port from listen(0) may
// be the very one the next listen(0) answers again once closed, or the kernel's pick for an
// outgoing connection, and a node then failed with "Address already in use".
let nextPort = 0;
function ephemeralLow() {
  try {
    return Math.min(32768, Number(fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").split(/\s+/)[0]) || 32768);
  } catch {
    return 32768;
  }
}

function listens(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

async function freePort() {
  const low = 20000;
  const span = ephemeralLow() - low;
  if (span >= 1000) {
    const base = (process.pid * 7919) % span;
    for (let tries = 0; tries < span; tries++) {
      const port = low + ((base + nextPort++) % span);
      if (await listens(port)) return port;
    }
  }
  return await new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function admin(url, method, route, token) {
  const r = await fetch(url + route, { method, headers: { Authorization: `Bearer ${token}` } });
  if (!r.ok) throw new Error(`${method} ${route}: ${r.status} ${await r.text()}`);
  return await r.json();
}

/** Three nodes made one cluster; a follower's URL. */
async function startCluster(tag, args, env) {
  let token = "sdk-cluster-admin-token";
  const i = args.indexOf("--admin-token");
  if (i >= 0) token = args[i + 1];
  else args = [...args, "--admin-token", token];
  const ports = [await freePort(), await freePort(), await freePort()];
  const nodeDirs = [0, 1, 2].map((n) => fs.mkdtempSync(path.join(os.tmpdir(), `tidepool-${tag}-n${n + 1}-`)));
  const urls = [];
  for (let n = 0; n < 3; n++) {
    const peers = [0, 1, 2].filter((j) => j !== n).map((j) => `${j + 1}=127.0.0.1:${ports[j]}`).join(",");
    // The tokens of databases derive from the credentials: the same on every node.
    if (n > 0) fs.copyFileSync(path.join(nodeDirs[0], "credentials.json"), path.join(nodeDirs[n], "credentials.json"));
    urls.push(await serveOne(nodeDirs[n], [...args, "--node-id", String(n + 1),
      "--cluster-listen", `127.0.0.1:${ports[n]}`, "--peers", peers,
      "--cluster-secret", "the SDK suites' cluster secret"], env));
  }
  await admin(urls[0], "POST", "/_admin/cluster/init", token);
  const deadline = Date.now() + 20_000;
  for (;;) {
    const status = await Promise.all(urls.map((u) => admin(u, "GET", "/_admin/cluster/status", token)));
    if (status.some((s) => s.takes_writes)) {
      const f = status.findIndex((s) => !s.takes_writes && s.leader);
      if (f >= 0) return urls[f];
    }
    if (Date.now() > deadline) throw new Error(`no leader within 20 s: ${JSON.stringify(status)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Resolves to the server's base URL (a follower's, in cluster mode). */
export async function startTidepool(tag, args, env = {}) {
  if (CLUSTER) return await startCluster(tag, args, env);
  const data = fs.mkdtempSync(path.join(os.tmpdir(), `tidepool-${tag}-`));
  return await serveOne(data, args, env);
}

/** Stops every server this process started (SIGTERM). */
export function stopTidepool() {
  for (const s of servers) s.kill("SIGTERM");
}
