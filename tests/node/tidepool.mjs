// Starts the tidepool binary (TIDEPOOL_BIN) on a free loopback port with a fresh data directory
// for one SDK test, and kills it when the test process exits.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

export const BIN = process.env.TIDEPOOL_BIN ?? path.resolve("../../target/debug/tidepool");

/** Resolves to the server's base URL once it prints its listening line. */
export async function startTidepool(tag, args) {
  const data = fs.mkdtempSync(path.join(os.tmpdir(), `tidepool-${tag}-`));
  const server = spawn(BIN, ["serve", "--listen", "127.0.0.1:0", "--data", data, ...args],
    { stdio: ["ignore", "pipe", "inherit"] });
  process.on("exit", () => server.kill("SIGKILL"));
  return await new Promise((resolve, reject) => {
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on("exit", (c) => reject(new Error(`tidepool exited with ${c}`)));
  });
}
