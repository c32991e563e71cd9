"""What the CLI says about a process's configuration before it starts: unknown keys (from the file or
``--override``) and ``ISRSIM_*`` environment variables that name no key. Kafka only logs the first; a
misspelt variable in a compose file is otherwise silently ignored."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import click

ENV_PREFIX = "ISRSIM_"
# Variables isrsim's own tools read (not configuration keys): the CLI's, the slow-step log every node
# honours, what `isrsim run` gives the user's program (which may itself call the CLI), the fuzzer's and
# the bench's knobs, and the compose build's.
CLI_VARIABLES = frozenset(
    {
        "ISRSIM_DATA_DIR",
        "ISRSIM_COMMAND_CONFIG",
        "ISRSIM_SLOW_STEP_MS",
        "ISRSIM_SEED",
        "ISRSIM_CLIENT_PROPERTIES",
        "ISRSIM_FUZZ_SECONDS",
        "ISRSIM_FUZZ_INPUTS",
        "ISRSIM_FUZZ_SEED",
        "ISRSIM_BENCH_LOG_LEVEL",
        "ISRSIM_HOST_WORKLOAD",
        "ISRSIM_DEBIAN_MIRROR",
    }
)


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def unknown_variables(keys: Iterable[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """``ISRSIM_*`` variables that are neither a key of ``keys`` nor one the CLI reads."""
    env = os.environ if environ is None else environ
    known = {env_name(k) for k in keys} | CLI_VARIABLES
    return sorted(name for name in env if name.startswith(ENV_PREFIX) and name not in known)


def warn_unknown(what: str, unknown_keys: Iterable[str], keys: Iterable[str]) -> None:
    """One warning line on stderr per unknown key and per unknown ``ISRSIM_*`` variable."""
    for key in unknown_keys:
        click.echo(f"warning: {what}: unknown configuration key {key!r} ignored", err=True)
    for name in unknown_variables(keys):
        click.echo(
            f"warning: {what}: environment variable {name} names no configuration key; ignored", err=True
        )
