// Compiled with `tsc --strict` against the types openapi-typescript made
// from the served document (issue 27): posting a trigger with a payload and
// reading `data.url` from an inbox item must type-check. A bare
// `type: object` in the document became `Record<string, never>`, and
// neither compiled. When HERALD_URL, HERALD_KEY and HERALD_USER_TOKEN are
// set, it also runs against that server.
import type { components, paths } from "./schema";

type TriggerInput = components["schemas"]["TriggerInput"];
type Accepted = paths["/v1/triggers"]["post"]["responses"]["202"]["content"]["application/json"];
type InboxPage = paths["/v1/inbox"]["get"]["responses"]["200"]["content"]["application/json"];
type InboxItem = components["schemas"]["InboxItem"];

export function trigger(userId: string, url: string): TriggerInput {
  return { type: "interop.export_ready", user_id: userId, payload: { name: "q4", url } };
}

export function linkOf(item: InboxItem): string | undefined {
  const url = item.data?.url;
  return typeof url === "string" ? url : undefined;
}

async function main(base: string, key: string, userToken: string): Promise<void> {
  const sent = await fetch(`${base}/v1/triggers`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(trigger("interop-user", "https://app.example.com/exports/ts")),
  });
  const accepted = (await sent.json()) as Accepted;
  if (sent.status !== 202 || accepted.planned.length !== 1) throw new Error(`trigger: ${sent.status}`);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const resp = await fetch(`${base}/v1/inbox?filter=unread`, { headers: { authorization: `Bearer ${userToken}` } });
    const page = (await resp.json()) as InboxPage;
    const link = page.items.map(linkOf).find((u) => u === "https://app.example.com/exports/ts");
    if (link) {
      console.log(`typescript client: trigger ${accepted.trigger_id}, inbox data.url ${link}`);
      return;
    }
    if (Date.now() > deadline) throw new Error("the message did not reach the inbox within 30 s");
    await new Promise((r) => setTimeout(r, 200));
  }
}

declare const process: { env: Record<string, string | undefined>; exitCode?: number };
const { HERALD_URL, HERALD_KEY, HERALD_USER_TOKEN } = process.env;
if (HERALD_URL && HERALD_KEY && HERALD_USER_TOKEN) {
  main(HERALD_URL, HERALD_KEY, HERALD_USER_TOKEN).catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
