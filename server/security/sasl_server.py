"""The server side of SASL on one connection: Kafka's ``SaslServerAuthenticator``, sans-I/O.

The socket server shows it every request read on a SASL listener before the connection authenticated
(``receive``), and does what the answer says: send ``response`` (if any), close the connection after it
(``close``), or let the request through to the handlers (``passthrough``: API_VERSIONS only). States:

* ``HANDSHAKE_OR_VERSIONS_REQUEST``: API_VERSIONS passes; SASL_HANDSHAKE with an enabled mechanism moves to
  ``AUTHENTICATE``, with another gets UNSUPPORTED_SASL_MECHANISM (33) and the list, then the connection
  closes; SASL_AUTHENTICATE gets ILLEGAL_SASL_STATE (34) and closes; anything else closes at once, unanswered.
* ``AUTHENTICATE``: SASL_AUTHENTICATE tokens go to the mechanism (SCRAM-SHA-256 by ``scramp``, or PLAIN);
  when it completes the connection is ``COMPLETE`` with ``principal`` ``User:<name>``; when it fails the
  answer is SASL_AUTHENTICATION_FAILED (58) and the connection closes. Anything else closes it.
* ``COMPLETE``: every request goes to the handlers (SASL requests again get ILLEGAL_SASL_STATE, as Kafka's
  KafkaApis answers them; isrsim has no re-authentication, KIP-368).

Credentials come from the node's live ``CredentialStore``, asked when the client names itself, so users
added while the node runs authenticate at once.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import scramp

from protocol.api_keys import ApiKeys
from protocol.errors import Errors, InvalidRequestError
from protocol.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from protocol.schema import from_body, to_body
from server.security.credentials import SCRAM_SHA_256, CredentialStore
from server.security.principal import USER_TYPE, KafkaPrincipal

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (SCRAM_SHA_256, PLAIN)


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "handshake_or_versions_request"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslStep:
    """What the socket server does with one request."""

    response: dict[str, Any] | None = None  # a body to answer with
    close: bool = False  # close the connection (after the response, if any)
    passthrough: bool = False  # hand the request to the handlers as usual
    reason: str = ""  # for the log, when closing


class _Failed(Exception):
    pass


class SaslServerAuthenticator:
    """One connection's SASL state machine."""

    def __init__(self, enabled_mechanisms: Sequence[str], credentials: CredentialStore) -> None:
        self.enabled_mechanisms = list(enabled_mechanisms)
        self.credentials = credentials
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self._scram: Any = None  # scramp's ScramServer of the exchange in progress
        self._scram_user = ""

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def receive(self, api_key: int, body: Any) -> SaslStep:
        if self.state is SaslState.COMPLETE:
            if api_key in (ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE):
                return SaslStep(illegal_sasl_state(api_key, "after successful authentication"))
            return SaslStep(passthrough=True)
        if self.state is SaslState.FAILED:
            return SaslStep(close=True, reason="authentication already failed")
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            if api_key == ApiKeys.API_VERSIONS:
                return SaslStep(passthrough=True)
            if api_key == ApiKeys.SASL_HANDSHAKE:
                return self._handshake(body)
            if api_key == ApiKeys.SASL_AUTHENTICATE:
                self.state = SaslState.FAILED
                return SaslStep(
                    to_body(
                        SaslAuthenticateResponse(
                            error_code=int(Errors.ILLEGAL_SASL_STATE),
                            error_message="SASL_AUTHENTICATE before SASL_HANDSHAKE",
                        )
                    ),
                    close=True,
                    reason="SASL_AUTHENTICATE before SASL_HANDSHAKE",
                )
            self.state = SaslState.FAILED
            return SaslStep(close=True, reason=f"unexpected {_name(api_key)} request during SASL handshake")
        # AUTHENTICATE
        if api_key == ApiKeys.SASL_AUTHENTICATE:
            return self._authenticate(body)
        self.state = SaslState.FAILED
        return SaslStep(close=True, reason=f"unexpected {_name(api_key)} request during SASL authentication")

    # ---------------------------------------------------------------------------------------- steps

    def _handshake(self, body: Any) -> SaslStep:
        try:
            request = from_body(SaslHandshakeRequest, body)
        except InvalidRequestError as exc:
            self.state = SaslState.FAILED
            answer = {"error_code": int(Errors.INVALID_REQUEST), "error_message": exc.message}
            return SaslStep(answer, close=True, reason=f"invalid SASL_HANDSHAKE: {exc.message}")
        mechanism = request.mechanism
        if mechanism not in self.enabled_mechanisms:
            self.state = SaslState.FAILED
            response = SaslHandshakeResponse(
                error_code=int(Errors.UNSUPPORTED_SASL_MECHANISM), mechanisms=self.enabled_mechanisms
            )
            return SaslStep(
                to_body(response), close=True, reason=f"SASL mechanism {mechanism!r} is not enabled"
            )
        self.mechanism = mechanism
        self.state = SaslState.AUTHENTICATE
        return SaslStep(to_body(SaslHandshakeResponse(mechanisms=self.enabled_mechanisms)))

    def _authenticate(self, body: Any) -> SaslStep:
        try:
            request = from_body(SaslAuthenticateRequest, body)
        except InvalidRequestError as exc:
            self.state = SaslState.FAILED
            answer = {"error_code": int(Errors.INVALID_REQUEST), "error_message": exc.message}
            return SaslStep(answer, close=True, reason=f"invalid SASL_AUTHENTICATE: {exc.message}")
        try:
            if self.mechanism == PLAIN:
                token = self._plain(request.auth_bytes)
            else:
                token = self._scram_step(request.auth_bytes)
        except _Failed as exc:
            self.state = SaslState.FAILED
            self._scram = None
            message = (
                f"Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {self.mechanism}"
            )
            response = SaslAuthenticateResponse(
                error_code=int(Errors.SASL_AUTHENTICATION_FAILED), error_message=message
            )
            return SaslStep(to_body(response), close=True, reason=f"{message}: {exc}")
        return SaslStep(to_body(SaslAuthenticateResponse(auth_bytes=token)))

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise _Failed("PLAIN token is not authzid NUL username NUL password")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise _Failed("PLAIN token is not UTF-8") from None
        if not username:
            raise _Failed("PLAIN token has no username")
        if authzid and authzid != username:
            raise _Failed("the authorization id differs from the username")
        credential = self.credentials.get(username, SCRAM_SHA_256)
        if credential is None or not credential.matches_password(password):
            raise _Failed(f"invalid credentials for user {username!r}")
        self._succeed(username)
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        assert self.mechanism is not None
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _Failed("SCRAM message is not UTF-8") from None
        if self._scram is None:
            server = scramp.ScramMechanism(self.mechanism).make_server(self._lookup)
            try:
                server.set_client_first(message)
            except _Failed:
                raise
            except scramp.ScramException as exc:
                raise _Failed(f"bad SCRAM client-first message: {exc}") from None
            self._scram = server
            return str(server.get_server_first()).encode("utf-8")
        server = self._scram
        received, expected = _scram_nonce(message), str(server.nonce)
        if received is not None and received != expected and received.endswith(expected):
            # librdkafka's client-final puts its own nonce before the server's (which already starts with
            # it); Kafka's ScramSaslServer accepts a nonce that ends with the server's, and so does this.
            # The proof still covers the message as received.
            server.nonce = type(server.nonce)(received)
        try:
            server.set_client_final(message)
        except scramp.ScramException as exc:
            raise _Failed(f"SCRAM proof of user {self._scram_user!r} does not match: {exc}") from None
        final = str(server.get_server_final()).encode("utf-8")
        self._scram = None
        self._succeed(self._scram_user)
        return final

    def _lookup(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        assert self.mechanism is not None
        credential = self.credentials.get(username, self.mechanism)
        if credential is None:
            # As Kafka's ScramSaslServer: an unknown user fails at the first message.
            raise _Failed(f"invalid user credentials: no {self.mechanism} credential for {username!r}")
        self._scram_user = username
        return credential.auth_info()

    def _succeed(self, username: str) -> None:
        self.state = SaslState.COMPLETE
        self.principal = KafkaPrincipal(USER_TYPE, username)


def illegal_sasl_state(api_key: int, why: str) -> dict[str, Any]:
    """ILLEGAL_SASL_STATE for a SASL request where none is expected (after authentication, or on a listener
    without SASL), as Kafka's KafkaApis answers them; the connection stays open."""
    message = f"{_name(api_key)} request received {why}"
    if api_key == ApiKeys.SASL_HANDSHAKE:
        return to_body(SaslHandshakeResponse(error_code=int(Errors.ILLEGAL_SASL_STATE)))
    return to_body(SaslAuthenticateResponse(error_code=int(Errors.ILLEGAL_SASL_STATE), error_message=message))


def _name(api_key: int) -> str:
    try:
        return ApiKeys(api_key).name
    except ValueError:
        return f"api_key {api_key}"


__all__ = [
    "PLAIN",
    "SUPPORTED_MECHANISMS",
    "SaslServerAuthenticator",
    "SaslState",
    "SaslStep",
    "illegal_sasl_state",
]


def _scram_nonce(message: str) -> str | None:
    """The ``r=`` attribute of a SCRAM message (None if it has none)."""
    for part in message.split(","):
        if part.startswith("r="):
            return part[2:]
    return None
