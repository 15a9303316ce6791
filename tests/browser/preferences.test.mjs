// The end user's preference center in a real browser (issue 14): the
// widget's settings view (opened from the panel, used with the keyboard)
// and the hosted page linked from an email's footer (a plain form, no
// JavaScript). A change made in either stops the next message of that
// category on that channel, and the send log says so. Screenshots go to
// test-output/ at the repository root.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { freePort, shots, startHerald, stopHerald, waitFor } from "./support.mjs";

// A page on its own origin embedding the widget for `token`; resolves to
// its address once it listens.
async function hostPage(pageServer, api, token) {
  const pagePort = await freePort();
  pageServer.on("request", (req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(`<!doctype html><html lang="en"><head><meta name="viewport" content="width=device-width"><title>Host app</title></head>
      <body style="font-family: system-ui; margin: 24px">
        <nav style="display:flex; justify-content:space-between; align-items:center; max-width:640px">
          <strong>Host app</strong><herald-inbox api="${api}" token="${token}"></herald-inbox>
        </nav>
        <script src="${api}/widget/inbox.js"></script>
      </body></html>`);
  });
  await new Promise((ok) => pageServer.listen(pagePort, "127.0.0.1", ok));
  return `http://127.0.0.1:${pagePort}`;
}

const launch = () => chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync"],
});

test("the widget's settings and the hosted page each stop the next message of a category", { timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "herald-prefs-"));
  const mail = join(dir, "mail");
  mkdirSync(mail);
  writeFileSync(join(dir, "herald.toml"), `
[inbox]
cors_origins = ["*"]
token_secret = "a-test-secret-that-is-at-least-32-characters"

[email]
transport = "file://${mail}"
from = "Herald <news@herald.test>"
address_secret = "another test secret of sufficient length"
`);
  const { base: api, server, api: call } = await startHerald(dir);
  const pageServer = createServer();
  let browser;
  try {
    await call("PUT", "/v1/users/ada", { email: "ada@example.com" });
    const template = { fallback_locale: "en", locales: { en: { subject: "{{ payload.title }}", text: "Read it in the app." } } };
    for (const [name, channel] of [["News in the inbox", "inbox"], ["News by email", "email"]]) {
      await call("POST", "/v1/rules", {
        name, trigger_type: "news.posted", channel, category: "news", enabled: true, template,
        display_name: "Product news", description: "What we shipped this week",
      });
    }
    await call("POST", "/v1/rules", {
      name: "Receipt", trigger_type: "invoice.paid", channel: "inbox", category: "transactional", enabled: true,
      template, display_name: "Receipts",
    });
    const { token } = await call("POST", "/v1/users/ada/token");
    const sends = async () => (await call("GET", "/v1/users/ada/sends")).messages;
    const settle = (n) => waitFor(async () => {
      const m = await sends();
      return m.length === n && m.every((x) => x.status !== "scheduled" && x.status !== "sending") && m;
    }, 20_000, `${n} messages to settle`);

    await call("POST", "/v1/triggers", { type: "news.posted", user_id: "ada", payload: { title: "First news" } });
    let messages = await settle(2);
    assert.deepEqual(messages.map((m) => m.status).sort(), ["sent", "sent"]);

    // The host page embedding the widget, on its own origin.
    const hostBase = await hostPage(pageServer, api, token);
    browser = await launch();
    const page = await browser.newPage({ viewport: { width: 1280, height: 640 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(hostBase);
    const shadow = (fn, arg) => page.evaluate(fn, arg);
    await waitFor(() => shadow(() => document.querySelector("herald-inbox")?.shadowRoot?.querySelector("li.unread")), 10_000, "the widget to load");

    // Keyboard only: focus the bell, open the panel, tab to the gear, open the settings.
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").focus());
    await page.keyboard.press("Enter");
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".settings").focus());
    await page.keyboard.press("Enter");
    const focused = await waitFor(() => shadow(() => {
      const a = document.querySelector("herald-inbox").shadowRoot.activeElement;
      return a && a.name;
    }), 10_000, "the settings view to focus its first checkbox");
    assert.equal(focused, "news:email", "the first choice has the focus");
    const view = await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".prefs").innerText);
    assert.match(view, /Product news/);
    assert.match(view, /What we shipped this week/);
    assert.match(view, /Receipts/);
    assert.match(view, /always sent/);
    const locked = await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector('input[name="transactional:inbox"]').disabled);
    assert.equal(locked, true, "transactional cannot be turned off");
    await page.screenshot({ path: join(shots, "preferences-1-widget.png") });

    // Tab to the inbox box and turn it off with the space bar.
    await page.keyboard.press("Tab");
    const next = await shadow(() => document.querySelector("herald-inbox").shadowRoot.activeElement.name);
    assert.equal(next, "news:inbox");
    await page.keyboard.press("Space");
    await waitFor(() => shadow(() => /Saved\./.test(document.querySelector("herald-inbox").shadowRoot.querySelector(".prefs .status").textContent)), 10_000, "the change to be saved");
    await page.screenshot({ path: join(shots, "preferences-2-widget-saved.png") });
    await page.setViewportSize({ width: 390, height: 700 });
    await page.screenshot({ path: join(shots, "preferences-2b-widget-phone.png") });

    // The next news message: the inbox copy is suppressed, the email goes.
    await call("POST", "/v1/triggers", { type: "news.posted", user_id: "ada", payload: { title: "Second news" } });
    messages = await settle(4);
    const inboxNews = messages.filter((m) => m.channel === "inbox").sort((a, b) => a.created_at.localeCompare(b.created_at));
    assert.equal(inboxNews[1].status, "suppressed");
    assert.equal(inboxNews[1].history[0].detail, 'the user turned off "news" by inbox in their preference center');

    // The hosted page, from the email's footer.
    const eml = readdirSync(mail).filter((f) => f.endsWith(".eml")).map((f) => readFileSync(join(mail, f), "utf8"));
    assert.ok(eml.length >= 2, `two emails written: ${eml.length}`);
    const link = eml[0].replace(/=\r?\n/g, "").match(/Choose which messages you get: (\S+)/)?.[1];
    assert.ok(link && link.includes("/p/"), `a preferences link in the footer: ${eml[0]}`);
    const hosted = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 390, height: 760 } });
    const form = await hosted.newPage();
    await form.goto(link.replace(/^https?:\/\/[^/]+/, api));
    assert.equal(await form.locator(`input[name="on"][value='["news","inbox"]']`).isChecked(), false, "shows the widget's change");
    assert.equal(await form.locator(`input[name="on"][value='["news","email"]']`).isChecked(), true);
    await form.screenshot({ path: join(shots, "preferences-3-hosted-page.png") });
    await form.locator(`input[name="on"][value='["news","email"]']`).uncheck();
    await Promise.all([form.waitForLoadState("load"), form.locator('button[type="submit"]').click()]);
    assert.match(await form.locator("body").innerText(), /Saved\./);
    await form.screenshot({ path: join(shots, "preferences-4-hosted-page-saved.png") });

    // The next news email is suppressed too, and the audit trail says who.
    await call("POST", "/v1/triggers", { type: "news.posted", user_id: "ada", payload: { title: "Third news" } });
    messages = await settle(6);
    const emailNews = messages.filter((m) => m.channel === "email").sort((a, b) => a.created_at.localeCompare(b.created_at));
    assert.equal(emailNews[2].status, "suppressed");
    assert.equal(emailNews[2].history[0].detail, 'the user turned off "news" by email in their preference center');
    const user = await call("GET", "/v1/users/ada");
    assert.deepEqual(user.user_preferences, { news: { inbox: false, email: false } });
    assert.deepEqual(errors, []);
  } finally {
    if (browser) await browser.close();
    pageServer.close();
    await stopHerald(server);
  }
});

// Issue 31: the widget's settings list the topics the user follows, one
// box each; unticking one mutes it, so the next trigger to that topic is
// suppressed for the user while another topic still reaches them. The
// host's topic name is shown as text, never markup.
test("the widget mutes one topic the user follows", { timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "herald-topic-mute-"));
  writeFileSync(join(dir, "herald.toml"), `
[inbox]
cors_origins = ["*"]
token_secret = "a-test-secret-that-is-at-least-32-characters"
`);
  const { base: api, server, api: call } = await startHerald(dir);
  const pageServer = createServer();
  let browser;
  try {
    const template = { fallback_locale: "en", locales: { en: { subject: "New comment", text: "Read it." } } };
    await call("POST", "/v1/rules", {
      name: "Comments", trigger_type: "doc.commented", channel: "inbox", category: "comments", enabled: true, template,
    });
    await call("PUT", "/v1/topics/doc:42", { name: "<b>Roadmap</b>" });
    for (const topic of ["doc:42", "doc:7"]) await call("POST", `/v1/topics/${topic}/subscribers`, { user_ids: ["ada"] });
    const { token } = await call("POST", "/v1/users/ada/token");

    browser = await launch();
    const page = await browser.newPage({ viewport: { width: 1280, height: 640 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(await hostPage(pageServer, api, token));
    const shadow = (fn, arg) => page.evaluate(fn, arg);
    await waitFor(() => shadow(() => document.querySelector("herald-inbox")?.shadowRoot?.querySelector(".settings")), 10_000, "the widget to load");
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".bell").click());
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".settings").click());
    await waitFor(() => shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector('input[name="topic:doc:42"]')), 10_000, "the topics to show");
    const view = await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".prefs").innerText);
    assert.match(view, /Topics you follow/);
    assert.match(view, /Notify me about <b>Roadmap<\/b> \(doc:42\)/, "the name as text");
    assert.match(view, /Notify me about doc:7/);
    const bold = await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector(".prefs b"));
    assert.equal(bold, null, "no markup from the host's name");
    await shadow(() => document.querySelector("herald-inbox").shadowRoot.querySelector('input[name="topic:doc:42"]').click());
    await waitFor(() => shadow(() => /Saved\./.test(document.querySelector("herald-inbox").shadowRoot.querySelector(".prefs .status").textContent)), 10_000, "the mute to be saved");
    await page.screenshot({ path: join(shots, "preferences-5-widget-topic-muted.png") });
    const center = await (await fetch(`${api}/v1/inbox/preferences`, { headers: { Authorization: `Bearer ${token}` } })).json();
    assert.deepEqual(center.topics.map((t) => [t.topic, t.muted]), [["doc:42", true], ["doc:7", false]]);

    // A trigger to each topic: the muted one is suppressed, saying so.
    for (const topic of ["doc:42", "doc:7"]) await call("POST", "/v1/triggers", { type: "doc.commented", topic });
    const messages = await waitFor(async () => {
      const m = (await call("GET", "/v1/users/ada/sends")).messages;
      return m.length === 2 && m.every((x) => x.status !== "scheduled" && x.status !== "sending") && m;
    }, 20_000, "both messages to settle");
    const suppressed = messages.filter((m) => m.status === "suppressed");
    assert.equal(suppressed.length, 1, JSON.stringify(messages));
    assert.equal(suppressed[0].history[0].detail, 'the user muted topic "doc:42"');
    assert.equal(messages.filter((m) => m.status === "sent").length, 1, "the other topic still reaches them");
    assert.deepEqual(errors, []);
  } finally {
    if (browser) await browser.close();
    pageServer.close();
    await stopHerald(server);
  }
});
