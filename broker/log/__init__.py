"""The partition log: ``log`` (the :class:`~broker.log.log.Log` of one replica), ``segment`` and ``index``
(its files), ``loader`` (start-up recovery), ``leader_epoch_cache`` and ``checkpoint`` (Kafka's text
checkpoint files)."""
