"""Launcher grammar as data: the routing marks and the exit reports of launchers and collectors
that the parser's fixed prefixes (prefixes.py) and exits (exits.py) do not spell out in code.

Owns: for each mark, the upstream file that writes it, the pattern, what it gives (rank, stream,
host, a time) and a sample of our own; for each exit report, the same plus how a worker ended
(exit code, signal). And the naming of signals: a negative code (torch elastic, Python's
subprocess: -N), a shell's or a launcher's 128+N, and strsignal(3) text ("Segmentation fault").
Must not: read a line, hold parser state, or guess: a mark names a rank only where its writer
puts the rank there, and a launcher line whose command is not the failed worker's names nobody.
"""
from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Mark:
    """A routing prefix: matched at the line's current position; its named groups are what it gives
    (rank, stream, host, container, asctime)."""

    name: str
    source: str
    pattern: re.Pattern[str]
    sample: str
    needle: str          # a literal every line with the mark holds in its first 48 characters (checked first)


_ASCTIME = (r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
            r"[ \d]\d \d\d:\d\d:\d\d \d{4}")

PREFIXES: tuple[Mark, ...] = (
    # horovodrun (gloo, and mpi through its own runner): '{time}[{rank}]<{prefix}>:{line}', time =
    # time.asctime() only with --prefix-output-with-timestamp; the index is the worker's rank.
    Mark("horovod_tag", "horovod horovod/runner/common/util/safe_shell_exec.py (forward_stream.prepend_context)",
         re.compile(rf"(?P<asctime>{_ASCTIME})?\[(?P<rank>\d{{1,6}})\]<(?P<stream>stdout|stderr)>:"),
         "Sat Oct  5 12:56:20 2024[3]<stderr>:Traceback (most recent call last):", "]<std"),
    # Lightning's own messages on every rank: f"[rank: {rank}] {message}" (the GLOBAL rank).
    Mark("lightning_rank", "lightning src/lightning/fabric/utilities/rank_zero.py (rank_prefixed_message)",
         re.compile(r"\[rank: (?P<rank>\d{1,6})\] "), "[rank: 3] Seed set to 1234", "[rank: "),
    # kubectl logs --prefix: "[pod/%s/%s] " (pod, container). A pod's hostname is its name.
    Mark("kubectl_prefix", "kubernetes staging/src/k8s.io/kubectl/pkg/cmd/logs/logs.go (addPrefixIfNeeded)",
         re.compile(r"\[pod/(?P<host>[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)/(?P<container>[-a-z0-9]{1,63})\] "),
         "[pod/llm-ft-worker-1/pytorch] [default2]:step 40 loss 2.1", "[pod/"),
    # Hugging Face's test runners stream a launched job's two pipes into one console:
    # tee(): print(label, line) with label "stdout:" / "stderr:" (accelerate `accelerate test`,
    # transformers' testing_utils): the label, one space, the child's line as it was.
    Mark("hf_tee_stream", "accelerate src/accelerate/test_utils/testing.py (_stream_subprocess.tee)",
         re.compile(r"(?P<stream>stdout|stderr): "), "stderr:   rank      : 3 (local_rank: 3)", "std"),
    # a script's own tag at the start of its line, "rank 3: ..." (print(f"rank {rank}: ...")): the
    # rank the line names as its writer's, the form failure_facts.rank_in_text reads ("Rank 11:")
    Mark("script_rank", "a training script's print / logging of its own rank (the line's own text)",
         re.compile(r"[Rr]ank (?P<rank>\d{1,6}): "), "rank 3: step=40 loss=2.1", "ank "),
)

# the characters a mark may start with -> the marks to try (the parser tries none for other lines)
_STARTS = {"horovod_tag": "MTWFS[", "script_rank": "rR", "hf_tee_stream": "s"}
FIRST: dict[str, tuple[Mark, ...]] = {}
for _m in PREFIXES:
    _starts = _STARTS.get(_m.name, "[")
    for _c in _starts:
        FIRST[_c] = (*FIRST.get(_c, ()), _m)


def mark_at(rest: str) -> tuple[Mark, re.Match[str]] | None:
    """The mark at the start of `rest`, with its match, or None."""
    head = rest[:48]
    for mk in FIRST.get(rest[:1], ()):
        if mk.needle in head:
            m = mk.pattern.match(rest)
            if m:
                return mk, m
    return None


# A collector's RFC 3339 time in front of EVERY line (kubectl logs --timestamps, a log shipper, a
# CI runner's log): "2024-11-20T14:37:16.123456789Z <line>". Read as a per-file mark: a file where
# nearly every line starts with it (so a program's own timestamped lines are not taken for it).
LEAD_RFC3339 = re.compile(r"((?:19|20)\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) (?!std(?:out|err) [FP] )")
LEAD_RFC3339_SOURCE = "kubernetes kubectl logs --timestamps (RFC3339Nano); log shippers' time field written in front"


def lead_rfc3339(lines: list[str]) -> bool:
    """Nearly every non-blank line of this (first) block starts with a collector's RFC 3339 time."""
    sample = [ln for ln in lines[:400] if ln.strip()]
    return len(sample) >= 3 and sum(1 for ln in sample if LEAD_RFC3339.match(ln)) >= 0.9 * len(sample)


@dataclass(frozen=True)
class ExitReport:
    """A launcher's line saying how a worker ended. Named groups: rank (the worker's global rank,
    only where the launcher names the worker it saw end), pid, host, code (exit code), signum,
    strsignal, signame. `trigger` is a literal the line must contain (checked first)."""

    name: str
    source: str
    trigger: str
    pattern: re.Pattern[str]
    sample: str
    by: str


EXITS: tuple[ExitReport, ...] = (
    ExitReport("mpirun_signal", "open-mpi orte/tools/orterun/help-orterun.txt, prrte help-prun.txt [proc-aborted-strsignal]",
               "noticed that process rank",
               re.compile(r"noticed that process rank (?P<rank>\d++) with PID (?P<pid>\d++) on node (?P<host>\S++) exited on "
                          r"signal (?P<signum>\d++)(?: \((?P<strsignal>[^)]*+)\))?"),
               "mpirun noticed that process rank 5 with PID 4242 on node gpu-b exited on signal 9 (Killed).", "mpirun"),
    # Python's subprocess.CalledProcessError.__str__: the command is the launcher's loop variable
    # (torch.distributed.launch before 1.9: the LAST process it spawned), so it names nobody.
    ExitReport("called_process_error", "cpython Lib/subprocess.py (CalledProcessError.__str__)",
               "CalledProcessError: Command",
               re.compile(r"(?:returned non-zero exit status (?P<code>-?\d++)|died with "
                          r"<Signals\.(?P<signame>SIG[A-Z0-9]++): (?P<signum>\d++)>)\.[ \t]*+$"),
               "subprocess.CalledProcessError: Command '['python', 'train.py', '--local_rank=3']' died with <Signals.SIGKILL: 9>.",
               "launcher"),
    # torch.multiprocessing.spawn (ProcessContext.join): the parent raises ProcessExitedException
    # ("process %d terminated with signal %s" % (error_index, name), or "... with exit code %d")
    # for the first process that ended; error_index is the spawned function's first argument:
    # the rank on one node, the local rank where each node runs its own mp.spawn (the failures
    # pass decides: failure_facts.spawn_node). Before 1.8 the same text was a plain Exception.
    ExitReport("mp_spawn_exited", "pytorch torch/multiprocessing/spawn.py (ProcessContext.join, ProcessExitedException)",
               "terminated with",
               re.compile(r"\bprocess (?P<rank>\d{1,6}) terminated with (?:signal (?P<signame>SIG[A-Z0-9]{2,8})"
                          r"|exit code (?P<code>-?\d{1,4}))\b"),
               "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGSEGV",
               "mp.spawn"),
    # horovodrun's gloo launcher (_exec_command_fn): print('Process {idx} exit with status code
    # {ec}.'), idx = slot_info.rank, the worker's rank; the code is the shell's (128+N: a signal)
    ExitReport("horovod_gloo_exit", "horovod horovod/runner/gloo_run.py (_exec_command_fn)",
               "exit with status code",
               re.compile(r"(?<![\w-])Process (?P<rank>\d{1,6}) exit with status code (?P<code>-?\d{1,4})\.\s*$"),
               "Process 3 exit with status code 137.", "horovodrun"),
)

# The first-failure record of mpirun (help-orterun.txt [orterun:non-zero-exit]: "  Process name: %s"
# = [[jobfamily,job],rank], then "  Exit code:    %d") and of horovodrun (gloo_run.py: "Process
# name: {name}" = the worker's rank, then "Exit code: {code}"): two lines, read as one record.
PROCESS_NAME = re.compile(r"Process name: (?:\[\[\d++,\d++\],(\d++)\]|(\d++))[ \t]*+$")
EXIT_CODE = re.compile(r"Exit code:[ \t]++(-?\d++)[ \t]*+$")
PROCESS_NAME_SOURCE = "open-mpi help-orterun.txt [orterun:non-zero-exit]; horovod horovod/runner/gloo_run.py (launch_gloo)"

# torchrun --log-dir D (--redirects / --tee): each worker's output in D/<run_id>/attempt_<n>/<local
# rank>/{stdout,stderr}.log (torch/distributed/elastic/multiprocessing/api.py DefaultLogsSpecs.reify):
# the folder is the LOCAL rank, never the global one.
LOG_DIR_LOCAL = re.compile(r"(?:^|[/\\])attempt_\d++[/\\](\d{1,6})[/\\](?:stdout|stderr)\.log(?:\.gz|\.zst)?$")
LOG_DIR_SOURCE = "pytorch torch/distributed/elastic/multiprocessing/api.py (DefaultLogsSpecs.reify)"


def local_rank_of_path(path: str) -> int | None:
    """The local rank a torchrun --log-dir file's path names, or None."""
    m = LOG_DIR_LOCAL.search(path or "")
    return int(m.group(1)) if m else None


# strsignal(3) descriptions (glibc string/siglist.h): what srun and mpirun print for a signal
STRSIGNAL = {
    "Hangup": "SIGHUP", "Interrupt": "SIGINT", "Quit": "SIGQUIT", "Illegal instruction": "SIGILL",
    "Trace/breakpoint trap": "SIGTRAP", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE", "Killed": "SIGKILL", "User defined signal 1": "SIGUSR1",
    "Segmentation fault": "SIGSEGV", "User defined signal 2": "SIGUSR2", "Broken pipe": "SIGPIPE",
    "Alarm clock": "SIGALRM", "Terminated": "SIGTERM",
}


def signal_named(code: int | None = None, signum: int | None = None, text: str | None = None) -> str | None:
    """SIGxxx for a signal number, a negative exit code (-N), a 128+N exit code (a shell's, or a
    launcher's such as Horovod's middleman), or strsignal text; None when it names no signal."""
    if text:
        name = STRSIGNAL.get(text.removesuffix(" (core dumped)").strip())
        if name:
            return name
    n = signum if signum is not None else (-code if code is not None and code < 0 else
                                           code - 128 if code is not None and 128 < code < 160 else None)
    if n is None:
        return None
    try:
        return _signal.Signals(n).name
    except ValueError:
        return None
