// Lock, Semaphore, RWLock and Election: acquire (a repeated long poll),
// try-acquire, release through the Grant; observe an election over SSE.

import { BakeryError, isKind } from "./errors.js";
import { big, bigOrNull, parseJson, seg } from "./http.js";
import { Grant, type Family, type Session } from "./session.js";
import type { Client } from "./client.js";

/** Options of a waiting acquire. */
export interface AcquireOptions {
  /** Stop waiting when aborted: the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Wait at most this long, then resolve with `null`. Without it, wait
   * until granted (or aborted).
   */
  timeoutMs?: number;
}

/** The longest long poll the server accepts, and the one we send while waiting without a limit. */
const MAX_POLL_MS = 60_000;
const POLL_MS = 30_000;
/** Extra time an HTTP call gets over its long poll. */
const POLL_GRACE_MS = 10_000;

/**
 * What every member of the lock family shares: acquire, tryAcquire.
 * @internal
 */
export abstract class Recipe<G extends Grant = Grant> {
  /** The recipe's name. */
  readonly name: string;
  /** @internal */
  protected readonly client: Client;
  /** @internal */
  protected readonly family: Family;

  /** @internal */
  constructor(client: Client, family: Family, name: string) {
    this.client = client;
    this.family = family;
    this.name = name;
  }

  /** @internal the request body's recipe-specific fields. */
  protected abstract fields(): Record<string, unknown>;

  /** @internal the class of the grants it gives. */
  protected grantClass(): typeof Grant {
    return Grant;
  }

  /** @internal */
  protected async take(
    options: AcquireOptions,
    wait: boolean,
    fields: Record<string, unknown> = this.fields(),
  ): Promise<G | null> {
    const { signal } = options;
    const deadline = options.timeoutMs === undefined ? Infinity : performance.now() + options.timeoutMs;
    const path = `/v1/${this.family}/${seg(this.name)}/${wait ? "acquire" : "try"}`;
    for (let first = true; ; first = false) {
      signal?.throwIfAborted();
      const remaining = deadline - performance.now();
      if (!first && remaining <= 0) return null;
      const session = await this.client.session(signal);
      const pollMs = Math.max(1, Math.min(remaining === Infinity ? POLL_MS : Math.ceil(remaining), MAX_POLL_MS));
      const body: Record<string, unknown> = { session: session.id, ...fields };
      if (wait) body.timeout_ms = pollMs;
      // Counted on the session per family/name (not per Lock object: several
      // may share a name), so that cleaning up after an interrupted acquire
      // never releases a grant another acquire of this client is receiving.
      const seen = session.begin(this.family, this.name);
      let answer;
      try {
        answer = await this.client.transport.call({
          method: "POST",
          path,
          body,
          // A long poll gets its wait on top of the ordinary deadline.
          timeoutMs: wait ? pollMs + Math.min(POLL_GRACE_MS, this.client.timeoutMs) : this.client.timeoutMs,
          signal,
          retry: "safe",
        });
      } catch (err) {
        session.finish(this.family, this.name);
        if (isKind(err, "not_found") && (session.ended || (await this.sessionGone(session)))) {
          continue; // the session ended while we asked: a new one is opened
        }
        if (!(err instanceof BakeryError) || err.kind === "unknown_outcome") {
          // Aborted or broken after sending: the server may have granted it.
          this.cleanUp(session, seen);
        }
        throw err;
      }
      session.finish(this.family, this.name);
      const { granted, token } = answer.body ?? {};
      if (granted === true) {
        const grant = session.hold(this.family, this.name, big(token), this.grantClass());
        if (session.ended) grant.markLost("its session ended as it was granted");
        return grant as G;
      }
      if (!wait) return null;
    }
  }

  /** Whether `session` has ended on the server (then drop it). */
  private async sessionGone(session: Session): Promise<boolean> {
    if ((await session.gone()) !== true) return false;
    session.end("the session ended on the server");
    return true;
  }

  /** Release in the background what an interrupted acquire may have been granted. */
  private cleanUp(session: Session, seen: number): void {
    session.cleanUp(this.family, this.name, seen);
  }

  /**
   * Ask once, never queueing: the grant, or `null` if it is busy.
   */
  tryAcquire(options: { signal?: AbortSignal } = {}): Promise<G | null> {
    return this.take(options, false);
  }
}

/** Fields of a waiting acquire on each recipe. */
abstract class Waiting<G extends Grant = Grant> extends Recipe<G> {
  /**
   * Wait first come first served until granted: the grant, or `null` if
   * `timeoutMs` passed first. Repeats the server's long poll for as long as
   * it takes. Aborting `signal` rejects with its reason (and gives back in
   * the background whatever the interrupted poll may have been granted).
   */
  acquire(options: AcquireOptions = {}): Promise<G | null> {
    return this.take(options, true);
  }
}

/** A fair, fenced mutual-exclusion lock. */
export class Lock extends Waiting {
  private readonly data: string | undefined;

  /** @internal */
  constructor(client: Client, name: string, options: { data?: string } = {}) {
    super(client, "locks", name);
    this.data = options.data;
  }

  protected fields(): Record<string, unknown> {
    return this.data === undefined ? {} : { data: this.data };
  }
}

/** A fair counting semaphore: at most `permits` holders at once. */
export class Semaphore extends Waiting {
  /** How many may hold it at once (every caller must give the same number). */
  readonly permits: number;

  /** @internal */
  constructor(client: Client, name: string, permits: number) {
    super(client, "semaphores", name);
    if (!Number.isInteger(permits) || permits < 1) {
      throw new BakeryError("invalid_input", 0, `permits must be a positive integer, got ${permits}`);
    }
    this.permits = permits;
  }

  protected fields(): Record<string, unknown> {
    return { permits: this.permits };
  }
}

/** One side of an {@link RWLock}: its readers or its writer. */
export class RWSide extends Waiting {
  /** `read` (shared) or `write` (exclusive). */
  readonly mode: "read" | "write";

  /** @internal */
  constructor(client: Client, name: string, mode: "read" | "write") {
    super(client, "rwlocks", name);
    this.mode = mode;
  }

  protected fields(): Record<string, unknown> {
    return { mode: this.mode };
  }
}

/**
 * A fair readers-writer lock: many readers or one writer.
 * `await rw.read.acquire()`, `await rw.write.tryAcquire()`.
 */
export class RWLock {
  /** The lock's name. */
  readonly name: string;
  /** Shared holds. */
  readonly read: RWSide;
  /** The exclusive hold. */
  readonly write: RWSide;

  /** @internal */
  constructor(client: Client, name: string) {
    this.name = name;
    this.read = new RWSide(client, name, "read");
    this.write = new RWSide(client, name, "write");
  }
}

/** The leader of an election, or nobody (`term` 0, no owner). */
export interface LeaderEvent {
  /** The leader's term (its grant's fencing token); 0: nobody leads. */
  term: bigint;
  /** The leader's owner (`session ID`), if any. */
  owner: string | null;
  /** The value the leader published, if any. */
  value: string | null;
}

/** Leadership of an election: a grant whose token is the term. */
export class Leadership extends Grant {
  /** The term (the same as {@link token}). */
  get term(): bigint {
    return this.token;
  }

  /** Step down: the same as {@link release}. */
  resign(options: { signal?: AbortSignal } = {}): Promise<void> {
    return this.release(options);
  }
}

/** An election: campaign to lead with a published value, resign, observe. */
export class Election extends Recipe<Leadership> {
  /** @internal */
  constructor(client: Client, name: string) {
    super(client, "elections", name);
  }

  protected fields(): Record<string, unknown> {
    return {};
  }

  protected override grantClass(): typeof Grant {
    return Leadership;
  }

  /**
   * Wait to lead, publishing `value` while leading: the leadership, or
   * `null` if `timeoutMs` passed first.
   */
  campaign(value: string, options: AcquireOptions = {}): Promise<Leadership | null> {
    return this.take(options, true, { data: value });
  }

  /** Lead now if nobody does, publishing `value`; never queues. */
  tryCampaign(value: string, options: { signal?: AbortSignal } = {}): Promise<Leadership | null> {
    return this.take(options, false, { data: value });
  }

  /** The current leader (term 0 if nobody leads). */
  async leader(options: { signal?: AbortSignal } = {}): Promise<LeaderEvent> {
    try {
      const answer = await this.client.transport.call({
        method: "GET",
        path: `/v1/elections/${seg(this.name)}`,
        timeoutMs: this.client.timeoutMs,
        signal: options.signal,
        retry: "always",
      });
      const holder = answer.body?.holders?.[0];
      if (!holder) return { term: 0n, owner: null, value: null };
      return { term: bigOrNull(holder.token) ?? 0n, owner: holder.owner ?? null, value: holder.data ?? null };
    } catch (err) {
      if (isKind(err, "not_found")) return { term: 0n, owner: null, value: null };
      throw err;
    }
  }

  /**
   * Follow the leader: yields the current leader, then every change, over
   * the server's SSE stream (reconnecting when the server ends it) until
   * `signal` is aborted or the loop breaks.
   */
  async *observe(options: { signal?: AbortSignal } = {}): AsyncGenerator<LeaderEvent, void, undefined> {
    const { signal } = options;
    let last: string | undefined;
    let failures = 0;
    for (;;) {
      if (signal?.aborted) return;
      let stream;
      try {
        stream = await this.client.transport.stream(`/v1/elections/${seg(this.name)}/observe?timeout_ms=600000`, signal);
      } catch (err) {
        if (signal?.aborted) return;
        if (isKind(err, "unavailable") && failures < 4) {
          failures++;
          await new Promise((r) => setTimeout(r, 100 * 2 ** failures));
          continue;
        }
        throw err;
      }
      failures = 0;
      const { request, response } = stream;
      try {
        let event = "message";
        let data: string[] = [];
        let buffer = "";
        response.setEncoding("utf8");
        for await (const chunk of response as AsyncIterable<string>) {
          buffer += chunk;
          let nl: number;
          while ((nl = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, nl).replace(/\r$/, "");
            buffer = buffer.slice(nl + 1);
            if (line === "") {
              if (data.length > 0) {
                const text = data.join("\n");
                if (event === "error") throw new BakeryError("unavailable", 200, `observing election ${this.name}: ${text}`);
                if (event === "leader" && text !== last) {
                  last = text;
                  const e = parseJson(text);
                  yield { term: big(e.term), owner: e.owner ?? null, value: e.value ?? null };
                }
              }
              event = "message";
              data = [];
            } else if (line.startsWith(":")) {
              // A comment: the server's keep-alive.
            } else {
              const colon = line.indexOf(":");
              const field = colon < 0 ? line : line.slice(0, colon);
              let value = colon < 0 ? "" : line.slice(colon + 1);
              if (value.startsWith(" ")) value = value.slice(1);
              if (field === "event") event = value;
              else if (field === "data") data.push(value);
            }
          }
        }
      } catch (err) {
        if (signal?.aborted) return;
        if (err instanceof BakeryError) throw err;
        // The stream broke: reconnect.
      } finally {
        request.destroy();
      }
    }
  }
}
