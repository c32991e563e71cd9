"""The SASL server state machine without sockets: Kafka's SaslServerAuthenticator states, SCRAM-SHA-256
against a real scramp client, PLAIN, and what ends a connection."""

from __future__ import annotations

import base64
import hashlib
import hmac

import scramp

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from server.security.credentials import CredentialStore, ScramCredential
from server.security.principal import KafkaPrincipal
from server.security.sasl_server import SaslServerAuthenticator, SaslState


def store() -> CredentialStore:
    s = CredentialStore()
    s.put("alice", ScramCredential.from_password("alice-secret"))
    return s


def handshake(auth: SaslServerAuthenticator, mechanism: str) -> None:
    step = auth.receive(ApiKeys.SASL_HANDSHAKE, {"mechanism": mechanism})
    assert step.response is not None and step.response["error_code"] == 0, step
    assert not step.close
    assert auth.state is SaslState.AUTHENTICATE


def scram_exchange(auth: SaslServerAuthenticator, user: str, password: str) -> tuple[int, bool]:
    """Runs SCRAM with scramp's client; returns the last error code and whether the server closes."""
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    step = auth.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": client.get_client_first().encode()})
    assert step.response is not None
    if step.response["error_code"]:
        return step.response["error_code"], step.close
    client.set_server_first(step.response["auth_bytes"].decode())
    step = auth.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": client.get_client_final().encode()})
    assert step.response is not None
    if not step.response["error_code"]:
        client.set_server_final(step.response["auth_bytes"].decode())  # the server proved the credential
    return step.response["error_code"], step.close


def test_api_versions_passes_before_authentication_and_other_requests_close() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    assert auth.receive(ApiKeys.API_VERSIONS, {}).passthrough
    step = auth.receive(ApiKeys.LEADER_AND_ISR, {})
    assert step.close and step.response is None and not step.passthrough
    assert auth.state is SaslState.FAILED and auth.principal is None


def test_scram_sha_256_authenticates_a_known_user() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256", "PLAIN"], store())
    handshake(auth, "SCRAM-SHA-256")
    assert scram_exchange(auth, "alice", "alice-secret") == (0, False)
    assert auth.complete and auth.principal == KafkaPrincipal("User", "alice")
    # Afterwards every request goes to the handlers; SASL requests get ILLEGAL_SASL_STATE, not a close.
    assert auth.receive(ApiKeys.STOP_REPLICA, {}).passthrough
    again = auth.receive(ApiKeys.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    assert again.response is not None and again.response["error_code"] == Errors.ILLEGAL_SASL_STATE
    assert not again.close


def test_scram_wrong_password_gets_58_and_closes() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    handshake(auth, "SCRAM-SHA-256")
    assert scram_exchange(auth, "alice", "wrong") == (Errors.SASL_AUTHENTICATION_FAILED, True)
    assert auth.principal is None and auth.state is SaslState.FAILED
    assert auth.receive(ApiKeys.API_VERSIONS, {}).close


def test_scram_unknown_user_fails_at_the_first_message() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    handshake(auth, "SCRAM-SHA-256")
    assert scram_exchange(auth, "mallory", "x") == (Errors.SASL_AUTHENTICATION_FAILED, True)
    assert auth.principal is None


def test_a_user_added_to_the_live_store_authenticates_at_once() -> None:
    credentials = store()
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], credentials)
    credentials.put("bob", ScramCredential.from_password("bob-secret"))
    handshake(auth, "SCRAM-SHA-256")
    assert scram_exchange(auth, "bob", "bob-secret") == (0, False)
    assert auth.principal == KafkaPrincipal("User", "bob")


def test_plain() -> None:
    ok = SaslServerAuthenticator(["PLAIN"], store())
    handshake(ok, "PLAIN")
    step = ok.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": b"\0alice\0alice-secret"})
    assert step.response is not None and step.response["error_code"] == 0 and not step.close
    assert ok.principal == KafkaPrincipal("User", "alice")
    for token in (b"\0alice\0nope", b"bob\0alice\0alice-secret", b"alice-secret", b"\0\0"):
        bad = SaslServerAuthenticator(["PLAIN"], store())
        handshake(bad, "PLAIN")
        step = bad.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": token})
        assert step.response is not None, token
        assert step.response["error_code"] == Errors.SASL_AUTHENTICATION_FAILED, token
        assert step.close and bad.principal is None


def test_a_mechanism_not_enabled_gets_33_with_the_list_and_closes() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    step = auth.receive(ApiKeys.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    assert step.response == {"error_code": Errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["SCRAM-SHA-256"]}
    assert step.close


def test_authenticate_before_handshake_gets_34_and_closes() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    step = auth.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": b"n,,n=alice,r=abc"})
    assert step.response is not None and step.response["error_code"] == Errors.ILLEGAL_SASL_STATE
    assert step.close


def test_only_sasl_authenticate_during_authentication() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    handshake(auth, "SCRAM-SHA-256")
    step = auth.receive(ApiKeys.API_VERSIONS, {})
    assert step.close and not step.passthrough


def test_malformed_bodies_and_tokens_close_without_crashing() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    step = auth.receive(ApiKeys.SASL_HANDSHAKE, {"mechanism": 7})
    assert step.close and step.response is not None and step.response["error_code"] == Errors.INVALID_REQUEST
    for token in (b"\xff\xfe", b"garbage", b""):
        auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
        handshake(auth, "SCRAM-SHA-256")
        step = auth.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": token})
        assert step.close and step.response is not None, token
        assert step.response["error_code"] == Errors.SASL_AUTHENTICATION_FAILED


def librdkafka_exchange(
    auth: SaslServerAuthenticator, user: str, password: str, *, tamper: bool = False
) -> int:
    """SCRAM-SHA-256 as librdkafka sends it: its client-final nonce is its own nonce followed by the whole
    nonce of the server-first message (Kafka's server accepts a nonce that ends with its own)."""
    cnonce = "rdkafka" + "x" * 25
    first_bare = f"n={user},r={cnonce}"
    step = auth.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": f"n,,{first_bare}".encode()})
    assert step.response is not None and step.response["error_code"] == 0
    server_first = step.response["auth_bytes"].decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    nonce = cnonce + attrs["r"] + ("z" if tamper else "")
    without_proof = f"c=biws,r={nonce}"
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, message, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    step = auth.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": f"{without_proof},p={proof}".encode()})
    assert step.response is not None
    return int(step.response["error_code"])


def test_librdkafka_client_final_nonce_is_accepted_as_kafka_accepts_it() -> None:
    auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
    handshake(auth, "SCRAM-SHA-256")
    assert librdkafka_exchange(auth, "alice", "alice-secret") == 0
    assert auth.complete and auth.principal == KafkaPrincipal("User", "alice")
    for password, tamper in (("wrong", False), ("alice-secret", True)):
        auth = SaslServerAuthenticator(["SCRAM-SHA-256"], store())
        handshake(auth, "SCRAM-SHA-256")
        assert (
            librdkafka_exchange(auth, "alice", password, tamper=tamper) == Errors.SASL_AUTHENTICATION_FAILED
        )
        assert not auth.complete
