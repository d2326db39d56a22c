// The README's example (examples/quickstart.mjs) runs against a real server.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { clientDir, startServer, type Server } from "./helpers/server.js";

let server: Server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

test("examples/quickstart.mjs runs", async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(clientDir, "examples", "quickstart.mjs")], {
    env: { ...process.env, BAKERY_URL: server.url },
    cwd: clientDir,
  });
  const lines = stdout.trim().split("\n");
  assert.match(lines[0]!, /^ids (\d+)n (\d+)n$/);
  const [, a, b] = /^ids (\d+)n (\d+)n$/.exec(lines[0]!)!;
  assert.equal(BigInt(b!), BigInt(a!) + 1n);
  assert.match(lines[1]!, /^holding nightly-report with token \d+n$/);
  assert.match(lines[2]!, /^charged \(attempt \d+\) \/ charged \(attempt \d+\)$/);
  assert.equal(lines[3], "error invalid_input 400");
});
