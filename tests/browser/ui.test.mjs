// The operator screen in a real browser (Debian's Chromium, driven by
// playwright-core), end to end against `herald serve`: log in, create and
// enable a rule, fire a trigger through the API, see the delivery on the
// send-log page, disable the rule, lift a suppression, log out; a page
// without a session redirects to the login; a form posted without its CSRF
// token is refused. Also (issue 15): the server's root leads to the screen;
// the editor's sample comes from the newest trigger of the type and each
// field's error sits under that field; every list names each message by its
// subject; a row's page shows the rendered message; failed rows are retried
// all at once with the filter; a rule is deleted from the screen; changes
// made through the API are in the audit log with the key's name; the outbox
// and the other pages are readable at 390 px (nothing wider than the
// screen). Issue 14: the editor's workflow fields (a refusal under its
// field, a save) and the dry run's window, digest and cap notes, on a
// laptop and a phone. Screenshots of every page, at 1280 px and at 390 px, go to
// test-output/ui-*.png at the repository root.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { bin, root, shots, startHerald, stopHerald, waitFor } from "./support.mjs";

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
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    // Nothing is fetched from anywhere but this server.
    const foreign = [];
    page.on("request", (r) => { if (!r.url().startsWith(base)) foreign.push(r.url()); });
    const shot = (name) => page.screenshot({ path: join(shots, `ui-${name}.png`), fullPage: true });
    const flash = () => page.textContent(".flash");

    // The server's root is the screen (here: its login), not a blank 404.
    await page.goto(`${base}/`);
    assert.equal(new URL(page.url()).pathname, "/ui/login");

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

    // A new rule for a trigger type that has arrived before: the first
    // preview uses the newest trigger's payload, not `{}`. A broken condition
    // is reported under the condition.
    await api("POST", "/v1/triggers", { type: "comment.created", user_id: "lin", payload: { author: "Grace", text: "Nice!" } });
    await page.click("text=New rule");
    assert.equal(await page.inputValue("textarea[name=sample_payload]"), "", "a blank editor has no made-up sample");
    await page.fill("input[name=name]", "Comment");
    await page.fill("input[name=trigger_type]", "comment.created");
    await page.fill("input[name=category]", "comments");
    await page.fill("input[name=loc0_subject]", "{{ payload.author }} commented");
    await page.fill("textarea[name=loc0_text]", "{{ payload.text }}");
    await page.fill("input[name=condition]", "payload.author ==");
    await page.click("button[value=preview]");
    assert.match(await page.inputValue("textarea[name=sample_payload]"), /"author": "Grace"/);
    assert.match(await page.textContent(".hint:below(textarea[name=sample_payload])"), /Filled from the newest comment\.created trigger/);
    const conditionError = await page.evaluate(() => {
      const label = document.querySelector("input[name=condition]").closest("label");
      const next = label.nextElementSibling;
      return next && next.classList.contains("field-error") ? next.textContent : null;
    });
    assert.match(conditionError ?? "", /line 1, column \d+/, "the condition's error is right under the condition");
    await shot("03b-rule-sample-and-condition-error");
    await page.fill("input[name=condition]", "");
    await page.click("button[value=preview]");
    assert.equal(await page.textContent(".preview .subject"), "Grace commented");
    await page.goto(`${base}/ui/rules`);

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
    // Each row is named by its message's subject, not only its id.
    assert.match(await page.textContent("table.outbox tbody tr:first-child td:first-child"), /Export q4 ready/);
    await shot("10-outbox");
    await page.click("table a[href^='/ui/outbox/']");
    assert.match(await page.textContent("dl.facts"), /sent/);
    // The row's page shows the message itself, rendered.
    assert.equal(await page.textContent(".preview .subject"), "Export q4 ready");
    assert.match(await page.textContent(".preview pre.body"), /your export has 3 rows\./);
    await shot("11-outbox-row");
    const rowPath = new URL(page.url()).pathname;

    // Rows that failed are retried at once, with the filter: three inbox
    // rows enqueued by hand with a payload the inbox cannot use end failed.
    execFileSync(bin, ["enqueue", "--channel", "inbox", "--user-id", "bo", "--count", "3", "--payload", '{"no_title": true}'], {
      cwd: dir, stdio: ["ignore", "pipe", "inherit"],
    });
    await waitFor(async () => {
      const failed = await api("GET", "/v1/outbox?status=failed");
      return failed.items.length === 3;
    }, 30_000, "the three unusable rows to end failed");
    await page.goto(`${base}/ui/outbox?status=failed`);
    await shot("11b-outbox-failed");
    await page.click("form.bulk button");
    assert.match(await flash(), /Scheduled 3 failed row\(s\) again, due now/);
    await waitFor(async () => {
      const failed = await api("GET", "/v1/outbox?user_id=bo");
      return failed.items.every((r) => r.status === "failed" && r.attempts === 1) && failed.items;
    }, 30_000, "the retried rows to be delivered (and fail) again");
    const boLog = await api("GET", "/v1/users/bo/sends");
    assert.ok(boLog.messages.every((m) => m.history.length === 2), "each row was tried again");

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

    // A rule made and switched through the API, then deleted from the screen.
    const viaApi = await api("POST", "/v1/rules", {
      name: "Made by the API", trigger_type: "api.thing", channel: "inbox", category: "c",
      template: { fallback_locale: "en", locales: { en: { subject: "s", text: "t" } } },
    });
    await api("PATCH", `/v1/rules/${viaApi.id}`, { enabled: true });
    await page.goto(`${base}/ui/rules/${viaApi.id}`);
    await page.click("text=Delete rule…");
    assert.match(await page.textContent("main"), /Delete it\?/);
    await shot("15b-rule-delete");
    await page.click("form[action$='/delete'] button");
    assert.match(await flash(), /Rule "Made by the API" deleted; 0 scheduled message\(s\) cancelled/);
    assert.doesNotMatch(await page.textContent("table.rules"), /Made by the API/);

    // Every action is in the audit log, the API's with the key's name.
    await page.goto(`${base}/ui/audit`);
    const log = await page.textContent("main table");
    for (const action of ["login", "rule.create", "rule.enable", "rule.disable", "rule.delete", "suppression.add",
                          "suppression.lift", "outbox.retry_many"]) {
      assert.match(log, new RegExp(action.replace(".", "\\.")), `audit log shows ${action}`);
    }
    assert.match(log, /api key "browser-test"[\s\S]*rule\.(create|enable)/, "changes through the API name the key");
    await shot("16-audit");

    // Issue 14: the workflow fields are edited in the same form (no
    // JavaScript); a bad value is refused under its field and nothing is
    // saved; the dry run says what the window, digest and cap would do.
    await page.goto(`${base}/ui/rules/new`);
    await page.fill("input[name=name]", "Comment digest");
    await page.fill("input[name=trigger_type]", "comment.created");
    await page.fill("input[name=category]", "comments");
    await page.fill("input[name=loc0_subject]", "{{ digest.count }} comments");
    await page.fill("textarea[name=loc0_text]", "new comments");
    await page.check("input[name=sw_day_mon]");
    await page.fill("input[name=sw_from]", "9am");
    await page.fill("input[name=sw_until]", "18:00");
    await page.fill("input[name=digest_window]", "3600");
    await page.fill("input[name=throttle_limit]", "3");
    await page.fill("input[name=throttle_per]", "86400");
    await page.fill("input[name=display_name]", "Comments");
    await page.click("button[value=save]");
    const fromError = await page.evaluate(() => {
      const next = document.querySelector("input[name=sw_from]").closest("label").nextElementSibling;
      return next && next.classList.contains("field-error") ? next.textContent : null;
    });
    assert.match(fromError ?? "", /"9am" is not a time of day/, "the error is under the field");
    await shot("16b-rule-workflow-refused");
    await page.fill("input[name=sw_from]", "09:00");
    await page.click("button[value=save]");
    assert.match(await flash(), /created/);
    const digestRule = new URL(page.url()).pathname.split("/").pop();
    const saved = await api("GET", `/v1/rules/${digestRule}`);
    assert.deepEqual(saved.send_window, { days: ["mon"], from: "09:00", until: "18:00" });
    assert.deepEqual(saved.throttle, { limit: 3, per: 86400, scope: "rule" });
    assert.equal(saved.digest.window, 3600);
    await page.goto(`${base}/ui/rules/${digestRule}/enable`);
    const dry = await page.textContent("main table");
    assert.match(dry, /Window: due [^ ]+: /);
    assert.match(dry, /Digest: would open a new digest/);
    assert.match(dry, /Cap: 1 of 3 used/);
    await shot("16c-rule-workflow-dry-run");

    // The same pages on a phone: nothing is wider than the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    const fits = async (path) => {
      await page.goto(`${base}${path}`);
      const [scroll, width] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
      assert.ok(scroll <= width, `${path} is ${scroll}px wide on a ${width}px screen`);
    };
    await fits("/ui/rules");
    await shot("17-phone-rules");
    await fits("/ui/sends?q=ada");
    await shot("18-phone-send-log");
    await fits("/ui/outbox");
    assert.match(await page.textContent("table.outbox tbody"), /Export q4 ready/);
    await shot("18b-phone-outbox");
    await fits(rowPath);
    await shot("18c-phone-outbox-row");
    await fits("/ui/outbox?status=failed");
    await shot("18d-phone-outbox-failed");
    await fits(`/ui/rules/${ruleId}`);
    await shot("18e-phone-rule-editor");
    await fits(`/ui/rules/${digestRule}`);
    await shot("18e2-phone-rule-editor-workflows");
    await fits(`/ui/rules/${digestRule}/enable`);
    await shot("18e3-phone-rule-dry-run");
    await fits("/ui/audit");
    await shot("18f-phone-audit");
    await page.setViewportSize({ width: 1280, height: 860 });

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
    await stopHerald(server);
  }
});
