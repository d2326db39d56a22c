// once: completed, failed and in-progress paths against a real server.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { BakeryError, Client } from "../src/index.js";
import { startServer, unique, waitFor, type Server } from "./helpers/server.js";

describe("once", () => {
  let server: Server;
  let a: Client;
  let b: Client;
  before(async () => {
    server = await startServer();
    a = new Client(server.url);
    b = new Client(server.url);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await server?.stop();
  });

  test("runs once; later calls get the stored result without running", async () => {
    const scope = unique("once");
    let runs = 0;
    const fn = async (attempt: bigint): Promise<string> => {
      runs++;
      assert.equal(typeof attempt, "bigint");
      assert.ok(attempt >= 1n);
      return `result-${runs}`;
    };
    assert.equal(await a.once(scope, "k", "payload", fn), "result-1");
    assert.equal(await a.once(scope, "k", "payload", fn), "result-1");
    assert.equal(await b.once(scope, "k", "payload", fn), "result-1");
    assert.equal(runs, 1);
    const r = await fetch(`${server.url}/v1/once/${scope}/k`);
    assert.equal(((await r.json()) as { status: string }).status, "completed");
  });

  test("a failure is rethrown and the key runs again on the next call", async () => {
    const scope = unique("once-fail");
    let runs = 0;
    await assert.rejects(
      a.once(scope, "k", "p", () => {
        runs++;
        throw new Error("boom");
      }),
      /boom/,
    );
    assert.equal(await b.once(scope, "k", "p", () => `ok after ${++runs}`), "ok after 2");
    assert.equal(runs, 2);
  });

  test("another worker in progress: the caller waits and gets its result", async () => {
    const scope = unique("once-wait");
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = false;
    const first = a.once(scope, "k", "p", async () => {
      started = true;
      await gate;
      return "from a";
    });
    await waitFor(() => started, 10_000, "the first worker to start");
    // Watch b's claims: release a only once b was told in_progress.
    const statuses: string[] = [];
    const transport = b.transport;
    const call = transport.call.bind(transport);
    transport.call = async (c) => {
      const answer = await call(c);
      if (c.path.endsWith("/claim")) statuses.push(answer.body.status);
      return answer;
    };
    let secondRan = false;
    try {
      const second = b.once(
        scope,
        "k",
        "p",
        () => {
          secondRan = true;
          return "from b";
        },
        { waitMs: 200 },
      );
      await waitFor(() => statuses.includes("in_progress"), 10_000, "b to be told in_progress");
      release();
      assert.equal(await second, "from a");
    } finally {
      transport.call = call;
    }
    assert.equal(statuses.at(-1), "completed");
    assert.equal(await first, "from a");
    assert.equal(secondRan, false);
  });

  test("the same key with another payload is a conflict", async () => {
    const scope = unique("once-conflict");
    await a.once(scope, "k", "one", () => "x");
    await assert.rejects(b.once(scope, "k", "two", () => "y"), (err: unknown) => {
      assert.ok(err instanceof BakeryError);
      assert.equal(err.kind, "conflict");
      assert.equal(err.status, 409);
      return true;
    });
  });
});
