// The client: one connection pool, one lazily opened session, the recipes.

import { setTimeout as sleep } from "node:timers/promises";

import { BakeryError, OnceFailedError, isKind } from "./errors.js";
import { bigOrNull, seg, Transport } from "./http.js";
import { Election, Lock, RWLock, Semaphore } from "./locks.js";
import { Sequence, type SequenceOptions } from "./sequence.js";
import { Session } from "./session.js";

/** Options of {@link Client}. */
export interface ClientOptions {
  /** Bearer token, when the service has a tokens file. */
  token?: string;
  /** TTL of the client's session in milliseconds (1,000 to 3,600,000; default 10,000); kept alive every third of it. */
  sessionTtlMs?: number;
  /** Deadline of each ordinary call in milliseconds (default 30,000); long polls get their wait on top. */
  timeoutMs?: number;
  /** How many times a call that did nothing (503 `unavailable`, connection refused) is retried (default 4). */
  retries?: number;
}

/** Options of {@link Client.once}. */
export interface OnceOptions {
  /** Stop waiting for another worker when aborted. */
  signal?: AbortSignal;
  /** How long one claim waits for another worker running the key (default 30,000 ms; the claim is repeated). */
  waitMs?: number;
}

/**
 * A client of `bakery serve`.
 *
 * ```ts
 * const client = new Client("http://127.0.0.1:7878");
 * const ids = client.sequence("orders", { block: 1000 });
 * const id = ids.tryNext() ?? (await ids.next());
 * const grant = await client.lock("report").acquire();
 * try { await work(grant.token); } finally { await grant!.release(); }
 * await client.close();
 * ```
 */
export class Client implements AsyncDisposable {
  /** @internal */
  readonly transport: Transport;
  /** @internal */
  readonly timeoutMs: number;
  private readonly ttlMs: number;
  private current: Session | undefined;
  private opening: Promise<Session> | undefined;
  private closed = false;

  /**
   * A client of the service at `baseUrl` (e.g. `http://127.0.0.1:7878`).
   * Nothing is sent until a call needs it.
   */
  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.transport = new Transport(baseUrl, { token: options.token, retries: options.retries });
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.ttlMs = options.sessionTtlMs ?? 10_000;
  }

  /** Ids of sequence `name`, from local blocks of `options.block` ids. */
  sequence(name: string, options: SequenceOptions = {}): Sequence {
    return new Sequence(this.transport, name, options, this.timeoutMs);
  }

  /** A fair, fenced lock; `data` is stored with each grant (readable by all). */
  lock(name: string, options: { data?: string } = {}): Lock {
    return new Lock(this, name, options);
  }

  /** A semaphore of `permits` (every caller must give the same number). */
  semaphore(name: string, permits: number): Semaphore {
    return new Semaphore(this, name, permits);
  }

  /** A readers-writer lock. */
  rwLock(name: string): RWLock {
    return new RWLock(this, name);
  }

  /** An election. */
  election(name: string): Election {
    return new Election(this, name);
  }

  /**
   * The client's session, opened on first use; a session that ended on the
   * server is replaced by a new one.
   * @internal
   */
  async session(signal?: AbortSignal): Promise<Session> {
    if (this.closed) throw new BakeryError("invalid_input", 0, "the client is closed");
    if (this.current && !this.current.ended) return this.current;
    if (!this.opening) {
      this.opening = this.open().finally(() => {
        this.opening = undefined;
      });
    }
    if (!signal) return this.opening;
    signal.throwIfAborted();
    return await Promise.race([
      this.opening,
      new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true })),
    ]);
  }

  private async open(): Promise<Session> {
    const sent = performance.now();
    const answer = await this.transport.call({
      method: "POST",
      path: "/v1/sessions",
      body: { ttl_ms: this.ttlMs },
      timeoutMs: this.timeoutMs,
      // An unknown outcome leaves at most an unused session, which expires.
      retry: "always",
    });
    const { id, ttl_ms } = answer.body;
    const session = new Session(this.transport, id, Number(ttl_ms), this.timeoutMs, (s) => {
      if (this.current === s) this.current = undefined;
    }, sent);
    if (this.closed) {
      await session.close();
      throw new BakeryError("invalid_input", 0, "the client is closed");
    }
    this.current = session;
    return session;
  }

  /**
   * Run `fn` exactly once across every process for `scope`/`key`: claim the
   * key; if claimed, run `fn(attempt)` and complete the key with its result
   * (or fail it with its error, so a later call runs it again, and rethrow);
   * if completed already, return the stored result without running; if
   * another worker runs it, wait and claim again. `payload` names the
   * request: the same key with another payload is refused (`conflict`).
   */
  async once(
    scope: string,
    key: string,
    payload: string,
    fn: (attempt: bigint) => string | Promise<string>,
    options: OnceOptions = {},
  ): Promise<string> {
    const { signal } = options;
    const waitMs = Math.max(0, Math.min(options.waitMs ?? 30_000, 60_000));
    const base = `/v1/once/${seg(scope)}/${seg(key)}`;
    for (;;) {
      signal?.throwIfAborted();
      const session = await this.session(signal);
      let state;
      try {
        state = (
          await this.transport.call({
            method: "POST",
            path: `${base}/claim`,
            body: { session: session.id, payload, wait_ms: waitMs },
            timeoutMs: waitMs + this.timeoutMs,
            signal,
            retry: "safe",
          })
        ).body;
      } catch (err) {
        if (isKind(err, "not_found") && (session.ended || (await session.gone()) === true)) {
          session.end("the session ended on the server");
          continue;
        }
        if (!(err instanceof BakeryError) || err.kind === "unknown_outcome") {
          // The claim may be held by the session (the server does not list
          // claims): end the session's ownership of it by closing the
          // session, so another worker can claim the key, and report.
          await session.reset(`a claim of ${scope}/${key} had an unknown outcome`);
        }
        throw err;
      }
      switch (state.status) {
        case "completed":
          return state.result ?? "";
        case "in_progress":
        case "released":
          // With a short wait the server answers at once: pace the next claim.
          if (waitMs < 100) await sleep(100, undefined, signal ? { signal } : {});
          continue;
        case "failed":
          throw new OnceFailedError(bigOrNull(state.attempt), state.error ?? "");
        case "claimed":
          break;
        default:
          throw new BakeryError("corrupt", 200, `claim answered an unknown status ${JSON.stringify(state.status)}`);
      }
      const attempt = bigOrNull(state.attempt) ?? 0n;
      let result: string;
      try {
        result = await fn(attempt);
        if (typeof result !== "string") {
          throw new BakeryError("invalid_input", 0, `once: fn must return a string, got ${typeof result}`);
        }
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        await this.transport
          .call({
            method: "POST",
            path: `${base}/fail`,
            body: { session: session.id, attempt, outcome: message || "failed" },
            timeoutMs: this.timeoutMs,
            retry: "refused",
          })
          .catch(async (failErr: unknown) => {
            await this.giveUpClaim(session, failErr, `fail of ${scope}/${key}`);
            // The work's error is the one to report; the failed fail rides along.
            if (err instanceof Error && err.cause === undefined) (err as { cause?: unknown }).cause = failErr;
          });
        throw err;
      }
      let done;
      try {
        done = await this.transport.call({
          method: "POST",
          path: `${base}/complete`,
          body: { session: session.id, attempt, outcome: result },
          timeoutMs: this.timeoutMs,
          // Resent only when refused: after an answered 503 the server has
          // already taken the claim out of the session.
          retry: "refused",
        });
      } catch (err) {
        await this.giveUpClaim(session, err, `complete of ${scope}/${key}`);
        throw err;
      }
      return done.body?.result ?? result;
    }
  }

  /**
   * After a complete or fail that did not certainly take effect (no answer,
   * or an answered 503): the claim may still be the session's, so close the
   * session (the server gives the claim back; every grant is lost).
   */
  private async giveUpClaim(session: Session, err: unknown, what: string): Promise<void> {
    if (err instanceof BakeryError && err.kind !== "unknown_outcome" && err.kind !== "unavailable") return;
    await session.reset(`the ${what} did not certainly take effect`);
  }

  /**
   * Close the client: close its session (giving back every grant at once)
   * and its connections. Further calls fail.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      const session = this.current ?? (this.opening ? await this.opening.catch(() => undefined) : undefined);
      await session?.close();
    } finally {
      this.transport.destroy();
    }
  }

  /** Close on `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
