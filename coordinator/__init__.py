"""The coordinators (Kafka's ``group-coordinator`` and ``transaction-coordinator`` modules): pure state
machines over a replicated internal topic, each under a trio shell that writes through the broker's append
path (``partition_writer.PartitionWriter``). ``group/``: consumer groups over ``__consumer_offsets``."""
