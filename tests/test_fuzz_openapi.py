"""Property-based fuzzing of every operation of docs/openapi.yaml with schemathesis (issue 8).

The real server runs as a child process (`python -m lbauth serve`, as in tests/processes.py), once on
SQLite and once on PostgreSQL; schemathesis's synchronous `requests` calls reach it over a loopback
port, so the test's event loop never has to serve them. Each operation gets positive and negative
cases (the document's examples, schemathesis's coverage cases, then generated ones) and every
response must:

- not be a 5xx;
- have a status code, content type, body schema and headers the document declares for it (and an
  `Allow` header on a 405).

So that the cases get past authentication into the handlers' logic, a user, its user token, a page
session (cookie + XSRF token), apps with their client credentials and a live grant are seeded over
the real interfaces (CLI and HTTP). The account operations that end sessions, change a password or
delete an account get fresh sessions, a second user or users made to be deleted, so that the
seeded credentials keep working. Each case is then sent in one of three ways, chosen from a hash
of its content (reproducible, like the derandomized generation): with real credentials (and real
ids, codes and tokens in place of generated ones), as generated (schemathesis's own garbage
credentials), or with no credentials at all, so that the error paths are fuzzed too. The first case
of each operation (with the operation's own method) always gets real credentials: an operation with
few cases could otherwise draw none. Every operation that takes a credential must have let some case
in (see `_got_past_authentication`), checked when the module's server stops.

Error bodies go to tests.client.ERROR_BODIES, which the suite-wide leak check scans.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.client import ERROR_BODIES
from tests.conftest import (
    BACKENDS,
    ROOT,
    TEST_ARGON2,
    _pg_admin,
    _pg_url,
    _run_apart,
    give_master_key,
    require_postgres,
    run_cli,
)
from tests.processes import free_port
from tests.support import basic_auth

pytestmark = pytest.mark.slow

# Generated cases per operation in the fuzzing phase (the examples and coverage phases add the document's
# examples and schemathesis's deterministic boundary cases). Bounded so the module stays under a minute
# per backend on a 2-core machine; raise LBAUTH_FUZZ_EXAMPLES locally to fuzz harder.
MAX_EXAMPLES = int(os.environ.get("LBAUTH_FUZZ_EXAMPLES", "12"))

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance, allow_header_conformance]

schema = schemathesis.openapi.from_path(str(ROOT / "docs" / "openapi.yaml"))
schema.config.phases.update(phases=["examples", "coverage", "fuzzing"])

PASSWORD = "correct horse battery"  # TestServer.create_user's default: the leak check knows it
REDIRECT_URI = "https://app.example/callback"
LOCAL_URI = "http://localhost:8123/callback"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"  # RFC 8628 3.4


# ---- the server and what is seeded in it ---------------------------------------------------------------

@dataclass
class Seeded:
    """A running server and real credentials for each security scheme of the document."""

    url: str
    http: requests.Session
    email: str
    user_token: str
    app: dict  # the main app: token endpoints, introspection, authorization
    spare: dict  # revoked, re-authorized and changed through the console by the fuzzing
    revocable: dict  # its tokens are revoked through /oauth/revoke
    access_token: str  # scope userinfo, of the main app's grant
    narrow_access_token: str  # scope chat.read only (user info answers 403)
    refresh_token: str
    openid_access_token: str  # scope openid profile email: UserInfo (contract 15)
    id_token: str  # the ID token of that grant: id_token_hint for RP-initiated logout
    session: str  # the pages' signed session cookie
    xsrf: str  # the `_xsrf` cookie value, which is also the form field
    log: Path
    other_email: str = ""  # a second user, whose sessions are ended and password changed (to itself)
    doomed: list[str] = field(default_factory=list)  # users that deleteAccount may delete, one each
    registration: dict = field(default_factory=dict)  # a dynamic registration (RFC 7591) to read
    statuses: dict[str, collections.Counter] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter))
    secured: set[str] = field(default_factory=set)  # the operations run that name a credential
    past_authentication: collections.Counter = field(default_factory=collections.Counter)  # their cases let in
    first_cases: dict[str, int] = field(default_factory=dict)  # operation -> its first case's digest (real)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.http.post(self.url + path, allow_redirects=False, timeout=20, **kwargs)

    def code(self, app: dict, redirect_uri: str = REDIRECT_URI, scope: tuple[str, ...] = ("userinfo",)) -> str:
        r = self.post("/api/oauth/authorize/external", headers={"Authorization": f"Bearer {self.user_token}"},
                      json={"clientId": app["clientId"], "redirectUri": redirect_uri, "scope": list(scope)})
        assert r.status_code == 200, r.text
        return r.json()["data"]["code"]

    def tokens(self, app: dict, scope: tuple[str, ...] = ("userinfo",)) -> dict:
        r = self.post("/oauth/token", data={
            "grant_type": "authorization_code", "code": self.code(app, scope=scope), "redirect_uri": REDIRECT_URI,
            "client_id": app["clientId"], "client_secret": app["clientSecret"]})
        assert r.status_code == 200, r.text
        return r.json()

    def device_authorization(self) -> dict:
        """A pending device authorization of the main app (RFC 8628): its device code and user code."""
        r = self.post("/oauth/device_authorization",
                      headers={"Authorization": basic_auth(self.app["clientId"], self.app["clientSecret"])})
        assert r.status_code == 200, r.text
        return r.json()

    def authorize_spare(self) -> None:
        """A live grant to revoke (the console fuzzing may have changed the app: then no grant)."""
        self.post("/api/oauth/authorize/external", headers={"Authorization": f"Bearer {self.user_token}"},
                  json={"clientId": self.spare["clientId"], "redirectUri": LOCAL_URI, "scope": ["userinfo"]})

    def register(self) -> dict:
        """A client registered through RFC 7591 (the fuzzing server runs with registration open)."""
        r = self.post("/oauth/register", json={"redirect_uris": [REDIRECT_URI], "client_name": "Fuzz Agent"})
        assert r.status_code == 201, r.text
        return r.json()

    def sign_in(self, email: str | None = None) -> str:
        """A fresh user token: a session of its own, for the operations that end one."""
        r = self.post("/api/auth/login", json={"email": email or self.email, "password": PASSWORD})
        assert r.status_code == 200, r.text
        return r.json()["data"]["token"]

    def session_id(self, token: str) -> str:
        """The id of the session a user token names (the `current` one of its list)."""
        r = self.http.get(self.url + "/api/account/sessions", headers={"Authorization": f"Bearer {token}"},
                          timeout=20)
        assert r.status_code == 200, r.text
        return next(s["sessionId"] for s in r.json()["data"]["items"] if s["current"])

    def page_session(self, email: str | None = None) -> tuple[str, str]:
        """Sign in through the login page: (session cookie, XSRF token)."""
        browser = requests.Session()
        try:
            page = browser.get(self.url + "/login", timeout=20)
            xsrf = page.cookies["_xsrf"]
            r = browser.post(self.url + "/login",
                             data={"_xsrf": xsrf, "email": email or self.email, "password": PASSWORD},
                             allow_redirects=False, timeout=20)
            assert r.status_code == 303, r.text
            return r.cookies["lbauth_session"], xsrf
        finally:
            browser.close()


def _cli(env: dict[str, str], *args: str) -> dict:
    result = run_cli(*args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _start(database_url: str, data_dir: Path) -> tuple[subprocess.Popen, str, Path, dict[str, str]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
    env.update(LBAUTH_DATABASE_URL=database_url, LBAUTH_DATA_DIR=str(data_dir), LBAUTH_PORT=str(port),
               LBAUTH_ENV="development", LBAUTH_RATE_LIMITS="off", LBAUTH_LOG_LEVEL="WARNING",
               LBAUTH_ARGON2=TEST_ARGON2)
    log = data_dir / f"server-{port}.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lbauth", "serve"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if requests.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url, log, env
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("server did not become healthy")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module", params=BACKENDS)
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One server per backend for the whole module, seeded once."""
    tmp = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    pg_name = None
    if request.param == "sqlite":
        shutil.copyfile(request.getfixturevalue("sqlite_template"), tmp / "lbauth.db")
        database_url = f"sqlite+aiosqlite:///{tmp / 'lbauth.db'}"
    else:
        template = request.getfixturevalue("pg_template")
        require_postgres(template)
        pg_name = f"lbauth_f_{secrets.token_hex(6)}"
        _run_apart(_pg_admin([f'CREATE DATABASE "{pg_name}" TEMPLATE "{template.name}"']))
        database_url = _pg_url(pg_name)
    give_master_key(tmp / "data")  # the one that opens the template's ID-token key
    proc, url, log, env = _start(database_url, tmp / "data")
    http = requests.Session()
    try:
        email = f"fuzz-{secrets.token_hex(4)}@example.com"
        _cli(env, "users", "create", "--email", email, "--name", "Fuzz User", "--password", PASSWORD,
             "--interest-tag", "fuzz")
        other_email, doomed = f"other-{email}", [f"doomed{i}-{email}" for i in range(2)]
        for extra in (other_email, *doomed):
            _cli(env, "users", "create", "--email", extra, "--name", "Fuzz Other", "--password", PASSWORD)
        apps = [_cli(env, "apps", "create", "--name", name, "--owner", email, "--redirect-uri", REDIRECT_URI,
                     "--device") for name in ("Fuzz App", "Spare App", "Revocable App")]
        r = http.post(url + "/api/auth/login", json={"email": email, "password": PASSWORD}, timeout=20)
        assert r.status_code == 200, r.text
        seeded = Seeded(url=url, http=http, email=email, user_token=r.json()["data"]["token"], app=apps[0],
                        spare=apps[1], revocable=apps[2], access_token="", narrow_access_token="",
                        refresh_token="", openid_access_token="", id_token="", session="", xsrf="", log=log,
                        other_email=other_email, doomed=doomed)
        main = seeded.tokens(seeded.app)
        seeded.access_token, seeded.refresh_token = main["access_token"], main["refresh_token"]
        seeded.narrow_access_token = seeded.tokens(seeded.app, scope=("chat.read",))["access_token"]
        openid = seeded.tokens(seeded.app, scope=("openid", "profile", "email"))
        seeded.openid_access_token, seeded.id_token = openid["access_token"], openid["id_token"]
        seeded.session, seeded.xsrf = seeded.page_session()
        seeded.registration = seeded.register()
        yield seeded
        print(f"\n{request.param}: the server's log (tracebacks of any 5xx): {log}")
        print(f"{request.param}: statuses per operation (run with -s to see them):")
        for label, statuses in sorted(seeded.statuses.items()):
            let_in = f", {seeded.past_authentication[label]} past authentication" if label in seeded.secured else ""
            print(f"  {label}: {sum(statuses.values())} cases, {dict(sorted(statuses.items()))}{let_in}")
        # The credentials seeded above are what gets cases into the handlers' logic: every operation
        # that takes one must have let some case in, or its fuzzing only ever met the front door.
        shut_out = {label: dict(seeded.statuses[label]) for label in sorted(seeded.secured)
                    if not seeded.past_authentication[label]}
        assert not shut_out, f"{request.param}: no case got past authentication: {shut_out}"
    finally:
        http.close()
        _stop(proc)
        if pg_name:
            _run_apart(_pg_admin([f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)']))


# ---- credentials for one case ----------------------------------------------------------------------------

REAL, GENERATED, NONE = "real", "as generated", "none"


def _mode(case: schemathesis.Case, seeded: Seeded) -> tuple[str, int]:
    """How this case authenticates, from a hash of its content: half real, a quarter as generated,
    a quarter with nothing. The hash's other bits pick among real variants. The operation's first
    case with its own method is real, and so is that same content sent again (a replay)."""
    digest = zlib.crc32(repr((case.operation.label, case.path_parameters, dict(case.headers or {}),
                              case.cookies, case.query, case.body)).encode("utf-8", "backslashreplace"))
    if case.method.upper() == case.operation.method.upper() and \
            seeded.first_cases.setdefault(case.operation.label, digest) == digest:
        return REAL, digest >> 2
    return (REAL, REAL, GENERATED, NONE)[digest % 4], digest >> 2


def _with_header(case: schemathesis.Case, name: str, value: str | None) -> None:
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != name.lower()}
    if value is not None:
        headers[name] = value
    case.headers = headers


def _with_cookies(case: schemathesis.Case, **cookies: str | None) -> None:
    jar = {k: v for k, v in (case.cookies or {}).items() if k not in cookies}
    jar.update({k: v for k, v in cookies.items() if v is not None})
    case.cookies = jar


def _with_fields(case: schemathesis.Case, **fields: Any) -> None:
    """Set form or JSON fields, when the body is an object (a negative case may send anything)."""
    if isinstance(case.body, dict):
        case.body = {**case.body, **fields}


def _client_auth(case: schemathesis.Case, app: dict, variant: int) -> None:
    """client_secret_basic or client_secret_post (RFC 6749 2.3.1), one of them."""
    if variant % 2:
        _with_header(case, "Authorization", basic_auth(app['clientId'], app['clientSecret']))
        if isinstance(case.body, dict):
            case.body = {k: v for k, v in case.body.items() if k not in ("client_id", "client_secret")}
    else:
        _with_header(case, "Authorization", None)
        _with_fields(case, client_id=app["clientId"], client_secret=app["clientSecret"])


def _page(case: schemathesis.Case, seeded: Seeded, session: str | None = None, xsrf: str | None = None) -> None:
    """A signed-in browser: the session cookie, and the XSRF cookie and field on a form post."""
    xsrf = xsrf or seeded.xsrf
    _with_cookies(case, lbauth_session=session or seeded.session, _xsrf=xsrf)
    if case.method.upper() == "POST":
        _with_fields(case, _xsrf=xsrf)


def authenticate(case: schemathesis.Case, seeded: Seeded) -> str:
    mode, variant = _mode(case, seeded)
    if mode == NONE:
        _with_header(case, "Authorization", None)
        _with_cookies(case, lbauth_session=None)
    if mode != REAL:
        return mode
    bearer = f"Bearer {seeded.user_token}"
    app = seeded.app
    match case.operation.definition.raw.get("operationId"):
        case "login" | "loginSubmit":
            _with_fields(case, email=seeded.email, password=PASSWORD)
            if case.operation.definition.raw["operationId"] == "loginSubmit":
                # A browser session of its own: signing in again ends the session the cookie names,
                # and with the seeded one every later page would only show the sign-in form.
                _page(case, seeded, *seeded.page_session())
        case ("listAuthorizations" | "listSessions" | "getProfile" | "updateProfile" | "getSecurity" | "enrolTotp"
              | "confirmTotp" | "removeTotp" | "regenerateRecoveryCodes" | "removePasskey" | "accountActivity"):
            _with_header(case, "Authorization", bearer)
        case "apiLogout":
            _with_header(case, "Authorization", f"Bearer {seeded.sign_in()}")  # logging out ends it
        case "endSession":
            _with_header(case, "Authorization", bearer)
            case.path_parameters = {"sessionId": seeded.session_id(seeded.sign_in())}
        case "endOtherSessions":  # the other user's: the seeded sessions stay
            _with_header(case, "Authorization", f"Bearer {seeded.sign_in(seeded.other_email)}")
        case "changePassword":  # the other user's, changed to the same password, or refused
            _with_header(case, "Authorization", f"Bearer {seeded.sign_in(seeded.other_email)}")
            if variant % 3:
                _with_fields(case, currentPassword=PASSWORD, newPassword=PASSWORD if variant % 3 == 1 else "short")
            elif isinstance(case.body, dict) and case.body.get("currentPassword") == PASSWORD:
                _with_fields(case, newPassword=PASSWORD)
        case "deleteAccount":
            if variant % 2 and seeded.doomed and isinstance(case.body, dict):
                email = seeded.doomed.pop()
                _with_header(case, "Authorization", f"Bearer {seeded.sign_in(email)}")
                _with_fields(case, password=PASSWORD)
            else:  # the seeded user, with the generated password: refused
                _with_header(case, "Authorization", bearer)
                if isinstance(case.body, dict) and case.body.get("password") == PASSWORD:
                    _with_fields(case, password="not the password")  # a case seen before, sent again
        case "revokeAuthorization":
            seeded.authorize_spare()
            _with_header(case, "Authorization", bearer)
            case.path_parameters = {"clientId": seeded.spare["clientId"]}
        case "me":
            _with_header(case, "Authorization", f"Bearer {seeded.access_token}")
        case "userInfo":
            token = seeded.narrow_access_token if variant % 3 == 0 else seeded.access_token
            _with_header(case, "Authorization", f"Bearer {token}")
        case "oidcUserInfo" | "oidcUserInfoPost":  # now and then a token without openid (403)
            token = seeded.access_token if variant % 3 == 0 else seeded.openid_access_token
            if variant % 2 and isinstance(case.body, dict) and case.method.upper() == "POST":
                _with_header(case, "Authorization", None)
                _with_fields(case, access_token=token)
            else:
                _with_header(case, "Authorization", f"Bearer {token}")
        case "rpLogout" | "rpLogoutPost":
            _page(case, seeded, *seeded.page_session())  # a session of its own: logging out ends it
            if case.method.upper() == "POST" and variant % 2:
                _with_fields(case, confirm="1")  # lbauth's own confirmation form
            fields = {"client_id": app["clientId"]}
            if variant % 3 == 0:
                fields["id_token_hint"] = seeded.id_token
            if case.method.upper() == "POST":
                _with_fields(case, **fields)
            else:
                case.query = {**(case.query or {}), **fields}
        case "authorizeExternal":
            _with_header(case, "Authorization", bearer)
            _with_fields(case, clientId=app["clientId"], redirectUri=REDIRECT_URI)
        case "exchangeCode":
            _with_fields(case, code=seeded.code(app), redirect_uri=REDIRECT_URI, client_id=app["clientId"],
                         client_secret=app["clientSecret"])
        case "refreshTokens":
            _with_fields(case, refresh_token=seeded.refresh_token, client_id=app["clientId"],
                         client_secret=app["clientSecret"])
        case "oauthToken":
            if isinstance(case.body, dict) and case.body.get("grant_type") == "refresh_token":
                _with_fields(case, refresh_token=seeded.refresh_token)
            elif isinstance(case.body, dict) and case.body.get("grant_type") == DEVICE_GRANT:
                _with_fields(case, device_code=seeded.device_authorization()["device_code"])
            else:
                _with_fields(case, code=seeded.code(app), redirect_uri=REDIRECT_URI)
            _client_auth(case, app, variant)
        case "oauthRevoke":
            tokens = seeded.tokens(seeded.revocable)
            _with_fields(case, token=tokens["refresh_token" if variant % 4 < 2 else "access_token"])
            _client_auth(case, seeded.revocable, variant >> 2)
        case "oauthDeviceAuthorization":
            _client_auth(case, app, variant)
        case "oauthIntrospect":
            _with_fields(case, token=seeded.refresh_token if variant % 4 < 2 else seeded.access_token)
            _client_auth(case, app, variant >> 2)
        case "authorizePage":
            _page(case, seeded)
            case.query = {**(case.query or {}), "client_id": app["clientId"], "redirect_uri": REDIRECT_URI}
        case "authorizeDecision":
            _page(case, seeded)
            _with_fields(case, client_id=app["clientId"], redirect_uri=REDIRECT_URI)
        case "logout":
            _page(case, seeded, *seeded.page_session())  # a session of its own: logging out revokes it
        case "revokeAppSubmit":
            seeded.authorize_spare()
            _page(case, seeded)
            case.path_parameters = {"clientId": seeded.spare["clientId"]}
        case "revokeAppConfirmPage" | "consoleAppPage" | "consoleAppAction":
            _page(case, seeded)
            case.path_parameters = {"clientId": seeded.spare["clientId"]}
        case "consoleCreateApp":
            _page(case, seeded)
            if variant % 2:  # a valid app, now and then
                _with_fields(case, name="Fuzzed App", redirect_uris=REDIRECT_URI)
        case "loginPage" | "connectedAppsPage" | "consoleHome" | "consoleNewAppForm" | "devicePage":
            _page(case, seeded)
        case "deviceSubmit":  # a pending request's code, now and then: the consent page, or its answer
            _page(case, seeded)
            if variant % 2:
                _with_fields(case, user_code=seeded.device_authorization()["user_code"])
        case "accountPage" | "sessionsPage" | "activityPage" | "deleteAccountPage" | "profileSubmit":
            _page(case, seeded)
        case ("securityPage" | "totpEnrolSubmit" | "totpConfirmSubmit" | "totpRemoveSubmit"
              | "recoveryCodesSubmit" | "passkeyRemoveSubmit"):  # generated codes are wrong: the seeded user
            _page(case, seeded)                                   # never gets a second factor
        case ("passkeyAddOptions" | "passkeyAdd" | "passkeySignInOptions" | "passkeySignIn"
              | "passkeySecondStepOptions" | "passkeySecondStep"):  # a page's script: the XSRF token in a header
            _page(case, seeded)
            _with_header(case, "X-XSRFToken", seeded.xsrf)
        case "passwordSubmit" | "deleteAccountSubmit" | "endSessionSubmit":  # generated passwords and ids are wrong
            _page(case, seeded, *seeded.page_session())
        case "endOtherSessionsSubmit":  # the other user's browser: the seeded sessions stay
            _page(case, seeded, *seeded.page_session(seeded.other_email))
        case "registerClient":
            if variant % 2:  # a valid registration, now and then
                _with_fields(case, redirect_uris=[REDIRECT_URI])
        case "readRegistration" | "deleteRegistration":  # a deletion deletes one made for it
            registration = seeded.registration if case.operation.definition.raw["operationId"] == \
                "readRegistration" else seeded.register()
            _with_header(case, "Authorization", f"Bearer {registration['registration_access_token']}")
            case.path_parameters = {"clientId": registration["client_id"]}
        case "changeEmail":  # a link to the new address, now and then; the email changes only if it is followed
            _with_header(case, "Authorization", bearer)
            if variant % 2:
                _with_fields(case, password=PASSWORD)
        case "requestEmailVerification":
            _with_header(case, "Authorization", bearer)
        case "changeEmailSubmit" | "emailVerificationSubmit" | "signupSubmit" | "forgotPasswordSubmit" | \
                "resetPasswordSubmit":
            _page(case, seeded)
        case "staticFile":
            case.path_parameters = {"file": "lbauth.css"}
    return mode


SIGNED_IN = b'action="/logout"'  # templates/base.html: the header's sign-out form, shown to a signed-in user


def _takes_credentials(case: schemathesis.Case) -> bool:
    """The document names a credential for the operation (a `security` requirement that is not `{}`)."""
    return any(case.operation.definition.raw.get("security") or [])


def _got_past_authentication(case: schemathesis.Case, response: requests.Response) -> bool:
    """Let in: not a 405 (refused before any check); behind the session cookie, a redirect or a page
    for a signed-in user (a visitor gets the sign-in form, with a 200 or a 401, and a page's 401 may
    also be a wrong password); behind any other credential, not a 401."""
    if response.status_code == 405:
        return False
    if any("sessionCookie" in requirement for requirement in case.operation.definition.raw["security"]):
        if response.content.startswith(b'{"code":'):  # a page's script call: the JSON envelope
            return response.status_code not in (401, 403)
        return 300 <= response.status_code < 400 or SIGNED_IN in response.content
    return response.status_code != 401


# ---- the test ----------------------------------------------------------------------------------------------

@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_response_is_documented_and_none_is_a_server_error(case: schemathesis.Case, fuzzed: Seeded) -> None:
    authenticate(case, fuzzed)
    response = case.call(base_url=fuzzed.url, timeout=20)
    fuzzed.statuses[case.operation.label][response.status_code] += 1
    if _takes_credentials(case):
        fuzzed.secured.add(case.operation.label)
        if _got_past_authentication(case, response):
            fuzzed.past_authentication[case.operation.label] += 1
    if response.status_code >= 400:
        ERROR_BODIES.append(response.content or b"")
    case.validate_response(response, checks=CHECKS)
