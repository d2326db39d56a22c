// BAKERY_URL=http://127.0.0.1:7878 node examples/quickstart.mjs
import { BakeryError, Client } from "@bakery-rs/client";

const client = new Client(process.env.BAKERY_URL ?? "http://127.0.0.1:7878");
try {
  // Ids: from a local block of 1,000, the next block fetched in the background.
  const orders = client.sequence("orders", { block: 1000 });
  const first = await orders.next(); // waits for the first block
  const second = orders.tryNext() ?? (await orders.next()); // the synchronous fast path
  console.log("ids", first, second);

  // A fair, fenced lock: send grant.token with every write made under it.
  // (In TypeScript, `await using grant = ...` releases it at the end of the block.)
  const grant = await client.lock("nightly-report").acquire({ timeoutMs: 5000 });
  if (grant === null) throw new Error("busy for 5 s");
  try {
    grant.lostSignal.addEventListener("abort", () => console.log("lost the lock: stop"));
    console.log("holding nightly-report with token", grant.token);
  } finally {
    await grant.release();
  }

  // Exactly once across every process: the second call returns the stored result.
  const charge = () => client.once("payments", "order-42", '{"amount":100}', async (attempt) => `charged (attempt ${attempt})`);
  console.log(await charge(), "/", await charge());

  // Errors carry the server's kind.
  try {
    await client.lock("no spaces").tryAcquire();
  } catch (err) {
    if (err instanceof BakeryError) console.log("error", err.kind, err.status);
  }
} finally {
  await client.close();
}
