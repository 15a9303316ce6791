// Herald inbox widget: <herald-inbox api="https://herald.example.com" token="…">
//
// A bell with an unseen badge and a list of the user's messages, kept live by
// the inbox stream. Served by Herald at /widget/inbox.js; no other assets, no
// dependencies. The token is a per-user inbox token (POST /v1/users/{id}/token
// from your backend); set a fresh one on the `token` attribute before it
// expires and the widget reconnects. The gear in the panel's header opens
// the user's preferences (GET/PUT /v1/inbox/preferences): a checkbox per
// category and channel, and one per topic the user follows (unticked:
// muted), saved as it is changed.
//
// Push: when Herald has Web Push set up (or the page gives the key in
// `push-key`) and the browser supports it, the panel offers "Turn on
// notifications": it asks the browser's permission, registers the host's
// copy of Herald's service worker (`sw-path`, default /push-sw.js; a
// service worker must come from the page's own origin), subscribes with
// the key and registers the subscription with the inbox token (POST
// /v1/inbox/push-subscriptions). `push="off"` leaves the button out.
(() => {
  if (customElements.get("herald-inbox")) return;

  const STYLE = `
    :host { position: relative; display: inline-block; font: 14px/1.4 system-ui, sans-serif; color: #1f2328; }
    button.bell { position: relative; border: 0; background: none; cursor: pointer; padding: 6px; border-radius: 6px; }
    button.bell:hover, button.bell:focus-visible { background: #f0f2f4; }
    svg { width: 22px; height: 22px; display: block; }
    .badge { position: absolute; top: 0; right: 0; min-width: 16px; height: 16px; padding: 0 4px; box-sizing: border-box;
             border-radius: 8px; background: #d1242f; color: #fff; font-size: 11px; line-height: 16px; text-align: center; }
    .badge[hidden] { display: none; }
    .panel { position: absolute; left: 0; top: 100%; width: min(340px, 90vw); max-height: 420px; overflow: auto;
             background: #fff; border: 1px solid #d0d7de; border-radius: 8px; box-shadow: 0 8px 24px rgba(0,0,0,.12); z-index: 1000; }
    .panel[hidden] { display: none; }
    header { display: flex; justify-content: space-between; align-items: center; padding: 8px 12px; border-bottom: 1px solid #eaeef2; font-weight: 600; }
    header button { border: 0; background: none; color: #0969da; cursor: pointer; font: inherit; font-weight: 400; }
    ul { list-style: none; margin: 0; padding: 0; }
    li { padding: 10px 12px; border-bottom: 1px solid #eaeef2; cursor: pointer; }
    li:hover { background: #f6f8fa; }
    li.unread .title { font-weight: 600; }
    li.unread .title::before { content: ""; display: inline-block; width: 8px; height: 8px; border-radius: 4px; background: #0969da; margin-right: 6px; }
    .body { color: #59636e; font-size: 13px; margin-top: 2px; }
    time { display: block; color: #8c959f; font-size: 12px; margin-top: 2px; }
    li.empty, li.error { cursor: default; }
    li.empty:hover, li.error:hover { background: none; }
    .empty { padding: 16px 12px; color: #59636e; }
    .error { padding: 16px 12px; color: #d1242f; }
    header .tools { display: flex; gap: 8px; align-items: center; }
    button.settings { font-size: 16px; line-height: 1; padding: 2px 4px; border-radius: 4px; color: #59636e; }
    button.settings[aria-pressed="true"] { background: #f0f2f4; }
    button:focus-visible, input:focus-visible { outline: 2px solid #0969da; outline-offset: 2px; }
    .prefs[hidden] { display: none; }
    .prefs fieldset { border: 0; border-bottom: 1px solid #eaeef2; margin: 0; padding: 8px 12px; }
    .prefs legend { font-weight: 600; padding: 0; }
    .prefs .desc { color: #59636e; font-size: 13px; margin: 2px 0 4px; }
    .prefs label { display: flex; gap: 6px; align-items: center; padding: 2px 0; }
    .prefs .status { padding: 6px 12px; color: #59636e; font-size: 12px; min-height: 1em; }
    .push { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; padding: 8px 12px; border-top: 1px solid #eaeef2; font-size: 13px; }
    .push[hidden], .push button[hidden] { display: none; }
    .push button { border: 1px solid #d0d7de; border-radius: 6px; background: #f6f8fa; cursor: pointer; font: inherit; padding: 4px 8px; }
    .push .push-status { color: #59636e; }
    .push .push-status.failed { color: #d1242f; }
  `;

  // A base64url VAPID key as the bytes `applicationServerKey` takes
  // (browsers that accept the string do not all).
  const keyBytes = (b64url) => {
    const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((b64url.length + 3) % 4);
    return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  };

  // The registration's worker once it is active: a subscription needs one,
  // and a worker just registered is still installing.
  const activeWorker = (reg) => new Promise((ok, fail) => {
    if (reg.active) { ok(reg); return; }
    const w = reg.installing || reg.waiting;
    if (!w) { fail(new Error("the service worker did not install")); return; }
    const timer = setTimeout(() => fail(new Error("the service worker did not activate within 10 s")), 10000);
    w.addEventListener("statechange", () => {
      if (w.state === "activated") { clearTimeout(timer); ok(reg); }
      if (w.state === "redundant") { clearTimeout(timer); fail(new Error("the service worker failed to install")); }
    });
  });

  // "5 min ago" in the page's language; the exact time is the tooltip.
  const relative = (iso) => {
    const then = Date.parse(iso);
    if (Number.isNaN(then)) return "";
    const s = Math.round((then - Date.now()) / 1000);
    const fmt = new Intl.RelativeTimeFormat(document.documentElement.lang || navigator.language || "en", { numeric: "auto" });
    for (const [unit, size] of [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]]) {
      if (Math.abs(s) >= size) return fmt.format(Math.round(s / size), unit);
    }
    return fmt.format(0, "second");
  };

  class HeraldInbox extends HTMLElement {
    static get observedAttributes() { return ["api", "token"]; }

    constructor() {
      super();
      this.items = [];
      this.root = this.attachShadow({ mode: "open" });
      this.root.innerHTML = `<style>${STYLE}</style>
        <button class="bell" part="bell" aria-label="Notifications" aria-haspopup="true" aria-expanded="false">
          <svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" aria-hidden="true">
            <path d="M18 8a6 6 0 0 0-12 0c0 7-3 9-3 9h18s-3-2-3-9"/><path d="M13.7 21a2 2 0 0 1-3.4 0"/></svg>
          <span class="badge" part="badge" hidden>0</span>
        </button>
        <div class="panel" part="panel" role="dialog" aria-label="Notifications" hidden>
          <header><span class="heading">Notifications</span><span class="tools"><button class="read-all" type="button">Mark all read</button>
            <button class="settings" type="button" aria-label="Notification settings" aria-pressed="false" title="Notification settings">⚙</button></span></header>
          <ul></ul>
          <form class="prefs" aria-label="Notification settings" hidden></form>
          <div class="push" part="push" hidden><button class="push-on" type="button">Turn on notifications</button>
            <span class="push-status" role="status"></span></div>
        </div>`;
      this.bell = this.root.querySelector(".bell");
      this.badge = this.root.querySelector(".badge");
      this.panel = this.root.querySelector(".panel");
      this.list = this.root.querySelector("ul");
      this.readAll = this.root.querySelector(".read-all");
      this.settings = this.root.querySelector(".settings");
      this.prefs = this.root.querySelector(".prefs");
      this.heading = this.root.querySelector(".heading");
      this.push = this.root.querySelector(".push");
      this.pushOn = this.root.querySelector(".push-on");
      this.pushStatus = this.root.querySelector(".push-status");
      this.pushOn.addEventListener("click", () => this.turnOnPush());
      this.settings.addEventListener("click", () => this.showPreferences(this.prefs.hidden));
      this.prefs.addEventListener("submit", (e) => e.preventDefault());
      this.bell.addEventListener("click", () => this.toggle());
      this.list.innerHTML = `<li class="empty">Loading…</li>`;
      this.readAll.addEventListener("click", () => this.post("/v1/inbox/read-all").then(() => {
        this.items.forEach((m) => { m.read_at = m.read_at || new Date().toISOString(); });
        this.render();
      }));
    }

    connectedCallback() { this.schedule(); }
    disconnectedCallback() { this.stop(); }
    attributeChangedCallback() { if (this.isConnected) this.schedule(); }

    // One start for the attributes and the connection that arrive together
    // (an element upgraded in place reports each attribute, then connects).
    schedule() {
      if (this.pending) return;
      this.pending = true;
      queueMicrotask(() => { this.pending = false; this.start(); });
    }

    get api() { return (this.getAttribute("api") || "").replace(/\/$/, ""); }
    get token() { return this.getAttribute("token") || ""; }
    get swPath() { return this.getAttribute("sw-path") || "/push-sw.js"; }

    async request(path, method = "GET", body) {
      const headers = { Authorization: `Bearer ${this.token}` };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      const resp = await fetch(this.api + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      if (!resp.ok) {
        const err = new Error(`${method} ${path}: ${resp.status}`);
        err.status = resp.status;
        // The server's own words (a problem+json `detail`, and for a 422
        // each field's message), for what is shown to the user.
        const problem = await resp.json().catch(() => null);
        if (problem && typeof problem.detail === "string") {
          const fields = Array.isArray(problem.errors) ? problem.errors.map((f) => `${f.field}: ${f.message}`) : [];
          err.detail = [problem.detail, ...fields].join("; ");
        }
        throw err;
      }
      return resp.status === 204 ? null : resp.json();
    }
    post(path) { return this.request(path, "POST"); }

    async start() {
      this.stop();
      this.failure = null;
      if (!this.api || !this.token) return;
      const generation = this.generation = (this.generation || 0) + 1;
      try {
        const page = await this.request("/v1/inbox?limit=20");
        const counts = await this.request("/v1/inbox/count");
        if (generation !== this.generation) return; // a newer token took over
        this.items = page.items;
        this.setCount(counts.unseen);
        this.render();
      } catch (e) {
        if (generation !== this.generation) return;
        // A refused token will be refused again: say so once, and do not open
        // a stream that would only be refused too. A fresh `token` attribute
        // starts over.
        this.fail(e.status === 401 || e.status === 403 ? "auth" : "unreachable", e);
        if (this.failure === "auth") return;
      }
      this.source = new EventSource(`${this.api}/v1/inbox/stream?token=${encodeURIComponent(this.token)}`);
      this.source.addEventListener("open", () => { if (this.failure) { this.failure = null; this.render(); } });
      this.source.addEventListener("count", (e) => this.setCount(JSON.parse(e.data).unseen));
      this.source.addEventListener("message", (e) => {
        const item = JSON.parse(e.data);
        if (!this.items.some((m) => m.id === item.id)) this.items.unshift(item);
        this.render();
        this.dispatchEvent(new CustomEvent("herald-message", { detail: item, bubbles: true }));
      });
      // The browser reconnects by itself after a dropped connection; it gives
      // up (CLOSED) only when the server refuses, e.g. a token that expired
      // since the page loaded.
      this.source.addEventListener("error", () => {
        if (this.source && this.source.readyState === EventSource.CLOSED) {
          this.stop();
          this.fail("auth", new Error("the inbox stream was refused"));
        }
      });
    }

    stop() { if (this.source) { this.source.close(); this.source = null; } }

    // The preferences view, in place of the list (or back to the list).
    async showPreferences(open) {
      this.prefs.hidden = !open;
      this.list.hidden = open;
      this.readAll.hidden = open || Boolean(this.failure) || !this.items.some((m) => !m.read_at);
      this.settings.setAttribute("aria-pressed", String(open));
      this.heading.textContent = open ? "Notification settings" : "Notifications";
      if (!open) { this.settings.focus(); return; }
      this.prefs.replaceChildren();
      const status = document.createElement("div");
      status.className = "status";
      status.setAttribute("role", "status");
      status.textContent = "Loading…";
      this.prefs.append(status);
      let center;
      try {
        center = await this.request("/v1/inbox/preferences");
      } catch (e) {
        status.textContent = "Your settings cannot be loaded right now.";
        return;
      }
      // Servers before topic mutes sent no `topics`.
      const topics = center.topics || [];
      status.textContent = center.categories.length || topics.length ? "" : "There is nothing to choose yet.";
      let first = null;
      for (const c of center.categories) {
        const set = document.createElement("fieldset");
        const legend = document.createElement("legend");
        legend.textContent = c.name; // text, never HTML
        set.append(legend);
        if (c.description) {
          const d = document.createElement("div");
          d.className = "desc";
          d.textContent = c.description;
          set.append(d);
        }
        for (const ch of c.channels) {
          const label = document.createElement("label");
          const box = document.createElement("input");
          box.type = "checkbox";
          box.name = `${c.category}:${ch.channel}`;
          box.checked = ch.enabled;
          box.disabled = c.locked;
          box.addEventListener("change", () =>
            this.saveChoice(box, { categories: { [c.category]: { [ch.channel]: box.checked } } }, status));
          // The channel as a person reads it ("Email"); servers before
          // issue 27 sent only the key.
          label.append(box, document.createTextNode(` ${ch.name || ch.channel}${c.locked ? " (always sent)" : ""}`));
          set.append(label);
          if (!first && !box.disabled) first = box;
        }
        this.prefs.insertBefore(set, status);
      }
      if (topics.length) {
        const set = document.createElement("fieldset");
        const legend = document.createElement("legend");
        legend.textContent = "Topics you follow";
        set.append(legend);
        for (const t of topics) {
          const label = document.createElement("label");
          const box = document.createElement("input");
          box.type = "checkbox";
          box.name = `topic:${t.topic}`;
          box.checked = !t.muted;
          box.addEventListener("change", () => this.saveChoice(box, { topics: { [t.topic]: box.checked } }, status));
          // Text, never HTML: the name is the host's.
          label.append(box, document.createTextNode(` Notify me about ${t.name ? `${t.name} (${t.topic})` : t.topic}`));
          set.append(label);
          if (!first) first = box;
        }
        this.prefs.insertBefore(set, status);
      }
      if (first) first.focus();
    }

    // Saves one checkbox of the preferences view; when the server refuses
    // or cannot be reached, the box goes back to how it was.
    async saveChoice(box, change, status) {
      status.textContent = "Saving…";
      try {
        await this.request("/v1/inbox/preferences", "PUT", change);
        status.textContent = "Saved.";
      } catch (e) {
        box.checked = !box.checked;
        status.textContent = "Your change could not be saved.";
      }
    }

    // Shows "Turn on notifications" when push can work here: the browser has
    // service workers, Push and notifications, the page is not opted out,
    // and there is a key (the `push-key` attribute, or Herald's, which is a
    // 404 while Web Push is not set up: then nothing is shown). Asked once
    // per key, when the panel first opens, not on every page load.
    async offerPush() {
      const supported = "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
      if (!supported || this.getAttribute("push") === "off" || !this.api) { this.push.hidden = true; return; }
      if (this.pushChecked === (this.getAttribute("push-key") || this.api)) return;
      this.pushChecked = this.getAttribute("push-key") || this.api;
      try {
        this.vapidKey = this.getAttribute("push-key") ||
          (await fetch(`${this.api}/v1/push/vapid-public-key`).then((r) => (r.ok ? r.json() : null)))?.public_key;
      } catch (e) {
        this.vapidKey = null;
      }
      if (!this.vapidKey) { this.push.hidden = true; return; }
      this.push.hidden = false;
      if (Notification.permission === "denied") {
        this.showPush("Notifications are blocked for this site in the browser's settings.", false, true);
        return;
      }
      const reg = await navigator.serviceWorker.getRegistration(this.swPath).catch(() => null);
      const sub = reg && await reg.pushManager.getSubscription().catch(() => null);
      if (sub && Notification.permission === "granted") this.showPush("Notifications are on for this browser.", false, true);
      else this.showPush("", false, false);
    }

    showPush(text, failed, hideButton) {
      this.pushStatus.textContent = text;
      this.pushStatus.classList.toggle("failed", failed);
      this.pushOn.hidden = hideButton;
    }

    // Permission, service worker, subscription, registration with Herald;
    // each step's failure is said in the panel and in a `herald-push`
    // event (detail: { on: false, step, message }), or `{ on: true }`.
    async turnOnPush() {
      this.pushOn.disabled = true;
      this.showPush("Turning notifications on…", false, false);
      let step = "permission";
      let sub = null;
      try {
        if (await Notification.requestPermission() !== "granted") {
          throw Object.assign(new Error("Notifications were not allowed in this browser."), { shown: true });
        }
        step = "service worker";
        const reg = await activeWorker(await navigator.serviceWorker.register(this.swPath));
        step = "subscribe";
        sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(this.vapidKey) });
        step = "register";
        await this.request("/v1/inbox/push-subscriptions", "POST", sub.toJSON());
        this.showPush("Notifications are on for this browser.", false, true);
        this.dispatchEvent(new CustomEvent("herald-push", { detail: { on: true }, bubbles: true }));
      } catch (e) {
        // A subscription Herald did not take is dropped, so the browser does
        // not claim to be on, and the next try starts clean.
        if (sub && step === "register") await sub.unsubscribe().catch(() => {});
        const message = e.shown ? e.message : `Notifications could not be turned on: ${e.detail || e.message || e}`;
        this.showPush(message, true, false);
        this.dispatchEvent(new CustomEvent("herald-push", { detail: { on: false, step, message }, bubbles: true }));
      } finally {
        this.pushOn.disabled = false;
      }
    }

    // Shows what went wrong in the panel and tells the page (`herald-error`,
    // detail: { reason: "auth" | "unreachable", status, message }), so it can
    // fetch a fresh token and set it on the `token` attribute.
    fail(reason, e) {
      this.failure = reason;
      this.setCount(0);
      this.render();
      this.dispatchEvent(new CustomEvent("herald-error", {
        detail: { reason, status: e.status ?? null, message: String(e.message || e) },
        bubbles: true,
      }));
    }

    setCount(n) {
      this.badge.textContent = n > 99 ? "99+" : String(n);
      this.badge.hidden = n === 0;
      this.bell.setAttribute("aria-label", n ? `Notifications, ${n} new` : "Notifications");
    }

    toggle() {
      const open = this.panel.hidden;
      this.panel.hidden = !open;
      this.bell.setAttribute("aria-expanded", String(open));
      this.place(open);
      if (open) this.render(); // fresh relative times
      if (open) this.offerPush();
      // Opening the list is seeing what is in it.
      if (open && !this.failure) this.items.filter((m) => !m.seen_at).forEach((m) => {
        m.seen_at = new Date().toISOString();
        this.post(`/v1/inbox/${encodeURIComponent(m.id)}/seen`).catch(() => {});
      });
    }

    // Keeps the open panel inside the viewport wherever the bell sits. It
    // hangs under the bell, aligned with the bell's right edge when there is
    // room on the left (a bell at the top right, the usual place) and pushed
    // right as far as needed otherwise, 8 px from either edge. A fixed
    // `right: 0` anchor (the first version) opened it off-screen for a bell
    // at the left of a page, as in the README's own example; a CSS-only
    // rule cannot know where on the page the bell is. Placed again when the
    // window is resized while it is open.
    place(open) {
      if (!open) {
        if (this.onResize) window.removeEventListener("resize", this.onResize);
        this.onResize = null;
        return;
      }
      const margin = 8;
      const viewport = document.documentElement.clientWidth || window.innerWidth;
      const width = Math.min(340, viewport - 2 * margin);
      const bell = this.bell.getBoundingClientRect();
      const left = Math.max(margin, Math.min(bell.right - width, viewport - margin - width));
      this.panel.style.width = `${width}px`;
      this.panel.style.left = `${left - this.getBoundingClientRect().left}px`;
      if (!this.onResize) {
        this.onResize = () => this.place(!this.panel.hidden);
        window.addEventListener("resize", this.onResize);
      }
    }

    render() {
      this.list.replaceChildren();
      this.readAll.hidden = Boolean(this.failure) || !this.items.some((m) => !m.read_at);
      const note = (cls, text) => {
        const li = document.createElement("li");
        li.className = cls;
        li.textContent = text;
        if (cls === "error") li.setAttribute("role", "alert");
        this.list.append(li);
      };
      if (this.failure === "auth") {
        note("error", "Your notifications could not be loaded: your session has expired. Reload the page to see them.");
        return;
      }
      if (this.failure === "unreachable") {
        note("error", "Notifications cannot be reached right now; they will appear when the connection is back.");
        return;
      }
      if (!this.items.length) {
        note("empty", "Nothing here yet.");
        return;
      }
      for (const m of this.items) {
        const li = document.createElement("li");
        li.className = m.read_at ? "read" : "unread";
        const title = document.createElement("div");
        title.className = "title";
        title.textContent = m.title; // text, never HTML: messages carry user data
        li.append(title);
        if (m.body) {
          const body = document.createElement("div");
          body.className = "body";
          body.textContent = m.body;
          li.append(body);
        }
        if (m.created_at) {
          const time = document.createElement("time");
          time.dateTime = m.created_at;
          time.title = new Date(m.created_at).toLocaleString();
          time.textContent = relative(m.created_at);
          li.append(time);
        }
        li.addEventListener("click", async () => {
          if (!m.read_at) { m.read_at = new Date().toISOString(); this.render(); await this.post(`/v1/inbox/${encodeURIComponent(m.id)}/read`).catch(() => {}); }
          if (m.url && /^https?:\/\//.test(m.url)) window.location.href = m.url;
        });
        this.list.append(li);
      }
    }
  }

  customElements.define("herald-inbox", HeraldInbox);
})();
