"""The two baselines, both "stop everything, restart from the checkpoint": `restart-all` (Megatron run
by hand or a batch scheduler) and `elastic` (torchrun / TorchElastic), which differ in when they
notice a fault and at what sizes they restart (docs/simulation.md, "The policies").
"""

from __future__ import annotations

from trainmedic.simulate.faults import Fault
from trainmedic.simulate.progress import Down, Restore
from trainmedic.simulate.scenario import Cost, ElasticCosts, RestartAllCosts
from trainmedic.simulate.world import Policy, World

# What the torchrun agent sees at once: the rank's process dies (a GPU fault raises a CUDA error in
# it; a reset connection raises in the collective). Everything else is silent until the timeout.
CRASHES = frozenset({"process_exit", "software_error", "cuda_error", "gpu_lost", "gpu_ecc", "gpu_driver",
                     "nvlink", "network"})


class Restarting(Policy):
    """Jobs on nodes; a fault stops the job until it is noticed, then it is restarted from the
    checkpoint on the nodes it can get. Subclasses say when a fault is noticed and at what size.
    A node that breaks while its job restarts makes that restart fail: it starts over at once.
    No severity grading and no plan across jobs: each job for itself."""

    restart: Cost

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.held: dict[str, list[str]] = {}  # job -> its nodes, in rank order
        self.owner: dict[str, str] = {}
        self.free: set[str] = set()
        self.waiting: list[str] = []  # jobs waiting for nodes, oldest first
        self.restarting: set[str] = set()
        self.epoch: dict[str, int] = {}  # bumped on every change: a timer of an older epoch is void

    def start(self) -> None:
        nodes = iter(node.id for node in self.world.nodes)
        for model in self.world.scenario.jobs:
            self.held[model.id] = [next(nodes) for _ in range(model.nodes)]
            self.owner.update(dict.fromkeys(self.held[model.id], model.id))
            self.epoch[model.id] = 0
        self.free = set(nodes)

    def detect_s(self, fault: Fault) -> float:
        raise NotImplementedError

    def size(self, job: str, available: int) -> int:
        """The size to restart at with `available` healthy nodes, or 0 to wait for repairs."""
        raise NotImplementedError

    def fault(self, fault: Fault) -> None:
        job = self.owner.get(fault.node)
        if job is None:
            self.free.discard(fault.node) if fault.breaks_node else None
            return
        book = self.world.books[job]
        if book.stop(self.world.now):
            self.world.at(self.world.now + self.detect_s(fault), self._noticed, job, self._bump(job))
        elif fault.breaks_node and job in self.restarting:
            self._relaunch(job)  # the launch on the broken node fails: start over

    def repaired(self, node: str) -> None:
        if node not in self.owner:
            self.free.add(node)
        for job in list(self.waiting):
            self.waiting.remove(job)
            self._relaunch(job)

    def _bump(self, job: str) -> int:
        self.epoch[job] += 1
        return self.epoch[job]

    def _noticed(self, job: str, epoch: int) -> None:
        if epoch == self.epoch[job]:
            self._relaunch(job)

    def _relaunch(self, job: str) -> None:
        """Restart the job on its healthy nodes and spares, at the size `size` allows, or wait."""
        now, book = self.world.now, self.world.books[job]
        keep = [n for n in self.held[job] if self.world.healthy(n)]
        for node in self.held[job]:
            if not self.world.healthy(node):
                del self.owner[node]
        size = self.size(job, len(keep) + len(self.free))
        self._bump(job)
        self.restarting.discard(job)
        if size == 0:
            self.held[job] = keep
            book.wait(now, Down.REPAIR_WAIT)
            self.waiting.append(job)
            return
        extra = sorted(self.free)[:max(0, size - len(keep))]
        self.free.difference_update(extra)
        self.free.update(keep[size:])
        for node in keep[size:]:
            del self.owner[node]
        self.held[job] = keep[:size] + extra
        self.owner.update(dict.fromkeys(extra, job))
        book.wait(now, Down.RESTART)
        self.restarting.add(job)
        self.world.at(now + self.restart.at(size), self._resumed, job, self.epoch[job])

    def _resumed(self, job: str, epoch: int) -> None:
        if epoch != self.epoch[job]:
            return
        self.restarting.discard(job)
        self.world.books[job].resume(self.world.now, len(self.held[job]), Restore.CHECKPOINT)


class RestartAll(Restarting):
    name = "restart-all"

    def __init__(self, world: World, costs: RestartAllCosts) -> None:
        super().__init__(world)
        self.costs, self.restart = costs, costs.restart

    def detect_s(self, fault: Fault) -> float:
        return self.costs.detect_s

    def size(self, job: str, available: int) -> int:
        asked = self.world.books[job].model.nodes
        return asked if available >= asked else 0


class Elastic(Restarting):
    name = "elastic"

    def __init__(self, world: World, costs: ElasticCosts) -> None:
        super().__init__(world)
        self.costs, self.restart = costs, costs.restart

    def detect_s(self, fault: Fault) -> float:
        return self.costs.crash_detect_s if fault.category in CRASHES else self.costs.detect_s

    def size(self, job: str, available: int) -> int:
        sizes = [n for n in self.world.books[job].table if n <= available]
        return max(sizes, default=0)

    def repaired(self, node: str) -> None:
        super().repaired(node)
        for job, nodes in self.held.items():  # torchrun restarts its workers when a node joins
            book = self.world.books[job]
            if (book.is_running and len(nodes) < book.model.nodes and self.free
                    and self.size(job, len(nodes) + len(self.free)) > len(nodes)):
                book.reconfigure(self.world.now)
                self._relaunch(job)
