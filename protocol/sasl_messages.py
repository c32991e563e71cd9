"""Bodies of SASL_HANDSHAKE (17) and SASL_AUTHENTICATE (36), docs/security.md (Kafka's SaslHandshakeRequest
and SaslAuthenticateRequest; the SASL tokens travel in ``auth_bytes`` as Kafka frames them since KIP-152)."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int16, Int64


@dataclass(slots=True, kw_only=True)
class SaslHandshakeRequest:
    mechanism: str


@dataclass(slots=True, kw_only=True)
class SaslHandshakeResponse:
    error_code: Int16 = 0
    mechanisms: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class SaslAuthenticateRequest:
    auth_bytes: bytes


@dataclass(slots=True, kw_only=True)
class SaslAuthenticateResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: Int64 = 0


__all__ = [
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
]
