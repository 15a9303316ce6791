"""Drives a running `herald serve` through the Python client that
openapi-python-client generated from the served document (issue 27): a
rule, a trigger with a payload, the user's inbox with their token, the
message marked read. Every call goes through the generated functions and
models, so a document that does not describe the server fails here.

Usage: python3 flow.py BASE_URL API_KEY (with the generated package,
`herald_client`, on the path).
"""

import sys
import time

from herald_client import AuthenticatedClient
from herald_client.api.inbox import inbox_count, inbox_list, inbox_read
from herald_client.api.rules import rules_create
from herald_client.api.triggers import triggers_create
from herald_client.api.users import users_token
from herald_client.models import InboxPage, Problem, RuleInput, RuleView, TriggerAccepted, TriggerInput, UserToken

base, key = sys.argv[1], sys.argv[2]
api = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)


def ok(answer, kind):
    assert isinstance(answer, kind), f"expected {kind.__name__}, got {answer!r}"
    return answer


rule = ok(
    rules_create.sync(
        client=api,
        body=RuleInput.from_dict(
            {
                "name": "Export ready (interop)",
                "trigger_type": "interop.export_ready",
                "channel": "inbox",
                "category": "exports",
                "enabled": True,
                "template": {
                    "fallback_locale": "en",
                    "locales": {"en": {"subject": "Export {{ payload.name }} ready", "text": "Download it"}},
                },
            }
        ),
    ),
    RuleView,
)
accepted = ok(
    triggers_create.sync(
        client=api,
        body=TriggerInput.from_dict(
            {
                "type": "interop.export_ready",
                "user_id": "interop-user",
                "payload": {"name": "q4", "url": "https://app.example.com/exports/q4"},
            }
        ),
    ),
    TriggerAccepted,
)
assert len(accepted.planned) == 1, accepted
assert accepted.planned[0].rule_id == rule.id

token = ok(users_token.sync("interop-user", client=api), UserToken).token
user = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)

# The worker delivers it; the deadline only bounds a broken run.
deadline = time.monotonic() + 30
while True:
    page = ok(inbox_list.sync(client=user), InboxPage)
    if page.items:
        break
    assert time.monotonic() < deadline, "the message did not reach the inbox within 30 s"
    time.sleep(0.2)
item = page.items[0]
assert item.title == "Export q4 ready", item.title
assert item.data["url"] == "https://app.example.com/exports/q4", item.data
assert item.read_at is None

read = inbox_read.sync(item.id, client=user)
assert not isinstance(read, Problem), read
assert read.read_at, read
counts = inbox_count.sync(client=user)
assert counts.unread == 0, counts
print(f"python client: rule {rule.id}, trigger {accepted.trigger_id}, inbox item {item.id} read at {read.read_at}")
