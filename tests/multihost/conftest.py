"""The multi-host test bed's fixtures. It needs root (namespaces, links, nftables): a machine where the
user is not root skips these tests with one line saying so; in CI (CI=true) a bed that cannot be built
fails them, as anything else that cannot run there would."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.multihost.bed import NEEDS, Bed, remove, sweep
from tests.multihost.deploy import Cluster, Site

NODES = ("n1", "n2", "n3")


def unable() -> str | None:
    """Why no bed can be built here, or None."""
    if os.geteuid() != 0:
        return "the multi-host bed needs root (network namespaces); run as root or in CI"
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    if missing:
        return (f"the multi-host bed needs {', '.join(missing)}: `make test` installs them "
                "(apt-get install iproute2 util-linux nftables)")
    return None


@pytest.fixture(scope="session")
def bed_allowed() -> None:
    reason = unable()
    if reason is None:
        sweep()  # what an earlier run killed before its clean-up left
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the multi-host tests: {reason}")
    pytest.skip(reason)


@contextmanager
def made_bed(root: Path) -> Iterator[Bed]:
    """An empty bed (a bridge, no host yet), closed at the end whatever happened in it."""
    try:
        made = Bed(root)
    except BaseException:
        remove(os.getpid())  # a bridge made before the failure
        raise
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def bed(bed_allowed: None, tmp_path: Path) -> Iterator[Bed]:
    with made_bed(tmp_path) as made:
        yield made


@pytest.fixture(scope="module")
def site(bed_allowed: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Site]:
    """The broker hosts (a module's BROKERS, else one), a control and a standby host and three node
    hosts with their files (docs/deployment.md), shared by a module's tests; each test deploys under
    a topic prefix of its own (`cluster`)."""
    with made_bed(tmp_path_factory.mktemp("site")) as made:
        built = Site(made, NODES, getattr(request.module, "BROKERS", ("kafka",)))
        try:
            built.build()
            yield built
        finally:
            built.close()


@pytest.fixture
def cluster(site: Site) -> Iterator[Callable[..., Cluster]]:
    """Deploys the services (`standby`: a second coordinator; `node_services`: a `trainmedic node` on
    each node host; coordinator settings as keywords) and stops them after the test."""
    made: list[Cluster] = []

    def deploy(standby: bool = False, node_services: bool = True, **coordinator: object) -> Cluster:
        one = Cluster(site, coordinator=coordinator, standby=standby, node_services=node_services)
        made.append(one)
        one.start()
        return one

    try:
        yield deploy
    finally:
        for one in made:
            one.close()
        for name, host in site.bed.hosts.items():  # the next test finds every host as it was
            host.skew_s = 0.0
            site.bed.heal(name)
            if name not in site.brokers:
                site.bed.kill(name)  # what a killed service left running: its ranks
