// What both browser tests need: where the binary and the screenshots are, a
// free port on loopback, a bounded wait, and a running `herald serve`. Not a
// test file itself (`node --test` runs only *.test.mjs here).
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
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

// `herald serve` in `dir` (configured by a herald.toml there, if any) on a
// free loopback port, with an API key made for the test. Resolves once
// /healthz answers; `api(method, path, body)` calls the JSON API with the key
// and fails the test on any status of 300 or more (`key` is there for other
// content types). Stop it with `stopHerald(server)`.
export async function startHerald(dir) {
  const key = execFileSync(bin, ["keys", "create", "--name", "browser-test"], { cwd: dir, stdio: ["ignore", "pipe", "inherit"] }).toString().trim();
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const server = spawn(bin, ["serve", "--listen", `127.0.0.1:${port}`], { cwd: dir, env: { ...process.env, HERALD_LOG: "warn" }, stdio: "inherit" });
  const api = async (method, path, body) => {
    const resp = await fetch(base + path, {
      method, headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: body && JSON.stringify(body),
    });
    const text = await resp.text();
    assert.ok(resp.status < 300, `${method} ${path}: ${resp.status} ${text}`);
    return JSON.parse(text);
  };
  try {
    await waitFor(() => fetch(`${base}/healthz`).then((r) => r.ok), 20_000, "herald to start");
  } catch (e) {
    server.kill("SIGTERM");
    throw e;
  }
  return { base, server, api, key };
}

// Stops a server `startHerald` started, and waits until it has exited.
export async function stopHerald(server) {
  server.kill("SIGTERM");
  await new Promise((ok) => server.once("exit", ok));
}
