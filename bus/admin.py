"""Topic creation and broker checks."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from trainmedic.bus.clients import admin as _admin
from trainmedic.bus.clients import served
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError


def list_topics(settings: KafkaSettings, timeout_s: float = 10.0) -> set[str]:
    """Names of the broker's topics; raises KafkaError when the broker does not answer."""
    return set(describe_topics(settings, timeout_s))


def describe_topics(settings: KafkaSettings, timeout_s: float = 10.0) -> dict[str, int]:
    """The broker's topics and their partition counts; raises KafkaError when the broker does not answer."""
    admin = _admin(settings)
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as err:
        served(admin, last=True)  # why no broker answered, from librdkafka's lines, before the error
        raise KafkaError(settings.unanswered(round(timeout_s), err.args[0].str()),
                         code=err.args[0].name(), retryable=True) from None
    return {name: len(topic.partitions) for name, topic in meta.topics.items() if topic.error is None}


def wait_for_broker(settings: KafkaSettings, timeout_s: float = 60.0) -> None:
    """Block until the broker accepts clients or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            list_topics(settings, timeout_s=min(5.0, max(1.0, deadline - time.monotonic())))
            return
        except KafkaError:
            if time.monotonic() >= deadline:
                raise


def wait_for_topics(settings: KafkaSettings, names: list[str], timeout_s: float = 30.0) -> dict[str, int]:
    """Partition counts of `names` once every one has leaders; raises KafkaError after `timeout_s`.

    A topic created a moment ago may not be in the broker's metadata yet, and a consumer group
    that joins then is assigned nothing of it until its next metadata refresh (minutes)."""
    admin = _admin(settings)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            meta = admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as err:
            served(admin, last=True)
            raise KafkaError(f"no metadata from {settings.bootstrap}: {err.args[0].str()}",
                             code=err.args[0].name(), retryable=True) from None
        ready = {name: len(t.partitions) for name, t in meta.topics.items()
                 if name in names and t.error is None and t.partitions
                 and all(p.leader >= 0 for p in t.partitions.values())}
        if len(ready) == len(set(names)):
            return ready
        if time.monotonic() >= deadline:
            missing = sorted(set(names) - set(ready))
            raise KafkaError(f"topics {', '.join(missing)} do not exist (or have no leader); "
                             "create them with `trainmedic topics create`")
        served(admin)  # its log lines as they come, not all at the end
        time.sleep(0.2)


def create_topics(
    settings: KafkaSettings, *, partitions: int | None = None, replication_factor: int = -1,
    timeout_s: float = 30.0,
) -> dict[str, str]:
    """Create every trainmedic topic that is missing, and bring those that exist to the settings a
    topic must keep (`TopicSpec.enforced`: the telemetry's broker clock). Returns name -> "created",
    "updated" or "exists".

    `partitions` overrides each topic's default; replication -1 takes the broker's default.
    """
    existing = list_topics(settings, timeout_s)
    wanted = settings.topics.all()
    admin = _admin(settings)
    result = {name: "exists" for name in wanted if name in existing}
    new = [
        NewTopic(
            name, num_partitions=partitions or spec.partitions,
            replication_factor=replication_factor, config=spec.config(),
        )
        for name, spec in wanted.items() if name not in existing
    ]
    result.update(_create(admin, new, timeout_s))
    kept = {name: spec.enforced() for name, spec in wanted.items() if name in existing and spec.enforced()}
    result.update(_enforce(admin, kept, timeout_s))
    return result


def _enforce(admin: AdminClient, wanted: dict[str, dict[str, str]], timeout_s: float) -> dict[str, str]:
    """Set each topic's `wanted` settings where the broker has others (only those keys, the rest
    untouched). Returns name -> "updated" or "exists"."""
    if not wanted:
        return {}
    have = _describe(admin, list(wanted), timeout_s)
    stale = {name: config for name, config in wanted.items()
             if any(have[name].get(key) != value for key, value in config.items())}
    result = {name: "exists" for name in wanted if name not in stale}
    if not stale:
        return result
    set_ = AlterConfigOpType.SET
    resources = [ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=set_) for key, value in config.items()])
        for name, config in stale.items()]
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as err:
            raise KafkaError(f"cannot set {stale[resource.name]} on topic {resource.name}: "
                             f"{err.args[0].str()}", code=err.args[0].name()) from None
        result[resource.name] = "updated"
    return result


def _describe(admin: AdminClient, names: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
    """The broker's configuration of each topic named (every key, defaults included)."""
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    found = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entries = future.result()
        except KafkaException as err:
            raise KafkaError(f"cannot read the configuration of topic {resource.name}: {err.args[0].str()}",
                             code=err.args[0].name()) from None
        found[resource.name] = {key: entry.value for key, entry in entries.items()}
    return found


def delete_topics(settings: KafkaSettings, names: list[str], timeout_s: float = 30.0) -> None:
    """Delete these topics (ones already gone are fine), waiting for the controller (tens of ms).
    Never with an operation timeout of 0: a KRaft controller then answers success and deletes
    nothing (which left every test's topics on the broker)."""
    if not names:
        return
    admin = _admin(settings)  # kept alive until the futures are done: a destroyed client fails them
    futures = admin.delete_topics(names, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as err:
            code = err.args[0]
            if code.code() != code.UNKNOWN_TOPIC_OR_PART:
                raise KafkaError(f"cannot delete topic {name}: {code.str()}", code=code.name()) from None


def ensure_topic(settings: KafkaSettings, name: str, *, partitions: int, config: dict[str, str],
                 timeout_s: float = 30.0) -> str:
    """Create one topic (not a contract topic: e.g. a service's own state) unless it exists."""
    if name in list_topics(settings, timeout_s):
        return "exists"
    topic = NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config)
    return _create(_admin(settings), [topic], timeout_s)[name]


def _create(admin: AdminClient, new: list[NewTopic], timeout_s: float) -> dict[str, str]:
    result: dict[str, str] = {}
    if not new:
        return result
    for name, future in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            future.result()
            result[name] = "created"
        except KafkaException as err:
            code = err.args[0]
            if code.code() != code.TOPIC_ALREADY_EXISTS:
                raise KafkaError(f"cannot create topic {name}: {code.str()}", code=code.name()) from None
            result[name] = "exists"
    return result


def grant_roles(settings: KafkaSettings, prefix: str, timeout_s: float = 30.0,
                nodes: tuple[str, ...] | None = None) -> int | None:
    """Grant every role its ACLs (bus/acls.py) for the topics under `prefix`, in one request, and every
    node principal (`nodes`, by default the broker's `node_users`) its own. Returns how many bindings,
    or None when the broker has no authorizer (a plain broker)."""
    from trainmedic.bus.acls import bindings

    admin = _admin(settings)
    if nodes is None:
        nodes = node_users(settings, timeout_s)
    wanted = bindings(prefix, nodes)
    for future in admin.create_acls(wanted, request_timeout=timeout_s).values():
        try:
            future.result()
        except KafkaException as err:
            code = err.args[0]
            if code.code() == code.SECURITY_DISABLED:
                return None
            raise KafkaError(f"cannot grant the roles' ACLs for prefix {prefix!r}: {code.str()}",
                             code=code.name()) from None
    _until_in_force(admin, prefix, len(wanted), timeout_s)
    return len(wanted)


def node_users(settings: KafkaSettings, timeout_s: float = 30.0) -> tuple[str, ...]:
    """The node principals' SCRAM users on the broker (`node-NAME`); none on a plain broker."""
    from trainmedic.bus.acls import NODE

    admin = _admin(settings)  # kept alive until the future is done: a destroyed client fails it
    try:
        found = admin.describe_user_scram_credentials(request_timeout=timeout_s).result()
    except KafkaException as err:
        code = err.args[0]
        if code.code() in (code.SECURITY_DISABLED, code.UNSUPPORTED_SASL_MECHANISM):
            return ()
        raise KafkaError(f"cannot list the SCRAM users: {code.str()}", code=code.name()) from None
    return tuple(sorted(name for name in found if name.startswith(NODE)))


def _until_in_force(admin: AdminClient, prefix: str, count: int, timeout_s: float) -> None:
    """Wait until the broker's authorizer holds `count` bindings under `prefix`: the controller
    acknowledges new ACLs a moment before the broker applies them."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as Type

    every = AclBindingFilter(Type.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.describe_acls(every, request_timeout=timeout_s).result()
        if sum(b.name.startswith(prefix) for b in found) >= count or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def revoke_roles(settings: KafkaSettings, prefix: str, timeout_s: float = 30.0) -> None:
    """Remove the ACLs `grant_roles` gave for `prefix`, the node principals' too (none on a plain broker)."""
    from trainmedic.bus.acls import filters

    admin = _admin(settings)
    for future in admin.delete_acls(filters(prefix, node_users(settings, timeout_s)),
                                    request_timeout=timeout_s).values():
        try:
            future.result()
        except KafkaException as err:
            code = err.args[0]
            if code.code() != code.SECURITY_DISABLED:
                raise KafkaError(f"cannot revoke the ACLs for prefix {prefix!r}: {code.str()}",
                                 code=code.name()) from None


def remove_prefix(settings: KafkaSettings, prefix: str) -> list[str]:
    """A deployment removed: every topic whose name starts with `prefix` deleted (gone when this
    returns; services' own topics too, their app ids start with it) and the roles' ACLs on the
    prefix revoked. The topics deleted."""
    names = sorted(name for name in list_topics(settings) if name.startswith(prefix))
    delete_topics(settings, names)
    revoke_roles(settings, prefix)
    return names


def set_scram_users(settings: KafkaSettings, passwords: dict[str, str], timeout_s: float = 30.0) -> None:
    """Create or update SCRAM-SHA-512 users (name -> password)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upserts = [UserScramCredentialUpsertion(name, info, pw.encode()) for name, pw in passwords.items()]
    admin = _admin(settings)  # kept alive until the futures are done: a destroyed client fails them
    futures = admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s)
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as err:
            raise KafkaError(f"cannot set the SCRAM credential of {name}: {err.args[0].str()}",
                             code=err.args[0].name()) from None


def retire_users(settings: KafkaSettings, names: tuple[str, ...], timeout_s: float = 30.0) -> None:
    """Principals that no longer exist (`acls.RETIRED`, a removed node): every ACL naming them revoked,
    on any prefix, then their SCRAM credentials deleted; one that was never there is no error."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramMechanism,
        UserScramCredentialDeletion,
    )

    admin = _admin(settings)
    # The ACLs first: a client still connected as the user is refused at its next request, and an
    # ACL removal that fails leaves the user able to log in, never ACLs of a user gone.
    acls = [AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{name}", None,
                             AclOperation.ANY, AclPermissionType.ANY) for name in names]
    for future in admin.delete_acls(acls, request_timeout=timeout_s).values():
        try:
            future.result()
        except KafkaException as err:
            raise KafkaError(f"cannot revoke the ACLs of {', '.join(names)}: {err.args[0].str()}",
                             code=err.args[0].name()) from None
    gone = [UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_512) for name in names]
    for name, future in admin.alter_user_scram_credentials(gone, request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as err:
            if err.args[0].name() != "RESOURCE_NOT_FOUND":
                raise KafkaError(f"cannot delete the SCRAM credential of {name}: {err.args[0].str()}",
                                 code=err.args[0].name()) from None
