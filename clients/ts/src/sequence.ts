// Ids from blocks reserved locally, the next block fetched in the
// background when the current one is 80 % used (Leaf's double buffer).

import { BakeryError } from "./errors.js";
import { big, seg, type Transport } from "./http.js";

/** Options of {@link Sequence}. */
export interface SequenceOptions {
  /** Ids reserved per block (1 to 100,000,000; default 1,000). */
  block?: number;
  /** The fraction of a block after which the next is fetched (default 0.8). */
  prefetchAt?: number;
}

interface Block {
  start: bigint;
  end: bigint;
}

/**
 * Unique ids, increasing within this object, drawn from blocks reserved with
 * `POST /v1/sequences/{name}/reserve`.
 *
 * The hot path is {@link tryNext}: synchronous, no I/O, one comparison and
 * one small bigint. {@link next} awaits a block when the local one is used
 * up. A loop that never awaits I/O cannot let the background reservation
 * land: `seq.tryNext() ?? await seq.next()` draws at full speed and waits
 * only at block boundaries.
 *
 * Unused ids of a block are lost when the process ends: a gap, never a
 * duplicate.
 */
export class Sequence {
  /** The sequence's name. */
  readonly name: string;
  /** Ids reserved per block. */
  readonly block: number;

  // The current block while its ids are safe integers: `cur` is the next id,
  // `mark` where the fast path stops (the prefetch point, then the end).
  private cur = 0;
  private mark = 0;
  private end = 0;
  // The current block past 2^53 (rare): the slow path hands out bigints.
  private bigCur = 0n;
  private bigEnd = 0n;
  private bigMode = false;
  private prefetchPoint = 0;

  private ready: Block | undefined;
  private pending: Promise<void> | undefined;
  private failure: unknown;
  private readonly transport: Transport;
  private readonly timeoutMs: number;
  private readonly fraction: number;

  /** @internal */
  constructor(transport: Transport, name: string, options: SequenceOptions, timeoutMs: number) {
    const block = options.block ?? 1000;
    if (!Number.isInteger(block) || block < 1 || block > 100_000_000) {
      throw new BakeryError("invalid_input", 0, `block must be an integer within 1..=100000000, got ${block}`);
    }
    const fraction = options.prefetchAt ?? 0.8;
    if (!(fraction > 0 && fraction <= 1)) {
      throw new BakeryError("invalid_input", 0, `prefetchAt must be within (0, 1], got ${fraction}`);
    }
    this.transport = transport;
    this.name = name;
    this.block = block;
    this.fraction = fraction;
    this.timeoutMs = timeoutMs;
  }

  /**
   * The next id if the local block has one, else `undefined` (and the next
   * block is on its way: `await next()`). Never does I/O itself.
   */
  tryNext(): bigint | undefined {
    const c = this.cur;
    if (c < this.mark) {
      this.cur = c + 1;
      return BigInt(c);
    }
    return this.slow();
  }

  /** The next id, waiting for a block if the local one is used up. */
  next(): Promise<bigint> {
    const id = this.tryNext();
    return id !== undefined ? Promise.resolve(id) : this.wait();
  }

  /** Wait for a block, then take its first id. */
  private async wait(): Promise<bigint> {
    for (;;) {
      if (this.pending === undefined && this.ready === undefined) this.prefetch();
      await this.pending;
      const failure = this.failure;
      const next = this.tryNext();
      if (next !== undefined) return next;
      if (failure !== undefined) {
        this.failure = undefined;
        throw failure;
      }
    }
  }

  /** Past the mark: start the prefetch, switch blocks, or go big. */
  private slow(): bigint | undefined {
    if (this.bigMode) {
      if (this.bigCur < this.bigEnd) {
        const id = this.bigCur++;
        if (Number(this.bigEnd - this.bigCur) <= this.block - this.prefetchPoint) this.prefetch();
        return id;
      }
    } else if (this.cur < this.end) {
      // At the prefetch point: fetch the next block, finish this one.
      this.prefetch();
      this.mark = this.end;
      return this.tryNext();
    }
    // This block is used up.
    const ready = this.ready;
    if (ready !== undefined) {
      this.ready = undefined;
      this.install(ready);
      return this.tryNext();
    }
    if (this.failure === undefined) this.prefetch();
    return undefined;
  }

  private install(block: Block): void {
    const size = Number(block.end - block.start);
    this.prefetchPoint = Math.min(size, Math.max(1, Math.floor(size * this.fraction)));
    if (block.end <= BigInt(Number.MAX_SAFE_INTEGER)) {
      this.bigMode = false;
      this.cur = Number(block.start);
      this.end = Number(block.end);
      this.mark = this.cur + this.prefetchPoint;
    } else {
      this.bigMode = true;
      this.bigCur = block.start;
      this.bigEnd = block.end;
      this.cur = this.mark = this.end = 0;
    }
  }

  /** Reserve the next block in the background (at most one at a time). */
  private prefetch(): void {
    if (this.pending !== undefined || this.ready !== undefined) return;
    this.failure = undefined;
    this.pending = this.reserve().then(
      (block) => {
        this.ready = block;
        this.pending = undefined;
      },
      (err: unknown) => {
        this.failure = err;
        this.pending = undefined;
      },
    );
  }

  /**
   * Reserve a block. Retried after an unknown outcome too: a block that may
   * have been reserved is never handed out (a gap, not a duplicate).
   */
  private async reserve(): Promise<Block> {
    const answer = await this.transport.call({
      method: "POST",
      path: `/v1/sequences/${seg(this.name)}/reserve?size=${this.block}`,
      timeoutMs: this.timeoutMs,
      retry: "always",
    });
    const start = big(answer.body.start);
    const end = big(answer.body.end);
    if (end <= start) throw new BakeryError("corrupt", answer.status, `an empty block ${start}..${end}`);
    return { start, end };
  }
}
