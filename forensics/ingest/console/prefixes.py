"""Who wrote a line: the routing prefixes collectors and launchers put in front of it (CRI,
Docker, syslog/journald, srun/mpirun labels, pdsh hosts, Ray, torchrun, NCCL, glog) and the
rank, local rank and host they give (the rules: forensics/ingest/console/__init__.py).
"""
from __future__ import annotations

import re

import datetime as _dt

from ...failure_facts import rank_in_text
from .marks import FIRST as _MARK_FIRST, LEAD_RFC3339, mark_at
from .row import _MAX_PENDING, _Row, _int
from .timestamps import _LEVEL_MAP, _MONTHS
from .topology import _LAUNCH_FIELD, _RDZV_FIELD, _WORKER


_TORCHRUN = re.compile(r"\[(rank|[A-Za-z_][A-Za-z_\-]*?|)(\d+)\]:")


_RAY = re.compile(r"\(([\w.\-]+) pid=(\d+)(?:, ip=([\d.a-fA-F:]+))?\)\s?")


_NCCL = re.compile(r"(?<![\w.\-])([\w.\-]++):(\d++):(\d++) \[(\d++)\] ")


_PDSH = re.compile(r"(?<![A-Za-z0-9_.\-])([A-Za-z0-9][A-Za-z0-9_.\-]{0,62}+): ")


# glog `E1218 20:27:21.426417 140233 file.cc:12] ` (month and day zero-padded) and c10's own
# logger (c10/util/Logging.cpp, MessageLogger: `(tm_mon + 1) * 100 + tm_mday`, so the month is
# not padded: `[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] ` is March 21)
_GLOG = re.compile(
    r"\[?([IWEF])(?:(\d\d?)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?)?(?:\s+\d+)?\s+([\w.\-/]+:\d+)\]\s?"
)


# A collector's time of day in front of a worker's routing prefix (`14:03:22 [rank3]:...`,
# `[14:03:22.120] [default1]:...`): the line's time, not its text.
_CLOCK = re.compile(r"\[?(\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)\]?\s+(?=\[(?:rank|[A-Za-z_][A-Za-z_\-]*?|)\d+\]:)")


_RANK_INLINE = re.compile(
    r"\[(?:PG (?:ID )?(\S+?)(?: PG GUID (\S+?))?(?:\s*\(([^)]*)\))? )?Rank (\d+)\]"
)


# What collectors and launchers put in front of a line (see forensics/ingest/templates.py).
# Kubernetes CRI (kubelet's container log files): `<RFC3339Nano> <stream> <F|P> <line>`.
_CRI = re.compile(r"((?:19|20)\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (stdout|stderr) ([FP]) ?")


# A collector's timestamp (ISO, bracketed or not), optionally Python logging's ` - LEVEL - `:
# consumed only when a routing prefix follows it, so plain timestamped lines keep their text.
_LEAD_TS = re.compile(
    r"\[?((?:19|20)\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?:\s+-\s+(?:[\w.\-]+\s+-\s+)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s+"
    r"|\s+\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?:?\s+|\s*[|:]\s*|\s+)"
)


# Behind a collector's timestamp, the later lines of a launcher's multi-line block (their
# indentation is what marks them, so the timestamp is consumed with exactly one separator):
# rendezvous result `  group_rank=1`, launch configs `  nproc_per_node : 4`, ChildFailedError
# table `Failures:` / `Root Cause (first observed failure):` / `  rank : 3 (local_rank: 3)` / rules.
_LEAD_TS_BLOCK = re.compile(
    r"\[?((?:19|20)\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?: - (?:[\w.\-]+ - )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) - | )"
)


_BLOCK_BODY = re.compile(
    r"(?:[ \t]{1,64}+(?:\w++\s*+[=:]|<NO_OTHER_FAILURES>)|(?:Failures:|Root Cause \(first observed failure\):)\s*+$"
    r"|(?<![=\-])[=\-]{20,}+\s*+$)"
)


_ROUTING = re.compile(
    r"\[(?:rank|[A-Za-z_][A-Za-z_\-]*?|)\d+\]:|\[\d+,\d+\]<\w+>:|\[?[IWEF]\d{3,4} \d\d:|(?<![\w.\-])[\w.\-]++:\d++:\d++ \[\d++\] "
    r"|\(\w+ pid=\d+"
)


# Syslog / journald short and short-precise (`journalctl -o short-precise`, microseconds):
# `Mon DD HH:MM:SS[.ffffff] host tag[pid]: ` (the host is the machine's).
_SYSLOG_HDR = re.compile(
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(\.\d+)? "
    r"([A-Za-z0-9][\w.\-]*) ([\w.\-/@]+)(?:\[(\d+)\])?: "
)


# journald `journalctl -o short-iso` / `short-iso-precise` (systemd logs-show.c: strftime
# "%Y-%m-%dT%H:%M:%S", ".%06u" when precise, the UTC offset as "%z" (+0000) in older systemd and
# "+00:00" in newer), then ` host identifier[pid]: `. Only with a [pid] (or the kernel's lines),
# so a timestamped program line `<ts> step 5: ...` is not taken for a journal header.
_JOURNAL_ISO = re.compile(
    r"((?:19|20)\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:[+-]\d\d:?\d\d|Z)) "
    r"([A-Za-z0-9][\w.\-]*) ([\w.\-/@]+)(?:\[(\d+)\])?: "
)


# srun --label: `%0*d: ` (task id, zero-padded to the width of the largest); recognised only in a
# file where most lines carry it (a numbered list in a program's output is not a label).
_SRUN_LABEL = re.compile(r" {0,8}+(\d{1,6}): ")
# a training script's own tag of its rank at the start of its text, the forms failure_facts.rank_in_text
# reads: "(rank 3/8) step=..." (print(f"(rank {rank}/{world}) ...")) and "RANK=2 ..." (the env var's
# name and value). Read without taking it off the text (rank_source "text": named in the line's text).
# A Python `logging` record's head (the default formats' pieces: asctime, levelname, name, in
# any order, with or without brackets) before its message; the rank a worker tags its message
# with is then failure_facts.rank_in_text's (one rank, not another's: "waiting for rank 3").
_LOG_HEAD = re.compile(r"^\[?(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?[ \[]{1,3})?(?:[\w.]+\]?[ :\[-]{1,4})?"
                       r"\[?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")
_TEXT_TAG = re.compile(r"\((?i:rank) (\d{1,6})/\d{1,6}\)[ :]|RANK=(\d{1,6})[ :,]")


# mpirun --tag-output (Open MPI / PRRTE): `[jobid,rank]<stdout>:`.
_MPI_TAG = re.compile(r"\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")


_TEE_LOCAL = re.compile(r"\[(?!rank\d)[A-Za-z_][A-Za-z_\-]*\d+\]:")


_NOT_HOSTS = frozenset({"python", "python3", "localhost6"})


_HOST_SUFFIX_WORDS = ("Error", "Exception", "Warning", "error", "warning")


def _is_host(name: str) -> bool:
    """A pdsh `name: ` prefix names a host only if it looks like one (a bare word is more often
    a program talking: `wandb: `, `srun: `, `ninja: `)."""
    if name == "localhost":
        return True
    if name in _NOT_HOSTS or name.startswith("python") or name.endswith(_HOST_SUFFIX_WORDS) or name.isdigit():
        return False
    return any(c.isdigit() for c in name)


class _Prefixes:
    """The parser's consumption of what collectors and launchers put in front of a line."""

    def _clock(self, rest: str, r: _Row) -> bool:
        """A collector's time of day before a worker's routing prefix: kept as the line's clock
        (extra.clock; the date comes from the line's own glog time, or stays unknown); the rest
        of the line (self._rest) is read on."""
        m = _CLOCK.match(rest)
        if not m:
            return False
        r.x(clock=m.group(1).replace(",", "."))
        self._rest = rest[m.end():]
        return True

    # -- prefixes -------------------------------------------------------------------------------
    def _prefixes(self, line: str, r: _Row) -> str:
        """Consume routing prefixes (collector, srun/mpirun labels, host, Ray, torchrun, NCCL,
        glog); fill r; return the rest."""
        rest = line
        ctx = self.ctx
        prefix_rank: int | None = None
        local_from_tee: int | None = None
        task: int | None = None
        for k in range(10):
            c = rest[:1]
            if c == "[":
                m = _TORCHRUN.match(rest)
                if m and (rest[m.end():].strip() or not self._cf_open()):
                    role, n = m.group(1), int(m.group(2))
                    if role == "rank" or role == "":
                        prefix_rank = n
                    else:
                        local_from_tee = n
                        r.local_rank = n
                    rest = rest[m.end():]
                    if role == "rank" and rest.startswith(" "):
                        rest = rest[1:]
                    continue
                m = _MPI_TAG.match(rest)
                if m:
                    prefix_rank = int(m.group(2))
                    r.x(stream=m.group(3))
                    rest = rest[m.end():]
                    continue
                m = _GLOG.match(rest)
                if m:
                    self._glog(m, r)
                    rest = rest[m.end():]
                    continue
                if rest[1:3] in ("19", "20") and self._lead_ts(rest, r):
                    rest = self._rest
                    continue
                if k == 0 and rest[3:4] == ":" and self._clock(rest, r):
                    rest = self._rest
                    continue
                hit = mark_at(rest)
                if hit:
                    prefix_rank = self._mark(hit[1], r, prefix_rank)
                    rest = rest[hit[1].end():]
                    continue
                break
            if c == "(":
                m = _RAY.match(rest)
                if m:
                    r.x(actor=m.group(1), pid=int(m.group(2)))
                    if m.group(3):
                        r.host = m.group(3)
                    rest = rest[m.end():]
                    continue
                break
            if c.isdigit():
                m = _CRI.match(rest)
                if m:
                    r.ts = m.group(1)
                    r.x(stream=m.group(2), partial=True if m.group(3) == "P" else None)
                    rest = rest[m.end():]
                    continue
                if k == 0 and rest[10:11] == "T" and rest[:2] in ("19", "20"):
                    m = _JOURNAL_ISO.match(rest)
                    if m and (m.group(4) or m.group(3) == "kernel"):
                        r.ts = m.group(1)
                        r.host = m.group(2)
                        r.x(program=m.group(3), pid=_int(m.group(4)))
                        rest = rest[m.end():]
                        continue
                if k == 0 and self.lead_ts:
                    m = LEAD_RFC3339.match(rest)
                    if m:
                        r.ts = m.group(1)
                        rest = rest[m.end():]
                        continue
                if rest[:2] in ("19", "20") and self._lead_ts(rest, r):
                    rest = self._rest
                    continue
                if k == 0 and rest[2:3] == ":" and self._clock(rest, r):
                    rest = self._rest
                    continue
            if self.srun and task is None and prefix_rank is None and (c.isdigit() or c == " "):
                m = _SRUN_LABEL.match(rest)
                if m:
                    task = int(m.group(1))
                    rest = rest[m.end():]
                    continue
            if c in "JFMASOND" and k == 0 or (c in "JFMASOND" and r.host is None and task is not None):
                m = _SYSLOG_HDR.match(rest)
                if m:
                    if self.year is not None:
                        r.ts = (f"{self.year:04d}-{_MONTHS[m.group(1)]:02d}-{int(m.group(2)):02d}"
                                f"T{m.group(3)}:{m.group(4)}:{m.group(5)}{m.group(6) or ''}")
                    r.host = m.group(7)
                    r.x(program=m.group(8), pid=_int(m.group(9)))
                    rest = rest[m.end():]
                    continue
            if c in "IWEF":
                m = _GLOG.match(rest)
                if m and m.group(2):
                    self._glog(m, r)
                    rest = rest[m.end():]
                    continue
            if c.isalnum():
                m = _NCCL.match(rest)
                if m:
                    r.host = m.group(1)
                    r.x(pid=int(m.group(2)), tid=int(m.group(3)))
                    r.local_rank = int(m.group(4))
                    rest = rest[m.end() - 1:].lstrip()
                    continue
                if r.host is None and prefix_rank is None:
                    m = _PDSH.match(rest)
                    if m and _is_host(m.group(1)):
                        r.host = m.group(1)
                        rest = rest[m.end():]
                        continue
            if c in _MARK_FIRST:
                hit = mark_at(rest)
                if hit:
                    prefix_rank = self._mark(hit[1], r, prefix_rank)
                    rest = rest[hit[1].end():]
                    continue
            break

        pg_rank: int | None = None
        if "Rank " in rest:
            m = _RANK_INLINE.search(rest)
            if m:
                pg_id, guid, desc, n = m.group(1), m.group(2), m.group(3), int(m.group(4))
                default_pg = pg_id is None or pg_id == "0" or desc == "default_pg"
                if prefix_rank is not None:
                    pass                 # the line's own prefix already named the global rank
                elif default_pg:
                    prefix_rank = n
                else:
                    pg_rank = n
                if pg_id is not None:
                    r.put(process_group=desc or guid or pg_id)
                    r.x(pg=desc or guid or pg_id, pg_id=pg_id)
        if pg_rank is not None:
            r.x(pg_rank=pg_rank)

        if task is not None:
            if self.srun_nodes:
                r.x(srun_task=task)      # a launcher per node: the task is the node, not a rank
            else:
                r.x(srun_task=task)
                if prefix_rank is None and local_from_tee is None:
                    prefix_rank = task   # srun started the ranks itself: task id = SLURM_PROCID
        # the node this line comes from, for the topology the launcher printed
        key = r.host or ctx.host_hint or (("task", task) if task is not None and self.srun_nodes else None)
        self.node_key = key
        if key is not None:
            self.nodes_seen.add(key)
        # a worker's own line (it names its rank or local rank) is never part of its launcher's
        # block: it neither continues nor ends it
        if prefix_rank is not None or local_from_tee is not None or r.local_rank is not None:
            bkey = _WORKER if key is None else ("worker", key)
        else:
            bkey = key
        if bkey != self.block_key:
            self._switch(bkey)
        # a launcher's block ends at the first line of its node that is not one of its fields
        if self.launch is not None and not _LAUNCH_FIELD.match(rest):
            self.launch = None
        if self.rdzv is not None and not _RDZV_FIELD.match(rest):
            self._install_rdzv(r)

        text_rank: int | None = None
        if prefix_rank is None and local_from_tee is None and r.local_rank is None and rest[:1] in "(R":
            m = _TEXT_TAG.match(rest)
            if m:
                text_rank = int(m.group(1) or m.group(2))
        if (text_rank is None and prefix_rank is None and local_from_tee is None and r.local_rank is None
                and _LOG_HEAD.match(rest) and ("ank" in rest[:300] or "ANK" in rest[:300])):
            # a worker's own logging record on the console (stderr), its rank in its message:
            # "... INFO trainer: [rank 3] step 5 ...", "[...][INFO] - rank=3 ...", "Rank 3: ..."
            text_rank = rank_in_text(rest[:300])
        if r.local_rank is None and prefix_rank is None and self.path_local is not None:
            r.local_rank = self.path_local      # a torchrun --log-dir worker file (marks.LOG_DIR_LOCAL)
        if prefix_rank is not None:
            r.rank, r.rank_source = prefix_rank, "prefix"
        elif text_rank is not None:
            r.rank, r.rank_source = text_rank, "text"
        elif r.local_rank is not None and ctx.gpu_map:
            mapped = ctx.gpu_map.get((r.host or ctx.host_hint, r.local_rank))
            if mapped is None:
                mapped = ctx.gpu_map.get((None, r.local_rank))
            if mapped is not None:
                r.rank, r.rank_source = mapped, "gpu_map"
        if r.rank is None and self.pid_rank and r.extra and "pid" in r.extra:
            g = self.pid_rank.get((r.host, r.extra["pid"]))
            if g is not None:
                r.rank, r.rank_source = g, "mapped"
        if prefix_rank is not None and local_from_tee is not None:
            # `[default1]:[rank1]:`: torchrun's local-rank tee prefix and PyTorch's global-rank
            # prefix on one line of one process: that local rank of this node is that rank
            self._learn(key, local_from_tee, prefix_rank, "its own lines carry both [defaultN]: and [rankM]:")
        if r.rank is None and r.local_rank is not None and self.topo:
            self._map_local(r)
        if r.rank is None and r.local_rank is not None and ctx.rank_hint is None and len(self.unmapped) < _MAX_PENDING:
            self.unmapped.append((r, key))      # a mapping printed later in this block still applies
        if r.rank is None and ctx.rank_hint is not None:
            r.rank, r.rank_source = ctx.rank_hint, "path"
        if r.host is None:
            r.host = ctx.host_hint
        return rest

    def _mark(self, m: re.Match[str], r: _Row, prefix_rank: int | None) -> int | None:
        """Fill r from a mark of marks.PREFIXES (its named groups); return the prefix rank."""
        g = m.groupdict()
        if g.get("rank") is not None:
            prefix_rank = int(g["rank"])
        if g.get("stream"):
            r.x(stream=g["stream"])
        if g.get("host"):
            r.host = g["host"]
        if g.get("container"):
            r.x(container=g["container"])
        if g.get("asctime") and r.ts is None:
            # time.asctime(): local time, no zone (naive times are read as UTC everywhere)
            r.ts = _dt.datetime.strptime(" ".join(g["asctime"].split()), "%a %b %d %H:%M:%S %Y").isoformat()
        return prefix_rank

    def _partial(self, r: _Row) -> None:
        """Kubelet (`P`) and Docker (no trailing newline) cut long lines: the rest of a cut line
        carries no prefix of its own, it belongs to the rank of the line it continues."""
        stream = r.extra["stream"] if r.extra else None
        head = self.partial_head.pop(stream, None)
        if head is not None:
            rank, source, local, host, line = head
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = rank, source
            if r.local_rank is None:
                r.local_rank = local
            r.host = r.host or host
            r.x(continues=line)
        if r.extra and r.extra.get("partial"):
            self.partial_head[stream] = head if head is not None else (r.rank, r.rank_source, r.local_rank, r.host, r.line)

    def _lead_ts(self, rest: str, r: _Row) -> bool:
        """A collector's timestamp (and Python logging's level) in front of a routing prefix:
        consume it (sets self._rest). Without a routing prefix behind it the line is left whole."""
        m = _LEAD_TS.match(rest)
        if not m or not _ROUTING.match(rest, m.end()):
            m = _LEAD_TS_BLOCK.match(rest)
            if not m or not _BLOCK_BODY.match(rest, m.end()):
                return False
        r.ts = m.group(1).replace(",", ".")
        word = m.group(2) or (m.group(3) if m.re is _LEAD_TS else None)
        if word:
            r.level = _LEVEL_MAP[word]
            r.x(collector_level=word)
        self._rest = rest[m.end():]
        return True
