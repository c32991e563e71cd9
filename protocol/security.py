"""A client's side of security (docs/security.md): TLS and SASL on a connection, from a client config.

``ClientSecurity`` is what a client connects with: a security protocol (``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT``, ``SASL_SSL``), the CA to trust (and for mutual TLS a certificate of its own), and a SASL
mechanism with a user name and password. It is read from a properties file with librdkafka's keys
(``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``) or
the Java client's (``sasl.jaas.config`` with ScramLoginModule / PlainLoginModule, ``ssl.truststore.location``
of type PEM), as ``client.properties`` of a secure cluster holds them.

Every connection that ``protocol.client`` opens uses the ``ClientSecurity`` given to it, or else the one in
``current_client_security`` (a context variable: a node process sets its inter-broker one, the CLI sets the
one of its command), or else PLAINTEXT. SASL runs as Kafka's clients run it: SASL_HANDSHAKE with the
mechanism, then SASL_AUTHENTICATE rounds carrying the mechanism's tokens (SCRAM by ``scramp``).
"""

from __future__ import annotations

import contextvars
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from protocol.errors import Errors, KafkaError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-256", "PLAIN")
LOGIN_MODULES = {
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM-SHA-256",
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
}


class SecurityConfigError(ValueError):
    """A client security setting that cannot be used; the message names the key."""


class AuthenticationError(KafkaError):
    """The server refused the client's credentials (SASL_AUTHENTICATION_FAILED, 58) or the SASL exchange
    failed (UNSUPPORTED_SASL_MECHANISM 33, ILLEGAL_SASL_STATE 34); the server closes the connection."""


def uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """``org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";``
    -> ("SCRAM-SHA-256", {"username": "a", "password": "b"})."""
    value = text.strip()
    module, _, rest = value.partition(" ")
    if module not in LOGIN_MODULES:
        known = ", ".join(LOGIN_MODULES)
        raise SecurityConfigError(f"sasl.jaas.config: login module {module!r} is not one of {known}")
    flag, _, options_text = rest.strip().partition(" ")
    if flag != "required":
        raise SecurityConfigError("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;'")
    options = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS_OPTION.findall(options_text)}
    return LOGIN_MODULES[module], options


def read_properties(path: Path) -> dict[str, str]:
    """``key=value`` lines (``#`` / ``!`` comments), as a Java client's ``--command-config`` file."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecurityConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise SecurityConfigError(f"{path}:{lineno}: expected key=value, got {raw!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: TLS or not, SASL or not, and with what."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-256"
    username: str = ""
    password: str = field(default="", repr=False)
    ca_location: str = ""  # PEM CA certificates to trust (ssl.ca.location / ssl.truststore.location)
    certificate_location: str = ""  # PEM certificate of this client (mutual TLS), optional
    key_location: str = ""  # its PEM private key (may be the certificate's file)
    key_password: str = field(default="", repr=False)
    check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https (Kafka's default)
    _context: list[ssl.SSLContext] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(
                f"security.protocol={self.security_protocol!r}: expected one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.sasl and self.sasl_mechanism not in SASL_MECHANISMS:
            raise SecurityConfigError(
                f"sasl.mechanism={self.sasl_mechanism!r}: isrsim supports {', '.join(SASL_MECHANISMS)}"
            )
        if self.sasl and not self.username:
            raise SecurityConfigError(
                f"security.protocol={self.security_protocol} needs a user: set sasl.username and "
                "sasl.password (or sasl.jaas.config)"
            )

    @property
    def tls(self) -> bool:
        return uses_tls(self.security_protocol)

    @property
    def sasl(self) -> bool:
        return uses_sasl(self.security_protocol)

    def ssl_context(self) -> ssl.SSLContext:
        """The client's TLS context (made once): the CA file if given, else the system's trust store."""
        if not self._context:
            ctx = ssl.create_default_context(cafile=self.ca_location or None)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.check_hostname = self.check_hostname
            if self.certificate_location:
                ctx.load_cert_chain(
                    self.certificate_location, self.key_location or None, self.key_password or None
                )
            self._context.append(ctx)
        return self._context[0]

    def with_user(self, username: str, password: str) -> ClientSecurity:
        """The same transport, authenticating as ``username`` (``--user`` / ``--password``)."""
        protocol = self.security_protocol
        if not self.sasl:
            protocol = "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return ClientSecurity(
            protocol,
            self.sasl_mechanism,
            username,
            password,
            self.ca_location,
            self.certificate_location,
            self.key_location,
            self.key_password,
            self.check_hostname,
        )

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, base_dir: Path | None = None) -> ClientSecurity:
        """From librdkafka's keys or the Java client's; relative file names are taken from ``base_dir``."""

        def path(value: str) -> str:
            if value and base_dir is not None and not Path(value).is_absolute():
                return str(base_dir / value)
            return value

        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "")).strip().upper()
        username = props.get("sasl.username", "")
        password = props.get("sasl.password", "")
        jaas = props.get("sasl.jaas.config", "")
        if jaas:
            jaas_mechanism, options = parse_jaas_config(jaas)
            mechanism = mechanism or jaas_mechanism
            username = options.get("username", username)
            password = options.get("password", password)
        truststore_type = props.get("ssl.truststore.type", "PEM").strip().upper()
        if props.get("ssl.truststore.location") and truststore_type != "PEM":
            raise SecurityConfigError(f"ssl.truststore.type={truststore_type}: isrsim reads PEM files only")
        ca = props.get("ssl.ca.location") or props.get("ssl.truststore.location", "")
        cert = props.get("ssl.certificate.location", "")
        key = props.get("ssl.key.location", "")
        if not cert and props.get("ssl.keystore.location"):
            cert = key = props["ssl.keystore.location"]  # a PEM keystore: the key and its chain
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        return cls(
            protocol,
            mechanism or "SCRAM-SHA-256",
            username,
            password,
            path(ca),
            path(cert),
            path(key),
            props.get("ssl.key.password", ""),
            algorithm == "https",
        )

    @classmethod
    def from_file(cls, path: Path) -> ClientSecurity:
        try:
            return cls.from_properties(read_properties(path), base_dir=path.parent)
        except SecurityConfigError as exc:
            raise SecurityConfigError(f"{path}: {exc}") from None


PLAINTEXT = ClientSecurity()

# The security of connections opened without an explicit one (a node's inter-broker config, the CLI's).
current_client_security: contextvars.ContextVar[ClientSecurity | None] = contextvars.ContextVar(
    "current_client_security", default=None
)


def effective_security(security: ClientSecurity | None) -> ClientSecurity:
    if security is not None:
        return security
    return current_client_security.get() or PLAINTEXT


# ------------------------------------------------------------------------------------ SASL, client side


def _check(body: Mapping[str, Any], what: str) -> None:
    code = int(body.get("error_code", 0) or 0)
    if code:
        error = Errors(code) if code in Errors._value2member_map_ else Errors.UNKNOWN_SERVER_ERROR
        message = body.get("error_message") or ""
        mechanisms = body.get("mechanisms")
        if mechanisms is not None:
            message = f"the server enables {', '.join(map(str, mechanisms)) or 'no mechanism'}"
        raise AuthenticationError(error, f"{what}: {message}" if message else what)


class Requester(Protocol):
    """What SASL needs of a connection (``protocol.client.KafkaConnection``)."""

    async def request(
        self, api_key: int, body: Any, *, api_version: int = 0, timeout: float | None = 30.0
    ) -> dict[str, Any]: ...


async def authenticate(conn: Requester, security: ClientSecurity, *, timeout: float = 30.0) -> None:
    """Kafka's SaslClientAuthenticator: SASL_HANDSHAKE, then SASL_AUTHENTICATE until the mechanism is done.
    Raises ``AuthenticationError`` (the server closes the connection after a failure)."""
    import scramp  # only a SASL client pays for it

    from protocol.api_keys import ApiKeys

    mechanism = security.sasl_mechanism
    body = await conn.request(ApiKeys.SASL_HANDSHAKE, {"mechanism": mechanism}, timeout=timeout)
    _check(body, f"SASL handshake for {mechanism}")

    async def step(token: bytes) -> bytes:
        answer = await conn.request(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": token}, timeout=timeout)
        _check(answer, f"SASL authentication of {security.username!r} with {mechanism}")
        data = answer.get("auth_bytes", b"")
        return bytes(data) if isinstance(data, bytes | bytearray) else b""

    if mechanism == "PLAIN":
        await step(b"\0" + security.username.encode() + b"\0" + security.password.encode())
        return
    client = scramp.ScramClient([mechanism], security.username, security.password)
    server_first = await step(client.get_client_first().encode())
    try:
        client.set_server_first(server_first.decode())
        client_final = client.get_client_final()
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise AuthenticationError(
            Errors.SASL_AUTHENTICATION_FAILED, f"bad SCRAM server-first: {exc}"
        ) from exc
    server_final = await step(client_final.encode())
    try:
        client.set_server_final(server_final.decode())
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        # The server did not prove it knows the credential: not the server it claims to be.
        raise AuthenticationError(
            Errors.SASL_AUTHENTICATION_FAILED, f"the server's SCRAM signature is wrong: {exc}"
        ) from exc


__all__ = [
    "PLAINTEXT",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "AuthenticationError",
    "ClientSecurity",
    "SecurityConfigError",
    "authenticate",
    "current_client_security",
    "effective_security",
    "parse_jaas_config",
    "read_properties",
    "uses_sasl",
    "uses_tls",
]
