"""Alert when a night fails: a Prefect automation that sends a notification block's message (SPEC §15).

The ``nightly`` flow ends Failed on a regression (and when a night could not
run at all); this automation turns that state into a message through any
notification block saved on the server -- Slack, Microsoft Teams,
PagerDuty, email, a custom webhook. Run it once per server::

    PREFECT_API_URL=http://127.0.0.1:4200/api python deployments/alerts.py --block slack-webhook/nightly-alerts

It matches runs of the flow named ``nightly`` (deployment runs and
``tribunal nightly`` runs recorded on the server alike) and replaces an
earlier automation of the same name, so running it again is harmless.
Nothing happens at import time.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from uuid import UUID

from prefect.events.actions import SendNotification
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

AUTOMATION_NAME = "tribunal-nightly-failed"
FLOW_NAME = "nightly"


def nightly_alert(block_document_id: UUID) -> AutomationCore:
    """The automation: a run of the ``nightly`` flow entered Failed -> send the block a message naming the night."""
    return AutomationCore(
        name=AUTOMATION_NAME,
        description="A night of a tribunal series ended Failed: a regression, or a night that could not run.",
        enabled=True,
        trigger=EventTrigger(
            expect={"prefect.flow-run.Failed"},
            match_related={"prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME},
            posture=Posture.Reactive, threshold=1, within=timedelta(0),
        ),
        actions=[SendNotification(
            block_document_id=block_document_id,
            subject="tribunal: {{ flow_run.name }} failed",
            body=("{{ flow_run.name }} ended Failed: {{ flow_run.state.message }}\n"
                  "The comparison is the run's night-<experiment> artifact: {{ flow_run|ui_url }}"),
        )],
    )


def install_alert(block: str) -> UUID:
    """Create (replacing any earlier one) the automation that notifies ``block``, given as ``<block-type>/<name>``."""
    from prefect.client.orchestration import get_client

    block_type, _, name = block.partition("/")
    if not block_type or not name:
        raise SystemExit(f"--block {block!r}: give <block-type-slug>/<block-name>, e.g. slack-webhook/nightly-alerts")
    with get_client(sync_client=True) as client:
        document = client.read_block_document_by_name(name=name, block_type_slug=block_type)
        for earlier in client.read_automations_by_name(AUTOMATION_NAME):
            client.delete_automation(earlier.id)
        return client.create_automation(nightly_alert(document.id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", required=True,
                        help="The notification block to send to, <block-type-slug>/<block-name>.")
    automation = install_alert(parser.parse_args().block)
    print(f"automation {AUTOMATION_NAME} ({automation}): a Failed run of flow {FLOW_NAME!r} notifies the block")


if __name__ == "__main__":
    main()
