"""SCRAM credentials stored as Kafka stores them: salt, StoredKey, ServerKey and the iteration count, never
the password (Kafka's ``ScramCredential``, shown by ``kafka-configs --describe`` as
``SCRAM-SHA-256=salt=...,stored_key=...,server_key=...,iterations=4096``).

One ``CredentialStore`` per node answers the SASL server: SCRAM-SHA-256 authenticates against it, and so
does PLAIN (the password a PLAIN client sends is salted with the stored salt and compared with StoredKey).
The store is saved as JSON with mode 0600; the controller owns the cluster's copy and sends it to the
brokers, which keep the last copy they got so that a restarted broker can authenticate its peers before it
hears from the controller.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scramp

from protocol import environment

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_MECHANISMS = (SCRAM_SHA_256,)
# Kafka's ScramMechanism.SCRAM_SHA_256.minIterations() and the default of kafka-configs.
MIN_ITERATIONS = 4096
DEFAULT_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's upper bound (ScramMechanism.maxIterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(
        cls, password: str, mechanism: str = SCRAM_SHA_256, iterations: int = DEFAULT_ITERATIONS
    ) -> ScramCredential:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unsupported SCRAM mechanism {mechanism!r}; isrsim supports {SCRAM_SHA_256}")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}")
        salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations
        )
        return cls(salt, stored_key, server_key, count)

    def matches_password(self, password: str, mechanism: str = SCRAM_SHA_256) -> bool:
        """Whether ``password`` salted with this credential's salt gives its StoredKey (PLAIN's check)."""
        _salt, stored_key, _server_key, _count = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=self.iterations, salt=self.salt
        )
        return hmac.compare_digest(stored_key, self.stored_key)

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """The tuple scramp's server side takes (salt, stored_key, server_key, iterations)."""
        return self.salt, self.stored_key, self.server_key, self.iterations

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ScramCredential:
        b64d = base64.b64decode
        salt, stored, server = (b64d(value[k]) for k in ("salt", "stored_key", "server_key"))
        return cls(salt, stored, server, int(value["iterations"]))


class CredentialStore:
    """user -> mechanism -> ScramCredential (Kafka's CredentialCache)."""

    def __init__(self, users: Mapping[str, Mapping[str, ScramCredential]] | None = None) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {
            user: dict(mechs) for user, mechs in (users or {}).items()
        }

    def get(self, user: str, mechanism: str = SCRAM_SHA_256) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def put(self, user: str, credential: ScramCredential, mechanism: str = SCRAM_SHA_256) -> None:
        self._users.setdefault(user, {})[mechanism] = credential

    def remove(self, user: str, mechanism: str = SCRAM_SHA_256) -> bool:
        mechs = self._users.get(user)
        if mechs is None or mechanism not in mechs:
            return False
        del mechs[mechanism]
        if not mechs:
            del self._users[user]
        return True

    def replace_all(self, other: CredentialStore) -> None:
        """Takes every credential of ``other`` (a new copy from the controller)."""
        self._users = {user: dict(mechs) for user, mechs in other._users.items()}

    def users(self) -> Iterator[tuple[str, str, ScramCredential]]:
        for user in sorted(self._users):
            for mechanism, credential in sorted(self._users[user].items()):
                yield user, mechanism, credential

    def __len__(self) -> int:
        return len(self._users)

    def to_json(self) -> dict[str, Any]:
        users = self._users.items()
        return {"users": {user: {mech: c.to_json() for mech, c in mechs.items()} for user, mechs in users}}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> CredentialStore:
        users = value.get("users", {})
        if not isinstance(users, dict):
            raise ValueError("credentials: 'users' must be an object")
        return cls(
            {
                user: {mech: ScramCredential.from_json(cred) for mech, cred in mechs.items()}
                for user, mechs in users.items()
            }
        )

    def save(self, path: Path) -> None:
        """Writes the store with mode 0600 (atomically: a temporary file renamed over the old one)."""
        write_secret_file(path, json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> CredentialStore:
        """The store saved at ``path``; an empty store when there is no file."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        try:
            return cls.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a credentials file: {e}") from e


def write_secret_file(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` readable by its owner only (0600), replacing any old file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        environment.fsync(fd)
    finally:
        os.close(fd)
    environment.replace(tmp, path)
