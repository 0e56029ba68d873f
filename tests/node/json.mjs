// The official @upstash/redis JSON commands (redis.json.*) against tidepool: documents go in
// as JS values and come back through the SDK's automatic JSON parsing; commands issued together
// travel in one auto-pipelined request. Exits non-zero on any failure. The server binary comes
// from TIDEPOOL_BIN.
import assert from "node:assert/strict";
import { Redis } from "@upstash/redis";
import { startTidepool } from "./tidepool.mjs";

const TOKEN = "json-test-token";

setTimeout(() => {
  console.error("json test FAILED: timed out after 60 s");
  process.exit(1);
}, 60_000).unref();

const url = await startTidepool("json", ["--token", TOKEN, "--read-only-token", "ro"]);

try {
  const redis = new Redis({ url, token: TOKEN });
  const cart = { user: "ada", items: [{ sku: "a1", qty: 1, price: 9.5 }], paid: false };
  assert.equal(await redis.json.set("cart", "$", cart), "OK");
  assert.deepEqual(await redis.json.get("cart"), cart);
  assert.deepEqual(await redis.json.get("cart", "$.items[0].sku"), ["a1"]);
  // Issued in the same tick: one /pipeline request. (The SDK's auto-pipeline sends reads in
  // a request of their own, concurrent with the writes' and in no set order with it: through
  // a cluster's follower the read is answered first. So the read comes after.)
  const [len, incr, toggled] = await Promise.all([
    redis.json.arrappend("cart", "$.items", { sku: "b2", qty: 2, price: 3 }),
    redis.json.numincrby("cart", "$.items[0].qty", 2),
    redis.json.toggle("cart", "$.paid"),
  ]);
  const items = await redis.json.get("cart", "$.items[?(@.qty>1)].sku");
  assert.deepEqual(len, [2]);
  assert.deepEqual(incr, [3]);
  assert.deepEqual(toggled, [1]);
  assert.deepEqual(items, ["a1", "b2"]);
  assert.deepEqual(await redis.json.type("cart", "$.items"), ["array"]);
  assert.deepEqual(await redis.json.objkeys("cart", "$"), [["user", "items", "paid"]]);
  assert.deepEqual(await redis.json.arrpop("cart", "$.items", 0), [{ sku: "a1", qty: 3, price: 9.5 }]);
  assert.equal(await redis.json.merge("cart", "$", { paid: null, note: "gift" }), "OK");
  assert.equal(await redis.json.mset({ key: "c2", path: "$", value: { user: "bob" } }), "OK");
  assert.deepEqual(await redis.json.mget(["cart", "c2", "none"], "$.user"), [["ada"], ["bob"], null]);
  assert.deepEqual(await redis.json.get("cart"), { user: "ada", items: [{ sku: "b2", qty: 2, price: 3 }], note: "gift" });
  assert.equal(await redis.json.del("cart", "$.note"), 1);
  assert.equal(await redis.type("cart"), "json");
  await assert.rejects(redis.json.set("fresh", "$.a", 1), /new objects must be created at the root/);
  // The read-only token reads documents but cannot write them.
  const ro = new Redis({ url, token: "ro" });
  assert.deepEqual(await ro.json.get("c2"), { user: "bob" });
  await assert.rejects(ro.json.set("c2", "$.user", '"eve"'), /NOPERM/);
  console.log("@upstash/redis json: ok");
} catch (e) {
  console.error(`json test FAILED: ${e.stack ?? e}`);
  process.exit(1);
}
process.exit(0);
