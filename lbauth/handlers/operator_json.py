"""The JSON shapes of the operator's records (contract sections 2, 10 and 18): what `lbauth apps`,
`lbauth webhooks` and `lbauth mail` print, and what the console shows. One function per shape; no
secret but the ones just made, shown this once; times in ISO 8601 UTC (contract 3)."""

from __future__ import annotations

from typing import Any

from lbauth.clock import iso
from lbauth.core.clients.apps import CreatedApp
from lbauth.storage.records import App, ClientMetadata, MailMessage, WebhookAttempt, WebhookEvent


def app_json(app: App) -> dict[str, Any]:
    """An app as `apps show/list/update` and the console show it: no secret, ever."""
    return {"appId": app.id, "clientId": app.client_id, "name": app.name, "owner": app.owner_email,
            "redirectUris": list(app.redirect_uris), "scopes": list(app.scopes), "webhookUrl": app.webhook_url,
            "webhookEnabled": app.webhook_disabled_at is None, "idTokenAlg": app.id_token_alg,
            "postLogoutRedirectUris": list(app.post_logout_redirect_uris),
            "tokenEndpointAuthMethod": app.token_endpoint_auth_method,
            "requirePushedAuthorizationRequests": app.requires_pushed_requests,
            "dpopBoundAccessTokens": app.requires_dpop, "grantTypes": ClientMetadata.of(app).grant_types,
            "createdAt": iso(app.created_at), "updatedAt": iso(app.updated_at)}


def created_app_json(created: CreatedApp) -> dict[str, Any]:
    """`apps create`: both secrets, shown this once (`clientSecret` null for a public client)."""
    return {"appId": created.app_id, "clientId": created.client_id, "clientSecret": created.client_secret,
            "webhookSecret": created.webhook_secret, "redirectUris": list(created.redirect_uris),
            "scopes": list(created.scopes), "webhookUrl": created.webhook_url}


def client_secret_json(client_id: str, secret: str) -> dict[str, Any]:
    """`apps rotate-secret`: the new client secret, shown this once."""
    return {"clientId": client_id, "clientSecret": secret}


def webhook_secret_json(client_id: str, secret: str) -> dict[str, Any]:
    """`apps rotate-webhook-secret`: the new webhook secret, shown this once."""
    return {"clientId": client_id, "webhookSecret": secret}


def event_json(event: WebhookEvent, *, with_error: bool = False) -> dict[str, Any]:
    """A webhook event as `webhooks list` and the console show it; `with_error` adds `lastError`,
    why the last attempt failed (or why none was made), for people reading them."""
    shown = {"eventId": event.id, "appId": event.app_id, "clientId": event.client_id, "eventType": event.event_type,
             "reason": event.reason, "status": event.status, "attempts": event.attempts,
             "lastStatus": event.last_status, "nextAttemptAt": iso(event.next_attempt_at),
             "createdAt": iso(event.created_at)}
    return {**shown, "lastError": event.last_error} if with_error else shown


def attempt_json(attempt: WebhookAttempt) -> dict[str, Any]:
    """One delivery attempt of an event, on the console."""
    return {"attemptedAt": iso(attempt.attempted_at), "status": attempt.status, "latencyMs": attempt.latency_ms,
            "error": attempt.error}


def mail_json(message: MailMessage) -> dict[str, Any]:
    """A message as `lbauth mail list` shows it. `lastError` never holds the letter (nor its link)."""
    return {"messageId": message.id, "kind": message.kind, "recipient": message.recipient, "status": message.status,
            "attempts": message.attempts, "lastError": message.last_error,
            "nextAttemptAt": iso(message.next_attempt_at), "createdAt": iso(message.created_at),
            "sentAt": iso(message.sent_at)}
