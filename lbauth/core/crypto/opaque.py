"""Opaque credentials (contract section 6): prefixed random strings, stored only as SHA-256.

Codes `lba_ac_`, refresh tokens `lba_rt_`, user tokens `lba_ut_`, client secrets `lba_cs_`, and for
RFC 7591 registration initial access tokens `lba_iat_` and registration access tokens `lba_rat_`
(access tokens, `lba_at_` + a JWT, are lbauth.verify's), and the tokens of emailed links
carry 256 bits of randomness after the prefix. They are high-entropy, so a plain SHA-256 is the
right hash (a slow password hash would only cap the token endpoint).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

# Prefixes, not secrets.
CODE = "lba_ac_"
REFRESH_TOKEN = "lba_rt_"  # noqa: S105
USER_TOKEN = "lba_ut_"  # noqa: S105
CLIENT_SECRET = "lba_cs_"  # noqa: S105
WEBHOOK_SECRET = "lba_whs_"  # noqa: S105
INITIAL_ACCESS_TOKEN = "lba_iat_"  # noqa: S105 (RFC 7591 3: lets a client register)
REGISTRATION_ACCESS_TOKEN = "lba_rat_"  # noqa: S105 (RFC 7592 3: lets it read and delete its registration)
# The tokens of emailed links (contract 18): sign-up, email verification, email change, password reset.
SIGNUP_LINK = "lba_su_"
VERIFY_LINK = "lba_ev_"
EMAIL_CHANGE_LINK = "lba_ec_"
RESET_LINK = "lba_pr_"
# The pending second step of a sign-in (contract 19): 5 minutes, single use.
MFA_TOKEN = "lba_mt_"  # noqa: S105
# A WebAuthn ceremony's challenge (contract 19): 5 minutes, single use.
PASSKEY_CHALLENGE = "lba_pk_"
# A pushed authorization request's reference (RFC 9126 2.2), after its URN prefix: 60 s until first use.
PUSHED_REQUEST = "lba_ru_"
# A device code (RFC 8628 3.2): what the device polls the token endpoint with, for 10 minutes.
DEVICE_CODE = "lba_dc_"


def new_secret(prefix: str) -> str:
    """The prefix and 256 random bits in base64url (43 characters)."""
    return prefix + secrets.token_urlsafe(32)


def new_id(prefix: str) -> str:
    """A public identifier: unguessable, but not a credential (ids appear in logs and URLs)."""
    return prefix + secrets.token_hex(12)


def digest(value: str) -> str:
    """The stored form of an opaque credential."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def matches(value: str, stored_digest: str) -> bool:
    """Constant-time check of a presented credential against its stored digest."""
    return hmac.compare_digest(digest(value), stored_digest)


def has_prefix(value: str, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix) and len(value) > len(prefix)
