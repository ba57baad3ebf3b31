"""The compose stack's broker set up as `trainmedic broker start` sets up the local one: a SCRAM user
per role, the topics, every role's ACLs, each role's settings in /credentials/ROLE.json (0600); run by
the `kafka-init` service (docs/security.md, "The broker protects itself").
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from trainmedic.bus import credentials
from trainmedic.bus.acls import GRANTS
from trainmedic.bus.admin import create_topics, grant_roles, set_scram_users, wait_for_broker
from trainmedic.bus.settings import KafkaSettings
from trainmedic.local.broker_auth import role_config, write_private
from trainmedic.schemas import DEFAULT_PREFIX

FOLDER = Path(os.environ.get("TRAINMEDIC_CREDENTIALS_DIR", "/credentials"))
SECRETS = FOLDER / "secrets.json"


def main() -> int:
    """Set the broker up; idempotent. The admin connects with SASL/PLAIN on the broker's internal
    listener (its password is TRAINMEDIC_KAFKA_ADMIN_PASSWORD, which the broker's JAAS settings hold
    too); roles connect with SCRAM-SHA-512 on the client listeners, each role's password made once
    and kept in the credentials volume."""
    admin = KafkaSettings(
        bootstrap=os.environ["TRAINMEDIC_KAFKA_BOOTSTRAP"],
        topic_prefix=os.environ.get("TRAINMEDIC_TOPIC_PREFIX", DEFAULT_PREFIX),
        extra={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin"},
        secrets={"sasl.password": os.environ["TRAINMEDIC_KAFKA_ADMIN_PASSWORD"]},
    )
    wait_for_broker(admin, 120.0)
    found = json.loads(SECRETS.read_text()) if SECRETS.exists() else {}
    passwords = {role: found.get(role) or secrets.token_urlsafe(24) for role in GRANTS}
    credentials.write_roles(FOLDER, {role: role_config(role, passwords[role]) for role in GRANTS})
    write_private(SECRETS, json.dumps(passwords, indent=2))
    set_scram_users(admin, passwords)
    created = create_topics(admin)
    grant_roles(admin, admin.topic_prefix)
    print(f"{len(passwords)} SCRAM users, {sum(v == 'created' for v in created.values())} topics created, "
          f"ACLs granted for {admin.topic_prefix!r}; credentials in {FOLDER}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
