"""DESCRIBE_ACLS, CREATE_ACLS and DELETE_ACLS (29-31) sent to a broker, in either encoding (docs/security.md,
docs/clients.md): forwarded to the active controller, which owns the cluster's ACLs (Kafka's
``AclControlManager``; KIP-590 forwards CreateAcls and DeleteAcls), so one answer holds the committed ACLs
whichever broker a client asked. The principal needs Describe (29) or Alter (30, 31) on the cluster first
(the specs' ``cluster_operation``, asked before the handler runs); with no authorizer configured the broker
answers SECURITY_DISABLED, as Kafka does."""

from __future__ import annotations

from typing import Any

from broker.admin_apis import AdminApis
from protocol import security_messages as sm
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from server.request_channel import Request, error_body

# Kafka's request.timeout.ms default: how long a forwarded ACL request may wait for the controller.
ACL_FORWARD_TIMEOUT_MS = 30_000


def _forward(admin: AdminApis, request: Request, api_key: ApiKeys, req: Any) -> None:
    if not admin.auth.enabled:
        request.complete(error_body(Errors.SECURITY_DISABLED, "No Authorizer is configured."))
        return

    def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
        request.complete(answer if answer is not None else error_body(error, why))

    admin._forward(request, api_key, req, ACL_FORWARD_TIMEOUT_MS, respond)


def handle_describe_acls(admin: AdminApis, request: Request, req: sm.DescribeAclsRequest) -> None:
    _forward(admin, request, ApiKeys.DESCRIBE_ACLS, req)


def handle_create_acls(admin: AdminApis, request: Request, req: sm.CreateAclsRequest) -> None:
    _forward(admin, request, ApiKeys.CREATE_ACLS, req)


def handle_delete_acls(admin: AdminApis, request: Request, req: sm.DeleteAclsRequest) -> None:
    _forward(admin, request, ApiKeys.DELETE_ACLS, req)
