/**
 * What went wrong, for a program to match on: the server's `kind`, or the one
 * the client gives a transport failure (`unavailable` when the request never
 * reached the server, `unknown_outcome` when it may have).
 */
export type ErrorKind =
  | "invalid_input"
  | "not_found"
  | "unavailable"
  | "unknown_outcome"
  | "exhausted"
  | "corrupt"
  | "unauthorized"
  | "forbidden"
  | "lost"
  | "conflict"
  | "internal";

/** Every kind, in the order the server documents them. */
export const ERROR_KINDS: readonly ErrorKind[] = [
  "invalid_input",
  "not_found",
  "unavailable",
  "unknown_outcome",
  "exhausted",
  "corrupt",
  "unauthorized",
  "forbidden",
  "lost",
  "conflict",
  "internal",
];

/**
 * An error of the service (or of reaching it): `kind` says what went wrong,
 * `status` is the HTTP status (0 when no answer came back), `message` says
 * it for a person.
 */
export class BakeryError extends Error {
  /** What went wrong, for a program. */
  readonly kind: ErrorKind;
  /** The HTTP status, or 0 for a transport failure (no answer). */
  readonly status: number;
  /** Milliseconds the server asked to wait before retrying (503), if it did. */
  readonly retryAfterMs: number | undefined;
  /** True when the connection was refused: the request certainly never reached the server. */
  readonly refused: boolean;

  constructor(
    kind: ErrorKind,
    status: number,
    message: string,
    options?: { cause?: unknown; retryAfterMs?: number; refused?: boolean },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "BakeryError";
    this.kind = kind;
    this.status = status;
    this.retryAfterMs = options?.retryAfterMs;
    this.refused = options?.refused === true;
  }

  override toString(): string {
    return `BakeryError(${this.kind}${this.status ? `, ${this.status}` : ""}): ${this.message}`;
  }
}

/** True if `err` is a {@link BakeryError} of `kind`. */
export function isKind(err: unknown, kind: ErrorKind): err is BakeryError {
  return err instanceof BakeryError && err.kind === kind;
}

/**
 * `once` found the key failed by an earlier attempt and not open for a
 * retry: `error` is what that attempt recorded.
 */
export class OnceFailedError extends Error {
  /** The failed attempt. */
  readonly attempt: bigint | undefined;
  /** The error the failed attempt recorded. */
  readonly error: string;

  constructor(attempt: bigint | undefined, error: string) {
    super(`the key failed before (attempt ${attempt ?? "?"}): ${error}`);
    this.name = "OnceFailedError";
    this.attempt = attempt;
    this.error = error;
  }
}
