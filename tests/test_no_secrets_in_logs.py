"""Every log line of a full flow, captured at DEBUG level from every logger, holds no token, code,
client secret, webhook secret, session cookie or password; nor does any error body."""

from __future__ import annotations

import io
import json
import logging

from lbauth import logs
from tests.flow_helpers import (
    PageSession,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    redirect_query,
    refresh,
)


async def test_full_flow_logs_no_secret(server, caplog):
    caplog.set_level(logging.DEBUG)
    formatted = io.StringIO()
    handler = logs.setup("DEBUG", stream=formatted)  # the production pipeline, too
    try:
        setup = await full_setup(server, webhook_url="https://hooks.example/lbauth")
        browser = PageSession(server)
        consent = await browser.open_logged_in(oauth_url(front_params(setup.client_id, setup.redirect_uri)),
                                               setup.user["email"], setup.user["password"])
        landing = await browser.decide(consent, "approve")
        code = redirect_query(landing.location, setup.redirect_uri)["code"][0]
        tokens = (await exchange(server, code, setup.redirect_uri, setup.client_id, setup.client_secret)).data
        again = await exchange(server, code, setup.redirect_uri, setup.client_id, setup.client_secret)
        await refresh(server, tokens["refreshToken"], setup.client_id, setup.client_secret)
        await server.client.get("/api/auth/me", bearer=tokens["accessToken"])
        bad_login = await server.client.post("/api/auth/login",
                                             json={"email": setup.user["email"], "password": "typo-password"})
        wrong_secret = await exchange(server, code, setup.redirect_uri, setup.client_id, "lba_cs_guess")
        # A token pasted into a path by mistake: the access log keeps the path, not the token.
        pasted = await server.client.get(f"/api/auth/{tokens['refreshToken']}")
        assert pasted.status == 404
    finally:
        logging.getLogger().removeHandler(handler)

    secrets = [setup.user["password"], "typo-password", setup.token, setup.client_secret,
               setup.app["webhookSecret"], code, tokens["accessToken"], tokens["refreshToken"], "lba_cs_guess",
               *(cookie.value for cookie in browser.cookies.values())]
    raw = "\n".join(r.getMessage() + json.dumps(getattr(r, "fields", {})) + (r.exc_text or "")
                    for r in caplog.records)
    assert "/api/oauth/token/code" in raw  # the access log saw the flow
    bodies = [again.text, bad_login.text, wrong_secret.text]
    for secret in secrets:
        assert secret not in raw, "a secret reached a log record"
        assert secret not in formatted.getvalue()
        for body in bodies:
            assert secret not in body
