"""A node's TLS and SASL settings: Kafka's config keys, the server's TLS context, what each listener asks of
a connection, and the client side this node uses towards its peers (docs/security.md).

Keys (the broker's and the controller's alike):

* ``ssl.keystore.type=PEM``, ``ssl.keystore.location`` (one PEM file: the private key and the certificate
  chain), ``ssl.key.password`` (if the key is encrypted);
* ``ssl.truststore.type=PEM``, ``ssl.truststore.location`` (the CA certificates trusted, for peers and, with
  ``ssl.client.auth``, for clients' certificates);
* ``ssl.client.auth`` (``none``, ``requested``, ``required``), ``ssl.endpoint.identification.algorithm``
  (``https``: check the peer's name in its certificate; empty: do not);
* ``sasl.enabled.mechanisms`` (``SCRAM-SHA-256``, ``PLAIN``), ``sasl.mechanism.inter.broker.protocol``, and
  ``sasl.jaas.config`` (``...ScramLoginModule required username="broker" password="...";``): who this node
  is when it connects to its peers on the inter-broker listener.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.file_names import CREDENTIALS_FILE, SECURITY_DIR
from protocol.security import (
    ClientSecurity,
    SecurityConfigError,
    parse_jaas_config,
    uses_sasl,
    uses_tls,
)
from server.config import SECURITY_CONFIG_KEYS, ConfigError
from server.security.credentials import CredentialStore
from server.security.sasl_server import SUPPORTED_MECHANISMS

CREDENTIALS_PATH = Path(SECURITY_DIR) / CREDENTIALS_FILE  # in a node's directory
CLIENT_AUTH_CHOICES = ("none", "requested", "required")


@dataclass(frozen=True)
class ListenerSecurity:
    """What a listener asks of each connection."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def sasl(self) -> bool:
        return bool(self.sasl_mechanisms)


def _enabled_mechanisms(values: Mapping[str, Any]) -> tuple[str, ...]:
    raw = str(values.get("sasl.enabled.mechanisms", ""))
    mechanisms = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
    for m in mechanisms:
        if m not in SUPPORTED_MECHANISMS:
            raise ConfigError(
                f"sasl.enabled.mechanisms: {m} is not supported "
                f"(isrsim has {', '.join(SUPPORTED_MECHANISMS)})"
            )
    if not mechanisms:
        raise ConfigError("sasl.enabled.mechanisms is empty but a listener uses SASL")
    return mechanisms


def server_ssl_context(values: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context of SSL / SASL_SSL listeners, from the PEM keystore (and truststore)."""
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if str(values.get(key, "PEM")).upper() != "PEM":
            raise ConfigError(f"{key}={values[key]}: isrsim reads PEM files only (set {key}=PEM)")
    keystore = str(values.get("ssl.keystore.location", ""))
    if not keystore:
        raise ConfigError(
            "ssl.keystore.location is required for SSL and SASL_SSL listeners (a PEM file with the key and "
            "certificate chain)"
        )
    client_auth = str(values.get("ssl.client.auth", "none")).strip().lower()
    if client_auth not in CLIENT_AUTH_CHOICES:
        raise ConfigError(
            f"ssl.client.auth={client_auth!r}: expected one of {', '.join(CLIENT_AUTH_CHOICES)}"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(keystore, None, str(values.get("ssl.key.password", "")) or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"ssl.keystore.location={keystore}: cannot load key and certificate: {exc}"
        ) from None
    truststore = str(values.get("ssl.truststore.location", ""))
    if truststore:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.truststore.location={truststore}: cannot load: {exc}") from None
    if client_auth != "none":
        if not truststore:
            raise ConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location")
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def listener_securities(
    values: Mapping[str, Any], protocols: Mapping[str, str], listener_names: list[str]
) -> dict[str, ListenerSecurity]:
    """Each listener's security, built once at start-up (a bad key or an unreadable PEM fails here)."""
    out: dict[str, ListenerSecurity] = {}
    context: ssl.SSLContext | None = None
    for name in listener_names:
        protocol = protocols.get(name, "PLAINTEXT")
        ctx = None
        if uses_tls(protocol):
            context = context or server_ssl_context(values)
            ctx = context
        mechanisms = _enabled_mechanisms(values) if uses_sasl(protocol) else ()
        out[name] = ListenerSecurity(protocol, ctx, mechanisms)
    return out


def inter_broker_client_security(values: Mapping[str, Any], protocol: str) -> ClientSecurity:
    """How this node connects to its peers on a listener speaking ``protocol``."""
    username = password = ""
    mechanism = str(values.get("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")).strip().upper()
    if uses_sasl(protocol):
        jaas = str(values.get("sasl.jaas.config", ""))
        if not jaas:
            raise ConfigError(
                f"the inter-broker listener uses {protocol}: set sasl.jaas.config (e.g. "
                'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                'password="...";)'
            )
        try:
            jaas_mechanism, options = parse_jaas_config(jaas)
        except SecurityConfigError as exc:
            raise ConfigError(str(exc)) from None
        if jaas_mechanism != mechanism:
            raise ConfigError(
                f"sasl.jaas.config's login module is for {jaas_mechanism}, but "
                f"sasl.mechanism.inter.broker.protocol={mechanism}"
            )
        username, password = options.get("username", ""), options.get("password", "")
    keystore = str(values.get("ssl.keystore.location", ""))
    client_auth = str(values.get("ssl.client.auth", "none")).strip().lower()
    try:
        return ClientSecurity(
            protocol,
            mechanism,
            username,
            password,
            str(values.get("ssl.truststore.location", "")),
            keystore if client_auth != "none" else "",
            keystore if client_auth != "none" else "",
            str(values.get("ssl.key.password", "")),
            str(values.get("ssl.endpoint.identification.algorithm", "https")).strip().lower() == "https",
        )
    except SecurityConfigError as exc:
        raise ConfigError(str(exc)) from None


def load_credential_store(directory: Path) -> CredentialStore:
    """The node's credentials, from ``<directory>/security/credentials.json`` (empty if absent)."""
    try:
        return CredentialStore.load(directory / CREDENTIALS_PATH)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


__all__ = [
    "CREDENTIALS_PATH",
    "SECURITY_CONFIG_KEYS",
    "ListenerSecurity",
    "inter_broker_client_security",
    "listener_securities",
    "load_credential_store",
    "server_ssl_context",
]
