"""Which client security a command uses: --command-config, else the root's client.properties, else
PLAINTEXT; --user/--password on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.client_security import CredentialsMismatch, resolve_client_security


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_plaintext_without_a_file(tmp_path: Path) -> None:
    assert resolve_client_security(tmp_path) is None


def test_the_roots_client_properties_then_command_config_then_user(tmp_path: Path) -> None:
    write(
        tmp_path / "client.properties", "security.protocol=SASL_SSL\nsasl.username=admin\nsasl.password=a\n"
    )
    root = resolve_client_security(tmp_path)
    assert root is not None and (root.security_protocol, root.username) == ("SASL_SSL", "admin")
    other = write(tmp_path / "other.properties", "security.protocol=SSL\n")
    chosen = resolve_client_security(tmp_path, other)
    assert chosen is not None and (chosen.security_protocol, chosen.sasl) == ("SSL", False)
    as_bob = resolve_client_security(tmp_path, None, "bob", "b")
    assert as_bob is not None and (as_bob.security_protocol, as_bob.username, as_bob.password) == (
        "SASL_SSL",
        "bob",
        "b",
    )
    plain_bob = resolve_client_security(tmp_path / "elsewhere", None, "bob", "b")
    assert plain_bob is not None and plain_bob.security_protocol == "SASL_PLAINTEXT"


def test_user_and_password_go_together(tmp_path: Path) -> None:
    with pytest.raises(CredentialsMismatch, match="--password"):
        resolve_client_security(tmp_path, None, "bob", None)
    with pytest.raises(CredentialsMismatch, match="--user"):
        resolve_client_security(tmp_path, None, None, "b")
