// @upstash/ratelimit (on the official @upstash/redis) against tidepool: its Lua scripts arrive
// by EVALSHA, fall back on NOSCRIPT, and must count exactly. Fixed window, sliding window and
// token bucket each allow their limit and refuse the next request; resetUsedTokens and
// getRemaining work. Exits non-zero on any failure. The server binary comes from TIDEPOOL_BIN.
import { Redis } from "@upstash/redis";
import { startTidepool } from "./tidepool.mjs";
import { Ratelimit } from "@upstash/ratelimit";

const TOKEN = "ratelimit-test-token";

function fail(msg) {
  console.error(`ratelimit test FAILED: ${msg}`);
  process.exit(1);
}
setTimeout(() => fail("timed out after 60 s"), 60_000).unref();

const url = await startTidepool("rl", ["--token", TOKEN, "--read-only-token", "ro"]);

const redis = new Redis({ url, token: TOKEN });
const limiters = {
  fixedWindow: Ratelimit.fixedWindow(5, "60 s"),
  slidingWindow: Ratelimit.slidingWindow(5, "60 s"),
  tokenBucket: Ratelimit.tokenBucket(1, "60 s", 5),
};
for (const [name, limiter] of Object.entries(limiters)) {
  const rl = new Ratelimit({ redis, limiter, prefix: `rl-${name}`, analytics: false });
  for (let i = 1; i <= 5; i++) {
    const r = await rl.limit("user-1");
    if (!r.success) fail(`${name}: request ${i} of 5 refused`);
    if (r.remaining !== 5 - i) fail(`${name}: request ${i}: remaining ${r.remaining}, want ${5 - i}`);
  }
  const sixth = await rl.limit("user-1");
  if (sixth.success) fail(`${name}: the 6th request was allowed`);
  const other = await rl.limit("user-2");
  if (!other.success) fail(`${name}: another identifier was refused`);
  const left = await rl.getRemaining("user-1");
  if (left.remaining !== 0) fail(`${name}: getRemaining says ${left.remaining}, want 0`);
  await rl.resetUsedTokens("user-1");
  const again = await rl.limit("user-1");
  if (!again.success) fail(`${name}: refused after resetUsedTokens`);
  console.log(`${name}: ok`);
}
// After SCRIPT FLUSH the SDK's EVALSHA meets NOSCRIPT and must recover on its own.
await redis.scriptFlush();
const rl = new Ratelimit({ redis, limiter: Ratelimit.fixedWindow(2, "60 s"), prefix: "rl-flush" });
if (!(await rl.limit("u")).success) fail("refused after SCRIPT FLUSH");
console.log("ratelimit: all ok");
process.exit(0);
