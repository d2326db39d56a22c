// Sequences against a real server, and the exact 64-bit JSON they rely on.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { BakeryError, Client } from "../src/index.js";
import { parseJson, stringifyJson } from "../src/http.js";
import { startServer, unique, type Server } from "./helpers/server.js";

describe("sequence", () => {
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

  test("ids are distinct and increasing across many blocks", async () => {
    const seq = client.sequence(unique("seq"), { block: 7 });
    let last = 0n;
    for (let i = 0; i < 200; i++) {
      const id = await seq.next();
      assert.equal(typeof id, "bigint");
      assert.ok(id > last, `${id} after ${last}`);
      last = id;
    }
  });

  test("tryNext has nothing before the first block, then draws from it synchronously", async () => {
    const seq = client.sequence(unique("seq-try"), { block: 100 });
    assert.equal(seq.tryNext(), undefined);
    const first = await seq.next();
    const second = seq.tryNext();
    assert.equal(second, first + 1n);
  });

  test("the next block is fetched in the background before this one is used up", async () => {
    const seq = client.sequence(unique("seq-prefetch"), { block: 10, prefetchAt: 0.5 });
    const first = await seq.next();
    for (let i = 0; i < 5; i++) assert.notEqual(seq.tryNext(), undefined);
    // Past half of the block: let the background reservation land.
    await new Promise((r) => setImmediate(r));
    await waitReady(seq);
    const rest: bigint[] = [];
    for (let id = seq.tryNext(); id !== undefined; id = seq.tryNext()) {
      rest.push(id);
      if (rest.length > 50) break;
    }
    // Synchronously past the end of the first block: the prefetched one was there.
    assert.ok(rest.length > 4, `only ${rest.length} ids without waiting`);
    assert.ok(rest.every((id, i) => id > (i === 0 ? first : rest[i - 1]!)));
  });

  test("two sequence objects of one name never share an id", async () => {
    const name = unique("seq-two");
    const a = client.sequence(name, { block: 5 });
    const b = client.sequence(name, { block: 5 });
    const ids = new Set<bigint>();
    for (let i = 0; i < 40; i++) {
      ids.add(await a.next());
      ids.add(await b.next());
    }
    assert.equal(ids.size, 80);
  });

  test("a bad name is invalid_input from the server", async () => {
    const seq = client.sequence("no spaces allowed", { block: 5 });
    await assert.rejects(seq.next(), (err: unknown) => {
      assert.ok(err instanceof BakeryError);
      assert.equal(err.kind, "invalid_input");
      assert.equal(err.status, 400);
      assert.match(err.message, /name/);
      return true;
    });
  });

  test("a bad block size is refused before any call", () => {
    assert.throws(() => client.sequence("x", { block: 0 }), (err: unknown) => err instanceof BakeryError && err.kind === "invalid_input");
  });
});

/** Wait (with a deadline) until the sequence has its next block locally. */
async function waitReady(seq: object): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((seq as { ready?: unknown }).ready === undefined) {
    if (Date.now() > deadline) throw new Error("the prefetched block never arrived");
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("JSON with 64-bit integers", () => {
  test("integers past 2^53 keep their exact value", () => {
    const text = '{"name":"s","start":18446744073709551000,"end":18446744073709551615,"s":"12345678901234567890"}';
    const body = parseJson(text);
    assert.equal(BigInt(body.start), 18446744073709551000n);
    assert.equal(BigInt(body.end), 18446744073709551615n);
    assert.equal(body.s, "12345678901234567890");
  });

  test("bigints are written as integer literals, strings stay strings", () => {
    const text = stringifyJson({ token: 18446744073709551615n, data: "\\u0000big:5", n: 3 });
    assert.equal(text, '{"token":18446744073709551615,"data":"\\\\u0000big:5","n":3}');
  });
});
