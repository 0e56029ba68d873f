// The official @upstash/redis suite's own cases where the hosted service answers differently
// from Redis (issue 24), run with the SDK against tidepool. Each case is named after the SDK
// test it stands for (file > test) and runs that test's documents, calls and assertions; the
// npm package ships without its tests, so they are written out here. Exits non-zero on any
// failure. The server binary comes from TIDEPOOL_BIN.
import assert from "node:assert/strict";
import { Redis } from "@upstash/redis";
import { startTidepool } from "./tidepool.mjs";

const TOKEN = "sdk-hosted-cases-token";

setTimeout(() => {
  console.error("sdk hosted cases FAILED: timed out after 120 s");
  process.exit(1);
}, 120_000).unref();

const url = await startTidepool("sdk-hosted", ["--token", TOKEN]);
const redis = new Redis({ url, token: TOKEN });
let n = 0;
const newKey = () => `key-${++n}-${Math.random().toString(36).slice(2)}`;
const randomID = () => Math.random().toString(36).slice(2);

const cases = {
  "json_arrindex.test.ts > Find the specific place of a color in a list of product colors": async () => {
    const key = newKey();
    assert.equal(
      await redis.json.set(key, "$", {
        name: "Noise-cancelling Bluetooth headphones",
        description: "Wireless Bluetooth headphones with noise-cancelling technology",
        connection: { wireless: true, type: "Bluetooth" },
        price: 99.98,
        stock: 25,
        colors: ["black", "silver"],
      }),
      "OK",
    );
    assert.deepEqual(await redis.json.arrappend(key, "$.colors", '"blue"'), [3]);
    assert.deepEqual(await redis.json.get(key), {
      name: "Noise-cancelling Bluetooth headphones",
      description: "Wireless Bluetooth headphones with noise-cancelling technology",
      connection: { wireless: true, type: "Bluetooth" },
      price: 99.98,
      stock: 25,
      colors: ["black", "silver", "blue"],
    });
    assert.deepEqual(await redis.json.get(key, "$.colors[*]"), ["black", "silver", "blue"]);
    assert.deepEqual(await redis.json.arrinsert(key, "$.colors", 2, '"yellow"', '"gold"'), [5]);
    assert.deepEqual(await redis.json.get(key, "$.colors"), [
      ["black", "silver", "yellow", "gold", "blue"],
    ]);
    assert.deepEqual(await redis.json.arrindex(key, "$..colors", '"silver"'), [1]);
  },

  "json_del.test.ts > Delete a value": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: 1, nested: { a: 2, b: 3 } }), "OK");
    assert.equal(await redis.json.del(key, "$..a"), 2);
    assert.deepEqual(await redis.json.get(key, "$"), [{ nested: { b: 3 } }]);
  },

  "json_forget.test.ts > Delete a value": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: 1, nested: { a: 2, b: 3 } }), "OK");
    assert.equal(await redis.json.forget(key, "$..a"), 2);
    assert.deepEqual(await redis.json.get(key, "$"), [{ nested: { b: 3 } }]);
  },

  "json_get.test.ts > Return the value at path in JSON serialized form": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: 2, b: 3, nested: { a: 4, b: null } }), "OK");
    assert.deepEqual(await redis.json.get(key, "$..b"), [null, 3]);
    assert.deepEqual(await redis.json.get(key, "$..a", "$..b"), { "$..b": [null, 3], "$..a": [4, 2] });
  },

  "json_mget.test.ts > Return the values at path from multiple key arguments": async () => {
    const key1 = newKey();
    const key2 = newKey();
    assert.equal(await redis.json.set(key1, "$", { a: 1, b: 2, nested: { a: 3 }, c: null }), "OK");
    assert.equal(await redis.json.set(key2, "$", { a: 4, b: 5, nested: { a: 6 }, c: null }), "OK");
    assert.deepEqual(await redis.json.mget([key1, key2], "$..a"), [
      [3, 1],
      [6, 4],
    ]);
  },

  "json_mset.test.ts > update multi-paths": async () => {
    const key = newKey();
    const data = { f1: { a: 1 }, f2: { a: 2 } };
    assert.equal(await redis.json.mset({ key, path: "$", value: data }), "OK");
    assert.equal(await redis.json.mset({ key, path: "$..a", value: 3 }), "OK");
    const res3 = await redis.json.get(key, "$");
    assert.notEqual(res3, null);
    assert.equal(res3.length, 1);
    assert.equal(res3[0]?.f1?.a, 3);
    assert.equal(res3[0]?.f2?.a, 3);
  },

  "json_numincrby.test.ts > return the length": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: "b", b: [{ a: 2 }, { a: 5 }, { a: "c" }] }), "OK");
    assert.deepEqual((await redis.json.numincrby(key, "$.a", 2)).sort(), [null]);
    assert.deepEqual((await redis.json.numincrby(key, "$..a", 2)).sort(), [4, 7, null, null]);
  },

  "json_nummultby.test.ts > return the length": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: "b", b: [{ a: 2 }, { a: 5 }, { a: "c" }] }), "OK");
    assert.deepEqual((await redis.json.nummultby(key, "$.a", 2)).sort(), [null]);
    assert.deepEqual((await redis.json.nummultby(key, "$..a", 2)).sort(), [10, 4, null, null]);
  },

  "json_objkeys.test.ts > return the keys": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: [3], nested: { a: { b: 2, c: 1 } } }), "OK");
    const res2 = await redis.json.objkeys(key, "$..a");
    for (const e of res2.sort()) {
      if (e === null) {
        continue;
      }
      e.sort();
    }
    assert.deepEqual(res2, [["b", "c"], null]);
  },

  "json_objlen.test.ts > return the length": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: [3], nested: { a: { b: 2, c: 1 } } }), "OK");
    assert.deepEqual(await redis.json.objlen(key, "$..a"), [2, null]);
  },

  "json_set.test.ts > update multi-paths": async () => {
    const key = newKey();
    const data = { f1: { a: 1 }, f2: { a: 2 } };
    assert.equal(await redis.json.set(key, "$", data), "OK");
    assert.equal(await redis.json.set(key, "$..a", 3), "OK");
    const res3 = await redis.json.get(key, "$");
    assert.notEqual(res3, null);
    assert.equal(res3.length, 1);
    assert.equal(res3[0]?.f1?.a, 3);
    assert.equal(res3[0]?.f2?.a, 3);
  },

  "json_strappend.test.ts > Add 'baz' to existing string": async () => {
    const key = newKey();
    assert.equal(
      await redis.json.set(key, "$", { a: "foo", nested: { a: "hello" }, nested2: { a: 31 } }),
      "OK",
    );
    assert.deepEqual((await redis.json.strappend(key, "$..a", '"baz"')).sort(), [6, 8, null]);
    assert.deepEqual(await redis.json.get(key), {
      a: "foobaz",
      nested: { a: "hellobaz" },
      nested2: { a: 31 },
    });
  },

  "json_strlen.test.ts > return the length": async () => {
    const key = newKey();
    assert.equal(
      await redis.json.set(key, "$", { a: "foo", nested: { a: "hello" }, nested2: { a: 31 } }),
      "OK",
    );
    assert.deepEqual((await redis.json.strlen(key, "$..a")).sort(), [3, 5, null]);
  },

  "json_type.test.ts > return the length": async () => {
    const key = newKey();
    assert.equal(await redis.json.set(key, "$", { a: 2, nested: { a: true }, foo: "bar" }), "OK");
    assert.deepEqual((await redis.json.type(key, "$..foo")).sort(), ["string"]);
    assert.deepEqual((await redis.json.type(key, "$..a")).sort(), ["boolean", "integer"]);
  },

  "xtrim.test.ts > should approximately trim stream to 30 items": async () => {
    const key = newKey();
    const promises = [];
    for (let i = 1; i <= 1000; i++) {
      promises.push(redis.xadd(key, "*", { [randomID()]: randomID() }));
    }
    await Promise.all(promises);
    await redis.xtrim(key, { strategy: "MAXLEN", threshold: 30, exactness: "~" });
    const len = await redis.xlen(key);
    assert.ok(len >= 29 && len <= 31, `${len} entries left`);
  },

  "xreadgroup.test.ts > NOACK > should return 0 items in PEL": async () => {
    const streamKey = newKey();
    const group = newKey();
    const consumer = newKey();
    await redis.xadd(streamKey, "*", { name: "John Doe", age: 30 });
    await redis.xgroup(streamKey, { type: "CREATE", group, id: "0" });
    await redis.xreadgroup(group, consumer, streamKey, ">", { NOACK: true });
    const xinfoRes = await redis.xinfo(streamKey, { type: "CONSUMERS", group });
    assert.deepEqual(xinfoRes, []);
  },

  "xreadgroup.test.ts > NOACK > should return desired amount of items in PEL": async () => {
    const wantedCount = 5;
    const streamKey = newKey();
    const group = newKey();
    const consumer = newKey();
    for (let i = 0; i < wantedCount; i++) {
      await redis.xadd(streamKey, "*", { name: "John Doe", age: 30 });
    }
    await redis.xgroup(streamKey, { type: "CREATE", group, id: "0" });
    await redis.xreadgroup(group, consumer, streamKey, ">", { NOACK: false });
    const xinfoRes = await redis.xinfo(streamKey, { type: "CONSUMERS", group });
    assert.equal(Number(xinfoRes[0][3]), wantedCount);
  },
};

let failed = 0;
for (const [name, run] of Object.entries(cases)) {
  try {
    await run();
    console.log(`ok    ${name}`);
  } catch (e) {
    failed++;
    console.error(`FAIL  ${name}: ${e.stack ?? e}`);
  }
}
if (failed > 0) {
  console.error(`sdk hosted cases FAILED: ${failed} of ${Object.keys(cases).length}`);
  process.exit(1);
}
console.log(`@upstash/redis suite cases where the hosted service differs from Redis: ${Object.keys(cases).length} ok`);
process.exit(0);
