"""What every node kind runs on (Kafka's ``server`` and ``server-common`` modules): the socket server
(``network``), the request channel and handler pool (``request_channel``), memory pool and connection
quotas, configuration base (``config``), security (``security/``), metrics (``metrics/``), the journal
writer, the controller channel, back-off and the event-loop stall log. Brokers and controllers import
it; it imports neither."""
