// Lock, semaphore, RW lock and election against a real server.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { BakeryError, Client, Leadership, type LeaderEvent } from "../src/index.js";
import { startServer, unique, waitFor, type Server } from "./helpers/server.js";

describe("lock family", () => {
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

  test("try-acquire: granted when free, null when held, granted again after release", async () => {
    const name = unique("try");
    const g = await a.lock(name).tryAcquire();
    assert.ok(g);
    assert.equal(await b.lock(name).tryAcquire(), null);
    await g.release();
    assert.equal(g.isReleased, true);
    const g2 = await b.lock(name).tryAcquire();
    assert.ok(g2);
    await g2.release();
  });

  test("fencing tokens increase with every grant", async () => {
    const lock = a.lock(unique("fence"));
    let last = 0n;
    for (let i = 0; i < 5; i++) {
      const g = await lock.acquire();
      assert.ok(g);
      assert.equal(typeof g.token, "bigint");
      assert.ok(g.token > last, `${g.token} after ${last}`);
      last = g.token;
      await g.release();
    }
  });

  test("a waiter is served when the holder releases", async () => {
    const name = unique("wait");
    const held = await a.lock(name).acquire();
    assert.ok(held);
    let served = false;
    const waiting = b.lock(name).acquire({ timeoutMs: 20_000 }).then((g) => {
      served = true;
      return g;
    });
    // The waiter is queued on the server, not served.
    await waitFor(async () => {
      const r = await fetch(`${server.url}/v1/locks/${name}`);
      const q = (await r.json()) as { queue: unknown[] };
      return q.queue.length === 1;
    }, 10_000, "the waiter to queue");
    assert.equal(served, false);
    await held.release();
    const g = await waiting;
    assert.ok(g);
    assert.ok(g.token > held.token);
    await g.release();
  });

  test("acquire with a timeout gives null when not granted in time", async () => {
    const name = unique("timeout");
    const held = await a.lock(name).acquire();
    const started = Date.now();
    assert.equal(await b.lock(name).acquire({ timeoutMs: 300 }), null);
    assert.ok(Date.now() - started >= 250);
    await held!.release();
  });

  test("an aborted acquire rejects with the signal's reason and leaves the lock free", async () => {
    const name = unique("abort");
    const held = await a.lock(name).acquire();
    const controller = new AbortController();
    const waiting = b.lock(name).acquire({ signal: controller.signal });
    setTimeout(() => controller.abort(new Error("stop waiting")), 100);
    await assert.rejects(waiting, /stop waiting/);
    await held!.release();
    // The aborted request left the queue: a third party gets the lock at once.
    const c = new Client(server.url);
    try {
      await waitFor(async () => {
        const g = await c.lock(name).tryAcquire();
        if (g) await g.release();
        return g !== null;
      }, 10_000, "the lock to be free");
    } finally {
      await c.close();
    }
  });

  test("await using releases the grant at the end of the block", async () => {
    const name = unique("using");
    {
      await using g = (await a.lock(name).acquire())!;
      assert.equal(await b.lock(name).tryAcquire(), null);
      assert.equal(g.isLost, false);
    }
    const g2 = await b.lock(name).tryAcquire();
    assert.ok(g2);
    await g2.release();
  });

  test("lock data is stored with the grant", async () => {
    const name = unique("data");
    const g = await a.lock(name, { data: "worker-7" }).acquire();
    const r = await fetch(`${server.url}/v1/locks/${name}`);
    const state = (await r.json()) as { holders: { data: string }[] };
    assert.equal(state.holders[0]!.data, "worker-7");
    await g!.release();
  });

  test("closing a client releases its grants", async () => {
    const name = unique("close");
    const c = new Client(server.url);
    const g = await c.lock(name).acquire();
    assert.ok(g);
    assert.equal(await b.lock(name).tryAcquire(), null);
    await c.close();
    assert.equal(g.isReleased, true);
    const g2 = await b.lock(name).tryAcquire();
    assert.ok(g2, "the closed client's lock should be free");
    await g2.release();
    await assert.rejects(c.lock(name).tryAcquire(), /closed/);
  });

  test("a grant whose session ended on the server is lost", async () => {
    const name = unique("lost");
    const c = new Client(server.url, { sessionTtlMs: 1000 });
    try {
      const g = await c.lock(name).acquire();
      assert.ok(g);
      // End the session behind the client's back (as a restart would).
      const session = (g as unknown as { session: { id: string } }).session.id;
      const r = await fetch(`${server.url}/v1/sessions/${session}`, { method: "DELETE" });
      assert.equal(r.status, 204);
      await Promise.race([
        g.lost,
        new Promise((_, reject) => setTimeout(() => reject(new Error("lost did not fire")), 10_000)),
      ]);
      assert.equal(g.isLost, true);
      assert.equal(g.lostSignal.aborted, true);
      assert.equal((g.lostSignal.reason as BakeryError).kind, "lost");
      await assert.rejects(g.release(), (err: unknown) => err instanceof BakeryError && err.kind === "lost");
      // The next acquire opens a new session.
      const g2 = await c.lock(name).acquire({ timeoutMs: 5000 });
      assert.ok(g2);
      assert.ok(g2.token > g.token);
      await g2.release();
    } finally {
      await c.close();
    }
  });

  test("a grant is lost when no keepalive succeeds for a whole TTL (the server is gone)", async () => {
    const own = await startServer();
    const c = new Client(own.url, { sessionTtlMs: 1000, retries: 0 });
    try {
      const g = await c.lock(unique("gone")).acquire();
      assert.ok(g);
      await own.stop();
      await Promise.race([
        g.lost,
        new Promise((_, reject) => setTimeout(() => reject(new Error("lost did not fire")), 10_000)),
      ]);
      assert.equal(g.isLost, true);
      assert.match((g.lostSignal.reason as Error).message, /no keepalive got through/);
    } finally {
      await c.close().catch(() => undefined);
      await own.stop();
    }
  });

  test("semaphore: at most `permits` holders", async () => {
    const name = unique("sem");
    const s1 = await a.semaphore(name, 2).acquire();
    const s2 = await b.semaphore(name, 2).acquire();
    assert.ok(s1 && s2);
    assert.equal(await b.semaphore(name, 2).tryAcquire(), null);
    await s1.release();
    const s3 = await b.semaphore(name, 2).tryAcquire();
    assert.ok(s3);
    await s2.release();
    await s3.release();
  });

  test("semaphore: another permit count is refused", async () => {
    const name = unique("sem-conflict");
    const s1 = await a.semaphore(name, 2).acquire();
    await assert.rejects(b.semaphore(name, 3).tryAcquire(), (err: unknown) => {
      assert.ok(err instanceof BakeryError);
      assert.equal(err.kind, "conflict");
      assert.equal(err.status, 409);
      assert.match(err.message, /permits/);
      return true;
    });
    await s1!.release();
  });

  test("RW lock: readers share, a writer excludes", async () => {
    const name = unique("rw");
    const r1 = await a.rwLock(name).read.acquire();
    const r2 = await b.rwLock(name).read.tryAcquire();
    assert.ok(r1 && r2, "two readers at once");
    assert.equal(await b.rwLock(name).write.tryAcquire(), null, "no writer while read");
    await r1.release();
    await r2.release();
    const w = await a.rwLock(name).write.acquire();
    assert.ok(w);
    assert.equal(await b.rwLock(name).read.tryAcquire(), null, "no reader while written");
    assert.equal(await b.rwLock(name).write.tryAcquire(), null, "no second writer");
    await w.release();
    const r3 = await b.rwLock(name).read.tryAcquire();
    assert.ok(r3);
    await r3.release();
  });

  test("election: one leader, observed with its value; the next leads after a resign", async () => {
    const name = unique("elect");
    const ea = a.election(name);
    const eb = b.election(name);
    const controller = new AbortController();
    const seen: LeaderEvent[] = [];
    const watching = (async () => {
      for await (const e of ea.observe({ signal: controller.signal })) seen.push(e);
    })();
    const lead = await ea.campaign("node-a");
    assert.ok(lead instanceof Leadership);
    assert.equal(await eb.tryCampaign("node-b"), null);
    assert.deepEqual({ ...(await eb.leader()), owner: null }, { term: lead.term, owner: null, value: "node-a" });
    await waitFor(() => seen.some((e) => e.term === lead.term && e.value === "node-a"), 10_000, "observe to see node-a");
    const next = eb.campaign("node-b", { timeoutMs: 20_000 });
    await lead.resign();
    const lead2 = await next;
    assert.ok(lead2);
    assert.ok(lead2.term > lead.term);
    await waitFor(() => seen.some((e) => e.term === lead2.term && e.value === "node-b"), 10_000, "observe to see node-b");
    controller.abort();
    await watching;
    const terms = seen.map((e) => e.term).filter((t) => t > 0n);
    assert.deepEqual(terms, [...terms].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)), "terms increase");
    await lead2.resign();
  });

  test("observe ends when the loop breaks", async () => {
    const name = unique("elect-break");
    for await (const e of a.election(name).observe()) {
      assert.equal(e.term, 0n);
      assert.equal(e.owner, null);
      break;
    }
  });
});
