"""``-o/--output text|json`` for the commands scripts read (kafka-topics, rpk ``--format json``)."""

from __future__ import annotations

import json
from typing import Any

import click

OUTPUT_OPTION = click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people; json (one document on stdout) for scripts.",
)


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, sort_keys=False, default=str))
