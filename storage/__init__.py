"""The partition log and what lies beside it (Kafka's ``storage`` module): ``log`` (the
:class:`~storage.log.Log` of one replica), ``segment``, ``index`` and ``time_index`` (its files),
``loader`` (start-up recovery), ``log_validator`` (the leader's ``LogValidator``), ``leader_epoch_cache``,
``producer_state`` and ``checkpoint`` (Kafka's text checkpoint files), and ``log_manager`` (a data
directory's logs)."""
