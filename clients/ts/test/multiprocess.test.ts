// The cases with real OS processes, each with its own Client.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client } from "../src/index.js";
import { helpersDir, startServer, unique, waitFor, type Server } from "./helpers/server.js";

const worker = path.join(helpersDir, "worker.js");

interface Run {
  pid: number;
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

/** Spawn the worker; `done` resolves when it exits. */
function spawnWorker(args: string[]): { pid: number; kill: (s: NodeJS.Signals) => void; lines: string[]; done: Promise<Run> } {
  const child = spawn(process.execPath, [worker, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  const lines: string[] = [];
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
    lines.splice(0, lines.length, ...stdout.split("\n").filter((l) => l.length > 0));
  });
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<Run>((resolve) =>
    child.on("exit", (code, signal) => resolve({ pid: child.pid!, code, signal, stdout, stderr })),
  );
  return { pid: child.pid!, kill: (s) => child.kill(s), lines, done };
}

function ok(run: Run): Run {
  assert.equal(run.code, 0, `worker ${run.pid} exited ${run.code ?? run.signal}: ${run.stderr}`);
  return run;
}

describe("multiple processes", () => {
  let server: Server;
  let tmp: string;
  before(async () => {
    server = await startServer();
    tmp = mkdtempSync(path.join(tmpdir(), "bakery-ts-mp-"));
  });
  after(async () => {
    await server?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test("4 processes x 1,000 ids: distinct, increasing within each", async () => {
    const name = unique("mp-ids");
    const runs = await Promise.all([0, 1, 2, 3].map(() => spawnWorker(["ids", server.url, name, "1000"]).done));
    const all = new Set<bigint>();
    for (const run of runs.map(ok)) {
      const ids = run.stdout.trim().split("\n").map(BigInt);
      assert.equal(ids.length, 1000);
      for (let i = 1; i < ids.length; i++) assert.ok(ids[i]! > ids[i - 1]!, `not increasing at ${i} in ${run.pid}`);
      for (const id of ids) all.add(id);
    }
    assert.equal(all.size, 4000, "ids handed out twice");
  });

  test("4 processes through one lock never overlap, tokens increase", async () => {
    const name = unique("mp-lock");
    const file = path.join(tmp, "lock.log");
    writeFileSync(file, "");
    const runs = await Promise.all([0, 1, 2, 3].map(() => spawnWorker(["lock", server.url, name, file, "15"]).done));
    runs.forEach(ok);
    const lines = readFileSync(file, "utf8").trim().split("\n");
    assert.equal(lines.length, 4 * 15 * 2);
    let holder: string | undefined;
    let lastToken = 0n;
    for (const [i, line] of lines.entries()) {
      const [what, pid, token] = line.split(" ");
      if (what === "enter") {
        assert.equal(holder, undefined, `line ${i + 1}: ${pid} entered while ${holder} held the lock`);
        assert.ok(BigInt(token!) > lastToken, `line ${i + 1}: token ${token} after ${lastToken}`);
        lastToken = BigInt(token!);
        holder = `${pid} ${token}`;
      } else {
        assert.equal(what, "exit");
        assert.equal(`${pid} ${token}`, holder, `line ${i + 1}: exit by a non-holder`);
        holder = undefined;
      }
    }
  });

  test("a holder stopped past its session TTL loses the lock to a waiter; its lost fires after SIGCONT", async () => {
    const name = unique("mp-stop");
    const holder = spawnWorker(["hold", server.url, name, "1500"]);
    await waitFor(() => holder.lines.some((l) => l.startsWith("acquired")), 20_000, "the holder to acquire");
    const held = BigInt(holder.lines[0]!.split(" ")[1]!);
    const waiter = new Client(server.url);
    try {
      // The waiter queues behind the live holder.
      assert.equal(await waiter.lock(name).tryAcquire(), null, "the lock should be held");
      holder.kill("SIGSTOP");
      let grant;
      try {
        grant = await waiter.lock(name).acquire({ timeoutMs: 30_000 });
      } finally {
        holder.kill("SIGCONT");
      }
      assert.ok(grant, "the waiter did not get the lock after the holder's session TTL");
      assert.ok(grant.token > held, `the waiter's token ${grant.token} should exceed ${held}`);
      const run = ok(await holder.done);
      assert.match(run.stdout, /^lost true true$/m);
      await grant.release();
    } finally {
      await waiter.close();
    }
  });

  test("once runs the work exactly once across 4 processes", async () => {
    const scope = unique("mp-once");
    const file = path.join(tmp, "once.log");
    writeFileSync(file, "");
    const runs = (await Promise.all([0, 1, 2, 3].map(() => spawnWorker(["once", server.url, scope, "job-1", file]).done))).map(ok);
    const ran = readFileSync(file, "utf8").trim().split("\n");
    assert.equal(ran.length, 1, `ran ${ran.length} times: ${ran.join("; ")}`);
    const runner = ran[0]!.split(" ")[1];
    for (const run of runs) assert.equal(run.stdout.trim(), `done by ${runner}`);
  });
});
