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
function spawnWorker(args: string[]): {
  pid: number;
  kill: (s: NodeJS.Signals) => void;
  send: (line: string) => void;
  lines: string[];
  done: Promise<Run>;
} {
  const child = spawn(process.execPath, [worker, ...args], { stdio: ["pipe", "pipe", "pipe"] });
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
  return { pid: child.pid!, kill: (s) => child.kill(s), send: (line) => child.stdin.write(line + "\n"), lines, done };
}

/** What is wrong with a log of enter/exit lines: an overlap, or tokens not increasing (undefined if nothing). */
function checkLog(lines: string[]): { overlap?: string; tokens?: string; exit?: string } {
  const found: { overlap?: string; tokens?: string; exit?: string } = {};
  let holder: string | undefined;
  let lastToken = 0n;
  for (const [i, line] of lines.entries()) {
    const [what, pid, token] = line.split(" ");
    if (what === "enter") {
      if (holder !== undefined) found.overlap ??= `line ${i + 1}: ${pid} entered while ${holder} held the lock`;
      if (!(BigInt(token!) > lastToken)) found.tokens ??= `line ${i + 1}: token ${token} after ${lastToken}`;
      lastToken = BigInt(token!);
      holder = `${pid} ${token}`;
    } else {
      if (what !== "exit" || `${pid} ${token}` !== holder) found.exit ??= `line ${i + 1}: ${line} while ${holder} held the lock`;
      holder = undefined;
    }
  }
  return found;
}

/** Run 4 `mode` workers (lock or nolock) started together; the log's lines. */
async function runLockers(mode: string, url: string, name: string, file: string, rounds: number): Promise<string[]> {
  writeFileSync(file, "");
  const workers = [0, 1, 2, 3].map(() => spawnWorker([mode, url, name, file, String(rounds)]));
  await waitFor(() => workers.every((w) => w.lines.includes("ready")), 30_000, "the workers to start");
  for (const w of workers) w.send("go");
  (await Promise.all(workers.map((w) => w.done))).forEach(ok);
  return readFileSync(file, "utf8").trim().split("\n");
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
    const lines = await runLockers("lock", server.url, unique("mp-lock"), path.join(tmp, "lock.log"), 15);
    assert.equal(lines.length, 4 * 15 * 2);
    assert.deepEqual(checkLog(lines), {});
  });

  test("negative control: 4 processes that do not take the lock are seen to overlap by the same checker", async () => {
    const lines = await runLockers("nolock", server.url, unique("mp-nolock"), path.join(tmp, "nolock.log"), 15);
    assert.equal(lines.length, 4 * 15 * 2);
    assert.ok(checkLog(lines).overlap, "the checker saw no overlap in a log written without the lock");
  });

  test("a holder stopped past its session TTL loses the lock to a waiter; its lost fires after SIGCONT", async () => {
    const name = unique("mp-stop");
    const ttl = 1500;
    const holder = spawnWorker(["hold", server.url, name, String(ttl)]);
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
      // lost fires within TTL/3 + 1 s of SIGCONT, measured in the holder.
      const late = /^cont-to-lost (\d+)$/m.exec(run.stdout);
      assert.ok(late, `no cont-to-lost in ${JSON.stringify(run.stdout)}`);
      process.stdout.write(`lost fired ${late[1]} ms after SIGCONT\n`);
      assert.ok(Number(late[1]) <= ttl / 3 + 1000, `lost fired ${late[1]} ms after SIGCONT (TTL ${ttl} ms)`);
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
