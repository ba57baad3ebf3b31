"""Slurm's host lists expanded as `scontrol show hostnames` does, and refused when they are not lists."""

from __future__ import annotations

import pytest

from trainmedic.ops.slurm.hostlist import HostlistError, expand


@pytest.mark.parametrize(("hostlist", "names"), [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("gpu[08-11],login", ["gpu08", "gpu09", "gpu10", "gpu11", "login"]),
    ("n[1,3-4,7]", ["n1", "n3", "n4", "n7"]),
    ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
    ("n[1-2],n2,n1", ["n1", "n2"]),
    ("a-b.c,d[9-10]x", ["a-b.c", "d9x", "d10x"]),
])
def test_a_host_list_names_its_hosts_in_slurms_order(hostlist: str, names: list[str]) -> None:
    assert expand(hostlist) == names


@pytest.mark.parametrize("hostlist", ["", ",", "n[1-3", "n1-3]", "n[[1]]", "n[a-b]", "n[3-1]", "n[1-]",
                                      "n[]"])
def test_what_is_not_a_host_list_is_refused(hostlist: str) -> None:
    with pytest.raises(HostlistError):
        expand(hostlist)


def test_a_host_list_that_names_too_many_hosts_is_refused_before_it_is_built() -> None:
    with pytest.raises(HostlistError, match="more than"):
        expand("n[0-9999]-g[0-9999]", limit=1000)
    with pytest.raises(HostlistError, match="too long"):
        expand("n[0-99999999999]")
