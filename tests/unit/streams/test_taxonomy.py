from __future__ import annotations

import pytest

from trainmedic.schemas.incident import Action, Severity
from trainmedic.streams.core.taxonomy import CATEGORIES, XID_CATEGORY, classify_error, xid_category

TAXONOMY_MD = {  # category -> severity, as the table in TAXONOMY.md says
    "node_lost": "SEV1", "gpu_lost": "SEV1", "gpu_ecc": "SEV1", "nvlink": "SEV1",
    "gpu_driver": "SEV1", "process_exit": "SEV2", "cuda_error": "SEV2", "hang": "SEV2",
    "nccl_error": "SEV2", "software_error": "SEV2", "link_flap": "SEV3", "network": "SEV3",
    "straggler": "WARN", "thermal": "WARN", "telemetry_gap": "WARN", "storm": "SEV2",
}
ALERT_ONLY = {"storm"}  # categories whose action is `alert` at any severity (TAXONOMY.md says so)


def test_every_category_of_the_taxonomy_with_its_severity_and_action():
    assert {name: c.severity.value for name, c in CATEGORIES.items()} == TAXONOMY_MD
    actions = {Severity.SEV1: Action.RECONFIGURE, Severity.SEV2: Action.RESTART,
               Severity.SEV3: Action.REATTEMPT, Severity.WARN: Action.ALERT}
    assert all(c.action is actions[c.severity] for c in CATEGORIES.values() if c.name not in ALERT_ONLY)
    assert all(CATEGORIES[c].action is Action.ALERT for c in ALERT_ONLY)
    assert all(CATEGORIES[c].action_at(s) is Action.ALERT for c in ALERT_ONLY for s in Severity)


def test_only_job_reports_are_limited_and_hardware_never():
    """Node evidence is never rate-limited (streams/core/limits.py): a storm of job reports must not
    hide a node's real failure."""
    from trainmedic.streams.core.taxonomy import Source

    node = {"node_lost", "gpu_lost", "gpu_ecc", "nvlink", "gpu_driver", "link_flap", "thermal",
            "telemetry_gap"}
    assert {name for name, c in CATEGORIES.items() if c.source is Source.NODE} == node
    assert {name for name, c in CATEGORIES.items() if c.source is Source.DETECTOR} == {"storm"}


def test_hardware_is_more_specific_than_any_software_explanation():
    hardware = ("gpu_ecc", "nvlink", "gpu_lost", "gpu_driver", "node_lost")
    software = ("cuda_error", "software_error", "process_exit", "network", "nccl_error")
    worst_hw = max(CATEGORIES[c].specificity for c in hardware)
    assert all(CATEGORIES[c].specificity > worst_hw for c in software)


@pytest.mark.parametrize(("xids", "category"), [
    ((79,), "gpu_lost"), ((48,), "gpu_ecc"), ((63,), "gpu_ecc"), ((64,), "gpu_ecc"),
    ((94,), "gpu_ecc"), ((95,), "gpu_ecc"), ((140,), "gpu_ecc"), ((74,), "nvlink"),
    ((119,), "gpu_driver"), ((120,), "gpu_driver"), ((154,), "gpu_driver"),
    ((62,), "gpu_driver"), ((13,), "cuda_error"), ((31,), "cuda_error"),
    ((43,), "cuda_error"), ((45,), "cuda_error"), ((68,), "cuda_error"),
    ((13, 79), "gpu_lost"), ((79, 48), "gpu_ecc"), ((92,), None), ((), None),
])
def test_xid_tables(xids, category):
    found = xid_category(xids)
    assert (found[0] if found else None) == category


def test_application_xids_never_isolate_a_node():
    app = [x for x, c in XID_CATEGORY.items() if CATEGORIES[c].severity is not Severity.SEV1]
    assert sorted(app) == [13, 31, 43, 45, 68]


@pytest.mark.parametrize(("text", "category"), [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_error"),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error", "nccl_error"),
    ("torch.distributed.DistBackendError: Watchdog caught collective operation timeout",
     "nccl_error"),
    ("RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection reset by peer", "nccl_error"),
    ("torch.distributed.DistNetworkError: Connection reset by peer", "nccl_error"),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "network"),
    ("ConnectionRefusedError: [Errno 111] Connection refused", "network"),
    ("ValueError: Expected input batch_size (32) to match target batch_size (31)",
     "software_error"),
    ("KeyError: 'labels'", "software_error"),
])
def test_error_messages_are_classified_by_the_pattern_table(text, category):
    assert classify_error(text) == category
