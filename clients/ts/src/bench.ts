// The benchmark: BAKERY_URL=http://127.0.0.1:PORT [BAKERY_BENCH_SECONDS=2] node dist/bench.js
// Prints one JSON line: ids drawn per second from local blocks with
// prefetch, and acquire+release pairs per second on an uncontended lock.

import { Client } from "./index.js";

const BLOCK = 100_000;

async function main(): Promise<void> {
  const url = process.env.BAKERY_URL;
  if (!url) throw new Error("set BAKERY_URL to a running bakery serve, e.g. http://127.0.0.1:7878");
  const seconds = Number(process.env.BAKERY_BENCH_SECONDS ?? "2");
  const client = new Client(url);
  const run = `${process.pid}-${Date.now()}`;
  try {
    // Ids: the fast path, waiting only when a block is used up.
    const seq = client.sequence(`bench-ts-${run}`, { block: BLOCK });
    await seq.next(); // first block, warm-up
    let ids = 0;
    let last = 0n;
    const idStart = performance.now();
    const idEnd = idStart + seconds * 1000;
    while (performance.now() < idEnd) {
      for (let i = 0; i < 10_000; i++) {
        const id = seq.tryNext() ?? (await seq.next());
        if (id <= last) throw new Error(`ids not increasing: ${id} after ${last}`);
        last = id;
      }
      ids += 10_000;
    }
    const idSeconds = (performance.now() - idStart) / 1000;

    // The same through `await seq.next()` on every id.
    const seq2 = client.sequence(`bench-ts-await-${run}`, { block: BLOCK });
    await seq2.next();
    let ids2 = 0;
    const awaitStart = performance.now();
    const awaitEnd = awaitStart + (seconds * 1000) / 2;
    while (performance.now() < awaitEnd) {
      for (let i = 0; i < 10_000; i++) await seq2.next();
      ids2 += 10_000;
    }
    const awaitSeconds = (performance.now() - awaitStart) / 1000;

    // Lock: acquire + release, sequential, uncontended.
    const lock = client.lock(`bench-ts-${run}`);
    const warm = await lock.acquire();
    await warm!.release();
    let ops = 0;
    const lockStart = performance.now();
    const lockEnd = lockStart + seconds * 1000;
    while (performance.now() < lockEnd) {
      const grant = await lock.acquire();
      await grant!.release();
      ops++;
    }
    const lockSeconds = (performance.now() - lockStart) / 1000;

    process.stdout.write(
      JSON.stringify({
        client: "ts",
        ids_per_s: ids / idSeconds,
        block: BLOCK,
        lock_ops_per_s: ops / lockSeconds,
        seconds: idSeconds + lockSeconds,
        ids_per_s_await_next: ids2 / awaitSeconds,
      }) + "\n",
    );
  } finally {
    await client.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
