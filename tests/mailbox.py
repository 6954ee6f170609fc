"""A real SMTP server for the tests (aiosmtpd), on a loopback port of the test's own event loop.

    mailbox = await Mailbox.start(port=0)      # LBAUTH_SMTP_URL=mailbox.url
    message = await mailbox.next(to="a@example.com")
    link = link_in(message, "lba_pr_")
    await mailbox.stop(); await mailbox.start()  # an outage, and back on the same port

aiosmtpd's Controller cannot listen on port 0 (it connects to its port to check it), hence
`loop.create_server`. Options: `tls=` a server SSLContext (STARTTLS offered; see `self_signed`),
`credentials=(user, password)` (AUTH PLAIN required before MAIL). `refuse[address] = "550 ..."`
refuses a recipient with that answer.
"""

from __future__ import annotations

import asyncio
import datetime
import email
import email.policy
import functools
import ipaddress
import re
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

_URL = re.compile(r"https?://[^\s<>\"']+")


@dataclass
class Received:
    message: EmailMessage
    mail_from: str
    rcpt_tos: list[str]
    tls: bool  # the message came over TLS (STARTTLS)
    login: str | None  # the user that authenticated, if any


class _Either:
    """`Mailbox.start(...)` makes and starts a mailbox; `mailbox.start()` starts it again."""

    def __init__(self, function: Any) -> None:
        self.function = function

    def __get__(self, obj: Any, owner: type) -> Any:
        return functools.partial(self.function, owner, obj)


class Mailbox:
    def __init__(self, *, tls: ssl.SSLContext | None = None, credentials: tuple[str, str] | None = None) -> None:
        self.tls = tls
        self.credentials = credentials
        self.port = 0
        self.received: list[Received] = []
        self.refuse: dict[str, str] = {}
        self._taken: set[int] = set()
        self._arrived = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._connections: set[SMTP] = set()

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    @property
    def messages(self) -> list[EmailMessage]:
        return [r.message for r in self.received]

    async def _start(cls: type[Mailbox], self: Mailbox | None, port: int | None = None, **options: Any) -> Mailbox:
        if self is None:
            self = cls(**options)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, "127.0.0.1", self.port if port is None else port,
                                                reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    start = _Either(_start)

    async def stop(self) -> None:
        """Stop listening and drop every connection: an SMTP server that is down."""
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                if connection.transport is not None:
                    connection.transport.close()
            await self._server.wait_closed()
            self._server = None

    def _protocol(self) -> SMTP:
        options: dict[str, Any] = {"hostname": "mailbox.test", "tls_context": self.tls}
        if self.credentials:
            options.update(authenticator=self._authenticate, auth_required=True, auth_exclude_mechanism=["LOGIN"])
        return _TrackedSMTP(self, **options)

    def _authenticate(self, server: SMTP, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        assert self.credentials is not None
        ok = isinstance(auth_data, LoginPassword) and (auth_data.login.decode(), auth_data.password.decode()) \
            == self.credentials
        return AuthResult(success=ok, auth_data=auth_data.login.decode() if ok else None)

    # aiosmtpd handler hooks
    async def handle_RCPT(self, server: SMTP, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        async with self._arrived:
            self.received.append(Received(message, envelope.mail_from, list(envelope.rcpt_tos),
                                          session.ssl is not None, session.auth_data))
            self._arrived.notify_all()
        return "250 Message accepted for delivery"

    async def next(self, to: str | None = None, timeout: float = 10) -> EmailMessage:
        """The earliest message not yet taken by `next` (to `to`, when given), waiting for it up to
        `timeout` seconds."""
        def untaken() -> Received | None:
            for index, received in enumerate(self.received):
                if index not in self._taken and (to is None or to in received.rcpt_tos):
                    self._taken.add(index)
                    return received
            return None

        async with self._arrived, asyncio.timeout(timeout):
            while (received := untaken()) is None:
                await self._arrived.wait()
        return received.message

    def to(self, address: str) -> list[EmailMessage]:
        return [r.message for r in self.received if address in r.rcpt_tos]


class _TrackedSMTP(SMTP):
    def __init__(self, mailbox: Mailbox, **options: Any) -> None:
        super().__init__(mailbox, **options)
        self.mailbox = mailbox

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.mailbox._connections.add(self)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.mailbox._connections.discard(self)
        super().connection_lost(exc)


def text_of(message: EmailMessage) -> str:
    part = message.get_body(("plain",))
    assert part is not None, "no text/plain part"
    return part.get_content()


def html_of(message: EmailMessage) -> str:
    part = message.get_body(("html",))
    assert part is not None, "no text/html part"
    return part.get_content()


def link_in(message: EmailMessage, prefix: str) -> str:
    """The URL in the text part that starts with `prefix`, or holds it (say `lba_pr_`)."""
    for url in _URL.findall(text_of(message)):
        if url.startswith(prefix) or prefix in url:
            return url.rstrip(".,)")
    raise AssertionError(f"no link with {prefix!r} in the message's text part")


def self_signed(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server SSLContext for 127.0.0.1 with a self-signed certificate, and the certificate's path
    (to trust it: SSL_CERT_FILE)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "smtp-cert.pem", folder / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_path
