/**
 * `@bakery-rs/client`: a client of `bakery serve` for Node 20+.
 *
 * @packageDocumentation
 */
export { Client, type ClientOptions, type OnceOptions } from "./client.js";
export { BakeryError, OnceFailedError, ERROR_KINDS, isKind, type ErrorKind } from "./errors.js";
export { Sequence, type SequenceOptions } from "./sequence.js";
export { Grant, type Family } from "./session.js";
export {
  Election,
  Leadership,
  Lock,
  RWLock,
  RWSide,
  Recipe,
  Semaphore,
  type AcquireOptions,
  type LeaderEvent,
} from "./locks.js";
