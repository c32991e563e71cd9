"""How a client of a local cluster authenticates (docs/security.md): a client properties file (Kafka's
``--command-config``), else the cluster root's ``client.properties`` (written by ``cluster up --secure``),
else PLAINTEXT; a user name and password authenticate as someone else over the same transport. The choice
is set as the process's ``protocol.security.current_client_security``, which every connection it then
opens uses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from protocol import CLIENT_PROPERTIES

if TYPE_CHECKING:
    from protocol import ClientSecurity

DEFAULT_ROOT = Path("isrsim-data")


class CredentialsMismatch(ValueError):
    """A user without a password, or a password without a user (a usage mistake)."""


def resolve_client_security(
    data_dir: Path | None,
    command_config: Path | None = None,
    user: str | None = None,
    password: str | None = None,
) -> ClientSecurity | None:
    """The security a client connects with; None: PLAINTEXT (no file and no user). A file that does not
    parse raises ``protocol.SecurityConfigError``."""
    from protocol import ClientSecurity

    security: ClientSecurity | None = None
    if command_config is not None:
        security = ClientSecurity.from_file(command_config)
    else:
        root = data_dir or Path(os.environ.get("ISRSIM_DATA_DIR") or DEFAULT_ROOT)
        path = root / CLIENT_PROPERTIES
        if path.is_file():
            security = ClientSecurity.from_file(path)
    if user is not None:
        if password is None:
            raise CredentialsMismatch("--user needs --password")
        security = (security or ClientSecurity()).with_user(user, password)
    elif password is not None:
        raise CredentialsMismatch("--password needs --user")
    return security


def apply_client_security(
    data_dir: Path | None,
    command_config: Path | None = None,
    user: str | None = None,
    password: str | None = None,
) -> ClientSecurity | None:
    """Resolves the security and makes it the process's default for new connections."""
    from protocol import current_client_security

    security = resolve_client_security(data_dir, command_config, user, password)
    current_client_security.set(security)
    return security
