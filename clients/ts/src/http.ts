// The transport: node:http with one keep-alive agent, JSON with 64-bit
// integers kept exact, deadlines, cancellation, and the retry rule (never
// resend a write of unknown outcome).

import http from "node:http";
import https from "node:https";
import { setTimeout as sleep } from "node:timers/promises";

import { BakeryError, type ErrorKind, ERROR_KINDS } from "./errors.js";

/** How a call may be retried. */
export type Retry =
  /**
   * Only when the connection was refused (nothing was sent): release,
   * complete and fail, which the server takes out of the session before its
   * store write, so a resend after an answered 503 would only find it gone.
   */
  | "refused"
  /** Only when nothing was done (503 `unavailable`, connection refused). */
  | "safe"
  /** Also after an unknown outcome: reads, keepalives, block reservations. */
  | "always";

/** One call to the service. */
export interface Call {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** The path and query, already escaped. */
  path: string;
  body?: unknown;
  /** The deadline of each attempt, in milliseconds. */
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  retry: Retry;
}

/** A response with its status and its parsed JSON body (undefined if empty). */
export interface Answer {
  status: number;
  body: any;
}

/** Transport errors raised before the request could reach the server. */
const NEVER_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "EADDRNOTAVAIL",
]);

const STATUS_KIND: Record<number, ErrorKind> = {
  400: "invalid_input",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  503: "unavailable",
};

// ---------------------------------------------------------------------------
// JSON with exact 64-bit integers.

/** A 64-bit integer from a JSON value: a number (exact below 2^53) or the
 * string {@link parseJson} made of a longer literal. */
export function big(value: unknown): bigint {
  if (typeof value === "bigint") return value;
  if (typeof value === "number" || typeof value === "string") return BigInt(value);
  throw new BakeryError("corrupt", 0, `expected an integer, got ${JSON.stringify(value)}`);
}

/** `big` of an optional value. */
export function bigOrNull(value: unknown): bigint | undefined {
  return value === null || value === undefined ? undefined : big(value);
}

const LONG_NUMBER = /\d{16}/;

/**
 * Parse JSON, turning every integer literal of 16 digits or more into a
 * string so it keeps its exact value (read it with {@link big}).
 */
export function parseJson(text: string): any {
  if (!LONG_NUMBER.test(text)) return JSON.parse(text);
  let out = "";
  let from = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      continue;
    }
    if (c >= 0x30 && c <= 0x39) {
      let j = i;
      while (j < text.length && text.charCodeAt(j) >= 0x30 && text.charCodeAt(j) <= 0x39) j++;
      const next = text.charCodeAt(j);
      const integer = next !== 0x2e && next !== 0x65 && next !== 0x45; // not . e E
      if (integer && j - i >= 16) {
        out += text.slice(from, i) + '"' + text.slice(i, j) + '"';
        from = j;
      }
      i = j - 1;
    }
  }
  return JSON.parse(out + text.slice(from));
}

// A bigint becomes this marker string, whose quotes stringify then removes.
// JSON.stringify escapes the NUL, so a user's string never produces `"\u0000`.
const BIG_MARK = "\u0000big:";
const BIG_MARKED = /"\\u0000big:(\d+)"/g;

/** JSON text of `value`, bigints written as exact integer literals. */
export function stringifyJson(value: unknown): string {
  let marked = false;
  const text = JSON.stringify(value, (_key, v) => {
    if (typeof v === "bigint") {
      marked = true;
      return BIG_MARK + v.toString();
    }
    return v;
  });
  return marked ? text.replace(BIG_MARKED, "$1") : text;
}

// ---------------------------------------------------------------------------

/** Options of the transport. */
export interface TransportOptions {
  token?: string | undefined;
  /** How many times a retryable call is retried (default 4). */
  retries?: number | undefined;
}

/**
 * The connection pool and the call loop. Uses node:http rather than the
 * global fetch: a plain keep-alive agent costs less per call (no WHATWG
 * streams), lets a long poll hold its own socket for as long as it waits
 * with no body or headers timeout of its own, and tells a refused connect
 * (nothing sent) from a connection broken after the request was written.
 */
export class Transport {
  readonly base: URL;
  private readonly agent: http.Agent;
  private readonly request: typeof http.request;
  private readonly headers: Record<string, string>;
  private readonly retries: number;
  private readonly prefix: string;

  constructor(baseUrl: string, options: TransportOptions = {}) {
    let url: URL;
    try {
      url = new URL(baseUrl);
    } catch (cause) {
      throw new BakeryError("invalid_input", 0, `not a URL: ${JSON.stringify(baseUrl)}`, { cause });
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new BakeryError("invalid_input", 0, `the base URL must be http or https, got ${url.protocol}`);
    }
    this.base = url;
    this.prefix = url.pathname.replace(/\/+$/, "");
    const secure = url.protocol === "https:";
    const agentOptions = { keepAlive: true, scheduling: "lifo" as const, noDelay: true };
    this.agent = secure ? new https.Agent(agentOptions) : new http.Agent(agentOptions);
    this.request = secure ? https.request : http.request;
    this.headers = { accept: "application/json" };
    if (options.token !== undefined) this.headers.authorization = `Bearer ${options.token}`;
    this.retries = options.retries ?? 4;
  }

  /** Close every pooled connection. */
  destroy(): void {
    this.agent.destroy();
  }

  /**
   * Make `call`, retrying it as its `retry` allows with jittered exponential
   * backoff (or the server's `Retry-After`). Resolves with a 2xx answer;
   * rejects with a {@link BakeryError} (or the signal's reason if aborted).
   */
  async call(call: Call): Promise<Answer> {
    for (let attempt = 0; ; attempt++) {
      call.signal?.throwIfAborted();
      try {
        return await this.once(call);
      } catch (err) {
        if (!(err instanceof BakeryError) || attempt >= this.retries) throw err;
        const retryable =
          call.retry === "refused"
            ? err.refused
            : err.kind === "unavailable" || (err.kind === "unknown_outcome" && call.retry === "always");
        if (!retryable) throw err;
        const backoff = Math.min(2000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2);
        await sleep(err.retryAfterMs ?? backoff, undefined, call.signal ? { signal: call.signal } : {});
      }
    }
  }

  /** JSON of `body` with its content type, for `call.body`. */
  private once(call: Call): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      const payload = call.body === undefined ? undefined : stringifyJson(call.body);
      const headers: Record<string, string | number> = { ...this.headers };
      if (payload !== undefined) {
        headers["content-type"] = "application/json";
        headers["content-length"] = Buffer.byteLength(payload);
      } else if (call.method !== "GET") {
        headers["content-length"] = 0;
      }
      let settled = false;
      let sent = false;
      const finish = (fn: () => void): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        call.signal?.removeEventListener("abort", onAbort);
        fn();
      };
      const req = this.request({
        protocol: this.base.protocol,
        hostname: this.base.hostname,
        port: this.base.port,
        method: call.method,
        path: this.prefix + call.path,
        headers,
        agent: this.agent,
      });
      const where = `${call.method} ${call.path}`;
      const timer = setTimeout(() => {
        const kind: ErrorKind = sent ? "unknown_outcome" : "unavailable";
        finish(() =>
          reject(new BakeryError(kind, 0, `${where}: no answer within ${call.timeoutMs} ms`)),
        );
        req.destroy();
      }, call.timeoutMs);
      const onAbort = (): void => {
        finish(() => reject(call.signal!.reason));
        req.destroy();
      };
      call.signal?.addEventListener("abort", onAbort, { once: true });
      req.on("finish", () => {
        sent = true;
      });
      req.on("error", (err: NodeJS.ErrnoException) => {
        const neverSent = !sent && err.code !== undefined && NEVER_SENT.has(err.code);
        const kind: ErrorKind = neverSent ? "unavailable" : "unknown_outcome";
        const what = neverSent ? "the request did not reach the server" : "the request may have reached the server";
        finish(() =>
          reject(new BakeryError(kind, 0, `${where}: ${err.message} (${what})`, { cause: err, refused: neverSent })),
        );
      });
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", (err) => {
          finish(() =>
            reject(new BakeryError("unknown_outcome", 0, `${where}: the answer broke off: ${err.message}`, { cause: err })),
          );
        });
        res.on("end", () => {
          const status = res.statusCode ?? 0;
          const text = Buffer.concat(chunks).toString("utf8");
          finish(() => {
            if (status >= 200 && status < 300) {
              try {
                resolve({ status, body: text.length === 0 ? undefined : parseJson(text) });
              } catch (cause) {
                reject(new BakeryError("corrupt", status, `${where}: the answer is not JSON: ${text.slice(0, 200)}`, { cause }));
              }
              return;
            }
            reject(errorOf(status, text, res.headers["retry-after"], where));
          });
        });
      });
      if (payload !== undefined) req.end(payload);
      else req.end();
    });
  }

  /**
   * Open a streaming GET (server-sent events): resolves with the response
   * once its headers are in (a non-2xx answer rejects with its error). The
   * caller reads the body and destroys `request` when done.
   */
  stream(path: string, signal?: AbortSignal): Promise<{ request: http.ClientRequest; response: http.IncomingMessage }> {
    return new Promise((resolve, reject) => {
      const req = this.request({
        protocol: this.base.protocol,
        hostname: this.base.hostname,
        port: this.base.port,
        method: "GET",
        path: this.prefix + path,
        headers: { ...this.headers, accept: "text/event-stream" },
        agent: this.agent,
        signal,
      });
      req.on("error", (err: NodeJS.ErrnoException) => {
        if (signal?.aborted) return reject(signal.reason);
        const kind: ErrorKind = err.code !== undefined && NEVER_SENT.has(err.code) ? "unavailable" : "unknown_outcome";
        reject(new BakeryError(kind, 0, `GET ${path}: ${err.message}`, { cause: err }));
      });
      req.on("response", (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) return resolve({ request: req, response: res });
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          reject(errorOf(status, Buffer.concat(chunks).toString("utf8"), res.headers["retry-after"], `GET ${path}`)),
        );
      });
      req.end();
    });
  }
}

/** The error an answer of `status` with `text` carries. */
function errorOf(status: number, text: string, retryAfter: string | undefined, where: string): BakeryError {
  let kind: ErrorKind = STATUS_KIND[status] ?? "internal";
  let message = `${where}: HTTP ${status}${text ? `: ${text.slice(0, 500)}` : ""}`;
  try {
    const body = JSON.parse(text);
    if (body && typeof body.kind === "string" && (ERROR_KINDS as readonly string[]).includes(body.kind)) {
      kind = body.kind as ErrorKind;
      message = typeof body.message === "string" ? body.message : message;
    }
  } catch {
    // Not the service's JSON (a proxy's page?): the status decides the kind.
  }
  const seconds = retryAfter === undefined ? NaN : Number(retryAfter);
  const options = Number.isFinite(seconds) ? { retryAfterMs: seconds * 1000 } : {};
  return new BakeryError(kind, status, message, options);
}

/** `encodeURIComponent` of a name for a path segment. */
export function seg(name: string): string {
  return encodeURIComponent(name);
}
