// Herald's push service worker. Copy this file to your own site (a service
// worker must come from the page's own origin), e.g. as /push-sw.js, and
// give its path to the widget (`sw-path`, default /push-sw.js). Herald
// serves the current version at /widget/push-sw.js.
//
// Each push carries Herald's JSON payload {"id", "title", "body", "url",
// "data"}. The notification's tag is the message's id, so a message that is
// delivered again (a retry after a lost answer) replaces its first copy
// instead of showing twice. A click opens `url` (http and https only, so a
// message cannot run script through a javascript: link) and closes the
// notification.
/* eslint-env serviceworker */

// The message a push carries, or a plain one when the payload is not
// Herald's (a push sent by hand while testing).
function heraldMessage(event) {
  let m = null;
  try { m = event.data ? event.data.json() : null; } catch (e) { m = null; }
  if (!m || typeof m !== "object" || typeof m.title !== "string") {
    return { id: "", title: event.data ? event.data.text() : "New notification", body: "", url: null, data: null };
  }
  return m;
}

// `url` when it is an absolute http(s) URL, else null.
function safeUrl(url) {
  if (typeof url !== "string") return null;
  try {
    const u = new URL(url, self.location.origin);
    return u.protocol === "https:" || u.protocol === "http:" ? u.href : null;
  } catch (e) {
    return null;
  }
}

self.addEventListener("push", (event) => {
  const m = heraldMessage(event);
  const options = {
    body: typeof m.body === "string" ? m.body : "",
    data: { id: m.id || null, url: safeUrl(m.url), data: m.data === undefined ? null : m.data },
  };
  if (m.id) {
    options.tag = String(m.id);
    // A replacement of an earlier copy is not news: do not alert twice.
    options.renotify = false;
  }
  event.waitUntil(self.registration.showNotification(m.title, options));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const url = safeUrl(event.notification.data && event.notification.data.url);
  if (!url) return;
  event.waitUntil((async () => {
    // A tab already on that page is brought forward rather than a second one opened.
    const open = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    const same = open.find((c) => c.url === url);
    if (same && "focus" in same) return same.focus();
    return self.clients.openWindow(url);
  })());
});
