"""A User-Agent header in words ("Chrome on Linux", "Safari on iPhone", "curl"), for the activity and
sessions pages: people recognise their devices by these, not by the raw header. Written here, with no
dependency: a few substrings decide, in an order that handles the headers that name several browsers
(Chrome's says "Safari", Edge's says "Chrome")."""

from __future__ import annotations

import re

UNKNOWN = "Unknown browser"

# (substring, name): the first that occurs names the browser.
_BROWSERS = (
    ("Edg/", "Edge"), ("EdgA/", "Edge"), ("EdgiOS/", "Edge"),
    ("OPR/", "Opera"), ("Opera", "Opera"),
    ("SamsungBrowser/", "Samsung Internet"),
    ("Firefox/", "Firefox"), ("FxiOS/", "Firefox"),
    ("CriOS/", "Chrome"), ("HeadlessChrome/", "Chrome"), ("Chromium/", "Chromium"), ("Chrome/", "Chrome"),
    ("Version/", "Safari"),  # Safari's own header; any other browser's was matched above
    ("Trident/", "Internet Explorer"), ("MSIE ", "Internet Explorer"),
)
# (substring, name): the first that occurs names the system. iOS headers say "like Mac OS X", and
# Android's say "Linux": they come first.
_SYSTEMS = (
    ("iPhone", "iPhone"), ("iPad", "iPad"), ("Android", "Android"), ("Windows", "Windows"), ("CrOS", "ChromeOS"),
    ("Macintosh", "macOS"), ("Mac OS X", "macOS"), ("Linux", "Linux"), ("FreeBSD", "FreeBSD"),
)
# Programs that name themselves first ("curl/8.5.0"), by that name, as people know them.
_PROGRAMS = {
    "curl": "curl", "wget": "Wget", "httpie": "HTTPie", "python-requests": "Python requests",
    "python-httpx": "Python httpx", "python-urllib": "Python", "aiohttp": "Python aiohttp",
    "go-http-client": "Go", "okhttp": "OkHttp", "axios": "axios", "node-fetch": "Node.js", "node": "Node.js",
    "undici": "Node.js", "postmanruntime": "Postman", "java-http-client": "Java",
}
_PRODUCT = re.compile(r"([A-Za-z][A-Za-z0-9._+\-]{0,39})(?:/|\s|$)")


def describe_agent(user_agent: str | None) -> str:
    """"Chrome on Linux", "Firefox on macOS", "Safari on iPhone", "curl", "Unknown browser"."""
    agent = (user_agent or "").strip()
    if not agent:
        return UNKNOWN
    if not agent.startswith("Mozilla/"):
        product = _PRODUCT.match(agent)
        if product is None:
            return UNKNOWN
        name = product.group(1)
        return _PROGRAMS.get(name.lower(), name)
    browser = next((name for marker, name in _BROWSERS if marker in agent), None)
    system = next((name for marker, name in _SYSTEMS if marker in agent), None)
    if browser is None:
        return f"{UNKNOWN} on {system}" if system else UNKNOWN
    return f"{browser} on {system}" if system else browser
