"""The account pages at {auth_url}/account/ (contract sections 7, 16 and 21): the profile and the
password (/account/), the live sessions (/account/sessions), recent security activity
(/account/activity), leaving (/account/delete), and
"Connected apps" (/account/apps), whose revocation asks for confirmation first (a second page, no
JavaScript). Every form is a POST with its XSRF token; each answer is a 303 back to its page with a
notice, or the page again with the error beside its field and what the user typed (passwords aside)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from lbauth.clock import iso
from lbauth.core import scopes
from lbauth.core.accounts.accounts import MAX_BIO, MAX_NAME, MAX_TAG, MAX_TAGS, ProfileChanges
from lbauth.core.audit import Outcome, describe_agent
from lbauth.core.audit.log import DEFAULT_PAGE, describe
from lbauth.errors import AuthorizationNotFound, LoginFailed, PasswordWeak, ValidationFailed
from lbauth.handlers.account_json import listed_session_json, profile_json
from lbauth.handlers.pages import SESSION_COOKIE, PageHandler, signed_in

ACCOUNT, SESSIONS, DELETE, ACTIVITY = "/account/", "/account/sessions", "/account/delete", "/account/activity"

# The profile's fields on the page (named as in the core), and what to say beside each when the core
# refuses it (ValidationFailed.field; its messages name the API's fields, not the form's).
PROFILE_HELP = {
    "name": f"Enter a name of 1 to {MAX_NAME} characters.",
    "avatar": "Enter a web address starting with https:// (at most 2048 characters), or leave it empty.",
    "bio": f"Keep your bio under {MAX_BIO} characters.",
    "interest_tags": f"Enter at most {MAX_TAGS} tags, separated by commas, each at most {MAX_TAG} characters.",
}
SAVED_NOTICES = ("profile", "password", "signup", "verification", "email")
PASSWORDS_DIFFER = "The two new passwords are not the same. Type the new password twice."


def readable_time(ts: int) -> str:
    """A time as people read it: "17 March 2030, 10:04 UTC"."""
    when = datetime.fromtimestamp(ts, UTC)
    return f"{when.day} {when:%B %Y, %H:%M} UTC"


def count_argument(value: str | None) -> int | None:
    """A count carried in a notice's query string (`?ended=2`), or None for anything else."""
    return int(value) if value and value.isascii() and value.isdigit() and len(value) < 7 else None


# ---- profile and password ------------------------------------------------------------------------------

class AccountForms(PageHandler):
    """The account page's two forms: shown by /account/, and again by each form's POST it refuses."""

    def show(self, status: int = 200, *, typed: dict[str, str] | None = None, errors: dict[str, str] | None = None,
             saved: str | None = None, ended: int | None = None) -> None:
        profile = profile_json(self.user)
        values = {"name": profile["name"], "avatar": profile["avatar"], "bio": profile["bio"],
                  "interest_tags": ", ".join(profile["interestTags"])}
        self.render_page("account.html", status=status, active_page="profile", profile=profile,
                         values={**values, **(typed or {})}, errors=errors or {},
                         saved=saved if saved in SAVED_NOTICES else None, ended=ended,
                         mail=self.services.settings.mail_enabled)


class AccountPage(AccountForms):
    """GET /account/: the profile form and the change-password form."""

    @signed_in
    async def get(self) -> None:
        self.show(saved=self.get_query_argument("saved", None),
                  ended=count_argument(self.get_query_argument("ended", None)))


class ProfileForm(AccountForms):
    """POST /account/profile: save the profile (the fields the form sent), then back to /account/."""

    @signed_in(next_url=ACCOUNT, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        typed = {name: form[name] for name in PROFILE_HELP if name in form}
        changes = ProfileChanges(**typed)
        if "interest_tags" in typed:
            changes["interest_tags"] = [tag.strip() for tag in typed["interest_tags"].split(",") if tag.strip()]
        try:
            await self.services.accounts.update_profile(self.user, changes)
        except ValidationFailed as exc:
            field = exc.field if exc.field in PROFILE_HELP else None
            self.show(400, typed=typed, errors={field: PROFILE_HELP[field]} if field else {"profile": exc.message})
            return
        self.redirect(ACCOUNT + "?saved=profile", status=303)


class PasswordForm(AccountForms):
    """POST /account/password: the current password, the new one twice; every other session ends."""

    @signed_in(next_url=ACCOUNT, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        current, new = form.get("current_password", ""), form.get("new_password", "")
        if new != form.get("confirm_password", ""):
            self.show(400, errors={"confirm_password": PASSWORDS_DIFFER})
            return
        self.limit_login(self.user.email)
        try:
            ended = await self.services.accounts.change_password(self.session, current, new, self.source())
        except LoginFailed as exc:
            self.show(401, errors={"current_password": exc.message})
            return
        except (PasswordWeak, ValidationFailed) as exc:
            self.show(400, errors={"new_password": exc.message})
            return
        self.redirect(f"{ACCOUNT}?saved=password&ended={ended}", status=303)


# ---- sessions ----------------------------------------------------------------------------------------------

class SessionsPage(PageHandler):
    """GET /account/sessions: every live session of the user, this browser's marked."""

    @signed_in
    async def get(self) -> None:
        listed = await self.services.accounts.sessions.listed(self.user.id, self.session.session.id)
        listed.sort(key=lambda item: not item.current)  # this browser first, then the most recently used
        items = [{**listed_session_json(item), "device": describe_agent(item.session.user_agent)} for item in listed]
        ended = self.get_query_argument("ended", None)
        self.render_page("sessions.html", active_page="sessions", items=items,
                         ended=ended if ended in ("one", "others") else None,
                         count=count_argument(self.get_query_argument("count", None)))


class EndSessionForm(PageHandler):
    """POST /account/sessions/{sessionId}/end: end one of the user's sessions (another user's is
    auth.session.not_found, as if there were none). Ending this browser's own signs it out."""

    @signed_in(next_url=SESSIONS, status=401)
    async def post(self, session_id: str, form: dict[str, Any]) -> None:
        await self.services.accounts.sessions.end(self.user.id, session_id, source=self.source(),
                                                  own=session_id == self.session.session.id)
        if session_id == self.session.session.id:
            self.clear_cookie(SESSION_COOKIE)
            self.redirect("/login", status=303)
            return
        self.redirect(SESSIONS + "?ended=one", status=303)


class EndOtherSessionsForm(PageHandler):
    """POST /account/sessions/end-others: end every session of the user but this browser's."""

    @signed_in(next_url=SESSIONS, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        ended = await self.services.accounts.sessions.end_others(self.user.id, self.session.session.id,
                                                                 source=self.source())
        self.redirect(f"{SESSIONS}?ended=others&count={ended}", status=303)


# ---- recent activity -------------------------------------------------------------------------------------

class ActivityPage(PageHandler):
    """GET /account/activity[?cursor=...]: the user's audit events (contract 21), newest first, a
    page at a time, each in words ("Signed in from Chrome on Linux, 127.0.0.1") with its time."""

    @signed_in
    async def get(self) -> None:
        page = await self.services.audit.activity(self.user.id, self.get_query_argument("cursor", None), DEFAULT_PAGE)
        items = [{"id": event.event_id, "text": describe(event), "when": readable_time(event.occurred_at),
                  "occurredAt": iso(event.occurred_at),
                  "failed": event.outcome == Outcome.FAILURE} for event in page.events]
        older = f"{ACTIVITY}?{urlencode({'cursor': page.next_cursor})}" if page.next_cursor else None
        self.render_page("activity.html", active_page="activity", items=items, older=older,
                         first_page=self.get_query_argument("cursor", None) is None)


# ---- leaving ---------------------------------------------------------------------------------------------

class DeleteAccountPage(PageHandler):
    """GET /account/delete: what deleting does, and the password to confirm it. POST (with the
    password): delete (contract 16), sign this browser out, and say it is done."""

    @signed_in
    async def get(self) -> None:
        await self.show()

    @signed_in(next_url=DELETE, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        self.limit_login(self.user.email)
        try:
            result = await self.services.accounts.delete_own(self.session, form.get("password", ""))
        except LoginFailed as exc:
            await self.show(401, error=exc.message)
            return
        self.clear_cookie(SESSION_COOKIE)
        self.user, self.session = None, None
        self.render_page("account_deleted.html", revoked=result.revoked_authorizations)

    async def show(self, status: int = 200, error: str | None = None) -> None:
        apps = await self.services.oauth.authorizations(self.user.id)
        self.render_page("confirm_delete.html", status=status, active_page="delete", apps=apps, error=error)


# ---- connected apps ------------------------------------------------------------------------------------

class ConnectedAppsPage(PageHandler):
    @signed_in
    async def get(self) -> None:
        items = await self.services.oauth.authorizations(self.user.id)
        self.render_page("connected_apps.html", active_page="apps", items=items, meanings=scopes.SCOPES,
                         revoked=self.get_query_argument("revoked", None))


class RevokeAppPage(PageHandler):
    """GET: "Revoke access for X?" POST (with XSRF): revoke, then back to the list."""

    @signed_in
    async def get(self, client_id: str) -> None:
        items = await self.services.oauth.authorizations(self.user.id)
        item = next((i for i in items if i.client_id == client_id), None)
        if item is None:
            raise AuthorizationNotFound()
        self.render_page("confirm_revoke.html", active_page="apps", item=item, meanings=scopes.SCOPES)

    @signed_in(next_url="/account/apps", status=401)
    async def post(self, client_id: str, form: dict[str, Any]) -> None:
        await self.services.oauth.revoke_authorization(self.user.id, client_id, self.source())
        self.redirect("/account/apps?" + urlencode({"revoked": client_id}), status=303)
