// What both browser tests need: where the binary and the screenshots are, a
// free port on loopback, and a bounded wait. Not a test file itself
// (`node --test` runs only *.test.mjs here).
import { mkdirSync } from "node:fs";
import { createServer } from "node:http";
import { join, resolve } from "node:path";

export const root = resolve(import.meta.dirname, "../..");
export const bin = process.env.HERALD_TEST_BIN || join(root, "target/debug/herald");
export const shots = join(root, "test-output");
mkdirSync(shots, { recursive: true });

export function freePort() {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); });
  });
}

// Polls `fn` until it returns something truthy, at most `ms`.
export async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    try { const v = await fn(); if (v) return v; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
