// The client's session: opened lazily, kept alive in the background, its
// grants watched for loss.

import { BakeryError, isKind } from "./errors.js";
import { big, seg, type Transport } from "./http.js";

/** The recipes a session holds grants of (the path's family). */
export type Family = "locks" | "semaphores" | "rwlocks" | "elections";

/**
 * A grant held in the client's session: a lock, semaphore permit, read or
 * write hold of an RW lock, or an election's leadership.
 *
 * Send {@link token} with every write made under the grant. Stop working
 * under it once {@link lost} resolves: a waiter may already hold it.
 * `await using grant = await lock.acquire()` releases it at the end of the
 * block.
 */
export class Grant implements AsyncDisposable {
  /** Which recipe. */
  readonly family: Family;
  /** Its name. */
  readonly name: string;
  /** The fencing token: larger than every earlier grant's of the same name. */
  readonly token: bigint;
  /** Resolves once the grant is lost (never if it is released first). */
  readonly lost: Promise<void>;
  /** Aborted once the grant is lost, for APIs that take a signal. */
  readonly lostSignal: AbortSignal;

  /** @internal */
  readonly session: Session;
  /** @internal the keepalive count when the grant was recorded. */
  readonly since: number;
  private readonly abort = new AbortController();
  private resolveLost!: () => void;
  private state: "held" | "lost" | "released" = "held";

  /** @internal */
  constructor(session: Session, family: Family, name: string, token: bigint) {
    this.session = session;
    this.family = family;
    this.name = name;
    this.token = token;
    this.since = session.keepalives;
    this.lostSignal = this.abort.signal;
    this.lost = new Promise<void>((resolve) => {
      this.resolveLost = resolve;
    });
  }

  /**
   * True once the grant is known lost, or may be: once no keepalive got
   * through for a whole TTL, the server may have ended the session (then
   * this also fires {@link lost}).
   */
  get isLost(): boolean {
    if (this.state === "held" && this.session.pastTtl()) this.session.expire();
    return this.state === "lost";
  }

  /** True once the grant was released (by {@link release} or closing the client). */
  get isReleased(): boolean {
    return this.state === "released";
  }

  /** @internal */
  key(): string {
    return grantKey(this.family, this.name, this.token);
  }

  /** @internal mark the grant lost: fires {@link lost} and {@link lostSignal} once. */
  markLost(why: string): void {
    if (this.state !== "held") return;
    this.state = "lost";
    this.session.forget(this);
    this.abort.abort(new BakeryError("lost", 0, `${this.family} ${this.name} (token ${this.token}) was lost: ${why}`));
    this.resolveLost();
  }

  /** @internal */
  markReleased(): void {
    if (this.state === "held") this.state = "released";
  }

  /**
   * Give the grant back. Rejects with kind `lost` if the server says it was
   * lost meanwhile (work done under it may have overlapped a successor's).
   * Releasing twice is a no-op. Not resent after an unknown outcome: the
   * error reaches the caller (closing the client gives the grant back).
   */
  async release(options: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.state === "released") return;
    if (this.state === "lost") {
      throw new BakeryError("lost", 0, `${this.family} ${this.name} (token ${this.token}) was lost before its release`);
    }
    if (this.isLost) {
      throw new BakeryError("lost", 0, `${this.family} ${this.name} (token ${this.token}) was lost before its release`);
    }
    this.session.forget(this);
    this.state = "released";
    try {
      await this.session.transport.call({
        method: "POST",
        path: `/v1/${this.family}/${seg(this.name)}/release`,
        body: { session: this.session.id, token: this.token },
        timeoutMs: this.session.timeoutMs,
        signal: options.signal,
        // Resent only when refused: after an answered 503 the server has
        // already taken the grant out of the session (it ends with its lease).
        retry: "refused",
      });
    } catch (err) {
      this.state = "held";
      if (isKind(err, "lost")) {
        this.markLost("the server answered its release with lost");
        throw err;
      }
      if (isKind(err, "not_found")) {
        // The grant is not in the session: ask the server whether the
        // session itself is gone (then every grant of it is lost).
        const gone = await this.session.gone();
        if (gone) this.session.end("the session ended on the server");
        this.markLost(gone ? "its session ended before the release" : "the session no longer held it at its release");
        throw new BakeryError("lost", err.status, err.message, { cause: err });
      }
      // Not released (or not known to be): still watched; release may be retried.
      this.session.track(this);
      throw err;
    }
  }

  /** Release on `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** A claim of `once` held in the session. */
export function grantKey(family: string, name: string, token: bigint): string {
  return `${family}\u0000${name}\u0000${token}`;
}

/**
 * One session of the service: its id, its grants, its keepalive loop.
 * @internal
 */
export class Session {
  readonly id: string;
  readonly ttlMs: number;
  readonly transport: Transport;
  readonly timeoutMs: number;
  /** How many keepalives were sent: a grant recorded after keepalive N is judged by N+1 on. */
  keepalives = 0;
  ended = false;
  private readonly grants = new Map<string, Grant>();
  private timer: NodeJS.Timeout | undefined;
  /** Fires at {@link lastOk} + TTL: every grant is lost then, whatever is in flight. */
  private expiry: NodeJS.Timeout | undefined;
  /** When the last successful keepalive (or the open) was sent, by performance.now(). */
  private lastOk: number;
  private readonly onEnd: (session: Session) => void;
  /** Acquires in flight per family/name, and how many ever started (whatever Lock object made them). */
  private readonly inflight = new Map<string, number>();
  private readonly started = new Map<string, number>();

  /** `openedAt`: when the request that opened the session was sent. */
  constructor(
    transport: Transport,
    id: string,
    ttlMs: number,
    timeoutMs: number,
    onEnd: (s: Session) => void,
    openedAt: number = performance.now(),
  ) {
    this.transport = transport;
    this.id = id;
    this.ttlMs = ttlMs;
    this.timeoutMs = timeoutMs;
    this.onEnd = onEnd;
    this.lastOk = openedAt;
    this.armExpiry();
    this.schedule(openedAt);
  }

  /** Whether a whole TTL passed since the last successful keepalive was sent. */
  pastTtl(): boolean {
    return !this.ended && performance.now() >= this.lastOk + this.ttlMs;
  }

  private armExpiry(): void {
    clearTimeout(this.expiry);
    if (this.ended) return;
    this.expiry = setTimeout(() => {
      if (this.pastTtl()) this.expire();
      else this.armExpiry();
    }, Math.max(0, Math.ceil(this.lastOk + this.ttlMs - performance.now())));
    this.refTimer();
  }

  /**
   * No keepalive got through for a whole TTL: the server may have ended the
   * session, so none of its grants is trusted any more. Ends it (every grant
   * lost) and closes it in the background in case it still lives.
   */
  expire(): void {
    if (this.ended) return;
    this.end(`no keepalive got through for a whole TTL (${this.ttlMs} ms)`);
    this.deleteQuietly();
  }

  /**
   * Give up the session: every grant lost, the session closed on the server
   * (so it gives back whatever it holds, e.g. a claim of unknown outcome).
   */
  async reset(why: string): Promise<void> {
    if (this.ended) return;
    this.end(why);
    await this.deleteQuietly();
  }

  private async deleteQuietly(): Promise<void> {
    try {
      await this.transport.call({
        method: "DELETE",
        path: `/v1/sessions/${seg(this.id)}`,
        timeoutMs: this.timeoutMs,
        retry: "always",
      });
    } catch {
      // Gone already, or unreachable: it ends with its TTL.
    }
  }

  /**
   * Whether the session is gone on the server (`GET` answered 404); false
   * if it lives, undefined if the server could not say.
   */
  async gone(): Promise<boolean | undefined> {
    try {
      await this.transport.call({
        method: "GET",
        path: `/v1/sessions/${seg(this.id)}`,
        timeoutMs: this.timeoutMs,
        retry: "always",
      });
      return false;
    } catch (err) {
      return isKind(err, "not_found") ? true : undefined;
    }
  }

  /** An acquire of `family/name` starts: returns its number (for {@link reconcile}). */
  begin(family: Family, name: string): number {
    const k = `${family}\u0000${name}`;
    this.inflight.set(k, (this.inflight.get(k) ?? 0) + 1);
    const n = (this.started.get(k) ?? 0) + 1;
    this.started.set(k, n);
    return n;
  }

  /** An acquire of `family/name` ended (answered or not). */
  finish(family: Family, name: string): void {
    const k = `${family}\u0000${name}`;
    const n = (this.inflight.get(k) ?? 0) - 1;
    if (n > 0) this.inflight.set(k, n);
    else this.inflight.delete(k);
  }

  /** Whether an acquire of `family/name` is in flight, or started after number `seen`. */
  private busy(family: Family, name: string, seen: number): boolean {
    const k = `${family}\u0000${name}`;
    return this.ended || (this.inflight.get(k) ?? 0) > 0 || (this.started.get(k) ?? 0) !== seen;
  }

  /** Record a grant the server gave this session. */
  hold(family: Family, name: string, token: bigint, kind: typeof Grant = Grant): Grant {
    const grant = new kind(this, family, name, token);
    this.grants.set(grant.key(), grant);
    this.refTimer();
    return grant;
  }

  /** Watch `grant` again (after a release that failed). */
  track(grant: Grant): void {
    if (this.ended) {
      grant.markLost("its session ended");
      return;
    }
    this.grants.set(grant.key(), grant);
    this.refTimer();
  }

  /** Whether the session holds `family/name/token` locally. */
  holds(family: Family, name: string, token: bigint): boolean {
    return this.grants.has(grantKey(family, name, token));
  }

  /** Stop tracking `grant`. */
  forget(grant: Grant): void {
    if (this.grants.get(grant.key()) === grant) this.grants.delete(grant.key());
    this.refTimer();
  }

  /** Keep the process alive while grants are held (so `lost` can fire), not otherwise. */
  private refTimer(): void {
    for (const timer of [this.timer, this.expiry]) {
      if (!timer) continue;
      if (this.grants.size > 0) timer.ref();
      else timer.unref();
    }
  }

  /** The next keepalive a third of the TTL after `from` (when the last one was sent). */
  private schedule(from: number): void {
    if (this.ended) return;
    const delay = Math.max(10, from + Math.floor(this.ttlMs / 3) - performance.now());
    this.timer = setTimeout(() => void this.keepalive(), delay);
    this.refTimer();
  }

  /**
   * One keepalive, all its retries bounded to a third of the TTL: the
   * answer's grants with `held: false`, or missing, are lost.
   */
  private async keepalive(): Promise<void> {
    if (this.ended) return;
    const number = ++this.keepalives;
    const sent = performance.now();
    const budget = Math.max(100, Math.floor(this.ttlMs / 3));
    try {
      const answer = await this.transport.call({
        method: "POST",
        path: `/v1/sessions/${seg(this.id)}/keepalive`,
        timeoutMs: budget,
        signal: AbortSignal.timeout(budget),
        retry: "always",
      });
      if (this.ended) return;
      this.lastOk = Math.max(this.lastOk, sent);
      this.armExpiry();
      const held = new Map<string, boolean>();
      for (const g of answer.body?.grants ?? []) {
        held.set(grantKey(g.family, g.name, big(g.token)), g.held === true);
      }
      for (const grant of [...this.grants.values()]) {
        if (grant.since >= number) continue; // recorded after this keepalive was sent
        const h = held.get(grant.key());
        if (h === undefined) grant.markLost("the session no longer lists it");
        else if (!h) grant.markLost("the server could not renew its lease and a waiter took over");
      }
    } catch (err) {
      if (this.ended) return;
      if (isKind(err, "not_found")) {
        this.end("the session ended on the server (it missed its TTL, or the instance restarted)");
        return;
      }
      if (this.pastTtl()) {
        this.expire();
        return;
      }
    }
    this.schedule(sent);
  }

  /** The session is over on the server: every grant is lost. */
  end(why: string): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.timer);
    clearTimeout(this.expiry);
    for (const grant of [...this.grants.values()]) grant.markLost(why);
    this.grants.clear();
    this.onEnd(this);
  }

  /** Close the session on the server, giving back everything it holds. */
  async close(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.timer);
    clearTimeout(this.expiry);
    const grants = [...this.grants.values()];
    this.grants.clear();
    this.onEnd(this);
    try {
      await this.transport.call({
        method: "DELETE",
        path: `/v1/sessions/${seg(this.id)}`,
        timeoutMs: this.timeoutMs,
        retry: "always",
      });
      for (const grant of grants) grant.markReleased();
    } catch (err) {
      if (isKind(err, "not_found")) {
        for (const grant of grants) grant.markLost("the session had already ended when the client closed");
        return;
      }
      for (const grant of grants) grant.markLost(`closing the session failed: ${(err as Error).message}`);
      throw err;
    }
  }

  /** Clean-ups after interrupted acquires still running. */
  private readonly cleanups = new Set<Promise<void>>();

  /**
   * {@link reconcile} in the background (its failure leaves the grant to
   * the session's end: closing the client gives it back).
   */
  cleanUp(family: Family, name: string, seen: number): void {
    const p: Promise<void> = this.reconcile(family, name, seen)
      .catch(() => undefined)
      .finally(() => this.cleanups.delete(p));
    this.cleanups.add(p);
  }

  /** @internal resolves once every background clean-up has finished (for tests). */
  async idle(): Promise<void> {
    while (this.cleanups.size > 0) await Promise.all([...this.cleanups]);
  }

  /**
   * After an acquire of unknown outcome (aborted, or its connection broke),
   * release any grant of `family/name` the server lists for this session
   * that nobody here knows of, so it does not stay held until the session
   * ends. `seen` is the number {@link begin} gave the interrupted acquire:
   * if another acquire of the same family/name (from any Lock object of
   * this client) is in flight or started since, its grant may be one of
   * those, so they are left alone.
   */
  async reconcile(family: Family, name: string, seen: number): Promise<void> {
    if (this.ended) return;
    const answer = await this.transport.call({
      method: "GET",
      path: `/v1/sessions/${seg(this.id)}`,
      timeoutMs: this.timeoutMs,
      retry: "always",
    });
    for (const g of answer.body?.grants ?? []) {
      const token = big(g.token);
      if (g.family !== family || g.name !== name || this.holds(family, name, token)) continue;
      if (this.busy(family, name, seen)) return;
      try {
        await this.transport.call({
          method: "POST",
          path: `/v1/${family}/${seg(name)}/release`,
          body: { session: this.id, token },
          timeoutMs: this.timeoutMs,
          retry: "refused",
        });
      } catch (err) {
        if (!isKind(err, "not_found") && !isKind(err, "lost")) throw err;
      }
    }
  }
}
