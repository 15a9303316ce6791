// Push in a real browser (Debian's Chromium, driven by playwright-core).
//
// 1. The service worker a host copies from /widget/push-sw.js: a push of
//    Herald's payload shows a notification with the title, body and the
//    message id as its tag (a second push of the same id replaces the
//    first), and a click closes it and opens the message's url, never a
//    javascript: one. The push is delivered by the DevTools protocol
//    (`ServiceWorker.deliverPushMessage`, what DevTools' "Push" button
//    does), so no push service is involved. Headless Chromium has no
//    notification to click, so the click is a `notificationclick` event
//    dispatched inside the worker with `clients.openWindow` recorded
//    instead of opening a window (a window may only be opened from a click
//    the browser itself delivers).
// 2. The widget's "Turn on notifications": it asks permission, registers the
//    host's service worker, subscribes with the key GET
//    /v1/push/vapid-public-key serves and POSTs the subscription with the
//    inbox token; what the server answers is shown under the button.
//    Headless Chromium has no push service to subscribe with, so
//    `pushManager.subscribe` is replaced by one that records its key and
//    returns a subscription of the shape browsers give.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { bin, freePort, shots, startHerald, stopHerald, waitFor } from "./support.mjs";

// A Herald with Web Push configured and its inbox open to any origin.
async function startPushHerald() {
  const dir = mkdtempSync(join(tmpdir(), "herald-push-"));
  const keys = JSON.parse(execFileSync(bin, ["push", "vapid-keys", "--json"], { cwd: dir }).toString());
  writeFileSync(join(dir, "herald.toml"), `
[inbox]
cors_origins = ["*"]
token_secret = "a-test-secret-that-is-at-least-32-characters"

[push]
vapid_private_key = "${keys.private_key}"
vapid_subject = "mailto:ops@example.com"
`);
  return { ...(await startHerald(dir)), publicKey: keys.public_key };
}

// The host application's origin: `/` embeds the widget, `/push-sw.js` is
// its copy of Herald's service worker, `/thread/…` where links lead.
async function startHost(api, sw) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const server = createServer((req, res) => {
    const url = new URL(req.url, base);
    if (url.pathname === "/push-sw.js") {
      res.writeHead(200, { "content-type": "text/javascript" });
      res.end(sw);
      return;
    }
    res.writeHead(200, { "content-type": "text/html" });
    res.end(`<!doctype html><html lang="en"><head><title>Host app</title></head><body>
      <herald-inbox api="${api}" token="${url.searchParams.get("token") || ""}"></herald-inbox>
      <script>window.heraldPush = []; document.addEventListener("herald-push", (e) => window.heraldPush.push(e.detail));</script>
      <script src="${api}/widget/inbox.js"></script></body></html>`);
  });
  await new Promise((ok) => server.listen(port, "127.0.0.1", ok));
  return { base, server };
}

function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
           "--no-first-run", "--disable-component-update", "--disable-sync"],
  });
}

test("the service worker shows a pushed message, replaces it by id and opens its url on click", { timeout: 60_000 }, async () => {
  const { base: api, server } = await startPushHerald();
  const sw = await fetch(`${api}/widget/push-sw.js`).then((r) => r.text());
  const host = await startHost(api, sw);
  let browser;
  try {
    browser = await launch();
    const context = await browser.newContext();
    await context.grantPermissions(["notifications"], { origin: host.base });
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${host.base}/`);
    const cdp = await context.newCDPSession(page);
    const registrations = [];
    cdp.on("ServiceWorker.workerRegistrationUpdated", (e) => registrations.push(...e.registrations));
    await cdp.send("ServiceWorker.enable");
    await page.evaluate(async () => {
      await navigator.serviceWorker.register("/push-sw.js");
      await navigator.serviceWorker.ready;
    });
    const registrationId = (await waitFor(
      () => registrations.find((r) => r.scopeURL === `${host.base}/` && !r.isDeleted), 10_000, "the registration")).registrationId;
    const worker = await waitFor(() => context.serviceWorkers().find((w) => w.url().endsWith("/push-sw.js")), 10_000, "the worker");

    const notifications = () => page.evaluate(async () => {
      const reg = await navigator.serviceWorker.getRegistration("/");
      return (await reg.getNotifications()).map((n) => ({ title: n.title, body: n.body, tag: n.tag, data: n.data }));
    });
    const push = (payload) => cdp.send("ServiceWorker.deliverPushMessage",
      { origin: host.base, registrationId, data: JSON.stringify(payload) });
    // Delivers `payload` until `shown` holds: under load (the other browser
    // suites run beside this one) DevTools may hand a push to a worker that
    // is still starting, and it is dropped. Every payload here is tagged, so
    // a second delivery replaces the first and the counts stay exact.
    const pushUntil = (payload, shown, what) => waitFor(async () => {
      await push(payload);
      return waitFor(shown, 2_000, what).catch(() => false);
    }, 20_000, what);

    const id = "0192f7a0-1c2d-7e3f-8a9b-0c1d2e3f4a5b";
    let shown = await pushUntil({ id, title: "Export ready", body: "first copy", url: `${host.base}/thread/42`, data: { export: 7 } },
      async () => { const n = await notifications(); return n.length === 1 && n; }, "the notification");
    assert.deepEqual(shown[0], {
      title: "Export ready", body: "first copy", tag: id,
      data: { id, url: `${host.base}/thread/42`, data: { export: 7 } },
    });

    // The same message again (a retry): it replaces the first, not beside it.
    shown = await pushUntil({ id, title: "Export ready", body: "second copy", url: `${host.base}/thread/42`, data: {} },
      async () => { const n = await notifications(); return n.length === 1 && n[0].body === "second copy" && n; }, "the replacement");
    assert.equal(shown[0].tag, id);

    // A javascript: url is not kept for the click; another message is its own notification.
    shown = await pushUntil({ id: "other", title: "Hi", url: "javascript:alert(1)", data: null },
      async () => { const n = await notifications(); return n.length === 2 && n; }, "the second notification");
    assert.equal(shown.find((n) => n.tag === "other").data.url, null);

    // A click closes the notification and opens the message's url; the
    // javascript: one opens nothing.
    const clicked = await worker.evaluate(async () => {
      const opened = [];
      self.clients.openWindow = async (url) => { opened.push(url); return null; };
      for (const n of await self.registration.getNotifications()) {
        // Synthetic events cannot `waitUntil` (only trusted ones may); the
        // handler has called openWindow by the time that throws.
        self.addEventListener("error", (e) => e.preventDefault(), { once: true });
        try { self.dispatchEvent(new NotificationEvent("notificationclick", { notification: n })); } catch (e) { /* waitUntil */ }
      }
      await new Promise((r) => setTimeout(r, 200));
      return { opened, left: (await self.registration.getNotifications()).length };
    });
    assert.deepEqual(clicked, { opened: [`${host.base}/thread/42`], left: 0 });
    assert.deepEqual(errors, []);
  } finally {
    await browser?.close();
    host.server.close();
    await stopHerald(server);
  }
});

test("the widget turns notifications on: permission, worker, subscription, and the server's answer shown", { timeout: 60_000 }, async () => {
  const { base: api, server, api: call, publicKey } = await startPushHerald();
  const sw = await fetch(`${api}/widget/push-sw.js`).then((r) => r.text());
  const host = await startHost(api, sw);
  let browser;
  try {
    const served = await fetch(`${api}/v1/push/vapid-public-key`).then((r) => r.json());
    assert.equal(served.public_key, publicKey);
    const { token } = await call("POST", "/v1/users/ada/token");
    browser = await launch();
    const context = await browser.newContext();
    await context.grantPermissions(["notifications"], { origin: host.base });
    // No push service in headless Chromium: a subscribe that records the key
    // it was given and answers what a browser's subscription serialises to.
    await context.addInitScript(() => {
      window.subscribedWith = [];
      PushManager.prototype.getSubscription = async () => null;
      PushManager.prototype.subscribe = async function (options) {
        window.subscribedWith.push(Array.from(new Uint8Array(options.applicationServerKey)));
        const json = { endpoint: "https://push.example.net/send/abc", expirationTime: null,
                       keys: { p256dh: "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4", auth: "BTBZMqHH6r4Tts7J_aSIgg" } };
        return { endpoint: json.endpoint, toJSON: () => json, unsubscribe: async () => { window.unsubscribed = true; return true; } };
      };
    });
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    const posts = [];
    page.on("request", (r) => { if (r.url() === `${api}/v1/inbox/push-subscriptions` && r.method() === "POST") posts.push(r); });
    await page.goto(`${host.base}/?token=${encodeURIComponent(token)}`);
    const shadow = (fn, arg) => page.evaluate(fn, arg);
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").click());
    const button = await waitFor(() => shadow(() => {
      const p = document.querySelector("herald-inbox").shadowRoot.querySelector(".push");
      return !p.hidden && !p.querySelector(".push-on").hidden && p.querySelector(".push-on").textContent;
    }), 10_000, "the turn-on button");
    assert.equal(button, "Turn on notifications");
    await page.screenshot({ path: join(shots, "widget-push-1-offer.png") });

    const answer = page.waitForResponse((r) => r.url() === `${api}/v1/inbox/push-subscriptions`);
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".push-on").click());
    const resp = await answer;
    const status = await waitFor(() => shadow(() => {
      const s = document.querySelector("herald-inbox").shadowRoot.querySelector(".push-status");
      return !s.textContent.endsWith("…") && s.textContent && { text: s.textContent, failed: s.classList.contains("failed") };
    }), 10_000, "the outcome under the button");
    await page.screenshot({ path: join(shots, "widget-push-2-answer.png") });

    // Subscribed with the key Herald serves, the subscription POSTed as the browser gave it, with the token.
    const key = Buffer.from(publicKey, "base64url");
    assert.deepEqual(await page.evaluate(() => window.subscribedWith), [Array.from(key)]);
    assert.equal(posts.length, 1);
    assert.equal(posts[0].headers().authorization, `Bearer ${token}`);
    assert.deepEqual(JSON.parse(posts[0].postData()).keys.auth, "BTBZMqHH6r4Tts7J_aSIgg");
    assert.equal(JSON.parse(posts[0].postData()).endpoint, "https://push.example.net/send/abc");
    const registered = await shadow(() => navigator.serviceWorker.getRegistration("/push-sw.js").then((r) => Boolean(r && r.active)));
    assert.ok(registered, "the host's service worker is registered and active");
    const events = await page.evaluate(() => window.heraldPush);
    // Herald took the subscription as the browser serialised it (201), and
    // it is the user's device now. (A refusal's words under the button are
    // the 422 path of `request`, as for every other call of the widget.)
    assert.equal(resp.status(), 201, await resp.text());
    assert.deepEqual(status, { text: "Notifications are on for this browser.", failed: false });
    assert.deepEqual(events, [{ on: true }]);
    const devices = await call("GET", "/v1/users/ada/push-subscriptions");
    assert.deepEqual(devices.items.map((d) => d.kind), ["web"]);
    assert.deepEqual(errors, []);
  } finally {
    await browser?.close();
    host.server.close();
    await stopHerald(server);
  }
});
