"""Rules about hosts and GPUs: hardware faults (Xid, counters, silence), lost nodes, link flaps and
thermal throttling; only the node's own telemetry tells that it lives or is repaired, and a heartbeat
marked `leaving` makes its silence expected (docs/detection.md, "Rules", "Telemetry gaps: blind is not dead").
"""

from __future__ import annotations

from trainmedic.schemas.telemetry import GpuSample, NodeHeartbeat
from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.correlation import absorb_groups, add_clue, affected, own_generation
from trainmedic.streams.core.deadlines import Deadlines, Timer
from trainmedic.streams.core.incidents import IncidentBook
from trainmedic.streams.core.state import Clue, DetectorState, GpuState, NicState, NodeState
from trainmedic.streams.core.taxonomy import CATEGORIES, THERMAL_THROTTLE, Resolves, xid_category

NIC_KEY_SEP = "\x1f"


class NodeRules:
    def __init__(self, state: DetectorState, config: DetectorConfig, book: IncidentBook,
                 timers: Deadlines) -> None:
        self.state, self.config, self.book, self.timers = state, config, book, timers

    def known(self, name: str, ts: float) -> NodeState:
        """The node's state, made if new, without noting it alive: a job's reports name nodes but
        are no evidence of their health (a forged report would end a node_lost or a gap)."""
        node = self.state.nodes.get(name)
        if node is None:
            node = self.state.nodes[name] = NodeState(last_seen=ts)
        return node

    def arrived(self, ts: float) -> float:
        """When the detector heard of telemetry its node stamped `ts`: then, or, for telemetry that came
        after event time had passed it (held by its producer through a partition, or from a node whose
        clock is behind), event time as it came. A node lives when it is heard from, whatever its own
        clock says: its clock neither makes it lost nor dates its return before its loss (issue 44)."""
        return max(ts, self.state.clock)

    def seen(self, name: str, ts: float) -> NodeState:
        """The node's state, noting that it is alive as its agent's telemetry stamped `ts` arrives."""
        at = self.arrived(ts)
        node = self.state.nodes.get(name)
        if node is None:
            node = self.state.nodes[name] = NodeState(last_seen=at)
        elif at > node.last_seen:
            node.last_seen = at
            if node.lost_since is not None:
                self._back(name, node, at)
            elif node.gap_id is not None:
                self._out_of_gap(name, node, at)
        return node

    # -- events ------------------------------------------------------------------------

    def on_gpu_sample(self, ev: GpuSample) -> None:
        ts = ev.ts
        node = self.seen(ev.node, ts)
        gpu = node.gpus.get(ev.gpu)
        if gpu is None:  # the first sample is the counters' baseline
            gpu = node.gpus[ev.gpu] = GpuState(ts, ev.ecc_dbe, ev.nvlink_errors)
        else:
            gpu.last_ts = ts
            gpu.silent = False
            dbe = ev.ecc_dbe
            if dbe is not None:
                before, gpu.ecc_dbe = gpu.ecc_dbe, dbe
                if before is not None and dbe > before:
                    self.hardware(ev.node, node, "gpu_ecc", ts, f"gpu {ev.gpu}|dbe",
                                  f"{ts:.3f} gpu {ev.gpu}: ecc_dbe {before} -> {dbe}", ev.gpu)
            links = ev.nvlink_errors
            if links is not None:
                before, gpu.nvlink_errors = gpu.nvlink_errors, links
                if before is not None and links > before:
                    self.hardware(ev.node, node, "nvlink", ts, f"gpu {ev.gpu}|nvlink",
                                  f"{ts:.3f} gpu {ev.gpu}: nvlink_errors {before} -> {links}",
                                  ev.gpu)
        if ev.xids:
            self._xids(ev, node)
        temp = ev.temp_c
        if (ev.throttle or gpu.hot_since is not None or gpu.thermal_id is not None
                or (temp is not None and temp >= self.config.gpu.temp_limit_c)):
            self._thermal(ev, node, gpu)
        if node.hw_id is not None:
            self._repaired(ev.node, node, ts)

    def on_heartbeat(self, ev: NodeHeartbeat) -> None:
        ts = ev.ts
        node = self.seen(ev.node, ts)
        node.interval = ev.interval
        node.leaving = ev.leaving  # the latest to arrive (a node's heartbeats share one partition, in order)
        self.timers.arm(Timer.NODE_LOST, ev.node,
                        node.last_seen + self.config.heartbeat.timeout_s(ev.interval))
        if ev.links:
            self._links(ev, node)
        if node.gpus:
            self._silent_gpus(ev.node, node, ts)

    # -- timers ------------------------------------------------------------------------

    def check_lost(self, name: str, when: float) -> None:
        node = self.state.nodes.get(name)
        if node is None or node.interval is None or node.lost_since is not None or node.leaving:
            return
        timeout = self.config.heartbeat.timeout_s(node.interval)
        due = node.last_seen + timeout
        if node.gap_id is not None and node.gap_until is not None:
            due = max(due, node.gap_until)
        if due > when:
            self.timers.arm(Timer.NODE_LOST, name, due)
            return
        quiet = self.quiet(when)
        if node.gap_until is None and self.config.gap.is_gap(len(quiet), self._reporting()):
            self._gap(quiet, when)  # looked at again when telemetry flows, or after judge_after_s
            return
        rec = self.book.get(node.gap_id)
        node.gap_id = node.gap_until = None
        if rec is not None:  # the telemetry flows again but not from this node, or the gap lasted
            self._leave_gap(rec, when, f"{name} still silent: judged alone")
        node.lost_since = when
        line = (f"{when:.3f} no telemetry since {node.last_seen:.3f} "
                f"(heartbeat every {node.interval:g}s, timeout {timeout:g}s)")
        self.hardware(name, node, "node_lost", when, "silent", line,
                      root_ts=node.last_seen,
                      first_ts=node.last_seen + min(node.interval, timeout))

    def quiet(self, when: float) -> list[str]:
        """The reporting nodes silent at `when` for `gap.quiet_missed` of their intervals or more."""
        missed = self.config.gap.quiet_missed
        return [name for name, node in self.state.nodes.items()
                if node.interval is not None and node.lost_since is None and not node.leaving
                and when - node.last_seen >= missed * node.interval]

    def _reporting(self) -> int:
        return sum(1 for node in self.state.nodes.values()
                   if node.interval is not None and node.lost_since is None and not node.leaving)

    # -- telemetry gaps ----------------------------------------------------------------

    def _gap(self, quiet: list[str], when: float) -> None:
        """Open the telemetry gap (or add to the open one): no node of it is lost as yet."""
        nodes = self.state.nodes
        open_ids = {nodes[name].gap_id for name in quiet} - {None}
        rec = next((r for r in map(self.book.get, sorted(open_ids)) if r is not None), None)
        joining = sorted(name for name in quiet if nodes[name].gap_id is None
                         or self.book.get(nodes[name].gap_id) is None)
        if not joining:
            return
        since = min(nodes[name].last_seen for name in joining)
        line = (f"{when:.3f} {len(quiet)} of {self._reporting()} nodes silent at once since "
                f"{since:.3f}: {', '.join(joining)}")
        if rec is None:
            rec = self.book.open("telemetry_gap", key="gap", root_ts=since, ts=when,
                                 first_ts=since, evidence=[line])
        else:
            self.book.note(rec, [line])
        judge_at = when + self.config.gap.judge_after_s
        for name in joining:
            nodes[name].gap_id, nodes[name].gap_until = rec.id, judge_at
            self.timers.arm(Timer.NODE_LOST, name, judge_at)

    def _out_of_gap(self, name: str, node: NodeState, ts: float) -> None:
        """A node of the gap reports again: telemetry flows, so the nodes of the gap still silent
        get one heartbeat timeout from now to report before they are judged one by one."""
        rec = self.book.get(node.gap_id)
        node.gap_id = node.gap_until = None
        for gpu in node.gpus.values():
            gpu.last_ts = ts
        if rec is None:
            return
        for other, peer in self.state.nodes.items():
            if peer.gap_id == rec.id and peer.interval is not None:
                until = ts + self.config.heartbeat.timeout_s(peer.interval)
                if peer.gap_until is None or until < peer.gap_until:
                    peer.gap_until = until
                    self.timers.arm(Timer.NODE_LOST, other, until)
        self._leave_gap(rec, ts, f"{name} reports again")

    def _leave_gap(self, rec, ts: float, why: str) -> None:
        self.book.note(rec, [f"{ts:.3f} {why}"])
        if not any(node.gap_id == rec.id for node in self.state.nodes.values()):
            self.book.resolve(rec, ts, "every node of the gap reports again or is judged on its own")

    def check_link_stable(self, key: str, when: float) -> None:
        name, nic_name = key.split(NIC_KEY_SEP)
        node = self.state.nodes.get(name)
        nic = node.nics.get(nic_name) if node else None
        rec = self.book.get(nic.flap_id) if nic else None
        if rec is None or not nic.up:
            return
        due = nic.up_ts + self.config.link.stable_s
        if due > when:
            self.timers.arm(Timer.LINK_STABLE, key, due)
            return
        nic.flap_id = None
        self.book.resolve(rec, when, f"{nic_name} up since {nic.up_ts:.3f}")

    # -- hardware incidents ------------------------------------------------------------

    def hardware(self, name: str, node: NodeState, category: str, ts: float, key: str,
                 line: str, gpu: int | None = None, root_ts: float | None = None,
                 first_ts: float | None = None) -> None:
        """Open the node's hardware incident, or add to the one already open."""
        node.fault_ts = ts
        rec = self.book.get(node.hw_id)
        if rec is not None:
            self.book.note(rec, [line])
            return
        job, ranks, jobs, lines = affected(self.state, node)
        first = ts if first_ts is None else first_ts
        absorbed_first, absorbed, dropped = absorb_groups(self.state, jobs)
        if absorbed_first is not None:
            first = min(first, absorbed_first)
        rec = self.book.open(
            category, key=key, root_ts=ts if root_ts is None else root_ts, ts=ts,
            first_ts=first, job=job, node=name, ranks=ranks, evidence=[line, *lines, *absorbed],
            dropped=dropped, jobs=jobs, gpu=gpu)
        node.hw_id = rec.id
        own_generation(self.state, self.book, rec)

    def _repaired(self, name: str, node: NodeState, ts: float) -> None:
        """Resolve the node's GPU fault once every GPU of it has reported since its latest fault
        evidence, none silent, for `gpu.healthy_s`: the node's own word that it is repaired. A job's
        new generation elsewhere is not (the fault stays open, and the node isolated)."""
        rec = self.book.get(node.hw_id)
        if rec is None or CATEGORIES[rec.category].resolves is not Resolves.NODE_HEALTHY:
            return
        since = rec.ts if node.fault_ts is None else node.fault_ts
        if ts - since < self.config.gpu.healthy_s or any(
                gpu.silent or gpu.last_ts <= since for gpu in node.gpus.values()):
            return
        node.hw_id = node.fault_ts = None
        self.book.resolve(rec, ts, f"every GPU of {name} reports clean since {since:.3f} "
                                   f"({self.config.gpu.healthy_s:g}s)")

    def _xids(self, ev: GpuSample, node: NodeState) -> None:
        found = xid_category(ev.xids)
        if found is None:
            return
        category, xid = found
        line = f"{ev.ts:.3f} gpu {ev.gpu}: Xid {xid}"
        if category != "cuda_error":
            self.hardware(ev.node, node, category, ev.ts, f"gpu {ev.gpu}|xid {xid}", line, ev.gpu)
            return
        cfg = self.config.correlation
        for name in node.jobs:  # an application Xid is evidence for the job, never the node
            job = self.state.jobs.get(name)
            if job is None or job.finishing:
                continue
            clue = Clue(CATEGORIES[category].specificity, ev.ts, -1, ev.node, category,
                        f"{line} (application error)", f"{category}: Xid {xid}")
            owner = self.book.get(job.fatal_id)
            if job.fatal_id is not None:
                if owner is not None:
                    self.book.note(owner, [clue.line])
                continue
            release = add_clue(job, clue, cfg.evidence_hold_s, cfg.evidence_lines)
            if release is not None:
                self.timers.arm(Timer.RELEASE, name, release)

    def _silent_gpus(self, name: str, node: NodeState, ts: float) -> None:
        """A GPU silent for silence_s while its host reports is lost. When every GPU of the
        node is silent the GPU sampler stopped, not the GPUs: no incident."""
        limit = ts - self.config.gpu.silence_s
        silent = [i for i, gpu in node.gpus.items() if gpu.last_ts < limit and not gpu.silent]
        if not silent or all(gpu.last_ts < limit for gpu in node.gpus.values()):
            return
        for i in silent:
            gpu = node.gpus[i]
            gpu.silent = True
            self.hardware(name, node, "gpu_lost", ts, f"gpu {i}|silent",
                          f"{ts:.3f} gpu {i}: no sample since {gpu.last_ts:.3f} while host reports",
                          i, root_ts=gpu.last_ts, first_ts=gpu.last_ts)

    def _back(self, name: str, node: NodeState, ts: float) -> None:
        """A lost node is heard from again: resolve node_lost; its GPUs start afresh."""
        node.lost_since = None
        for gpu in node.gpus.values():
            gpu.last_ts = ts
        rec = self.book.get(node.hw_id)
        if rec is not None and rec.category == "node_lost":
            node.hw_id = None
            self.book.resolve(rec, ts, f"{name} reports again")

    # -- links and thermal -------------------------------------------------------------

    def _links(self, ev: NodeHeartbeat, node: NodeState) -> None:
        ts = ev.ts
        for link in ev.links:
            nic = node.nics.get(link.name)
            if nic is None:
                node.nics[link.name] = NicState(link.up, None if link.up else ts,
                                                ts if link.up else None)
            elif link.up != nic.up:
                nic.up = link.up
                if link.up:
                    nic.up_ts = ts
                    self._flap(ev.node, node, link.name, nic, ts)
                else:
                    nic.down_ts = ts

    def _flap(self, name: str, node: NodeState, nic_name: str, nic: NicState, ts: float) -> None:
        line = f"{ts:.3f} {nic_name} down at {nic.down_ts:.3f}, up again ({ts - nic.down_ts:.1f}s)"
        self.timers.arm(Timer.LINK_STABLE, f"{name}{NIC_KEY_SEP}{nic_name}",
                        ts + self.config.link.stable_s)
        rec = self.book.get(nic.flap_id)
        if rec is not None:  # debounced: flaps before the link is stable again are one incident
            self.book.note(rec, [line])
            return
        job, ranks, _, lines = affected(self.state, node)
        rec = self.book.open("link_flap", key=nic_name, root_ts=nic.down_ts, ts=ts,
                             first_ts=nic.down_ts, job=job, node=name, ranks=ranks,
                             evidence=[line, *lines], nic=nic_name)
        nic.flap_id = rec.id

    def _thermal(self, ev: GpuSample, node: NodeState, gpu: GpuState) -> None:
        """WARN after hot_since is sustained; resolved after clear_s without heat."""
        ts, cfg = ev.ts, self.config.gpu
        reasons = sorted(THERMAL_THROTTLE.intersection(ev.throttle))
        hot = bool(reasons) or (ev.temp_c is not None and ev.temp_c >= cfg.temp_limit_c)
        if hot:
            gpu.cool_since = None
            if gpu.hot_since is None:
                gpu.hot_since = ts
            if gpu.thermal_id is None and ts - gpu.hot_since >= cfg.thermal_sustain_s:
                job, ranks, _, lines = affected(self.state, node)
                why = ", ".join(reasons) or f"temp {ev.temp_c:g}C >= {cfg.temp_limit_c:g}C"
                line = f"{ts:.3f} gpu {ev.gpu}: {why} since {gpu.hot_since:.3f}"
                rec = self.book.open("thermal", key=f"gpu {ev.gpu}", root_ts=gpu.hot_since, ts=ts,
                                     first_ts=gpu.hot_since, job=job, node=ev.node, ranks=ranks,
                                     evidence=[line, *lines], gpu=ev.gpu)
                gpu.thermal_id = rec.id
            return
        gpu.hot_since = None
        rec = self.book.get(gpu.thermal_id)
        if rec is None:
            gpu.thermal_id = None
            return
        if gpu.cool_since is None:
            gpu.cool_since = ts
        elif ts - gpu.cool_since >= cfg.thermal_clear_s:
            self.book.resolve(rec, ts, f"gpu {ev.gpu} cool since {gpu.cool_since:.3f}")
            gpu.thermal_id = gpu.cool_since = None
