"""Security: who a connection is (``KafkaPrincipal``), how it proved it (TLS, SASL) and what it may do
(the authorizer). See docs/security.md."""
