"""Settings (contract section 1): command-line flags over `LBAUTH_*` environment variables over a
TOML file (`--config`) over defaults, validated once at start.

Every bad value raises `SettingsError` with one line that names the setting; the command line
prints that line and exits non-zero, never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SIGNING_ALGS = ("ES256", "RS256", "EdDSA")
ENVIRONMENTS = ("development", "production")
# argon2id's cost for new password hashes: (time cost, memory in KiB, parallelism); RFC 9106
# section 4's second recommended option (t=3, 64 MiB, p=4)
DEFAULT_ARGON2 = (3, 65536, 4)
# RFC 7591 dynamic registration (contract 17): anyone may register, only with an initial access
# token (`lbauth registration-tokens create`), or not at all.
REGISTRATION_MODES = ("open", "token", "off")
# Sign-up without an operator (contract 18): open in development, off in production by default.
SIGNUP_MODES = ("open", "off")
# Second factors (contract 19): optional, or required of every user before anything else.
MFA_MODES = ("optional", "required")
# Mail is read by a person waiting for it, its links live 30 minutes to a day: retried sooner than
# webhooks, then every 10 minutes, about 2 days in all.
DEFAULT_MAIL_RETRY_SCHEDULE = (10, 30, 60, 120, 300) + (600,) * 287
# About 3 days in all: 10 s, 1 min, 5 min, 30 min, 1 h, then every 3 h (contract section 10).
DEFAULT_RETRY_SCHEDULE = (10, 60, 300, 1800, 3600) + (10800,) * 23


class SettingsError(Exception):
    """A setting has a bad value; the message is one readable line naming it."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("./var")
    database_url: str = ""  # default derived from data_dir
    base_url: str = ""  # default derived from host and port
    auth_url: str = ""  # default: base_url
    issuer: str = ""  # default: base_url
    audience: str = ""  # default: base_url
    code_ttl: int = 300
    access_token_ttl: int = 7200
    refresh_token_ttl: int = 2_592_000
    user_token_ttl: int = 2_592_000
    id_token_ttl: int = 3600  # contract 15: LBAUTH_ID_TOKEN_TTL
    signing_alg: str = "ES256"
    master_key: str | None = None  # None: generated once into data_dir/master.key
    env: str = "production"
    workers: int = 1
    max_body_bytes: int = 1_048_576
    webhook_retry_schedule: tuple[int, ...] = DEFAULT_RETRY_SCHEDULE
    webhook_timeout: int = 10
    outbound_ca_file: Path | None = None  # contract 17: extra CAs trusted for outbound HTTPS
    # on (the defaults in lbauth/core/ratelimit.py), off, or overrides such as
    # "login-account=5/60,token-client=100/10" (requests/seconds; the others keep their defaults)
    rate_limits: bool | tuple[tuple[str, int, int], ...] = True
    metrics_token: str | None = None
    log_level: str = "INFO"
    registration: str = ""  # default: open in development, token in production
    argon2: tuple[int, int, int] = DEFAULT_ARGON2
    # Mail (contract 18): smtp:// (STARTTLS when offered) or smtps://; none: .eml files under the
    # data dir in development, no mail (so no sign-up or reset) in production.
    smtp_url: str | None = None
    smtp_password_file: Path | None = None
    mail_from: str = ""  # default: noreply@ the auth URL's host
    mail_retry_schedule: tuple[int, ...] = DEFAULT_MAIL_RETRY_SCHEDULE
    signup: str = ""  # default: open in development, off in production
    mfa: str = "optional"
    webauthn_rp_id: str = ""  # passkeys' relying party ID; default: the auth URL's host
    audit_retention_days: int = 400  # contract 21: audit events older than this are deleted
    # OpenTelemetry tracing (pip install 'lbauth[otel]'), configured by the standard OTEL_* variables
    otel: bool = False

    @property
    def longest_signed_ttl(self) -> int:
        """The longest a token a signing key signed can live: what a retiring key must outlast."""
        return max(self.access_token_ttl, self.id_token_ttl)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def development(self) -> bool:
        return self.env == "development"

    @property
    def mail_enabled(self) -> bool:
        """Mail can be sent: an SMTP server, or .eml files in development."""
        return bool(self.smtp_url) or self.development

    @property
    def signup_open(self) -> bool:
        return self.signup == "open" and self.mail_enabled

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


# ---- parsing of single values ------------------------------------------------------------------

def _integer(value: Any, requirement: str) -> int:
    """An int from TOML or a string from the environment or a flag; bools are not numbers."""
    if isinstance(value, bool):
        raise ValueError(requirement)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.lstrip("-").isdigit():
        raise ValueError(f"{requirement} (got {text!r})")
    return int(text)


def _whole_seconds(value: Any) -> int:
    n = _integer(value, "must be a whole number of seconds")
    if n <= 0:
        raise ValueError(f"must be a positive whole number of seconds (got {n})")
    return n


def _positive_int(value: Any) -> int:
    n = _integer(value, "must be a whole number")
    if n <= 0:
        raise ValueError(f"must be a positive whole number (got {n})")
    return n


def _port(value: Any) -> int:
    n = _integer(value, "must be a port number from 0 to 65535")
    if not 0 <= n <= 65535:
        raise ValueError(f"must be a port number from 0 to 65535 (got {n})")
    return n


def _code_ttl(value: Any) -> int:
    n = _whole_seconds(value)
    if n > 3600:
        raise ValueError(f"must be at most 3600 seconds; RFC 6749 4.1.2 asks for minutes (got {n})")
    return n


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip()
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)} (got {text!r})")
        return text
    return parse


RATE_LIMIT_KINDS = ("token-client", "token-address", "login-account", "login-address", "register-address",
                    "document-address", "document-host", "signup-address", "signup-account", "reset-address",
                    "reset-account", "mail-account", "mfa-account", "device-session", "device-address")
_RATE_LIMIT = re.compile(rf"({'|'.join(RATE_LIMIT_KINDS)})=(\d+)/(\d+)")


def _rate_limits(value: Any) -> bool | tuple[tuple[str, int, int], ...]:
    """on, off, or comma-separated `kind=requests/seconds` overrides (which turn limits on)."""
    if isinstance(value, bool | tuple):
        return value
    text = str(value).strip().lower()
    if "=" not in text:
        return _switch(text)
    overrides = []
    for part in text.split(","):
        match = _RATE_LIMIT.fullmatch(part.strip())
        if not match or int(match[2]) < 1 or int(match[3]) < 1:
            raise ValueError("must be on, off, or overrides like login-account=5/60,token-client=100/10 "
                             f"(kinds: {', '.join(RATE_LIMIT_KINDS)})")
        overrides.append((match[1], int(match[2]), int(match[3])))
    return tuple(overrides)


_ARGON2 = re.compile(r"t=(\d{1,6}),m=(\d{1,9}),p=(\d{1,3})")


def _argon2(value: Any) -> tuple[int, int, int]:
    """`t=TIME,m=MEMORY_KIB,p=PARALLELISM`: 1-100 passes, 1-64 lanes, 8 KiB per lane to 4 GiB."""
    if isinstance(value, tuple):
        return value
    match = _ARGON2.fullmatch(str(value).strip().replace(" ", ""))
    if match:
        time_cost, memory, lanes = (int(group) for group in match.groups())
        if 1 <= time_cost <= 100 and 1 <= lanes <= 64 and 8 * lanes <= memory <= 4 * 1024 * 1024:
            return time_cost, memory, lanes
    raise ValueError("must be t=PASSES,m=KIB,p=LANES with 1-100 passes, 1-64 lanes and 8 KiB per lane "
                     f"to 4194304 KiB of memory, like t=3,m=65536,p=4 (got {str(value)!r})")


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "true", "yes", "1"):
        return True
    if text in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"must be on or off (got {text!r})")


def _schedule(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    delays = tuple(_whole_seconds(item) for item in items if str(item).strip())
    if not delays:
        raise ValueError("must list at least one delay in seconds")
    return delays


def _shown(url: str) -> str:
    """`url` for an error message: a user-info part (which may hold a password) is not shown."""
    scheme, at, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{at}***@{netloc.rpartition('@')[2]}{slash}{path}" if "@" in netloc else url


def _url(value: Any) -> str:
    text = str(value).strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"must be an absolute http(s) URL without query or fragment (got {_shown(text)!r})")
    return text


def _issuer(value: Any) -> str:
    """The issuer is used byte for byte (contract 1): kept as given, checked by `_complete`."""
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


_DEFAULT_PORTS = {"http": 80, "https": 443}


def issuer_problem(issuer: str) -> str | None:
    """Why `issuer` is not a canonical issuer identifier (contract 1; RFC 8414 2, RFC 9207 2.4:
    clients compare it byte for byte), or None when it is."""
    parts = urlsplit(issuer)
    try:
        port = parts.port
    except ValueError:
        return "must be an absolute http(s) URL with a valid port"
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname:
        return "must be an absolute https URL (http in development)"
    host = parts.netloc.rpartition("@")[2]
    problems = [
        ("has a user-info part", "@" in parts.netloc),
        ("has an upper-case scheme", not issuer.startswith(parts.scheme + ":")),  # urlsplit lowercases it
        ("has an upper-case host", host != host.lower()),
        (f"names the default port {port}", port == _DEFAULT_PORTS[parts.scheme.lower()]),
        ("has an empty port", host.endswith(":")),
        ("has a query", "?" in issuer),
        ("has a fragment", "#" in issuer),
        ("ends with a slash", issuer.endswith("/")),
    ]
    found = [what for what, bad in problems if bad]
    if found:
        return (f"must be canonical: lowercase scheme and host, no default port, no query, no fragment, "
                f"no trailing slash ({_shown(issuer)!r} {', '.join(found)})")
    return None


def _database_url(value: Any) -> str:
    text = str(value).strip()
    scheme = text.split("://", 1)[0] if "://" in text else ""
    if scheme not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        shown = scheme or text.split(":", 1)[0]
        raise ValueError(
            "must start with sqlite+aiosqlite:/// or postgresql+asyncpg:// "
            f"(got a URL of scheme {shown!r})")
    rest = text.split("://", 1)[1]
    if scheme == "sqlite+aiosqlite" and not rest.startswith("/"):
        raise ValueError("a SQLite URL must name a file: sqlite+aiosqlite:///path/to/lbauth.db")
    if scheme == "postgresql+asyncpg" and not urlsplit(text).hostname:
        raise ValueError("a PostgreSQL URL must name a host: postgresql+asyncpg://user@host:5432/db")
    return text


def _text(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


def _ca_file(value: Any) -> Path | None:
    """A PEM file of CA certificates that outbound HTTPS trusts besides the system's; empty: none."""
    text = str(value).strip()
    if not text:
        return None
    path = Path(text)
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {text!r}: {exc.strerror or exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError(f"{text!r} holds no PEM certificate")
    return path


_SMTP_SCHEMES = {"smtp": 587, "smtps": 465}


def _smtp_url(value: Any) -> str | None:
    """`smtp://[user[:password]@]host[:port]` (STARTTLS when offered) or `smtps://` (implicit TLS)."""
    text = str(value).strip()
    if not text:
        return None
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - a bad port raises
    except ValueError:
        raise ValueError(f"has a bad port (got {_shown(text)!r})") from None
    if parts.scheme not in _SMTP_SCHEMES or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"must be smtp://[user[:password]@]host[:port] or smtps://... (got {_shown(text)!r})")
    return text


def _secret_file(value: Any) -> Path | None:
    text = str(value).strip()
    if not text:
        return None
    path = Path(text)
    try:
        path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {text!r}: {exc.strerror or exc}") from None
    return path


_MAILBOX = re.compile(r"^(?:[^<>@\s][^<>@]*<)?[^@\s<>]{1,64}@[^@\s<>]+>?$")


def _mail_from(value: Any) -> str:
    """An address, or `Name <address>`."""
    text = str(value).strip()
    if not _MAILBOX.match(text) or ("<" in text) != text.endswith(">"):
        raise ValueError(f"must be an email address, or Name <address> (got {text!r})")
    return text


def _rp_id(value: Any) -> str:
    """A WebAuthn relying party ID: a host name, no scheme, port or path (WebAuthn 5.1.4)."""
    text = str(value).strip().lower()
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", text) or ".." in text:
        raise ValueError(f"must be a host name such as example.com, without scheme or port (got {text[:80]!r})")
    return text


def _log_level(value: Any) -> str:
    return _choice(("DEBUG", "INFO", "WARNING", "ERROR"))(str(value).strip().upper())


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "host": _text,
    "port": _port,
    "data_dir": lambda v: Path(_text(v)),
    "database_url": _database_url,
    "base_url": _url,
    "auth_url": _url,
    "issuer": _issuer,
    "audience": _text,
    "code_ttl": _code_ttl,
    "access_token_ttl": _whole_seconds,
    "refresh_token_ttl": _whole_seconds,
    "user_token_ttl": _whole_seconds,
    "id_token_ttl": _whole_seconds,
    "signing_alg": _choice(SIGNING_ALGS),
    "master_key": _text,
    "env": _choice(ENVIRONMENTS),
    "workers": _positive_int,
    "max_body_bytes": _positive_int,
    "webhook_retry_schedule": _schedule,
    "webhook_timeout": _whole_seconds,
    "outbound_ca_file": _ca_file,
    "rate_limits": _rate_limits,
    "metrics_token": _text,
    "log_level": _log_level,
    "registration": _choice(REGISTRATION_MODES),
    "argon2": _argon2,
    "smtp_url": _smtp_url,
    "smtp_password_file": _secret_file,
    "mail_from": _mail_from,
    "mail_retry_schedule": _schedule,
    "signup": _choice(SIGNUP_MODES),
    "mfa": _choice(MFA_MODES),
    "webauthn_rp_id": _rp_id,
    "audit_retention_days": _positive_int,
    "otel": _switch,
}

# Settings that may be given as a command-line flag. The master key, the metrics token and the SMTP
# URL (which may hold a password) are secrets: a flag would show them to every user of `ps`, so
# they come from the environment or file.
FLAG_SETTINGS = tuple(name for name in _PARSERS if name not in ("master_key", "metrics_token", "smtp_url"))


def env_name(name: str) -> str:
    return "LBAUTH_" + name.upper()


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def load(flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
         config_file: str | os.PathLike[str] | None = None) -> Settings:
    """Merge the four sources, highest first, and validate the result."""
    environ = os.environ if environ is None else environ
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    config_file = config_file or flags.pop("config", None) or environ.get("LBAUTH_CONFIG") or None
    flags.pop("config", None)

    raw: dict[str, tuple[Any, str]] = {}  # setting -> (value, where it came from)
    if config_file:
        for key, value in _read_toml(Path(config_file)).items():
            raw[key] = (value, f"{key} in {config_file}")
    for name in _PARSERS:
        if env_name(name) in environ:
            raw[name] = (environ[env_name(name)], env_name(name))
    for name, value in flags.items():
        if name in _PARSERS:
            raw[name] = (value, flag_name(name))

    values: dict[str, Any] = {}
    for name, (value, source) in raw.items():
        try:
            values[name] = _PARSERS[name](value)
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    return _complete(Settings(**values))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"--config: no such file {str(path)!r}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"--config: cannot read {str(path)!r}: {exc}") from None
    data = data.get("lbauth", data) if isinstance(data.get("lbauth"), dict) else data
    unknown = sorted(set(data) - set(_PARSERS))
    if unknown:
        raise SettingsError(f"--config: unknown setting {unknown[0]!r} in {str(path)!r}")
    return data


def _complete(s: Settings) -> Settings:
    """Fill the settings whose defaults derive from others, and check them together."""
    changes: dict[str, Any] = {}
    if not s.database_url:
        changes["database_url"] = f"sqlite+aiosqlite:///{(s.data_dir / 'lbauth.db').resolve()}"
    base_url = s.base_url or f"http://{_url_host(s.host)}:{s.port}"
    changes["base_url"] = base_url
    changes["auth_url"] = s.auth_url or base_url
    changes["issuer"] = s.issuer or base_url
    changes["audience"] = s.audience or base_url
    changes["registration"] = s.registration or ("open" if s.development else "token")
    changes["signup"] = s.signup or ("open" if s.development else "off")
    changes["mail_from"] = s.mail_from or f"noreply@{urlsplit(changes['auth_url']).hostname or 'localhost'}"
    auth_host = (urlsplit(changes["auth_url"]).hostname or "localhost").lower()
    changes["webauthn_rp_id"] = s.webauthn_rp_id or auth_host
    if auth_host != changes["webauthn_rp_id"] and not auth_host.endswith("." + changes["webauthn_rp_id"]):
        raise SettingsError(f"LBAUTH_WEBAUTHN_RP_ID: must be the host of LBAUTH_AUTH_URL ({auth_host}) or a domain "
                            f"it is under (got {changes['webauthn_rp_id']!r}); browsers refuse any other")
    problem = issuer_problem(changes["issuer"])
    if problem:
        where = "LBAUTH_ISSUER" if s.issuer else "LBAUTH_ISSUER (which defaults to LBAUTH_BASE_URL)"
        raise SettingsError(f"{where}: {problem}")
    return s.replace(**changes)


# The public addresses (contract 1): https in production, since tokens, codes and sessions travel
# over them. TLS may end at a proxy in front; these are what browsers and clients see.
PUBLIC_URLS = ("base_url", "auth_url", "issuer")


def check_for_serving(s: Settings) -> None:
    """What `lbauth serve` needs beyond well-formed values: in production, https public URLs.
    Checked in this order, so a URL derived from LBAUTH_BASE_URL is reported under that name."""
    if s.development:
        return
    for name in PUBLIC_URLS:
        url = getattr(s, name)
        if urlsplit(url).scheme.lower() != "https":
            raise SettingsError(
                f"{env_name(name)}: must be an https URL in production (got {_shown(url)!r}); TLS may end at a proxy "
                "in front, this is the public address. Set it, or LBAUTH_ENV=development for local use")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
