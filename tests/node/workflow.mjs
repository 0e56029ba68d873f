// The official @upstash/workflow SDK (and @upstash/qstash underneath) against tidepool: a
// workflow endpoint on loopback runs context.run, context.sleep, context.waitForEvent and
// context.call end to end, started with the SDK's Client.trigger and woken with Client.notify. Exits non-zero on
// any failure. The server binary comes from TIDEPOOL_BIN.
import { spawn } from "node:child_process";
import http from "node:http";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=";
const CURRENT = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r";
const NEXT = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs";
const BIN = process.env.TIDEPOOL_BIN ?? path.resolve("../../target/debug/tidepool");

let base;
async function fail(msg) {
  console.error(`workflow test FAILED: ${msg}`);
  if (base) {
    // What the server did, newest first, to see where the run stopped.
    try {
      const r = await fetch(`${base}/v2/events?count=40`, { headers: { Authorization: `Bearer ${TOKEN}` } });
      for (const e of (await r.json()).events ?? []) {
        console.error(`  ${e.state} ${e.messageId} ${e.url} ${e.responseStatus ?? ""} ${e.error ?? ""}`);
      }
    } catch (e) {
      console.error(`  (no event log: ${e})`);
    }
  }
  process.exit(1);
}
process.on("exit", () => server?.kill("SIGKILL"));
const deadline = setTimeout(() => fail("timed out after 60 s"), 60_000);

// 1. tidepool, with the retry backoff in milliseconds.
const data = fs.mkdtempSync(path.join(os.tmpdir(), "tidepool-wf-"));
var server = spawn(BIN, ["serve", "--listen", "127.0.0.1:0", "--data", data,
  "--qstash-token", TOKEN, "--qstash-current-signing-key", CURRENT,
  "--qstash-next-signing-key", NEXT],
  { env: { ...process.env, TIDEPOOL_RETRY_BACKOFF_UNIT_MS: "1" }, stdio: ["ignore", "pipe", "inherit"] });
base = await new Promise((resolve) => {
  server.stdout.once("data", (d) => resolve(/http:\/\/\S+/.exec(String(d))[0]));
});
process.env.QSTASH_URL = base;
process.env.QSTASH_TOKEN = TOKEN;
process.env.QSTASH_CURRENT_SIGNING_KEY = CURRENT;
process.env.QSTASH_NEXT_SIGNING_KEY = NEXT;
const { serve, Client } = await import("@upstash/workflow");

// 2. The workflow endpoint: a plain Node server in front of the SDK's generic handler.
const trace = [];
let done;
const finished = new Promise((r) => { done = r; });
const { handler: POST } = serve(async (context) => {
  const input = context.requestPayload;
  const a = await context.run("first", async () => {
    trace.push("first");
    return { got: input };
  });
  // Time must come from a step: the route function runs again on every delivery.
  const before = await context.run("before-nap", async () => Date.now());
  await context.sleep("nap", 1);
  const slept = await context.run("after-nap", async () => {
    trace.push("after-nap");
    return Date.now() - before;
  });
  const { eventData, timeout } = await context.waitForEvent("payment", "payment-42", { timeout: "30s" });
  // A third-party call through the service: the response comes back as a callback.
  const call = await context.call("third-party", {
    url: `http://127.0.0.1:${endpoint.address().port}/third-party`,
    method: "POST",
    body: { ask: "price" },
  });
  const result = await context.run("last", async () => {
    trace.push("last");
    return { a, eventData, timeout, slept, call };
  });
  done(result);
  return result;
}, { verbose: Boolean(process.env.WF_VERBOSE) });
const endpoint = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  if (req.url === "/third-party") {
    const asked = JSON.parse(Buffer.concat(chunks).toString() || "{}");
    res.writeHead(201, { "Content-Type": "application/json", "X-Third": "yes" });
    res.end(JSON.stringify({ price: 9, asked: asked.ask }));
    return;
  }
  const url = `http://127.0.0.1:${endpoint.address().port}${req.url}`;
  const request = new Request(url, {
    method: req.method,
    headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
    body: chunks.length ? Buffer.concat(chunks) : undefined,
  });
  try {
    const response = await POST(request);
    const text = Buffer.from(await response.arrayBuffer());
    if (response.status >= 400 || process.env.WF_VERBOSE) {
      console.error(`endpoint answered ${response.status}: ${text}`);
    }
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(text);
  } catch (e) {
    console.error(`endpoint threw: ${e?.stack ?? e}`);
    res.writeHead(500);
    res.end(String(e));
  }
});
await new Promise((r) => endpoint.listen(0, "127.0.0.1", r));
const workflowUrl = `http://127.0.0.1:${endpoint.address().port}/wf`;

// 3. Start it with the SDK's client, wait until it waits, and notify.
const client = new Client({ baseUrl: base, token: TOKEN });
const { workflowRunId } = await client.trigger({ url: workflowUrl, body: { order: 42 } });
if (!workflowRunId?.startsWith("wfr_")) await fail(`trigger answered ${workflowRunId}`);
for (let i = 0; ; i++) {
  const waiters = await client.getWaiters({ eventId: "payment-42" });
  if (waiters.length > 0) break;
  if (i > 400) await fail("the run never waited for payment-42");
  await new Promise((r) => setTimeout(r, 50));
}
const notified = await client.notify({ eventId: "payment-42", eventData: { paid: true } });
if (!Array.isArray(notified) || notified.length !== 1) await fail(`notify answered ${JSON.stringify(notified)}`);

const result = await finished;
// The run deletes itself at the end; give the SDK's DELETE a moment, then it must be gone.
let gone = false;
for (let i = 0; i < 100 && !gone; i++) {
  const r = await fetch(`${base}/v2/workflows/runs/${workflowRunId}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  gone = r.status === 404;
  if (!gone) await new Promise((r) => setTimeout(r, 50));
}
const logs = await client.logs({ workflowRunId });
const run = logs.runs?.[0];
const stepNames = (run?.steps ?? []).flatMap((g) => g.steps.map((x) => x.stepName));
const checks = [
  [run?.workflowState === "RUN_SUCCESS", `client.logs shows the run finished: ${JSON.stringify(run)?.slice(0, 300)}`],
  [["init", "first", "last"].every((n) => stepNames.includes(n)), `client.logs lists the steps: ${JSON.stringify(stepNames)}`],
  [JSON.stringify(trace) === JSON.stringify(["first", "after-nap", "last"]), `steps ran once each, in order: ${JSON.stringify(trace)}`],
  [result.a?.got?.order === 42, `the initial payload reached the first step: ${JSON.stringify(result.a)}`],
  [result.eventData?.paid === true && result.timeout === false, `the event data arrived: ${JSON.stringify(result)}`],
  [result.slept >= 900, `the sleep slept: ${result.slept} ms`],
  [result.call?.status === 201 && result.call?.body?.price === 9 && result.call?.body?.asked === "price",
    `context.call got the third party's answer: ${JSON.stringify(result.call)}`],
  [gone, "the finished run answers 404"],
];
for (const [ok, what] of checks) if (!ok) await fail(what);
console.log(`workflow test passed: run ${workflowRunId}, steps ${JSON.stringify(trace)}, slept ${result.slept} ms`);
clearTimeout(deadline);
server.kill("SIGTERM");
endpoint.close();
fs.rmSync(data, { recursive: true, force: true });
process.exit(0);
