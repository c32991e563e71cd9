"""Kafka's principal: ``User:NAME``. A connection that has not authenticated is ``User:ANONYMOUS``
(Kafka's ``KafkaPrincipal.ANONYMOUS``), as every PLAINTEXT and SSL-without-client-auth connection is."""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); a name without a type is refused, as Kafka's
        ``SecurityUtils.parseKafkaPrincipal`` refuses it."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {text!r} must be TYPE:NAME, e.g. User:alice")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
