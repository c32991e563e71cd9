"""The cluster's security metadata: every ACL binding and every SCRAM credential, with a version that
rises with each change.

The controller owns it and keeps it under its directory; each broker keeps the last copy the controller
sent it (UPDATE_METADATA's ``security`` field) under its ``log.dirs``, so that a restarted broker authorizes
and authenticates before it hears from the controller. On disk, in ``<dir>/security/`` (both files mode
0600, replaced atomically):

* ``credentials.json``: the SCRAM credentials (``CredentialStore.save``: salt, StoredKey, ServerKey,
  iterations; never a password);
* ``acls.json``: ``{"version": N, "acls": [{resource_type, resource_name, pattern_type, principal, host,
  operation, permission_type}, ...]}`` with Kafka's enum names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol import security_messages as sm
from protocol.file_names import ACLS_FILE, CREDENTIALS_FILE, SECURITY_DIR
from server.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from server.security.authorizer import StandardAuthorizer
from server.security.credentials import SCRAM_SHA_256, CredentialStore, ScramCredential, write_secret_file

log = logging.getLogger(__name__)


# Kafka's ScramMechanism type ids on the wire.
SCRAM_MECHANISM_IDS: dict[int, str] = {1: SCRAM_SHA_256, 2: "SCRAM-SHA-512"}
SCRAM_MECHANISM_TYPES: dict[str, int] = {name: i for i, name in SCRAM_MECHANISM_IDS.items()}


def scram_credential_from_salted_password(
    salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """RFC 5802's keys from SaltedPassword, as Kafka's controller derives them from an
    ALTER_USER_SCRAM_CREDENTIALS upsertion: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key"), with H = SHA-256."""
    client_key = hmac.new(salted_password, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", hashlib.sha256).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, i) = PBKDF2-HMAC-SHA-256: what a client sends in an upsertion."""
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


@dataclass
class SecurityMetadata:
    version: int = 0
    acls: set[AclBinding] = field(default_factory=set)
    credentials: CredentialStore = field(default_factory=CredentialStore)

    # ------------------------------------------------------------------ disk

    @staticmethod
    def directory_of(base: Path) -> Path:
        return base / SECURITY_DIR

    def save(self, directory: Path) -> None:
        """Writes both files under ``directory`` (the ``security`` directory itself)."""
        self.credentials.save(directory / CREDENTIALS_FILE)
        body = {"version": self.version, "acls": [b.to_json() for b in sorted(self.acls)]}
        write_secret_file(directory / ACLS_FILE, json.dumps(body, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, directory: Path) -> SecurityMetadata:
        """The copy saved under ``directory``; empty (version 0) when there is none. A damaged file raises
        ValueError naming it."""
        credentials = CredentialStore.load(directory / CREDENTIALS_FILE)
        path = directory / ACLS_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(0, set(), credentials)
        try:
            body = json.loads(text)
            acls = {AclBinding.from_json(a) for a in body.get("acls", [])}
            version = int(body.get("version", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not an ACL file: {e}") from e
        return cls(version, acls, credentials)

    # ------------------------------------------------------------------ the metadata log

    def to_json(self) -> dict[str, Any]:
        """The copy a controller quorum's metadata record carries: the version, every ACL binding and every
        SCRAM credential as the store keeps it (salt, StoredKey, ServerKey, iterations; never a password)."""
        return {
            "version": self.version,
            "acls": [b.to_json() for b in sorted(self.acls)],
            "credentials": self.credentials.to_json(),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SecurityMetadata:
        """The copy :meth:`to_json` made; ValueError if it is not one."""
        try:
            credentials = value.get("credentials", {})
            return cls(
                int(value.get("version", 0)),
                {AclBinding.from_json(a) for a in value.get("acls", [])},
                CredentialStore.from_json(credentials if isinstance(credentials, Mapping) else {}),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a security metadata record: {e}") from e

    def copy(self) -> SecurityMetadata:
        credentials = CredentialStore()
        credentials.replace_all(self.credentials)
        return SecurityMetadata(self.version, set(self.acls), credentials)

    # ------------------------------------------------------------------ wire

    def to_message(self) -> sm.UpdateMetadataSecurity:
        return sm.UpdateMetadataSecurity(
            version=self.version,
            acls=[sm.SecurityAcl(**b.wire_fields()) for b in sorted(self.acls)],
            scram_credentials=[
                sm.SecurityScramCredential(
                    name=user,
                    mechanism=SCRAM_MECHANISM_TYPES.get(mechanism, 0),
                    salt=c.salt,
                    stored_key=c.stored_key,
                    server_key=c.server_key,
                    iterations=c.iterations,
                )
                for user, mechanism, c in self.credentials.users()
            ],
        )

    @classmethod
    def from_message(cls, msg: sm.UpdateMetadataSecurity) -> SecurityMetadata:
        """The copy a message carries; ValueError for an enum code or mechanism isrsim does not know."""
        acls = {
            AclBinding(
                ResourcePattern(ResourceType(a.resource_type), a.resource_name, PatternType(a.pattern_type)),
                AccessControlEntry(
                    a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type)
                ),
            )
            for a in msg.acls
        }
        credentials = CredentialStore()
        for c in msg.scram_credentials:
            mechanism = SCRAM_MECHANISM_IDS.get(c.mechanism)
            if mechanism is None:
                raise ValueError(f"unknown SCRAM mechanism type {c.mechanism} for user {c.name!r}")
            credentials.put(
                c.name, ScramCredential(c.salt, c.stored_key, c.server_key, c.iterations), mechanism
            )
        return cls(msg.version, acls, credentials)


class BrokerSecurityMetadata:
    """A node's live copy: the authorizer's ACLs and the SASL server's credential store, loaded from
    ``directory`` at start and replaced (disk first) when a new version arrives."""

    def __init__(
        self,
        directory: Path,
        authorizer: StandardAuthorizer | None,
        credential_store: CredentialStore,
        node: str = "broker",
    ) -> None:
        self.directory = directory
        self.authorizer = authorizer
        self.credential_store = credential_store
        self.node = node
        self.version = 0

    def load(self) -> None:
        """Takes the copy on disk (if any): ACLs into the authorizer, credentials into the store."""
        saved = SecurityMetadata.load(self.directory)
        self._take(saved)
        if saved.version:
            log.info(
                "%s: security metadata version %d loaded from %s (%d ACL(s), %d user(s))",
                self.node,
                saved.version,
                self.directory,
                len(saved.acls),
                len(saved.credentials),
            )

    def apply(self, msg: sm.UpdateMetadataSecurity) -> bool:
        """Takes a copy from the controller unless it is the one already held; returns whether it did.
        ValueError (nothing changed) for a copy that cannot be read."""
        if msg.version == self.version:
            return False
        new = SecurityMetadata.from_message(msg)
        new.save(self.directory)
        self._take(new)
        log.info(
            "%s: security metadata version %d from the controller (%d ACL(s), %d user(s))",
            self.node,
            new.version,
            len(new.acls),
            len(new.credentials),
        )
        return True

    def _take(self, new: SecurityMetadata) -> None:
        self.credential_store.replace_all(new.credentials)
        if self.authorizer is not None:
            self.authorizer.replace_acls(new.acls)
        self.version = new.version


__all__ = [
    "ACLS_FILE",
    "CREDENTIALS_FILE",
    "SCRAM_MECHANISM_IDS",
    "SCRAM_MECHANISM_TYPES",
    "SECURITY_DIR",
    "BrokerSecurityMetadata",
    "SecurityMetadata",
    "salted_password",
    "scram_credential_from_salted_password",
]
