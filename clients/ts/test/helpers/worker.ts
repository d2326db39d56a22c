// A child process of the multi-process tests: its own Client, one job.
//   ids  URL NAME COUNT          print COUNT ids, one a line
//   lock URL NAME FILE ROUNDS    enter/exit lines in FILE while holding the lock
//                                (prints `ready`, starts on a line on stdin)
//   nolock URL NAME FILE ROUNDS  the same without taking the lock (the checker's negative control)
//   hold URL NAME TTL_MS         hold the lock; print `acquired TOKEN`, then `lost` once lost
//                                and `cont-to-lost MS` (from SIGCONT to lost)
//   once URL SCOPE KEY FILE      once(): the work appends `run PID` to FILE

import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

import { Client } from "../../src/index.js";

const [mode, url, ...args] = process.argv.slice(2);

async function main(): Promise<void> {
  if (!url) throw new Error("usage: worker MODE URL ...");
  switch (mode) {
    case "ids": {
      const [name, count] = args;
      const client = new Client(url);
      const seq = client.sequence(name!, { block: 50 });
      const out: string[] = [];
      for (let i = 0; i < Number(count); i++) out.push(String(seq.tryNext() ?? (await seq.next())));
      process.stdout.write(out.join("\n") + "\n");
      await client.close();
      return;
    }
    case "lock":
    case "nolock": {
      const [name, file, rounds] = args;
      const client = new Client(url);
      const lock = client.lock(name!);
      // Every process starts together, so that without the lock they overlap.
      process.stdout.write("ready\n");
      await new Promise((resolve) => createInterface({ input: process.stdin }).once("line", resolve));
      for (let i = 0; i < Number(rounds); i++) {
        const grant = mode === "lock" ? await lock.acquire() : undefined;
        if (mode === "lock" && !grant) throw new Error("acquire without a timeout returned null");
        const token = grant?.token ?? 0n;
        appendFileSync(file!, `enter ${process.pid} ${token}\n`);
        await sleep(4); // hold it a while, so an overlap shows
        appendFileSync(file!, `exit ${process.pid} ${token}\n`);
        await grant?.release();
      }
      await client.close();
      process.exit(0); // stdin stays open
    }
    case "hold": {
      const [name, ttl] = args;
      let contAt: number | undefined;
      process.on("SIGCONT", () => (contAt ??= performance.now()));
      const client = new Client(url, { sessionTtlMs: Number(ttl) });
      const grant = await client.lock(name!).acquire();
      if (!grant) throw new Error("acquire without a timeout returned null");
      process.stdout.write(`acquired ${grant.token}\n`);
      const limit = sleep(120_000).then(() => "timeout");
      const outcome = await Promise.race([grant.lost.then(() => "lost"), limit]);
      const lostAt = performance.now();
      process.stdout.write(`${outcome} ${grant.isLost} ${grant.lostSignal.aborted}\n`);
      // SIGCONT's handler may run after the timer that fired lost: wait for it (5 s at most).
      for (const until = performance.now() + 5000; contAt === undefined && performance.now() < until; ) await sleep(10);
      // Lost before the SIGCONT handler ran counts as at once.
      process.stdout.write(`cont-to-lost ${contAt === undefined ? "unknown" : Math.max(0, lostAt - contAt).toFixed(0)}\n`);
      await client.close().catch(() => undefined);
      process.exit(outcome === "lost" ? 0 : 1);
    }
    case "once": {
      const [scope, key, file] = args;
      const client = new Client(url);
      const result = await client.once(scope!, key!, "the payload", async (attempt) => {
        appendFileSync(file!, `run ${process.pid} ${attempt}\n`);
        await sleep(300); // others claim while this runs
        return `done by ${process.pid}`;
      });
      process.stdout.write(`${result}\n`);
      await client.close();
      return;
    }
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
