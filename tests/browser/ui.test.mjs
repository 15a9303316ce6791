// The operator screen in a real browser (Debian's Chromium, driven by
// playwright-core), end to end against `herald serve`: log in, create and
// enable a rule, fire a trigger through the API, see the delivery on the
// send-log page, disable the rule, lift a suppression, log out; a page
// without a session redirects to the login; a form posted without its CSRF
// token is refused. Screenshots of every page go to test-output/ui-*.png at
// the repository root.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { bin, root, shots, startHerald, waitFor } from "./support.mjs";

const EMAIL = "ops@example.com";
const PASSWORD = "a long operator password";

test("an operator runs a rule from the screen, end to end", { timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "herald-ui-"));
  execFileSync(bin, ["operators", "add", "--email", EMAIL, "--password-stdin"], {
    cwd: dir, input: `${PASSWORD}\n`, stdio: ["pipe", "pipe", "inherit"],
  });
  const { base, server, api, key } = await startHerald(dir);
  let browser;
  let page;
  try {
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
             "--no-first-run", "--disable-component-update", "--disable-sync"],
    });
    const context = await browser.newContext({ viewport: { width: 1200, height: 860 } });
    page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    // Nothing is fetched from anywhere but this server.
    const foreign = [];
    page.on("request", (r) => { if (!r.url().startsWith(base)) foreign.push(r.url()); });
    const shot = (name) => page.screenshot({ path: join(shots, `ui-${name}.png`), fullPage: true });
    const flash = () => page.textContent(".flash");

    // A page without a session redirects to the login.
    await page.goto(`${base}/ui/outbox`);
    assert.equal(new URL(page.url()).pathname, "/ui/login");
    await shot("01-login");

    // A wrong password is refused with the same words as an unknown email.
    await page.fill("input[name=email]", EMAIL);
    await page.fill("input[name=password]", "not the password");
    await page.click("button[type=submit]");
    assert.match(await page.textContent(".error"), /Wrong email or password/);
    await shot("02-login-refused");

    // The login goes back to the page that asked for it.
    await page.fill("input[name=password]", PASSWORD);
    await page.click("button[type=submit]");
    assert.equal(new URL(page.url()).pathname, "/ui/outbox");
    assert.match(await page.textContent("header.top"), new RegExp(EMAIL));
    await page.goto(`${base}/ui/rules`);
    await shot("03-rules-empty");

    // Create a rule; a template error is shown with its line and column first.
    await page.click("text=New rule");
    await page.fill("input[name=name]", "Export ready");
    await page.fill("input[name=trigger_type]", "export.ready");
    await page.selectOption("select[name=channel]", "inbox");
    await page.fill("input[name=category]", "exports");
    await page.fill("input[name=loc0_subject]", "Export {{ payload.name }} ready");
    await page.fill("textarea[name=loc0_text]", "Hi {{ user.id }},\nyour export has {{ payload.rows rows.");
    await page.fill("textarea[name=sample_payload]", '{"name": "q4", "rows": 3}');
    await page.click("button[value=preview]");
    const problem = await page.textContent(".error");
    assert.match(problem, /template\.locales\.en\.text/);
    assert.match(problem, /line 2, column \d+/);
    await shot("04-rule-template-error");
    await page.fill("textarea[name=loc0_text]", "Hi {{ user.id }},\nyour export has {{ payload.rows }} rows.");
    await page.click("button[value=preview]");
    assert.equal(await page.textContent(".preview .subject"), "Export q4 ready");
    assert.match(await page.textContent(".preview pre.body"), /your export has 3 rows\./);
    await page.click("button[value=save]");
    assert.match(await flash(), /created\. It is off/);
    const ruleId = new URL(page.url()).pathname.split("/").pop();
    await shot("05-rule-saved");

    // Enabling shows the dry run first: a trigger that arrived while the
    // rule was off is what it would have planned for.
    await api("POST", "/v1/triggers", { type: "export.ready", user_id: "grace", payload: { name: "q3", rows: 12 } });
    await page.goto(`${base}/ui/rules`);
    await page.click("text=Turn on…");
    assert.match(await page.textContent("main"), /Dry run/);
    assert.match(await page.textContent("main table"), /grace[\s\S]*yes/);
    await shot("06-rule-enable-preview");

    // A form posted without its CSRF token is refused, and changes nothing.
    await page.evaluate(() => document.querySelector("form[action$='/enable'] input[name=csrf]").remove());
    const refused = await Promise.all([page.waitForNavigation(), page.click("form[action$='/enable'] button")]);
    assert.equal(refused[0].status(), 403);
    assert.match(await page.textContent(".error"), /CSRF/);
    await shot("07-csrf-refused");
    assert.equal((await api("GET", `/v1/rules/${ruleId}`)).enabled, false, "the refused form changed nothing");

    await page.goto(`${base}/ui/rules/${ruleId}/enable`);
    await page.click("form[action$='/enable'] button");
    assert.match(await flash(), /is on/);
    assert.match(await page.textContent("td.switch"), /on/);
    await shot("08-rules-on");
    assert.equal((await api("GET", `/v1/rules/${ruleId}`)).enabled, true);

    // A trigger through the API; the delivery shows on the send-log page.
    const fired = await api("POST", "/v1/triggers", { type: "export.ready", user_id: "ada", payload: { name: "q4", rows: 3 } });
    assert.equal(fired.planned.length, 1);
    await api("POST", "/v1/triggers", { type: "comment.created", user_id: "ada", payload: {} });
    await page.goto(`${base}/ui/sends`);
    await page.fill("input[name=q]", "ada");
    await page.click("form[action='/ui/sends'] button");
    await waitFor(async () => {
      await page.reload();
      return /sent/.test(await page.textContent("article.message .history") ?? "");
    }, 30_000, "the delivery to appear in the send log");
    const timeline = await page.textContent("main");
    assert.match(timeline, /Export ready/);
    assert.match(timeline, /no enabled rule matches trigger type "comment\.created"/, "triggers that planned nothing are shown");
    await shot("09-send-log");

    await page.goto(`${base}/ui/outbox`);
    assert.match(await page.textContent(".cards"), /1\s*sent/);
    await shot("10-outbox");
    await page.click("table a[href^='/ui/outbox/']");
    assert.match(await page.textContent("dl.facts"), /sent/);
    await shot("11-outbox-row");

    // Turn the rule off again.
    await page.goto(`${base}/ui/rules`);
    await page.click("text=Turn off");
    assert.match(await flash(), /is off/);
    assert.equal((await api("GET", `/v1/rules/${ruleId}`)).enabled, false);
    await shot("12-rules-off");

    // A hard bounce arrives (through the API): the address is suppressed, with
    // the bounce as evidence. An operator adds one by hand, and lifts the
    // bounced one with a reason.
    const dsn = readFileSync(join(root, "tests/data/bounces/eml/lhost-sendmail-02.eml"));
    const ingested = await fetch(`${base}/v1/bounces/mail`, {
      method: "POST", headers: { Authorization: `Bearer ${key}`, "Content-Type": "message/rfc822" }, body: dsn,
    });
    assert.equal(ingested.status, 200, await ingested.text());
    const [bounced] = (await api("GET", "/v1/suppressions?email=userunknown@example.org")).suppressions;
    assert.equal(bounced.reason, "hard_bounce");
    await page.goto(`${base}/ui/suppressions`);
    await page.fill("form[method=post][action='/ui/suppressions'] input[name=email]", "blocked@example.com");
    await page.fill("form[method=post][action='/ui/suppressions'] input[name=detail]", "asked by phone not to be mailed");
    await page.click("form[method=post][action='/ui/suppressions'] button");
    assert.match(await flash(), /Suppression added/);
    await page.goto(`${base}/ui/suppressions`);
    const table = await page.textContent("main table");
    assert.match(table, /hard_bounce/);
    assert.match(table, /asked by phone/);
    await shot("13-suppressions");
    await page.click(`table a[href='/ui/suppressions/${bounced.address_hash}']`);
    assert.match(await page.textContent("main"), /What arrived/);
    await page.click("details summary");
    await shot("14-suppression-evidence");
    await page.fill("form[action='/ui/suppressions/lift'] input[name=reason]", "the mailbox exists again (checked with the customer)");
    await page.click("form[action='/ui/suppressions/lift'] button");
    assert.match(await flash(), /Lifted 1 suppression/);
    assert.match(await page.textContent("main"), /the mailbox exists again/);
    await shot("15-suppression-lifted");
    assert.equal((await api("GET", `/v1/suppressions?address_hash=${bounced.address_hash}`)).suppressions.length, 0);

    // Every action is in the audit log.
    await page.goto(`${base}/ui/audit`);
    const log = await page.textContent("main table");
    for (const action of ["login", "rule.create", "rule.enable", "rule.disable", "suppression.add", "suppression.lift"]) {
      assert.match(log, new RegExp(action.replace(".", "\\.")), `audit log shows ${action}`);
    }
    await shot("16-audit");

    // The same pages on a phone.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}/ui/rules`);
    await shot("17-phone-rules");
    await page.goto(`${base}/ui/sends?q=ada`);
    await shot("18-phone-send-log");
    await page.setViewportSize({ width: 1200, height: 860 });

    // Log out: the session ends, and the screen is closed again.
    await page.click("text=Log out");
    assert.equal(new URL(page.url()).pathname, "/ui/login");
    assert.match(await page.textContent(".notice"), /logged out/);
    await shot("19-logged-out");
    await page.goto(`${base}/ui/rules`);
    assert.equal(new URL(page.url()).pathname, "/ui/login");

    assert.deepEqual(errors, []);
    assert.deepEqual(foreign, [], "no asset fetched from outside the server");
  } catch (e) {
    if (page) await page.screenshot({ path: join(shots, "ui-failure.png"), fullPage: true }).catch(() => {});
    throw e;
  } finally {
    if (browser) await browser.close();
    server.kill("SIGTERM");
    await new Promise((ok) => server.once("exit", ok));
  }
});
