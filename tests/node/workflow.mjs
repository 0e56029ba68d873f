// The official @upstash/workflow SDK (and @upstash/qstash underneath) against tidepool: a
// workflow endpoint on loopback runs context.run, context.sleep, context.waitForEvent and
// context.call end to end, started with the SDK's Client.trigger and woken with Client.notify;
// and a failing run through client.dlq (list, retryFailureFunction, resume); and runs started
// with the REST API's POST /v2/trigger and /v2/batch/trigger; and context.invoke of another
// workflow, whose result the server hands back. Exits non-zero on any failure. The server binary comes from TIDEPOOL_BIN.
import http from "node:http";
import { startTidepool, stopTidepool } from "./tidepool.mjs";

const TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=";
const CURRENT = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r";
const NEXT = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs";

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
const deadline = setTimeout(() => fail("timed out after 60 s"), 60_000);

// 1. tidepool (three nodes, and a follower's URL, with TIDEPOOL_CLUSTER=follower), with the
// retry backoff in milliseconds.
base = await startTidepool("wf", ["--qstash-token", TOKEN, "--qstash-current-signing-key", CURRENT,
  "--qstash-next-signing-key", NEXT], { TIDEPOOL_RETRY_BACKOFF_UNIT_MS: "1" });
process.env.QSTASH_URL = base;
process.env.QSTASH_TOKEN = TOKEN;
process.env.QSTASH_CURRENT_SIGNING_KEY = CURRENT;
process.env.QSTASH_NEXT_SIGNING_KEY = NEXT;
// WORKFLOW_SDK picks the SDK release under test (tools/test.sh runs 1.x and 0.2.x).
const SDK = process.env.WORKFLOW_SDK ?? "@upstash/workflow";
const { serve, Client } = await import(SDK);

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
// A second workflow whose second step fails until `flakyOk`: it goes to the DLQ, its failure
// function runs, and the SDK's client.dlq lists it, calls the failure function again, and
// resumes it from the failed step.
let flakyOk = false;
let failureCalls = 0;
const flakyTrace = [];
let flakyDone;
const flakyFinished = new Promise((r) => { flakyDone = r; });
const { handler: FLAKY } = serve(async (context) => {
  const one = await context.run("one", async () => {
    flakyTrace.push("one");
    return 1;
  });
  const two = await context.run("two", async () => {
    if (!flakyOk) {
      flakyTrace.push("two-failed");
      throw new Error("not yet");
    }
    flakyTrace.push("two");
    return 2;
  });
  flakyDone({ one, two });
  return one + two;
}, {
  retries: 0,
  failureFunction: async () => {
    failureCalls++;
    return "handled";
  },
  verbose: Boolean(process.env.WF_VERBOSE),
});
// A third one, started through the REST API's trigger routes instead of the SDK's client.
const simpleResults = [];
const { handler: SIMPLE } = serve(async (context) => {
  const doubled = await context.run("double", async () => context.requestPayload.n * 2);
  simpleResults.push(doubled);
  return doubled;
}, { verbose: Boolean(process.env.WF_VERBOSE) });
// A workflow that invokes another (context.invoke): the server starts the invoked run with
// the payload, and gives its result back to the invoker as the Invoke step's out.
const childWorkflow = { workflowId: "child", options: {} };
const { handler: CHILD } = serve(async (context) => {
  const v = await context.run("child-step", async () => context.requestPayload.x + 1);
  return { doubled: v * 2 };
}, { verbose: Boolean(process.env.WF_VERBOSE) });
let invokeDone;
const invokeFinished = new Promise((r) => { invokeDone = r; });
const { handler: PARENT } = serve(async (context) => {
  const got = await context.invoke("call-child", { workflow: childWorkflow, body: { x: 20 } });
  await context.run("after-invoke", async () => invokeDone(got));
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
    const handler = { "/flaky": FLAKY, "/simple": SIMPLE, "/inv/parent": PARENT, "/inv/child": CHILD }[req.url] ?? POST;
    const response = await handler(request);
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

// The DLQ of workflow runs, through the SDK's client.dlq.
const flakyUrl = `http://127.0.0.1:${endpoint.address().port}/flaky`;
const { workflowRunId: flakyRun } = await client.trigger({ url: flakyUrl, body: { n: 1 }, retries: 0 });
let entry;
for (let i = 0; ; i++) {
  const { messages } = await client.dlq.list({ filter: { workflowRunId: flakyRun } });
  entry = messages?.[0];
  if (entry && entry.failureCallbackInfo?.state === "CALLBACK_SUCCESS") break;
  if (i > 400) await fail(`the failed run never showed in client.dlq.list: ${JSON.stringify(messages)}`);
  await new Promise((r) => setTimeout(r, 50));
}
const failedLogs = await client.logs({ workflowRunId: flakyRun });
const failedRun = failedLogs.runs?.[0];
await client.dlq.retryFailureFunction({ dlqId: entry.dlqId });
for (let i = 0; failureCalls < 2; i++) {
  if (i > 400) await fail(`retryFailureFunction did not call the failure function again (${failureCalls})`);
  await new Promise((r) => setTimeout(r, 50));
}
flakyOk = true;
const resumed = await client.dlq.resume({ dlqId: entry.dlqId, retries: 0 });
const flaky = await flakyFinished;
const left = await client.dlq.list({ filter: { workflowRunId: flakyRun } });
const dlqChecks = [
  [entry.workflowRunId === flakyRun && entry.workflowUrl === flakyUrl && typeof entry.workflowCreatedAt === "number",
    `client.dlq.list shows the run: ${JSON.stringify(entry).slice(0, 300)}`],
  [failedRun?.workflowState === "RUN_FAILED" && failedRun?.dlqId === entry.dlqId,
    `client.logs shows the run failed: ${JSON.stringify(failedRun)?.slice(0, 300)}`],
  [resumed?.workflowRunId === flakyRun && typeof resumed?.workflowCreatedAt === "number",
    `client.dlq.resume answered ${JSON.stringify(resumed)}`],
  [flaky.one === 1 && flaky.two === 2, `the resumed run finished: ${JSON.stringify(flaky)}`],
  [flakyTrace.filter((s) => s === "one").length === 1 && flakyTrace.at(-1) === "two",
    `the resumed run did not run its first step again: ${JSON.stringify(flakyTrace)}`],
  [(left.messages ?? []).length === 0, `the resumed entry left the DLQ: ${JSON.stringify(left)}`],
];
for (const [ok, what] of dlqChecks) if (!ok) await fail(what);

// POST /v2/trigger/<url> and POST /v2/batch/trigger start runs as the SDK's trigger does; a
// run id given twice is a duplicate.
const simpleUrl = `http://127.0.0.1:${endpoint.address().port}/simple`;
const auth = { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" };
const one = await (await fetch(`${base}/v2/trigger/${simpleUrl}`, {
  method: "POST", headers: { ...auth, "Upstash-Workflow-RunId": "wfr_rest-1" }, body: JSON.stringify({ n: 5 }),
})).json();
const many = await (await fetch(`${base}/v2/batch/trigger`, {
  method: "POST", headers: auth,
  body: JSON.stringify([
    { destination: simpleUrl, body: JSON.stringify({ n: 6 }) },
    { destination: simpleUrl, body: JSON.stringify({ n: 7 }), headers: { "Upstash-Workflow-RunId": "wfr_rest-1" } },
  ]),
})).json();
for (let i = 0; simpleResults.length < 2; i++) {
  if (i > 400) await fail(`the triggered runs did not finish: ${JSON.stringify(simpleResults)}`);
  await new Promise((r) => setTimeout(r, 50));
}
const triggerChecks = [
  [one.workflowRunId === "wfr_rest-1" && typeof one.workflowCreatedAt === "number" && !one.deduplicated,
    `/v2/trigger answered ${JSON.stringify(one)}`],
  [Array.isArray(many) && many[0]?.workflowRunId?.startsWith("wfr_") && many[1]?.workflowRunId === "wfr_rest-1"
    && many[1]?.deduplicated === true, `/v2/batch/trigger answered ${JSON.stringify(many)}`],
  [JSON.stringify([...simpleResults].sort()) === JSON.stringify([10, 12]), `the triggered runs ran: ${JSON.stringify(simpleResults)}`],
];
for (const [ok, what] of triggerChecks) if (!ok) await fail(what);

const { workflowRunId: parentRun } = await client.trigger({ url: `http://127.0.0.1:${endpoint.address().port}/inv/parent` });
const invoked = await invokeFinished;
if (invoked?.body?.doubled !== 42 || invoked.isFailed || invoked.isCanceled) {
  await fail(`context.invoke got ${JSON.stringify(invoked)} (run ${parentRun})`);
}
console.log(`workflow test passed (${SDK}): run ${workflowRunId}, steps ${JSON.stringify(trace)}, slept ${result.slept} ms; DLQ run ${flakyRun} resumed: ${JSON.stringify(flakyTrace)}; invoke answered ${JSON.stringify(invoked)}`);
clearTimeout(deadline);
stopTidepool();
endpoint.close();
process.exit(0);
