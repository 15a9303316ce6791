// The inbox widget in a real browser (Debian's Chromium, driven by
// playwright-core): a host page on another origin embeds it with one script
// tag; a trigger fired through the API moves the badge without a reload.
// Screenshots go to test-output/ at the repository root.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { freePort, shots, startHerald, waitFor } from "./support.mjs";

test("the widget's badge follows a trigger fired through the API, without a reload", { timeout: 90_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "herald-widget-"));
  writeFileSync(join(dir, "herald.toml"), `
[inbox]
cors_origins = ["*"]
token_secret = "a-test-secret-that-is-at-least-32-characters"
`);
  const { base: api, server, api: call } = await startHerald(dir);
  let browser;
  const page_server = createServer();
  try {
    await call("POST", "/v1/rules", {
      name: "Comment", trigger_type: "comment.created", channel: "inbox", category: "comments", enabled: true,
      template: { fallback_locale: "en", locales: { en: { subject: "{{ payload.author }} commented", text: "{{ payload.text }}" } } },
    });
    const { token } = await call("POST", "/v1/users/ada/token");

    // The host application's page, on its own origin.
    const pagePort = await freePort();
    page_server.on("request", (_req, res) => {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(`<!doctype html><html><head><meta name="viewport" content="width=device-width"><title>Host app</title></head>
        <body style="font-family: system-ui; margin: 24px">
          <nav style="display:flex; justify-content:space-between; align-items:center; max-width:640px">
            <strong>Host app</strong>
            <herald-inbox api="${api}" token="${token}"></herald-inbox>
          </nav>
          <script src="${api}/widget/inbox.js"></script>
        </body></html>`);
    });
    await new Promise((ok) => page_server.listen(pagePort, "127.0.0.1", ok));

    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
             "--no-first-run", "--disable-component-update", "--disable-sync"],
    });
    const page = await browser.newPage({ viewport: { width: 720, height: 520 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`http://127.0.0.1:${pagePort}/`);
    const badge = () => page.evaluate(() => {
      const b = document.querySelector("herald-inbox")?.shadowRoot?.querySelector(".badge");
      return b ? { hidden: b.hidden, text: b.textContent } : null;
    });
    await waitFor(async () => (await badge())?.hidden === true, 10_000, "the widget to load with an empty inbox");
    await page.screenshot({ path: join(shots, "widget-1-empty.png") });

    let reloads = 0;
    page.on("load", () => reloads++);
    await call("POST", "/v1/triggers", { type: "comment.created", user_id: "ada", payload: { author: "Grace", text: "Nice work!" } });
    const seen = await waitFor(async () => { const b = await badge(); return b && !b.hidden && b.text === "1" && b; }, 10_000, "the badge to show 1");
    assert.equal(seen.text, "1");
    assert.equal(reloads, 0, "no page reload");
    await page.screenshot({ path: join(shots, "widget-2-badge.png") });

    await page.evaluate(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").click());
    const title = await waitFor(() => page.evaluate(() =>
      document.querySelector("herald-inbox").shadowRoot.querySelector("li .title")?.textContent), 5_000, "the list");
    assert.equal(title, "Grace commented");
    // Opening the list marks it seen: the badge clears via the stream.
    await waitFor(async () => (await badge())?.hidden === true, 10_000, "the badge to clear once seen");
    await page.screenshot({ path: join(shots, "widget-3-open.png") });
    assert.deepEqual(errors, []);
  } finally {
    if (browser) await browser.close();
    page_server.close();
    server.kill("SIGTERM");
    await new Promise((ok) => server.once("exit", ok));
  }
});
