"""The kit's own error: a problem with a message for the user (what is wrong and how to fix it, in one
line), which the command line shows as ``Error: MESSAGE`` with exit code 1."""

from __future__ import annotations


class KitError(Exception):
    """A problem the user can fix, or a bug named in one line; the message says which."""


class ClusterError(KitError):
    """A problem with a local cluster (its files, its processes) the user can fix; the message says how."""
