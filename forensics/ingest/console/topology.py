"""Which global rank a local rank is: the topology launchers print (torchrun's rendezvous
result and launch configs, DeepSpeed's global_rank_mapping), per node, and the launcher blocks
read across interleaved lines of other nodes.
"""
from __future__ import annotations

import re
from typing import Any

from .row import _Row, _int


# Topology printed by launchers
_RDZV_FIELD = re.compile(
    r"^\s+(restart_count|master_addr|master_port|group_rank|group_world_size|local_ranks|role_ranks|global_ranks"
    r"|role_world_sizes|global_world_sizes)=(.*?)\s*$"
)


_LAUNCH_FIELD = re.compile(r"^\s+(\w+)\s*:\s*(.*?)\s*$")


_DS_MAPPING = re.compile(r"'([^']+)': \[([\d,\s]*)\]")


_DS_NODES = re.compile(r"nnodes=(\d+), num_local_procs=(\d+), node_rank=(\d+)")


_DS_WORLD = re.compile(r"dist_world_size=(\d+)")


# The block state (see _Parser._switch) of workers' own lines on a console that names no node.
_WORKER = ("worker", None)


class _Topology:
    """The parser's reading of the topology launchers print, and its mapping of local ranks."""

    def _learn(self, key: Any, local: int, rank: int, why: str) -> None:
        """A (node, local rank) -> rank pair the log states outside a launcher's topology block
        (a line with both prefixes, a ChildFailedError record). Two different ranks for one local
        rank of one node (consoles of several nodes merged without host names) map nobody."""
        if key in self.topo_restart:
            return                      # the rendezvous result of this node already says it all
        m = self.topo.setdefault(key, {})
        if self.topo_why.get(key) == "conflict":
            return
        if m.get(local, rank) != rank:
            self.topo[key] = {}
            self.topo_why[key] = "conflict"
            return
        m[local] = rank
        self.topo_why.setdefault(key, why)

    def _map_unmapped(self) -> None:
        """Rows of this block that named only a local rank, mapped by what the block printed after
        them (a ChildFailedError table, a line with both prefixes). Rows of earlier blocks are
        already written: they keep their local rank only."""
        if self.topo:
            for r, key in self.unmapped:
                if r.rank is None:
                    self._map_local(r, key)
        self.unmapped = []

    def _map_local(self, r: _Row, key: Any = ...) -> None:
        """Local rank -> global rank through the topology the launcher printed for this node.
        A mapping learned without a node name serves lines of other names only while the file
        shows a single node."""
        if key is ...:
            key = self.node_key
        m = self.topo.get(key)
        if m is None and key is not None and len(self.nodes_seen) <= 1:
            key = None
            m = self.topo.get(None)
        if m and r.local_rank in m:
            r.rank, r.rank_source = m[r.local_rank], "mapped"
            r.x(mapped_by=self.topo_why.get(key))

    # -- topology the launchers print -----------------------------------------------------------
    def _topology(self, body: str, r: _Row) -> None:
        """torchrun's rendezvous result and launch configs, DeepSpeed's rank mapping: what turns
        a local rank into a global one (see _map_local). State survives block boundaries."""
        if self.rdzv is not None:
            m = _RDZV_FIELD.match(body)
            if m:
                self.rdzv[m.group(1)] = m.group(2)
                if m.group(1) == "global_world_sizes":
                    self._install_rdzv(r)
                elif m.group(1) == "global_ranks":
                    self._apply_rdzv(self.rdzv)   # a worker's line may come before the block ends
                return
            self._install_rdzv(r)
        if self.launch is not None:
            m = _LAUNCH_FIELD.match(body)
            if m:
                self.launch[m.group(1)] = m.group(2)
                self._apply_launch(self.launch)
                return
            self.launch = None
        if "Rendezvous complete for workers" in body:
            self.rdzv = {"key": self.node_key}
        elif "launch configs:" in body and "elastic_operator" in body:
            self.launch = {"key": self.node_key}
        elif "global_rank_mapping=" in body:
            hosts = {h: [int(t) for t in re.findall(r"\d+", ranks)] for h, ranks in _DS_MAPPING.findall(body)}
            if not hosts:
                return
            for h, ranks in hosts.items():
                self.topo[h] = dict(enumerate(ranks))
                self.topo_why[h] = "DeepSpeed global_rank_mapping"
            names = list(hosts)
            if len(names) == 1:
                self.topo[None] = self.topo[names[0]]          # one node: local = its ranks
                self.topo_why[None] = "DeepSpeed global_rank_mapping (one node)"
            elif self.ds_node_rank is not None and self.ds_node_rank < len(names):
                if self.node_key not in self.topo:
                    self.topo[self.node_key] = self.topo[names[self.ds_node_rank]]
                    self.topo_why[self.node_key] = f"DeepSpeed global_rank_mapping (node_rank={self.ds_node_rank})"
            self.multi_node = self.multi_node or len(names) > 1
            self.world = sum(len(v) for v in hosts.values())
            r.x(global_rank_mapping=hosts)
        elif "num_local_procs=" in body:
            m = _DS_NODES.search(body)
            if m:
                self.ds_node_rank = int(m.group(3))
                self.multi_node = self.multi_node or int(m.group(1)) > 1
        elif "dist_world_size=" in body:
            m = _DS_WORLD.search(body)
            if m:
                self.world = int(m.group(1))

    def _install_rdzv(self, r: _Row) -> None:
        d, self.rdzv = self.rdzv, None
        assert d is not None
        local, glob, gws = self._apply_rdzv(d)
        r.x(topology={"group_rank": _int(d.get("group_rank")), "group_world_size": gws,
                      "local_ranks": local, "global_ranks": glob})

    def _apply_rdzv(self, d: dict[str, Any]) -> tuple[list[int], list[int], int | None]:
        """What a rendezvous result says so far: world size, more than one node, and this node's
        local -> global map (applied once per block)."""
        local = [int(t) for t in re.findall(r"-?\d+", d.get("local_ranks", ""))]
        glob = [int(t) for t in re.findall(r"-?\d+", d.get("global_ranks", ""))]
        gws = _int(d.get("group_world_size"))
        sizes = [int(t) for t in re.findall(r"\d+", d.get("global_world_sizes", ""))]
        if sizes:
            self.world = sizes[0]
        if gws is not None and gws > 1:
            self.multi_node = True
        if not local or len(local) != len(glob) or d.get("applied"):
            return local, glob, gws
        d["applied"] = True
        key, restart = d["key"], _int(d.get("restart_count")) or 0
        new = dict(zip(local, glob))
        old = self.topo.get(key)
        if old is not None and old != new and restart <= self.topo_restart.get(key, -1):
            # two agents' results under one name (consoles of several nodes merged without host
            # prefixes): neither can be told from the other, so neither maps
            self.topo[key] = {}
        else:
            self.topo[key] = new
            self.topo_restart[key] = restart
            self.topo_why[key] = f"torchrun rendezvous result (group_rank={d.get('group_rank', '?')})"
        return local, glob, gws

    def _apply_launch(self, d: dict[str, Any]) -> None:
        """What the launch configs say so far (applied field by field: a worker's line may come
        before the block ends)."""
        nmax, nproc = _int(d.get("max_nodes")), _int(d.get("nproc_per_node"))
        if nmax is not None and nmax > 1:
            self.multi_node = True
        elif nmax == 1 and nproc is not None:
            # a single-node launch: local rank = global rank for its workers
            if d["key"] not in self.topo:
                self.topo[d["key"]] = {i: i for i in range(nproc)}
                self.topo_why[d["key"]] = f"single-node launch (max_nodes=1, nproc_per_node={nproc}): local rank = rank"
            self.world = self.world or nproc

    def _switch(self, key: Any) -> None:
        """Make `key`'s open blocks (ChildFailedError table, rendezvous result, launch configs)
        the current ones, parking those of the node read before."""
        cur = (self.cf_section, self.cf, self.rdzv, self.launch)
        if cur[0] is not None or cur[2] is not None or cur[3] is not None:
            self.parked[self.block_key] = cur
        self.cf_section, self.cf, self.rdzv, self.launch = self.parked.pop(key, (None, {}, None, None))
        self.block_key = key
