// Herald inbox widget: <herald-inbox api="https://herald.example.com" token="…">
//
// A bell with an unseen badge and a list of the user's messages, kept live by
// the inbox stream. Served by Herald at /widget/inbox.js; no other assets, no
// dependencies. The token is a per-user inbox token (POST /v1/users/{id}/token
// from your backend); set a fresh one on the `token` attribute before it
// expires and the widget reconnects.
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
    .panel { position: absolute; right: 0; top: 100%; width: min(340px, 90vw); max-height: 420px; overflow: auto;
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
    .empty { padding: 16px 12px; color: #59636e; }
  `;

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
          <header><span>Notifications</span><button class="read-all" type="button">Mark all read</button></header>
          <ul></ul>
        </div>`;
      this.bell = this.root.querySelector(".bell");
      this.badge = this.root.querySelector(".badge");
      this.panel = this.root.querySelector(".panel");
      this.list = this.root.querySelector("ul");
      this.bell.addEventListener("click", () => this.toggle());
      this.root.querySelector(".read-all").addEventListener("click", () => this.post("/v1/inbox/read-all").then(() => {
        this.items.forEach((m) => { m.read_at = m.read_at || new Date().toISOString(); });
        this.render();
      }));
    }

    connectedCallback() { this.start(); }
    disconnectedCallback() { this.stop(); }
    attributeChangedCallback() { if (this.isConnected) this.start(); }

    get api() { return (this.getAttribute("api") || "").replace(/\/$/, ""); }
    get token() { return this.getAttribute("token") || ""; }

    async request(path, method = "GET") {
      const resp = await fetch(this.api + path, { method, headers: { Authorization: `Bearer ${this.token}` } });
      if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status}`);
      return resp.json();
    }
    post(path) { return this.request(path, "POST"); }

    async start() {
      this.stop();
      if (!this.api || !this.token) return;
      try {
        const page = await this.request("/v1/inbox?limit=20");
        this.items = page.items;
        const counts = await this.request("/v1/inbox/count");
        this.setCount(counts.unseen);
        this.render();
      } catch (e) {
        this.dispatchEvent(new CustomEvent("herald-error", { detail: String(e) }));
      }
      this.source = new EventSource(`${this.api}/v1/inbox/stream?token=${encodeURIComponent(this.token)}`);
      this.source.addEventListener("count", (e) => this.setCount(JSON.parse(e.data).unseen));
      this.source.addEventListener("message", (e) => {
        const item = JSON.parse(e.data);
        if (!this.items.some((m) => m.id === item.id)) this.items.unshift(item);
        this.render();
        this.dispatchEvent(new CustomEvent("herald-message", { detail: item }));
      });
    }

    stop() { if (this.source) { this.source.close(); this.source = null; } }

    setCount(n) {
      this.badge.textContent = n > 99 ? "99+" : String(n);
      this.badge.hidden = n === 0;
      this.bell.setAttribute("aria-label", n ? `Notifications, ${n} new` : "Notifications");
    }

    toggle() {
      const open = this.panel.hidden;
      this.panel.hidden = !open;
      this.bell.setAttribute("aria-expanded", String(open));
      // Opening the list is seeing what is in it.
      if (open) this.items.filter((m) => !m.seen_at).forEach((m) => {
        m.seen_at = new Date().toISOString();
        this.post(`/v1/inbox/${encodeURIComponent(m.id)}/seen`).catch(() => {});
      });
    }

    render() {
      this.list.replaceChildren();
      if (!this.items.length) {
        const empty = document.createElement("li");
        empty.className = "empty";
        empty.textContent = "Nothing here yet.";
        this.list.append(empty);
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
