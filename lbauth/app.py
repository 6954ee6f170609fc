"""The URL table: `make_app(services)` -> tornado.web.Application, and nothing else."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import tornado.web

from lbauth import logs, tracing
from lbauth.handlers import (
    account,
    account_pages,
    console,
    device_page,
    identity,
    oauth_api,
    oauth_rfc,
    oidc,
    ops,
    pages,
    passkey_pages,
    recovery_api,
    recovery_pages,
    registration,
    security,
    security_pages,
    wellknown,
)
from lbauth.handlers.authorize_page import AuthorizePage
from lbauth.handlers.base import NotFoundHandler
from lbauth.handlers.oidc_logout import LogoutEndpoint
from lbauth.services import Services

_access_log = logging.getLogger("lbauth.access")

ROUTES = [
    # API ({base_url}): the spec's endpoints and ours, enveloped
    (r"/api/auth/login", account.LoginHandler),
    (r"/api/auth/login/mfa", security.LoginMfaHandler),
    (r"/api/auth/logout", account.LogoutHandler),
    (r"/api/account", account.AccountHandler),
    (r"/api/account/profile", account.ProfileHandler),
    (r"/api/account/password", account.PasswordHandler),
    (r"/api/account/sessions", account.SessionsHandler),
    (r"/api/account/sessions/end-others", account.EndOtherSessionsHandler),
    (r"/api/account/sessions/([^/]+)", account.SessionHandler),
    (r"/api/account/activity", account.ActivityHandler),
    (r"/api/account/security", security.SecurityHandler),
    (r"/api/account/security/totp", security.TotpHandler),
    (r"/api/account/security/passkeys/([^/]+)", security.PasskeyHandler),
    (r"/api/account/security/totp/confirm", security.TotpConfirmHandler),
    (r"/api/account/security/recovery-codes", security.RecoveryCodesHandler),
    (r"/api/auth/signup", recovery_api.SignupHandler),
    (r"/api/auth/password/forgot", recovery_api.ForgotPasswordHandler),
    (r"/api/auth/password/reset", recovery_api.ResetPasswordHandler),
    (r"/api/account/email", recovery_api.ChangeEmailHandler),
    (r"/api/account/email/verify", recovery_api.VerifyEmailHandler),
    (r"/api/auth/authorizations", account.AuthorizationsHandler),
    (r"/api/auth/authorizations/([^/]+)", account.AuthorizationHandler),
    (r"/api/oauth/revocations", account.RevocationFeedHandler),
    (r"/api/auth/me", identity.MeHandler),
    (r"/api/service/user/info", identity.UserInfoHandler),
    (r"/api/oauth/authorize/external", oauth_api.AuthorizeExternalHandler),
    (r"/api/oauth/token/code", oauth_api.TokenCodeHandler),
    (r"/api/oauth/token/refresh", oauth_api.TokenRefreshHandler),
    # Standard clients (RFC shapes)
    (r"/oauth/token", oauth_rfc.OAuthTokenHandler),
    (r"/oauth/revoke", oauth_rfc.OAuthRevokeHandler),
    (r"/oauth/par", oauth_rfc.OAuthParHandler),
    (r"/oauth/device_authorization", oauth_rfc.OAuthDeviceAuthorizationHandler),
    (r"/oauth/introspect", oauth_rfc.OAuthIntrospectHandler),
    (r"/oauth/register", registration.RegisterHandler),
    (r"/oauth/register/([^/]+)", registration.ClientConfigurationHandler),
    (r"/.well-known/jwks.json", wellknown.JwksHandler),
    (r"/.well-known/oauth-authorization-server", wellknown.MetadataHandler),
    (r"/.well-known/oauth-authorization-server/(.+)", wellknown.IssuerPathMetadataHandler),
    (r"/.well-known/openid-configuration", wellknown.MetadataHandler),
    (r"/.well-known/openid-configuration/(.+)", wellknown.IssuerPathMetadataHandler),
    (r"/(.+)/\.well-known/openid-configuration", wellknown.IssuerPathMetadataHandler),
    (r"/oauth/userinfo", oidc.UserInfoEndpoint),
    # Pages ({auth_url})
    (r"/oauth/logout", LogoutEndpoint),
    (r"/oauth/?", AuthorizePage),
    (r"/device", device_page.DevicePage),
    (r"/", pages.HomePage),
    (r"/login", pages.LoginPage),
    (r"/login/mfa", pages.LoginMfaPage),
    (r"/login/passkey/options", passkey_pages.PasskeySignInOptions),
    (r"/login/passkey", passkey_pages.PasskeySignIn),
    (r"/login/mfa/passkey/options", passkey_pages.SecondStepOptions),
    (r"/login/mfa/passkey", passkey_pages.SecondStep),
    (r"/logout", pages.LogoutPage),
    (r"/account/?", account_pages.AccountPage),
    (r"/account/profile", account_pages.ProfileForm),
    (r"/account/password", account_pages.PasswordForm),
    (r"/account/sessions", account_pages.SessionsPage),
    (r"/account/sessions/end-others", account_pages.EndOtherSessionsForm),
    (r"/account/sessions/([^/]+)/end", account_pages.EndSessionForm),
    (r"/account/delete", account_pages.DeleteAccountPage),
    (r"/account/activity", account_pages.ActivityPage),
    (r"/account/security", security_pages.SecurityPage),
    (r"/account/security/totp", security_pages.TotpForm),
    (r"/account/security/totp/confirm", security_pages.TotpConfirmForm),
    (r"/account/security/totp/remove", security_pages.TotpRemoveForm),
    (r"/account/security/recovery-codes", security_pages.RecoveryCodesForm),
    (r"/account/security/passkeys/options", passkey_pages.AddPasskeyOptions),
    (r"/account/security/passkeys", passkey_pages.AddPasskey),
    (r"/account/security/passkeys/([^/]+)/remove", passkey_pages.RemovePasskeyForm),
    (r"/account/email", recovery_pages.ChangeEmailForm),
    (r"/account/email/verify", recovery_pages.VerifyEmailForm),
    (r"/signup", recovery_pages.SignupPage),
    (r"/signup/confirm", recovery_pages.SignupConfirmPage),
    (r"/password/forgot", recovery_pages.ForgotPasswordPage),
    (r"/password/reset", recovery_pages.ResetPasswordPage),
    (r"/email/verify", recovery_pages.VerifyEmailPage),
    (r"/email/confirm", recovery_pages.ConfirmEmailChangePage),
    (r"/account/apps", account_pages.ConnectedAppsPage),
    (r"/account/apps/([^/]+)/revoke", account_pages.RevokeAppPage),
    (r"/console/?", console.ConsoleHome),
    (r"/console/apps/new", console.NewAppPage),
    (r"/console/apps/([^/]+)", console.AppPage),
    # Operations
    (r"/healthz", ops.HealthHandler),
    (r"/readyz", ops.ReadyHandler),
    (r"/metrics", ops.MetricsHandler),
]
# The metrics' route label: the URL pattern that answered, not the path (which may hold ids).
_ROUTE_OF = {handler: pattern for pattern, handler in ROUTES}
_STATIC_ROUTE = r"/static/(.*)"  # Tornado's own route for static_path (a span's name; metrics say unmatched)


def make_app(services: Services) -> tornado.web.Application:
    deps = {"services": services}
    secure = urlsplit(services.settings.auth_url).scheme == "https"
    return tornado.web.Application(
        [tornado.web.url(path, handler, deps) for path, handler in ROUTES],
        default_handler_class=NotFoundHandler,
        default_handler_args=deps,
        log_function=_log_request,
        **cookie_settings(services),
        xsrf_cookie_kwargs={"httponly": True, "samesite": "Strict", "secure": secure},
        static_path=str(pages.resource_dir("static")),
        static_handler_class=pages.StaticFiles,
        templates=pages.make_templates(),
    )


def cookie_settings(services: Services) -> dict:
    """Signed cookies under every master key, signing with the first (see MasterKeys.versioned)."""
    secrets_by_version, version = services.master_keys.versioned("cookie signing")
    return {"cookie_secret": secrets_by_version, "key_version": version}


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """One access-log line per request (the path only, never the query string or the body), the
    request's metrics, and (tracing on) the end of its span."""
    request, status, seconds = handler.request, handler.get_status(), handler.request.request_time()
    # A credential pasted into a path (every one carries the `lba_` prefix) is not kept.
    path = logs.redact(request.path) if "lba_" in request.path else request.path
    logs.event(_access_log, "request", method=request.method, path=path, status=status,
               ms=round(seconds * 1000, 2), requestId=getattr(handler, "request_id", None))
    route = _ROUTE_OF.get(type(handler), "unmatched")
    services = getattr(handler, "services", None)
    if services is not None:
        services.metrics.observe_request(route, request.method, status, seconds)
    if tracing.active is not None:
        if route == "unmatched" and isinstance(handler, tornado.web.StaticFileHandler):
            route = _STATIC_ROUTE
        tracing.active.request_finished(request.connection, route, request.method or "GET", request.path, status,
                                        getattr(handler, "request_id", None))
