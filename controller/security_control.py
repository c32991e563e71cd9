"""The controller's ACLs and SCRAM credentials (Kafka's ``AclControlManager`` and ``ScramControlManager``):
CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS, DESCRIBE_USER_SCRAM_CREDENTIALS and ALTER_USER_SCRAM_CREDENTIALS
on a :class:`~server.security.security_metadata.SecurityMetadata`.

Synchronous and without I/O: each method answers a request and says whether the metadata changed; the
shell (``controller.py``) then saves it, hands the new ACLs to its authorizer and sends the new copy to
every live broker. Authorization is the shell's too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from protocol import security_messages as sm
from protocol.admin_bounds import (
    EXCESSIVE_ACL_DELETE_ERROR,
    EXCESSIVE_ACL_DELETE_MESSAGE,
    EXCESSIVE_BATCH_ERROR,
    EXCESSIVE_BATCH_MESSAGE,
    too_many_records,
)
from protocol.errors import Errors
from server.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_new_binding,
)
from server.security.credentials import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS, CredentialStore
from server.security.security_metadata import (
    SCRAM_MECHANISM_IDS,
    SCRAM_MECHANISM_TYPES,
    SecurityMetadata,
    scram_credential_from_salted_password,
)

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def _enum(cls: Callable[[int], E], value: int, what: str) -> E:
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"unknown {what} {value}") from None


def _filter(
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission_type: int,
) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, resource_type, "resource type"),
        resource_name,
        _enum(PatternType, pattern_type, "pattern type"),
        principal,
        host,
        _enum(AclOperation, operation, "operation"),
        _enum(AclPermissionType, permission_type, "permission type"),
    )


class SecurityControl:
    def __init__(self, metadata: SecurityMetadata) -> None:
        self.metadata = metadata

    def _changed(self) -> None:
        self.metadata.version += 1

    # ------------------------------------------------------------------ ACLs

    def create_acls(self, req: sm.CreateAclsRequest) -> tuple[sm.CreateAclsResponse, bool]:
        """One record per new binding, at most MAX_RECORDS_PER_USER_OP (controller/bounds.py): past
        that, nothing is created and every valid creation is answered POLICY_VIOLATION, as Kafka's
        controller answers an operation its BoundedList refuses."""
        results: list[sm.AclCreationResult] = []
        new: set[AclBinding] = set()
        for c in req.creations:
            try:
                binding = AclBinding(
                    ResourcePattern(
                        _enum(ResourceType, c.resource_type, "resource type"),
                        c.resource_name,
                        _enum(PatternType, c.resource_pattern_type, "pattern type"),
                    ),
                    AccessControlEntry(
                        c.principal,
                        c.host,
                        _enum(AclOperation, c.operation, "operation"),
                        _enum(AclPermissionType, c.permission_type, "permission type"),
                    ),
                )
            except ValueError as exc:
                results.append(
                    sm.AclCreationResult(error_code=int(Errors.INVALID_REQUEST), error_message=str(exc))
                )
                continue
            problem = validate_new_binding(binding)
            if problem is not None:
                results.append(
                    sm.AclCreationResult(error_code=int(Errors.INVALID_REQUEST), error_message=problem)
                )
                continue
            if binding not in self.metadata.acls:  # creating an existing binding is a no-op, as in Kafka
                new.add(binding)
            results.append(sm.AclCreationResult())
        if too_many_records(len(new)):
            refused = sm.AclCreationResult(
                error_code=int(EXCESSIVE_BATCH_ERROR), error_message=EXCESSIVE_BATCH_MESSAGE
            )
            return sm.CreateAclsResponse(results=[r if r.error_code else refused for r in results]), False
        self.metadata.acls |= new
        if new:
            self._changed()
        return sm.CreateAclsResponse(results=results), bool(new)

    def describe_acls(self, req: sm.DescribeAclsRequest) -> sm.DescribeAclsResponse:
        try:
            acl_filter = _filter(
                req.resource_type_filter,
                req.resource_name_filter,
                req.pattern_type_filter,
                req.principal_filter,
                req.host_filter,
                req.operation,
                req.permission_type,
            )
        except ValueError as exc:
            return sm.DescribeAclsResponse(error_code=int(Errors.INVALID_REQUEST), error_message=str(exc))
        unknown = acl_filter.unknown_field()
        if unknown is not None:
            return sm.DescribeAclsResponse(
                error_code=int(Errors.INVALID_REQUEST), error_message=f"the filter's {unknown} is UNKNOWN"
            )
        by_pattern: dict[ResourcePattern, list[sm.AclDescription]] = {}
        for b in sorted(self.metadata.acls):
            if acl_filter.matches(b):
                by_pattern.setdefault(b.pattern, []).append(
                    sm.AclDescription(
                        principal=b.entry.principal,
                        host=b.entry.host,
                        operation=int(b.entry.operation),
                        permission_type=int(b.entry.permission_type),
                    )
                )
        return sm.DescribeAclsResponse(
            resources=[
                sm.DescribeAclsResource(
                    resource_type=int(p.resource_type),
                    resource_name=p.name,
                    pattern_type=int(p.pattern_type),
                    acls=acls,
                )
                for p, acls in by_pattern.items()
            ]
        )

    def delete_acls(self, req: sm.DeleteAclsRequest) -> tuple[sm.DeleteAclsResponse, bool]:
        """At most MAX_RECORDS_PER_USER_OP bindings are removed (controller/bounds.py): a filter whose
        matches would pass that removes none and is answered UNKNOWN_SERVER_ERROR, as in Kafka's
        AclControlManager."""
        results: list[sm.DeleteAclsFilterResult] = []
        removed: set[AclBinding] = set()
        acls = sorted(self.metadata.acls)
        for f in req.filters:
            try:
                acl_filter = _filter(
                    f.resource_type_filter,
                    f.resource_name_filter,
                    f.pattern_type_filter,
                    f.principal_filter,
                    f.host_filter,
                    f.operation,
                    f.permission_type,
                )
            except ValueError as exc:
                results.append(
                    sm.DeleteAclsFilterResult(error_code=int(Errors.INVALID_REQUEST), error_message=str(exc))
                )
                continue
            unknown = acl_filter.unknown_field()
            if unknown is not None:
                results.append(
                    sm.DeleteAclsFilterResult(
                        error_code=int(Errors.INVALID_REQUEST),
                        error_message=f"the filter's {unknown} is UNKNOWN",
                    )
                )
                continue
            matching = [b for b in acls if acl_filter.matches(b)]
            if too_many_records(len(removed.union(matching))):
                results.append(
                    sm.DeleteAclsFilterResult(
                        error_code=int(EXCESSIVE_ACL_DELETE_ERROR), error_message=EXCESSIVE_ACL_DELETE_MESSAGE
                    )
                )
                continue
            removed.update(matching)
            results.append(
                sm.DeleteAclsFilterResult(
                    matching_acls=[sm.DeleteAclsMatchingAcl(**b.wire_fields()) for b in matching]
                )
            )
        self.metadata.acls -= removed
        if removed:
            self._changed()
        return sm.DeleteAclsResponse(filter_results=results), bool(removed)

    # ------------------------------------------------------------------ SCRAM credentials

    def describe_scram_credentials(
        self, req: sm.DescribeUserScramCredentialsRequest
    ) -> sm.DescribeUserScramCredentialsResponse:
        store = self.metadata.credentials
        infos: dict[str, list[sm.CredentialInfo]] = {}
        for user, mechanism, credential in store.users():
            infos.setdefault(user, []).append(
                sm.CredentialInfo(
                    mechanism=SCRAM_MECHANISM_TYPES.get(mechanism, 0), iterations=credential.iterations
                )
            )
        if not req.users:  # nil or empty: every user
            return sm.DescribeUserScramCredentialsResponse(
                results=[
                    sm.DescribeUserScramCredentialsResult(user=u, credential_infos=i)
                    for u, i in infos.items()
                ]
            )
        names = [u.name for u in req.users]
        results: list[sm.DescribeUserScramCredentialsResult] = []
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(
                    sm.DescribeUserScramCredentialsResult(
                        user=name,
                        error_code=int(Errors.DUPLICATE_RESOURCE),
                        error_message="Cannot describe SCRAM credentials for the same user twice in a single "
                        "request",
                    )
                )
            elif name not in infos:
                results.append(
                    sm.DescribeUserScramCredentialsResult(
                        user=name,
                        error_code=int(Errors.RESOURCE_NOT_FOUND),
                        error_message="Attempt to describe a user credential that does not exist",
                    )
                )
            else:
                results.append(sm.DescribeUserScramCredentialsResult(user=name, credential_infos=infos[name]))
        return sm.DescribeUserScramCredentialsResponse(results=results)

    def alter_scram_credentials(
        self, req: sm.AlterUserScramCredentialsRequest
    ) -> tuple[sm.AlterUserScramCredentialsResponse, bool]:
        """Each user's changes are applied together or not at all; one result per user, in the order the
        request first names them (Kafka's ``ScramControlManager.alterCredentials``)."""
        ops: dict[str, list[sm.ScramCredentialDeletion | sm.ScramCredentialUpsertion]] = {}
        every: list[sm.ScramCredentialDeletion | sm.ScramCredentialUpsertion] = [
            *req.deletions,
            *req.upsertions,
        ]
        for op in every:
            ops.setdefault(op.name, []).append(op)
        if too_many_records(len(every)):  # one record per change (controller/bounds.py)
            return sm.AlterUserScramCredentialsResponse(
                results=[
                    sm.AlterUserScramCredentialsResult(
                        user=user,
                        error_code=int(EXCESSIVE_BATCH_ERROR),
                        error_message=EXCESSIVE_BATCH_MESSAGE,
                    )
                    for user in ops
                ]
            ), False
        store = self.metadata.credentials
        staged = CredentialStore()
        staged.replace_all(store)
        results: list[sm.AlterUserScramCredentialsResult] = []
        changed = False
        for user, user_ops in ops.items():
            error, message = self._check_user_ops(user, user_ops, store)
            if error != Errors.NONE:
                results.append(
                    sm.AlterUserScramCredentialsResult(
                        user=user, error_code=int(error), error_message=message
                    )
                )
                continue
            for op in user_ops:
                mechanism = SCRAM_MECHANISM_IDS[op.mechanism]
                if isinstance(op, sm.ScramCredentialDeletion):
                    staged.remove(user, mechanism)
                else:
                    staged.put(
                        user,
                        scram_credential_from_salted_password(op.salt, op.salted_password, op.iterations),
                        mechanism,
                    )
            changed = True
            results.append(sm.AlterUserScramCredentialsResult(user=user))
        if changed:
            store.replace_all(staged)
            self._changed()
        return sm.AlterUserScramCredentialsResponse(results=results), changed

    @staticmethod
    def _check_user_ops(
        user: str,
        user_ops: list[sm.ScramCredentialDeletion | sm.ScramCredentialUpsertion],
        store: CredentialStore,
    ) -> tuple[Errors, str | None]:
        if not user:
            return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
        mechanisms = [op.mechanism for op in user_ops]
        if len(set(mechanisms)) != len(mechanisms):
            return Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
        for op in user_ops:
            mechanism = SCRAM_MECHANISM_IDS.get(op.mechanism)
            if mechanism is None or mechanism not in SCRAM_MECHANISMS:
                return Errors.UNSUPPORTED_SASL_MECHANISM, (
                    f"Unknown SCRAM mechanism {op.mechanism}; isrsim supports SCRAM-SHA-256 (1)"
                )
            if isinstance(op, sm.ScramCredentialDeletion):
                if store.get(user, mechanism) is None:
                    return (
                        Errors.RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist",
                    )
            else:
                if op.iterations < MIN_ITERATIONS:
                    return Errors.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (at least {MIN_ITERATIONS})"
                if op.iterations > MAX_ITERATIONS:
                    return Errors.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (at most {MAX_ITERATIONS})"
                if not op.salt or not op.salted_password:
                    return Errors.UNACCEPTABLE_CREDENTIAL, "salt and salted_password must not be empty"
        return Errors.NONE, None


__all__ = ["SecurityControl"]
