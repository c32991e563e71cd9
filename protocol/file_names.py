"""The names of the files more than one package writes or reads, defined once (docs/layout.md,
Vocabularies): a cluster root's, a node directory's, a node's security directory's.

A name one module alone uses stays in that module (a segment's suffix, a checkpoint's name beside the
code that writes it).
"""

from __future__ import annotations

# A cluster root (``isrsim cluster up``'s ``--data-dir``).
CLUSTER_FILE = "cluster.json"  # the nodes, their ports and processes (kit.cluster_files)
FAULTS_FILE = "faults.jsonl"  # every fault applied or ended (kit.fault_journal; the report's bands)
CHAOS_FILE = "chaos.json"  # the chaos nemesis's schedule (lab.chaos)
CLIENT_PROPERTIES = "client.properties"  # a client's security settings (kit.client_security)

# A node's directory.
EVENTS_FILE = "events.jsonl"  # a node's journal (server.journal)
ACKED_FILE = "acked.jsonl"  # a broker's acknowledgement journal, beside its events.jsonl
ACTIVITY_FILE = "client-activity.jsonl"  # what clients asked a broker and were told, per second
SERVED_FILE = "served.jsonl"  # what a broker served to consumers (docs/your-application.md)
META_PROPERTIES = "meta.properties"  # a log directory's identity (storage.log_manager)

# A node's security directory (``<node dir>/security/``): SCRAM credentials and ACLs.
SECURITY_DIR = "security"
CREDENTIALS_FILE = "credentials.json"
ACLS_FILE = "acls.json"

__all__ = [
    "ACKED_FILE",
    "ACLS_FILE",
    "ACTIVITY_FILE",
    "CHAOS_FILE",
    "CLIENT_PROPERTIES",
    "CLUSTER_FILE",
    "CREDENTIALS_FILE",
    "EVENTS_FILE",
    "FAULTS_FILE",
    "META_PROPERTIES",
    "SECURITY_DIR",
    "SERVED_FILE",
]
