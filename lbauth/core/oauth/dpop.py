"""DPoP at the authorization server (RFC 9449): the proofs sent to the token endpoint (5) and with
a bound access token to UserInfo and `/api/auth/me` (7), checked with `lbauth.verify`'s proof check;
each proof's `jti` is used once across every process of the deployment, through the database
(11.1). No nonces are issued (8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core.crypto import opaque
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import ProvenKey
from lbauth.storage.repo import dpop as repo
from lbauth.verify import TokenError
from lbauth.verify.dpop import DPOP_ALGS, PROOF_WINDOW, DPoPError, Proof, check_proof, token_jkt

__all__ = ["DPOP_ALGS", "DPoPProofs", "Proof", "ProvenKey", "spend_in"]


REPLAYED = "This DPoP proof was used before: make a new one for every request."


class DPoPProofs:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    def at_token_endpoint(self, headers: Sequence[str], url: str) -> ProvenKey | None:
        """The key the proof of a request to the token endpoint (RFC 9449 5, 4.3) or the pushed
        authorization request endpoint (10.1) at `url` shows, None when it sent none; a bad proof
        is `invalid_dpop_proof` (400). Its single use is the caller's to record: in the grant's
        own unit of work (`spend_in`), or with `spend`."""
        if not headers:
            return None
        return self._checked(headers, "POST", url, errors.DPoPProofRefused)

    async def spend(self, key: ProvenKey) -> None:
        """Record the proof's single use in a unit of work of its own (RFC 9449 11.1)."""
        await self.db.transaction(spend_in, key, single_statement=True)

    async def for_access_token(self, claims: dict[str, Any], token: str, scheme: str, headers: Sequence[str],
                               method: str, url: str) -> None:
        """RFC 9449 7: a bound token (`cnf.jkt`) only with `Authorization: DPoP` and a proof of its
        key over this request, used once; an unbound one only as Bearer."""
        try:
            jkt = token_jkt(claims)
        except TokenError:  # a `cnf` of another kind: as good as no token here
            raise errors.TokenInvalid() from None
        if jkt is None:
            if scheme == "dpop":
                raise errors.TokenInvalid("This access token is not DPoP-bound: send it as a Bearer token.")
            return
        if scheme != "dpop":
            raise errors.DPoPBoundTokenAsBearer()
        key = self._checked(headers, method, url, errors.DPoPProofInvalid, access_token=token, jkt=jkt)
        try:
            await self.spend(key)
        except errors.DPoPProofRefused:
            raise errors.DPoPProofInvalid(REPLAYED) from None

    def _checked(self, headers: Sequence[str], method: str, url: str, error: type[errors.LbauthError],
                 **expected: Any) -> ProvenKey:
        if len(headers) != 1:
            raise error("Send exactly one DPoP header.")
        now = self.clock.now()
        try:
            proof = check_proof(headers[0], method=method, url=url, now=now, **expected)
        except DPoPError as exc:
            raise error(exc.message) from None
        return ProvenKey(proof.jkt, opaque.digest(f"{proof.jkt}.{proof.jti}"), int(now) + 2 * PROOF_WINDOW)


def spend_in(conn: Connection, key: ProvenKey) -> None:
    """Record the proof's single use in the caller's unit of work (RFC 9449 11.1), or refuse a
    proof any process recorded before."""
    try:
        repo.spend(conn, key)
    except Duplicate:
        raise errors.DPoPProofRefused(REPLAYED) from None
