// The /ui page in a real browser: Debian's headless Chromium driven by
// Playwright, against a real `bakery serve` (BAKERY_BIN, default the repo's
// target/debug/bakery) on BAKERY_TEST_URI (default an SQLite file).
// Screenshots are kept under target/ui/.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";
import { chromium } from "playwright-core";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const bin = process.env.BAKERY_BIN ?? join(repo, "target/debug/bakery");
const browserPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const shots = join(repo, "target/ui");
const scratch = mkdtempSync(join(tmpdir(), "bakery-ui-"));
const storeUri = process.env.BAKERY_TEST_URI ?? `sqlite://${join(scratch, "ui.db")}`;

/** A running `bakery serve`, its base URL and a way to stop it. */
async function serve(extra = []) {
  assert.ok(
    existsSync(bin),
    `no bakery binary at ${bin}: build it with \`cargo build -p bakery-cli --features serve\` or set BAKERY_BIN`,
  );
  const child = spawn(bin, ["--uri", storeUri, "serve", "--listen", "127.0.0.1:0", ...extra], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((ok, fail) => {
    child.once("exit", (code) => fail(new Error(`bakery serve exited with ${code} before listening`)));
    lines.once("line", (line) => {
      const found = /listening on (\S+)/.exec(line);
      found ? ok(found[1]) : fail(new Error(`unexpected first line: ${line}`));
    });
  });
  return {
    url,
    stop: () =>
      new Promise((done) => {
        if (child.exitCode !== null) return done();
        child.once("exit", done);
        child.kill("SIGTERM");
      }),
  };
}

/** A JSON call; throws on a status other than 2xx. */
async function call(base, method, path, body, token) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(`${base}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** Until `check()` is true, or fail after `ms` naming `what`. */
async function until(what, check, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`never: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let browser;
before(async () => {
  assert.ok(existsSync(browserPath), `no Chromium at ${browserPath}: install Debian's chromium, or set CHROMIUM`);
  mkdirSync(shots, { recursive: true });
  browser = await chromium.launch({
    executablePath: browserPath,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** The owners shown as holders and as waiters of `member`, in page order. */
async function shown(page, member) {
  return page.evaluate((member) => {
    const card = document.querySelector(`[data-member="${member}"]`);
    if (!card) return null;
    const owners = (selector) => [...card.querySelectorAll(selector)].map((li) => li.dataset.owner);
    return { holders: owners("ul.holders > li.holder"), queue: owners("ol.queue > li.waiter") };
  }, member);
}

test("the page shows the holder and the waiters in order, then moves on live", async () => {
  const server = await serve();
  const name = `ui-${randomUUID().slice(0, 8)}`;
  const member = `locks/${name}`;
  const waits = [];
  const ids = [];
  try {
    for (let i = 0; i < 3; i++) ids.push((await call(server.url, "POST", "/v1/sessions", { ttl_ms: 60_000 })).id);
    const [a, b, c] = ids;
    const held = await call(server.url, "POST", `/v1/locks/${name}/acquire`, { session: a, data: "nightly report" });
    assert.equal(held.granted, true);
    for (const [i, waiter] of [b, c].entries()) {
      waits.push(call(server.url, "POST", `/v1/locks/${name}/acquire`, { session: waiter, timeout_ms: 60_000 }));
      // In line before the next joins, so the order is known.
      await until(`${i + 1} waiting`, async () => {
        const state = await call(server.url, "GET", `/v1/locks/${name}`);
        return state.queue.length === i + 1;
      });
    }
    await call(server.url, "POST", `/v1/sequences/${name}-orders/reserve?size=100`);
    const led = await call(server.url, "POST", `/v1/elections/${name}-primary/acquire`, { session: a, data: "10.0.0.7" });

    const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    const errors = [];
    page.on("pageerror", (err) => errors.push(err.message));
    await page.goto(`${server.url}/ui`);
    await until("the page shows the lock", async () => (await shown(page, member))?.queue.length === 2);
    assert.deepEqual(await shown(page, member), {
      holders: [`session ${a}`],
      queue: [`session ${b}`, `session ${c}`],
    });
    const card = page.locator(`[data-member="${member}"]`);
    assert.equal(await card.locator("ol.queue").getAttribute("aria-label"), "queue");
    assert.match(await card.locator(".holder .token").innerText(), new RegExp(`token ${held.token}$`));
    assert.match(await card.locator(".holder .data").innerText(), /nightly report/);
    assert.match(await card.locator(".holder .lease .left-text").innerText(), /\d+(\.\d)? (s|ms|min)$/);
    assert.match(await page.locator(`[data-sequence="${name}-orders"] .next`).innerText(), /^101$/);
    const leader = page.locator(`#leaders [data-member="elections/${name}-primary"]`);
    assert.equal(await leader.locator(".facts").innerText(), `term ${led.token}`);
    assert.equal(await leader.locator(".holder").getAttribute("data-owner"), `session ${a}`);
    assert.match(await leader.locator(".holder .data").innerText(), /10\.0\.0\.7/);
    for (const id of ids) assert.equal(await page.locator(`[data-session="${id}"]`).count(), 1, id);
    assert.equal(await page.locator("#status").getAttribute("data-state"), "live");
    // Readable on a phone: nothing wider than the screen.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than a phone's screen`);
    await page.screenshot({ path: join(shots, "held.png"), fullPage: true });

    // Released: the page moves on by itself (no reload).
    let reloaded = false;
    page.on("load", () => (reloaded = true));
    await call(server.url, "POST", `/v1/locks/${name}/release`, { session: a, token: held.token });
    await until("the page moves on", async () => (await shown(page, member))?.holders[0] === `session ${b}`);
    assert.deepEqual(await shown(page, member), { holders: [`session ${b}`], queue: [`session ${c}`] });
    assert.equal(reloaded, false, "the page was reloaded");
    await page.screenshot({ path: join(shots, "moved-on.png"), fullPage: true });
    assert.deepEqual(errors, [], "the page threw");
    await page.close();
  } finally {
    for (const id of ids) await call(server.url, "DELETE", `/v1/sessions/${id}`).catch(() => {});
    await Promise.allSettled(waits);
    await server.stop();
  }
});

test("a lock taken through another bakery serve process shows on this one's page when watched", async () => {
  // Two server processes on one store: the page of the first follows what a
  // client of the second holds and waits for.
  const [here, there] = [await serve(), await serve()];
  const name = `ui-other-${randomUUID().slice(0, 8)}`;
  const ids = [];
  const waits = [];
  try {
    for (let i = 0; i < 2; i++) ids.push((await call(there.url, "POST", "/v1/sessions", { ttl_ms: 60_000 })).id);
    const held = await call(there.url, "POST", `/v1/locks/${name}/acquire`, { session: ids[0] });
    waits.push(call(there.url, "POST", `/v1/locks/${name}/acquire`, { session: ids[1], timeout_ms: 60_000 }));
    await until("one waiting", async () => (await call(there.url, "GET", `/v1/locks/${name}`)).queue.length === 1);

    const page = await browser.newPage();
    await page.goto(`${here.url}/ui`);
    await page.locator("#status[data-state='live']").waitFor();
    assert.equal(await page.locator(`[data-member="locks/${name}"]`).count(), 0, "shown before it was watched");
    await page.fill("#watch", `locks/${name}`);
    await page.click("#watch-form button");
    await until("the watched lock shows", async () => (await shown(page, `locks/${name}`))?.queue.length === 1);
    assert.deepEqual(await shown(page, `locks/${name}`), { holders: [`session ${ids[0]}`], queue: [`session ${ids[1]}`] });
    assert.match(page.url(), new RegExp(`watch=locks%2F${name}`));
    // Released there: this page moves on (its store reads, not this process's events).
    await call(there.url, "POST", `/v1/locks/${name}/release`, { session: ids[0], token: held.token });
    await until("the page moves on", async () => (await shown(page, `locks/${name}`))?.holders[0] === `session ${ids[1]}`);
    assert.equal(await page.locator(`[data-session="${ids[0]}"]`).count(), 0, "another instance's session shown");
    await page.close();
  } finally {
    for (const id of ids) await call(there.url, "DELETE", `/v1/sessions/${id}`).catch(() => {});
    await Promise.allSettled(waits);
    await Promise.all([here.stop(), there.stop()]);
  }
});

test("behind tokens, the page asks for one and shows only what it may read", async () => {
  const tokens = join(scratch, "tokens.toml");
  writeFileSync(
    tokens,
    `[[token]]
name = "ops"
secret = "ops-secret-0123456789"
prefixes = ["ops-"]
operations = ["locks", "read"]

[[token]]
name = "billing"
secret = "billing-secret-0123456789"
prefixes = ["billing-"]
operations = ["locks", "read"]
`,
  );
  const server = await serve(["--tokens", tokens]);
  const secret = "ops-secret-0123456789";
  const other = "billing-secret-0123456789";
  const name = `ops-${randomUUID().slice(0, 8)}`;
  const hidden = `billing-${randomUUID().slice(0, 8)}`;
  let session;
  let otherSession;
  try {
    session = (await call(server.url, "POST", "/v1/sessions", {}, secret)).id;
    await call(server.url, "POST", `/v1/locks/${name}/acquire`, { session }, secret);
    // Another token's lock and session, on the same instance.
    otherSession = (await call(server.url, "POST", "/v1/sessions", {}, other)).id;
    await call(server.url, "POST", `/v1/locks/${hidden}/acquire`, { session: otherSession }, other);
    const page = await browser.newPage();
    await page.goto(`${server.url}/ui`);
    await page.locator("#token-form").waitFor({ state: "visible" });
    assert.equal(await page.locator("#status").getAttribute("data-state"), "auth");
    assert.equal(await page.locator(`[data-member="locks/${name}"]`).count(), 0, "data shown without a token");
    await page.fill("#token", secret);
    await page.click("#token-form button");
    await until("the page shows the lock", async () => (await shown(page, `locks/${name}`))?.holders.length === 1);
    assert.deepEqual(await shown(page, `locks/${name}`), { holders: [`session ${session}`], queue: [] });
    assert.equal(await page.locator("#token-form").isVisible(), false);
    assert.equal(await page.locator(`[data-session="${session}"]`).count(), 1);
    // What the other token holds is not shown, nor its session.
    assert.equal(await page.locator(`[data-member="locks/${hidden}"]`).count(), 0, "another token's lock");
    assert.equal(await page.locator(`[data-session="${otherSession}"]`).count(), 0, "another token's session");
    assert.doesNotMatch(await page.content(), new RegExp(hidden), "another token's name in the page");
    await page.close();
  } finally {
    if (session) await call(server.url, "DELETE", `/v1/sessions/${session}`, undefined, secret).catch(() => {});
    if (otherSession) await call(server.url, "DELETE", `/v1/sessions/${otherSession}`, undefined, other).catch(() => {});
    await server.stop();
  }
});
