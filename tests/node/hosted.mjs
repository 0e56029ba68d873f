// The official @upstash/redis where the hosted service answers differently from Redis 7.0 and
// the SDK relies on it (issue 18): scan with `withType`, a small keyspace scanned whole in one
// call, COPY onto itself, ZRANGE by rank with offset and count, HEXPIREAT past Redis's bound,
// FCALL_RO of a function without the no-writes flag. Exits non-zero on any failure.
// The server binary comes from TIDEPOOL_BIN.
import assert from "node:assert/strict";
import { Redis } from "@upstash/redis";
import { startTidepool } from "./tidepool.mjs";

const TOKEN = "hosted-test-token";

setTimeout(() => {
  console.error("hosted test FAILED: timed out after 60 s");
  process.exit(1);
}, 60_000).unref();

const url = await startTidepool("hosted", ["--token", TOKEN]);

try {
  const redis = new Redis({ url, token: TOKEN });
  await redis.set("s", "v");
  await redis.zadd("z", { score: 1, member: "a" }, { score: 2, member: "b" }, { score: 3, member: "c" });
  await redis.json.set("j", "$", { a: 1 });
  const [cursor, typed] = await redis.scan(0, { withType: true });
  assert.equal(cursor, "0");
  typed.sort((x, y) => x.key.localeCompare(y.key));
  assert.deepEqual(typed, [
    { key: "j", type: "json" },
    { key: "s", type: "string" },
    { key: "z", type: "zset" },
  ]);
  assert.deepEqual(await redis.scan(0, { match: "z" }), ["0", ["z"]]);
  assert.equal(await redis.copy("s", "s"), "NOT_COPIED");
  assert.equal(await redis.copy("s", "t"), "COPIED");
  assert.deepEqual(await redis.zrange("z", 0, -1, { offset: 1, count: 1 }), ["b"]);
  assert.deepEqual(await redis.zrange("z", 0, -1, { rev: true, offset: 0, count: 2 }), ["c", "b"]);
  // HEXPIREAT with milliseconds where seconds are meant, as the SDK's own pipeline test sends.
  await redis.hset("h", { f: "v" });
  const p = redis.pipeline();
  p.hexpireat("nokey", "field", Date.now() + 1000);
  p.hexpireat("h", "f", Date.now() + 1000);
  assert.deepEqual(await p.exec(), [[-2], [1]]);
  assert.equal(await redis.hget("h", "f"), "v");
  // FCALL_RO runs a function that only reads, without the no-writes flag.
  await redis.functions.load({
    code: "#!lua name=lib\nredis.register_function('rd', function(k) return redis.call('GET', k[1]) end)",
  });
  assert.equal(await redis.functions.callRo("rd", ["s"]), "v");
  console.log("@upstash/redis where the hosted service differs from Redis: ok");
} catch (e) {
  console.error(`hosted test FAILED: ${e.stack ?? e}`);
  process.exit(1);
}
process.exit(0);
