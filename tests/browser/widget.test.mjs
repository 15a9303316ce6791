// The inbox widget in a real browser (Debian's Chromium, driven by
// playwright-core): a host page on another origin embeds it with one script
// tag; a trigger fired through the API moves the badge without a reload; an
// empty inbox says so; each message shows its time and follows its
// `payload.url` when clicked; a bad or expired token shows an error in the
// panel and a `herald-error` event, once, instead of an empty panel and a
// stream of 401s. Screenshots at 1280 px and 390 px go to test-output/ at
// the repository root.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { freePort, shots, startHerald, stopHerald, waitFor } from "./support.mjs";

// A Herald in a fresh directory (named from `prefix`) whose inbox API
// answers pages from any origin, as the widget's host pages are.
async function startInboxHerald(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  writeFileSync(join(dir, "herald.toml"), `
[inbox]
cors_origins = ["*"]
token_secret = "a-test-secret-that-is-at-least-32-characters"
`);
  return startHerald(dir);
}

test("the widget follows the API live, shows times, links, an empty inbox and a refused token", { timeout: 120_000 }, async () => {
  const { base: api, server, api: call } = await startInboxHerald("herald-widget-");
  let browser;
  const page_server = createServer();
  try {
    await call("POST", "/v1/rules", {
      name: "Comment", trigger_type: "comment.created", channel: "inbox", category: "comments", enabled: true,
      template: { fallback_locale: "en", locales: { en: { subject: "{{ payload.author }} commented", text: "{{ payload.text }}" } } },
    });
    const { token } = await call("POST", "/v1/users/ada/token");

    // The host application's pages, on their own origin: `/?token=…` embeds
    // the widget, `/thread/…` is where a message's link leads.
    const pagePort = await freePort();
    const hostBase = `http://127.0.0.1:${pagePort}`;
    page_server.on("request", (req, res) => {
      const url = new URL(req.url, hostBase);
      res.writeHead(200, { "content-type": "text/html" });
      if (url.pathname.startsWith("/thread/")) {
        res.end(`<!doctype html><title>Thread</title><h1>Thread ${url.pathname.slice(8)}</h1>`);
        return;
      }
      res.end(`<!doctype html><html lang="en"><head><meta name="viewport" content="width=device-width"><title>Host app</title></head>
        <body style="font-family: system-ui; margin: 24px">
          <nav style="display:flex; justify-content:space-between; align-items:center; max-width:640px">
            <strong>Host app</strong>
            <herald-inbox api="${api}" token="${url.searchParams.get("token")}"></herald-inbox>
          </nav>
          <script>
            // What a host page does with the widget's events (they bubble).
            window.heraldErrors = [];
            document.addEventListener("herald-error", (e) => window.heraldErrors.push(e.detail));
          </script>
          <script src="${api}/widget/inbox.js"></script>
        </body></html>`);
    });
    await new Promise((ok) => page_server.listen(pagePort, "127.0.0.1", ok));

    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
             "--no-first-run", "--disable-component-update", "--disable-sync"],
    });
    const page = await browser.newPage({ viewport: { width: 1280, height: 560 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${hostBase}/?token=${encodeURIComponent(token)}`);
    const inShadow = (fn) => page.evaluate(fn);
    const badge = () => inShadow(() => {
      const b = document.querySelector("herald-inbox")?.shadowRoot?.querySelector(".badge");
      return b ? { hidden: b.hidden, text: b.textContent } : null;
    });
    const panelText = () => inShadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".panel").innerText);
    const clickBell = () => inShadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").click());
    await waitFor(async () => (await badge())?.hidden === true, 10_000, "the widget to load with an empty inbox");
    await page.screenshot({ path: join(shots, "widget-1-empty.png") });

    // An empty inbox says so.
    await clickBell();
    await waitFor(async () => /Nothing here yet\./.test(await panelText()), 5_000, "the empty state");
    await page.screenshot({ path: join(shots, "widget-1b-empty-open.png") });
    await clickBell();

    let reloads = 0;
    page.on("load", () => reloads++);
    await call("POST", "/v1/triggers", {
      type: "comment.created", user_id: "ada", payload: { author: "Grace", text: "Nice work!", url: `${hostBase}/thread/42` },
    });
    const seen = await waitFor(async () => { const b = await badge(); return b && !b.hidden && b.text === "1" && b; }, 10_000, "the badge to show 1");
    assert.equal(seen.text, "1");
    assert.equal(reloads, 0, "no page reload");
    await page.screenshot({ path: join(shots, "widget-2-badge.png") });

    await clickBell();
    const item = await waitFor(() => inShadow(() => {
      const li = document.querySelector("herald-inbox").shadowRoot.querySelector("li.unread");
      const time = li?.querySelector("time");
      return li && { title: li.querySelector(".title").textContent, time: time?.textContent, at: time?.dateTime };
    }), 5_000, "the list");
    assert.equal(item.title, "Grace commented");
    // Each message shows when it arrived ("now", "2 minutes ago"), with the exact time in the markup.
    assert.ok(item.time && item.time.length > 0, "a time is shown");
    assert.ok(!Number.isNaN(Date.parse(item.at)), `a machine-readable time: ${item.at}`);
    // Opening the list marks it seen: the badge clears via the stream.
    await waitFor(async () => (await badge())?.hidden === true, 10_000, "the badge to clear once seen");
    await page.screenshot({ path: join(shots, "widget-3-open.png") });
    await page.setViewportSize({ width: 390, height: 700 });
    await page.screenshot({ path: join(shots, "widget-3b-open-phone.png") });

    // Clicking a message marks it read and follows its payload's url.
    await Promise.all([
      page.waitForURL(`${hostBase}/thread/42`),
      inShadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector("li.unread").click()),
    ]);
    const read = await call("GET", "/v1/users/ada/sends");
    assert.equal(read.messages.length, 1);

    // A bad (or expired) token: the panel says what is wrong, the page gets one
    // `herald-error`, and no stream is opened to be refused over and over.
    const bad = await browser.newPage({ viewport: { width: 390, height: 700 } });
    bad.on("pageerror", (e) => errors.push(String(e)));
    const refused = [];
    bad.on("response", (r) => { if (r.url().startsWith(`${api}/v1/inbox`) && r.status() === 401) refused.push(r.url()); });
    await bad.goto(`${hostBase}/?token=not.a-token`);
    const detail = await waitFor(() => bad.evaluate(() => window.heraldErrors[0]), 10_000, "a herald-error event");
    assert.equal(detail.reason, "auth");
    assert.equal(detail.status, 401);
    await bad.evaluate(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").click());
    const text = await bad.evaluate(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".panel").innerText);
    assert.match(text, /session has expired/);
    await bad.screenshot({ path: join(shots, "widget-4-refused-token-phone.png") });
    await bad.setViewportSize({ width: 1280, height: 560 });
    await bad.screenshot({ path: join(shots, "widget-4b-refused-token.png") });
    // Give a stream the chance to be tried, then count: one refused list read, no stream.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(refused.filter((u) => u.includes("/stream")).length, 0, `no stream opened: ${refused}`);
    assert.ok(refused.length <= 2, `refused once, not repeatedly: ${refused}`);
    assert.equal(await bad.evaluate(() => window.heraldErrors.length), 1, "one herald-error event");
    assert.deepEqual(errors, []);
  } finally {
    if (browser) await browser.close();
    page_server.close();
    await stopHerald(server);
  }
});

// Issue 27, item 24: the panel opened off-screen for a bell at the left of
// a page (the README's own example page: the element first in <body>), as
// it was anchored `right: 0` to the bell. Wherever the bell sits (left,
// middle, right) and at 1280 and 390 px, the open panel lies inside the
// viewport, also after the window is resized while it is open.
test("the widget's panel stays inside the viewport wherever the bell sits", { timeout: 120_000 }, async () => {
  const { base: api, server, api: call } = await startInboxHerald("herald-widget-place-");
  let browser;
  const page_server = createServer();
  try {
    const { token } = await call("POST", "/v1/users/ada/token");
    const pagePort = await freePort();
    const hostBase = `http://127.0.0.1:${pagePort}`;
    const layouts = {
      // The README's example, as written: no layout at all.
      left: (t) => `<!doctype html><title>My app</title>
        <herald-inbox api="${api}" token="${t}"></herald-inbox>`,
      middle: (t) => `<!doctype html><meta name="viewport" content="width=device-width"><title>Middle</title>
        <div style="text-align:center"><herald-inbox api="${api}" token="${t}"></herald-inbox></div>`,
      right: (t) => `<!doctype html><meta name="viewport" content="width=device-width"><title>Right</title>
        <nav style="display:flex; justify-content:space-between"><strong>App</strong>
        <herald-inbox api="${api}" token="${t}"></herald-inbox></nav>`,
    };
    page_server.on("request", (req, res) => {
      const url = new URL(req.url, hostBase);
      const layout = layouts[url.pathname.slice(1)];
      res.writeHead(layout ? 200 : 404, { "content-type": "text/html" });
      res.end(layout ? `${layout(url.searchParams.get("token"))}<script src="${api}/widget/inbox.js"></script>` : "");
    });
    await new Promise((ok) => page_server.listen(pagePort, "127.0.0.1", ok));
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
             "--no-first-run", "--disable-component-update", "--disable-sync"],
    });
    const placement = (page) => page.evaluate(() => {
      const el = document.querySelector("herald-inbox");
      const r = el.shadowRoot.querySelector(".panel").getBoundingClientRect();
      const bell = el.shadowRoot.querySelector(".bell").getBoundingClientRect();
      return { left: r.left, right: r.right, width: r.width, top: r.top, bellBottom: bell.bottom,
               viewport: document.documentElement.clientWidth };
    });
    const inside = (p, what) => {
      assert.ok(p.width > 0, `${what}: the panel is shown`);
      assert.ok(p.left >= 0, `${what}: the panel starts inside the viewport (left ${p.left})`);
      assert.ok(p.right <= p.viewport, `${what}: the panel ends inside the viewport (right ${p.right} of ${p.viewport})`);
      assert.ok(Math.abs(p.top - p.bellBottom) < 2, `${what}: the panel hangs under the bell`);
    };
    const errors = [];
    for (const [name, width] of [["left", 1280], ["left", 390], ["middle", 1280], ["middle", 390], ["right", 1280], ["right", 390]]) {
      const page = await browser.newPage({ viewport: { width, height: 700 } });
      page.on("pageerror", (e) => errors.push(String(e)));
      await page.goto(`${hostBase}/${name}?token=${encodeURIComponent(token)}`);
      await waitFor(() => page.evaluate(() => document.querySelector("herald-inbox")?.shadowRoot?.querySelector(".bell")), 10_000, "the widget");
      await page.evaluate(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").click());
      inside(await placement(page), `bell at the ${name}, ${width} px`);
      await page.screenshot({ path: join(shots, `widget-5-${name}-${width}.png`) });
      // Resized while open (a phone turned, a window narrowed): placed again.
      await page.setViewportSize({ width: width === 1280 ? 390 : 1280, height: 700 });
      await waitFor(async () => { const p = await placement(page); return p.left >= 0 && p.right <= p.viewport && p; },
        5_000, `the panel to stay inside after a resize (bell at the ${name})`);
      await page.close();
    }
    assert.deepEqual(errors, []);
  } finally {
    if (browser) await browser.close();
    page_server.close();
    await stopHerald(server);
  }
});
