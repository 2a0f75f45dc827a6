"""Console reader, the lines the failures pass relies on: the watchdog's dump-signal report that
every rank prints once one rank's NCCL watchdog fires (torch >= 2.3) carries THAT rank's last
enqueued / completed work; source code quoted in a traceback is not an event."""
from __future__ import annotations

import io
import json

import polars as pl

from forensics.ingest.console import read_console
from forensics.ingest.formats import ReaderContext

TEXT = (
    "[rank0]:[2024-12-18 20:17:15,002] [INFO] [train.py:188] step 87\n"
    "[rank1]:[E1218 20:27:21.530511309 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a "
    "dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last "
    "enqueued NCCL work: 40, last completed NCCL work: 40.This is most likely caused by incorrect usages of "
    "collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the "
    "scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other "
    "reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.\n"
    "[rank0]:[E1218 20:27:21.482119928 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a "
    "dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info. "
    "Last enqueued NCCL work: 41, last completed NCCL work: 40.This is most likely caused by incorrect usages of "
    "collectives.\n"
)


def rows(text: str = TEXT) -> list[dict]:
    ctx = ReaderContext(path="/logs/console.log", rank_hint=None, host_hint=None)
    ev = pl.concat([b.events for b in read_console(ctx.path, io.BytesIO(text.encode()), ctx)], how="diagonal_relaxed")
    return [dict(r, x=json.loads(r["extra"]) if r["extra"] else {}) for r in ev.sort("line").iter_rows(named=True)]


def test_dump_signal_is_a_typed_event_with_the_ranks_own_numbers() -> None:
    _, other, own = rows()
    assert (other["event"], other["rank"], other["level"]) == ("NCCL_DUMP_SIGNAL", 1, "ERROR")
    assert (other["x"]["signal_from"], other["x"]["last_enqueued"], other["x"]["last_completed"]) == (0, 40, 40)
    assert (own["rank"], own["x"]["signal_from"], own["x"]["last_enqueued"]) == (0, "self", 41)
    assert other["timestamp"] is not None and other["timestamp"].year == 2024


def test_the_source_line_raising_an_oom_is_not_an_oom() -> None:
    tb = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/train.py", line 242, in _oom_hook\n'
        "[rank1]:     raise torch.OutOfMemoryError(\n"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB.\n"
    )
    events = [(r["line"], r["event"]) for r in rows(tb)]
    assert events == [(1, "TRACEBACK"), (2, "TRACEBACK_CONT"), (3, "TRACEBACK_CONT"), (4, "CUDA_OOM")]


# c10/util/Exception.cpp (Error::Error): "Exception raised from FUNC at FILE:LINE (most recent
# call first):" then c10/util/Backtrace.cpp's "frame #N: SYMBOL + 0xOFF (0xADDR in LIB)" lines
NATIVE = [
    "Exception raised from c10_cuda_check_implementation at /opt/pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f00aa01b897 in /opt/torch/lib/libc10.so)",
    "frame #1: c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&) + 0x64 (0x7f00aa0cb125 in /opt/torch/lib/libc10.so)",
    "",
    "frame #2: <unknown function> + 0x1e0dc (0x7f00ab11e0dc in /opt/torch/lib/libc10_cuda.so)",
]


def test_a_native_backtrace_belongs_to_the_exception_above_it() -> None:
    text = "\n".join([
        "[rank2]: Traceback (most recent call last):",
        '[rank2]:   File "/srv/job/main.py", line 77, in <module>',
        "[rank2]:     out = model(batch)",
        "[rank2]: RuntimeError: CUDA error: device-side assert triggered",
        "[rank2]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        *(f"[rank2]: {ln}" for ln in NATIVE),
        "[rank2]: after the backtrace: Error is a word here",
    ]) + "\n"
    got = rows(text)
    head = got[0]["line"]
    native = got[5:10]
    assert all(r["event"] == "TRACEBACK_CONT" and r["x"]["head"] == head and r["level"] == "INFO"
               for r in native if r["message"]), native
    # the backtrace ends at the first line that is neither: read as before
    assert got[-1]["event"] == "LOG" and got[-1]["level"] == "ERROR"


def test_a_native_backtrace_after_an_uncaught_cpp_exception_belongs_to_its_what_line() -> None:
    text = "\n".join([
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  CUDA error: an illegal memory access was encountered",
        *NATIVE,
    ]) + "\n"
    got = rows(text)
    heads = {r["x"].get("head") for r in got[2:] if r["message"]}
    assert heads == {got[1]["line"]} and not any(r["level"] == "ERROR" for r in got[2:])


def test_a_native_backtrace_with_no_exception_above_is_plain_text() -> None:
    got = rows("\n".join(["[rank0]:[2024-12-18 20:17:15,002] [INFO] [train.py:188] step 87", *NATIVE]) + "\n")
    assert all(r["event"] == "LOG" and r["level"] == "INFO" for r in got[1:] if r["message"])
