// Faults the reviewer found: keepalives that hang, acquires and claims of
// unknown outcome, release/complete/fail answered 503 or 404, and two Lock
// objects of one name in one client.

import assert from "node:assert/strict";
import { createServer as httpServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import { after, before, describe, test } from "node:test";

import { BakeryError, Client, isKind } from "../src/index.js";
import type { Session } from "../src/session.js";
import { startServer, unique, waitFor, type Server } from "./helpers/server.js";

/** A fake service run by `handle`; `hits` counts requests by "METHOD path". */
interface Stub {
  url: string;
  hits: Map<string, number>;
  count(prefix: string): number;
  stop(): Promise<void>;
}

async function stub(handle: (req: IncomingMessage, res: ServerResponse, body: string) => void): Promise<Stub> {
  const hits = new Map<string, number>();
  const srv = httpServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => {
      const key = `${req.method} ${req.url}`;
      hits.set(key, (hits.get(key) ?? 0) + 1);
      handle(req, res, body);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    count: (prefix) => [...hits].filter(([k]) => k.startsWith(prefix)).reduce((n, [, v]) => n + v, 0),
    stop: async () => {
      srv.closeAllConnections();
      await new Promise((r) => srv.close(r));
    },
  };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(JSON.stringify(body));
}

/** Answers opening and closing a session; `rest` decides the others (default: never answer). */
function service(ttlMs: number, rest: (req: IncomingMessage, res: ServerResponse) => void = () => undefined) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    if (req.method === "POST" && req.url === "/v1/sessions") return json(res, 200, { id: "s-1", ttl_ms: ttlMs, grants: [] });
    if (req.method === "DELETE" && req.url === "/v1/sessions/s-1") {
      res.statusCode = 204;
      return void res.end();
    }
    rest(req, res);
  };
}

const UNAVAILABLE = { kind: "unavailable", message: "the store is unavailable" };

describe("faults", () => {
  test("a keepalive that never gets an answer: lost fires by the last good keepalive + TTL", async () => {
    const ttl = 1500;
    const fake = await stub(
      service(ttl, (req, res) => {
        if (req.url?.endsWith("/try")) json(res, 200, { granted: true, token: 7 });
        // The keepalive is accepted and never answered.
      }),
    );
    const c = new Client(fake.url, { sessionTtlMs: ttl, timeoutMs: 60_000 });
    try {
      const start = performance.now(); // before the session is opened: its last good keepalive is later
      const g = await c.lock("l").tryAcquire();
      assert.ok(g);
      assert.equal(g.isLost, false);
      const lostAt = await Promise.race([
        g.lost.then(() => performance.now()),
        new Promise<number>((_, reject) => setTimeout(() => reject(new Error("lost did not fire")), 10_000)),
      ]);
      const late = lostAt - start;
      assert.ok(fake.count("POST /v1/sessions/s-1/keepalive") >= 1, "no keepalive was sent");
      assert.ok(late <= ttl + 250, `lost fired ${late.toFixed(0)} ms after the session was opened (TTL ${ttl} ms)`);
      assert.equal(g.isLost, true);
      assert.match((g.lostSignal.reason as Error).message, /no keepalive got through/);
    } finally {
      await c.close().catch(() => undefined);
      await fake.stop();
    }
  });

  test("an acquire that never gets an answer ends with unknown_outcome and is not resent", async () => {
    const fake = await stub(service(10_000));
    const c = new Client(fake.url, { timeoutMs: 300 });
    try {
      await assert.rejects(c.lock("l").acquire({ timeoutMs: 200 }), (err: unknown) => {
        assert.ok(err instanceof BakeryError, String(err));
        assert.equal(err.kind, "unknown_outcome");
        return true;
      });
      assert.equal(fake.count("POST /v1/locks/l/acquire"), 1, "an acquire of unknown outcome must not be resent");
    } finally {
      await c.close().catch(() => undefined);
      await fake.stop();
    }
  });

  test("a release answered 503 is not resent", async () => {
    const fake = await stub(
      service(10_000, (req, res) => {
        if (req.url?.endsWith("/try")) json(res, 200, { granted: true, token: 7 });
        else if (req.url?.endsWith("/release")) json(res, 503, UNAVAILABLE);
      }),
    );
    const c = new Client(fake.url, { retries: 4 });
    try {
      const g = await c.lock("l").tryAcquire();
      assert.ok(g);
      await assert.rejects(g.release(), (err: unknown) => isKind(err, "unavailable"));
      assert.equal(fake.count("POST /v1/locks/l/release"), 1, "a release answered 503 must not be resent");
      assert.equal(g.isReleased, false, "a release answered 503 is not a release");
    } finally {
      await c.close().catch(() => undefined);
      await fake.stop();
    }
  });

  test("a complete answered 503 is not resent, and the session is closed to give the claim back", async () => {
    const fake = await stub(
      service(10_000, (req, res) => {
        if (req.url?.endsWith("/claim")) json(res, 200, { status: "claimed", attempt: 1 });
        else if (req.url?.endsWith("/complete")) json(res, 503, UNAVAILABLE);
      }),
    );
    const c = new Client(fake.url, { retries: 4 });
    try {
      await assert.rejects(c.once("s", "k", "p", () => "r"), (err: unknown) => isKind(err, "unavailable"));
      assert.equal(fake.count("POST /v1/once/s/k/complete"), 1, "a complete answered 503 must not be resent");
      assert.equal(fake.count("DELETE /v1/sessions/s-1"), 1, "the session holding the claim was not closed");
    } finally {
      await c.close().catch(() => undefined);
      await fake.stop();
    }
  });

  test("a fail answered 503 is not resent", async () => {
    const fake = await stub(
      service(10_000, (req, res) => {
        if (req.url?.endsWith("/claim")) json(res, 200, { status: "claimed", attempt: 1 });
        else if (req.url?.endsWith("/fail")) json(res, 503, UNAVAILABLE);
      }),
    );
    const c = new Client(fake.url, { retries: 4 });
    try {
      await assert.rejects(
        c.once("s", "k", "p", () => {
          throw new Error("boom");
        }),
        /boom/,
      );
      assert.equal(fake.count("POST /v1/once/s/k/fail"), 1, "a fail answered 503 must not be resent");
      assert.equal(fake.count("DELETE /v1/sessions/s-1"), 1, "the session holding the claim was not closed");
    } finally {
      await c.close().catch(() => undefined);
      await fake.stop();
    }
  });

  test("a claim of unknown outcome is not resent: the session is closed, its grants lost, the error reported", async () => {
    const fake = await stub(
      service(10_000, (req, res) => {
        if (req.url?.endsWith("/try")) json(res, 200, { granted: true, token: 7 });
        else if (req.url?.endsWith("/claim")) req.socket.destroy(); // read, then the connection breaks
      }),
    );
    const c = new Client(fake.url);
    try {
      const g = await c.lock("l").tryAcquire();
      assert.ok(g);
      let ran = false;
      await assert.rejects(
        c.once("s", "k", "p", () => {
          ran = true;
          return "r";
        }),
        (err: unknown) => isKind(err, "unknown_outcome"),
      );
      assert.equal(ran, false);
      assert.equal(fake.count("POST /v1/once/s/k/claim"), 1, "a claim of unknown outcome must not be resent");
      assert.equal(fake.count("DELETE /v1/sessions/s-1"), 1, "the session that may hold the claim was not closed");
      assert.equal(g.isLost, true, "the grants of a reset session are lost");
    } finally {
      await c.close().catch(() => undefined);
      await fake.stop();
    }
  });
});

describe("faults against a real server", () => {
  let server: Server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server?.stop();
  });

  test("a release answered 404 while the session lives: only that grant is lost", async () => {
    const c = new Client(server.url);
    try {
      const g1 = await c.lock(unique("r404-a")).acquire();
      const g2 = await c.lock(unique("r404-b")).acquire();
      assert.ok(g1 && g2);
      // Released behind the client's back: the session lives, g1 is not in it.
      const session = (g1 as unknown as { session: Session }).session.id;
      const r = await fetch(`${server.url}/v1/locks/${g1.name}/release`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ session, token: Number(g1.token) }),
      });
      assert.equal(r.status, 204, await r.text());
      await assert.rejects(g1.release(), (err: unknown) => isKind(err, "lost"));
      assert.equal(g1.isLost, true);
      assert.equal(g1.isReleased, false, "a release the server did not do is not reported as one");
      assert.equal(g2.isLost, false, "another grant of the live session is not lost");
      await g2.release();
      assert.equal(g2.isReleased, true);
    } finally {
      await c.close();
    }
  });

  test("a release answered 404 after the session ended: every grant of it is lost", async () => {
    const c = new Client(server.url);
    try {
      const g1 = await c.lock(unique("s404-a")).acquire();
      const g2 = await c.lock(unique("s404-b")).acquire();
      assert.ok(g1 && g2);
      const session = (g1 as unknown as { session: Session }).session.id;
      const r = await fetch(`${server.url}/v1/sessions/${session}`, { method: "DELETE" });
      assert.equal(r.status, 204);
      await assert.rejects(g1.release(), (err: unknown) => isKind(err, "lost"));
      assert.equal(g1.isLost, true);
      assert.equal(g2.isLost, true, "the other grant of the ended session is lost too");
    } finally {
      await c.close();
    }
  });

  test("cleaning up after an aborted acquire keeps the grant another Lock object of the same name is receiving", async () => {
    // A proxy that holds back the answer of the first acquire through it.
    let held: (() => void) | undefined;
    let acquires = 0;
    const upstream = new URL(server.url);
    const proxy = await stub((req, res, body) => {
      const isAcquire = req.url?.endsWith("/acquire") === true;
      const n = isAcquire ? ++acquires : 0;
      const up = request(
        { hostname: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
        (upRes) => {
          let text = "";
          upRes.on("data", (d: Buffer) => (text += d.toString()));
          upRes.on("end", () => {
            const send = (): void => {
              res.writeHead(upRes.statusCode ?? 500, { "content-type": "application/json" });
              res.end(text);
            };
            if (n === 1) held = send;
            else send();
          });
        },
      );
      up.on("error", () => res.destroy());
      up.end(body);
    });
    const c = new Client(proxy.url);
    const other = new Client(server.url);
    try {
      const name = unique("two-locks");
      const session = await c.session();
      // Lock object 2: granted on the server, its answer not yet in.
      const second = c.lock(name).acquire();
      await waitFor(() => held !== undefined, 10_000, "the first acquire's answer");
      // Lock object 1 (another object, same name): queued, then aborted.
      const abort = new AbortController();
      const first = c.lock(name).acquire({ signal: abort.signal });
      await waitFor(() => acquires === 2, 10_000, "the second acquire to reach the server");
      abort.abort(new Error("stop"));
      await assert.rejects(first, /stop/);
      await session.idle(); // the clean-up read the session and decided
      held!();
      const g = await second;
      assert.ok(g);
      assert.equal(g.isLost, false);
      assert.equal(await other.lock(name).tryAcquire(), null, "the clean-up released the grant of the other Lock object");
      assert.equal(proxy.count(`POST /v1/locks/${name}/release`), 0);
      await g.release();
    } finally {
      await c.close().catch(() => undefined);
      await other.close();
      await proxy.stop();
    }
  });
});
