// Error kinds: from the server, and from the transport.

import assert from "node:assert/strict";
import { createServer as httpServer } from "node:http";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";

import { BakeryError, Client, ERROR_KINDS, isKind } from "../src/index.js";
import { startServer, unique, type Server } from "./helpers/server.js";

/** A port nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

describe("errors", () => {
  let server: Server;
  let client: Client;
  before(async () => {
    server = await startServer();
    client = new Client(server.url);
  });
  after(async () => {
    await client?.close();
    await server?.stop();
  });

  test("an invalid name is invalid_input (400) with the server's message", async () => {
    await assert.rejects(client.lock("bad name!").tryAcquire(), (err: unknown) => {
      assert.ok(err instanceof BakeryError);
      assert.equal(err.kind, "invalid_input");
      assert.equal(err.status, 400);
      assert.match(err.message, /bad name!/);
      assert.ok(isKind(err, "invalid_input"));
      return true;
    });
  });

  test("connection refused is unavailable (after the retries)", async () => {
    const port = await closedPort();
    const c = new Client(`http://127.0.0.1:${port}`, { retries: 1 });
    try {
      await assert.rejects(c.sequence("s").next(), (err: unknown) => {
        assert.ok(err instanceof BakeryError);
        assert.equal(err.kind, "unavailable");
        assert.equal(err.status, 0);
        assert.match(err.message, /ECONNREFUSED|did not reach/);
        return true;
      });
      await assert.rejects(c.lock("l").acquire(), (err: unknown) => isKind(err, "unavailable"));
    } finally {
      await c.close();
    }
  });

  test("a connection cut after an acquire was sent is unknown_outcome, and the acquire is not resent", async () => {
    // A fake service: opens sessions, but hangs up on every acquire after reading it.
    let acquires = 0;
    const fake = httpServer((req, res) => {
      if (req.url === "/v1/sessions") {
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ id: "s-1", ttl_ms: 10000, grants: [] }));
      } else if (req.url?.endsWith("/acquire")) {
        acquires++;
        req.socket.destroy();
      } else {
        res.statusCode = 404;
        res.end(JSON.stringify({ kind: "not_found", message: "no" }));
      }
    });
    await new Promise<void>((r) => fake.listen(0, "127.0.0.1", r));
    const port = (fake.address() as { port: number }).port;
    const c = new Client(`http://127.0.0.1:${port}`);
    try {
      await assert.rejects(c.lock("l").acquire(), (err: unknown) => {
        assert.ok(err instanceof BakeryError);
        assert.equal(err.kind, "unknown_outcome");
        assert.equal(err.status, 0);
        return true;
      });
      assert.equal(acquires, 1, "an acquire of unknown outcome must not be resent");
    } finally {
      await c.close().catch(() => undefined);
      fake.closeAllConnections();
      await new Promise((r) => fake.close(r));
    }
  });

  test("releasing a grant the session no longer holds is not_found; releasing twice is a no-op", async () => {
    const name = unique("err-release");
    const g = await client.lock(name).acquire();
    assert.ok(g);
    await g.release();
    // The server no longer has it: a raw release answers not_found.
    const session = (g as unknown as { session: { id: string } }).session.id;
    const r = await fetch(`${server.url}/v1/locks/${name}/release`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ session, token: Number(g.token) }),
    });
    assert.equal(r.status, 404);
    assert.equal(((await r.json()) as { kind: string }).kind, "not_found");
    // And releasing again through the client is a no-op.
    await g.release();
  });

  test("every kind the server documents is a kind here", async () => {
    const r = await fetch(`${server.url}/openapi.json`);
    const doc = (await r.json()) as { components: { schemas: { Kind: { enum: string[] } } } };
    assert.deepEqual([...doc.components.schemas.Kind.enum].sort(), [...ERROR_KINDS].sort());
  });
});
