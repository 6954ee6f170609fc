"""Reading the revocation feed (contract section 7) into a check-list."""

from __future__ import annotations

import urllib.parse
from datetime import datetime

from lbauth.verify.checklist import CheckList, Entry
from lbauth.verify.discovery import fetch_json


def _epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def poll_feed(feed_uri: str, checklist: CheckList, timeout: float) -> None:
    """Add the feed's entries since the check-list's cursor, page after page until it is caught up
    (an empty page, or one that says to wait: `pollAfter` > 0)."""
    while True:
        url = feed_uri
        if checklist.cursor:
            url += "?" + urllib.parse.urlencode({"since": checklist.cursor})
        document = fetch_json(url, timeout)
        data = document.get("data", document)
        entries = [Entry(0, item.get("grantId"), item.get("jti"), _epoch(item["revokedAt"]),
                         _epoch(item["expiresAt"])) for item in data.get("items", [])]
        checklist.add(entries)
        checklist.cursor = data.get("cursor") or checklist.cursor
        if not entries or data.get("pollAfter", 1) > 0:
            return
