"""The local-cluster kit: everything a program needs to run and use a cluster of isrsim processes on this
machine, with no command line of its own.

- the files: ``cluster_files`` (a cluster root, ``cluster.json``), ``security_files`` (CA, certificates,
  SCRAM users of a secure cluster), ``fault_journal`` (``faults.jsonl``);
- the processes: ``processes`` (the one launcher: start a node, wait for its start line, signal, stop),
  ``local_cluster`` (layout and configs, start and stop a whole cluster, process faults), ``health``
  (healthy, converged), ``unmanaged`` (a stand-in controller for brokers no controller manages), ``ports``;
- faults on the network: ``net_faults``;
- clients: ``node_query`` (one-shot requests), ``cluster_client`` (bootstrap, metadata, connections),
  ``producer`` and ``consumer``, ``console`` and ``console_producer`` (Kafka's console tools' formats),
  ``client_security`` (how a client authenticates).

The command line (``cli``), the lab (``lab``) and the tests' fixtures all use it.
"""
