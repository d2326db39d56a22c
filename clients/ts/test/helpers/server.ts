// Starts a real `bakery serve` for a test file and stops it afterwards.

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** clients/ts, from .test-build/test/helpers/ or test/helpers/. */
const here = path.dirname(fileURLToPath(import.meta.url));
export const clientDir = here.includes(`${path.sep}.test-build${path.sep}`)
  ? path.resolve(here, "../../..")
  : path.resolve(here, "../..");
const repoDir = path.resolve(clientDir, "../..");

/** The compiled test helpers (for child processes). */
export const helpersDir = here;

/** A running server. */
export interface Server {
  url: string;
  stop(): Promise<void>;
}

/** The server binary: $BAKERY_BIN, else the repo's target/debug/bakery. Fails loudly if missing. */
export function bakeryBin(): string {
  const bin = process.env.BAKERY_BIN || path.join(repoDir, "target", "debug", "bakery");
  if (!existsSync(bin)) {
    throw new Error(
      `bakery binary not found at ${bin}: build it with \`cargo build -p bakery-cli --features serve\` ` +
        `(from the repository root) or point BAKERY_BIN at one`,
    );
  }
  return bin;
}

/** Start `bakery serve` on 127.0.0.1:0 on $BAKERY_TEST_URI (default: SQLite in a temp dir). */
export async function startServer(extraArgs: string[] = []): Promise<Server> {
  const bin = bakeryBin();
  let tmp: string | undefined;
  let uri = process.env.BAKERY_TEST_URI;
  if (!uri) {
    tmp = mkdtempSync(path.join(tmpdir(), "bakery-ts-"));
    uri = `sqlite://${path.join(tmp, "ids.db")}`;
  }
  const child: ChildProcess = spawn(bin, ["--uri", uri, "serve", "--listen", "127.0.0.1:0", ...extraArgs], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGKILL");
      await exited;
    }
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`bakery serve did not start within 30 s: ${stderr}`)), 30_000);
      const lines = createInterface({ input: child.stdout! });
      lines.once("line", (line) => {
        clearTimeout(timer);
        const m = /listening on (http:\/\/\S+)/.exec(line);
        if (m) resolve(m[1]!);
        else reject(new Error(`unexpected first line from bakery serve: ${line}`));
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`bakery serve exited (${code}) before listening: ${stderr}`));
      });
    });
    return { url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** A name unique to this run (runs may share a PostgreSQL store). */
export function unique(what: string): string {
  return `ts-${what}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Wait until `check` holds, polling, or fail after `ms`. */
export async function waitFor(check: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
