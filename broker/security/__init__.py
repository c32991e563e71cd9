"""Security: who a connection is (``KafkaPrincipal``), how it proved it (TLS, SASL) and what it may do
(the authorizer). SPEC.md section 8."""
