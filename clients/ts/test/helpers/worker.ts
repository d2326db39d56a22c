// A child process of the multi-process tests: its own Client, one job.
//   ids  URL NAME COUNT          print COUNT ids, one a line
//   lock URL NAME FILE ROUNDS    enter/exit lines in FILE while holding the lock
//   hold URL NAME TTL_MS         hold the lock; print `acquired TOKEN`, then `lost` once lost
//   once URL SCOPE KEY FILE      once(): the work appends `run PID` to FILE

import { appendFileSync } from "node:fs";
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
    case "lock": {
      const [name, file, rounds] = args;
      const client = new Client(url);
      const lock = client.lock(name!);
      for (let i = 0; i < Number(rounds); i++) {
        const grant = await lock.acquire();
        if (!grant) throw new Error("acquire without a timeout returned null");
        appendFileSync(file!, `enter ${process.pid} ${grant.token}\n`);
        await sleep(2); // hold it a little, so an overlap would show
        appendFileSync(file!, `exit ${process.pid} ${grant.token}\n`);
        await grant.release();
      }
      await client.close();
      return;
    }
    case "hold": {
      const [name, ttl] = args;
      const client = new Client(url, { sessionTtlMs: Number(ttl) });
      const grant = await client.lock(name!).acquire();
      if (!grant) throw new Error("acquire without a timeout returned null");
      process.stdout.write(`acquired ${grant.token}\n`);
      const limit = sleep(120_000).then(() => "timeout");
      const outcome = await Promise.race([grant.lost.then(() => "lost"), limit]);
      process.stdout.write(`${outcome} ${grant.isLost} ${grant.lostSignal.aborted}\n`);
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
