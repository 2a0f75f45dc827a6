"""What a command pays for at start-up: `import forensics` and the CLI load neither the ingest
package nor numpy / pyarrow / polars, and a post-mortem command on a store never imports the
ingest package, numpy or pyarrow (each a few hundred ms of a `last-10s` that should take 1 s)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forensics

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("forensics.ingest", "numpy", "pyarrow", "pyarrow.compute")


def loaded(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {list(HEAVY) + ['polars']!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_forensics_and_the_cli_load_nothing_heavy() -> None:
    assert loaded("import forensics, forensics.cli") == []
    # the package attribute still is the callable ingest package, loaded when first used
    assert loaded("import forensics\nforensics.ingest") == ["forensics.ingest", "numpy", "pyarrow", "pyarrow.compute",
                                                            "polars"]


def test_a_store_is_opened_and_scanned_without_the_ingest_package(tmp_path: Path) -> None:
    store = tmp_path / "st"
    forensics.ingest([str(REPO / "sample_logs" / "healthy")], store)
    code = (f"from forensics.run import open_run\nrun = open_run([{str(store)!r}])\n"
            "print(run.events().select('rank').collect().height)")
    assert [m for m in loaded(code) if m in HEAVY] == []


def test_pyarrow_allocates_from_the_c_library_unless_the_user_chose() -> None:
    """`import forensics` picks pyarrow's system allocator (its default keeps the pages an ingest
    frees: peak RSS); a user's ARROW_DEFAULT_MEMORY_POOL stays theirs."""
    code = "import forensics, pyarrow\nprint(pyarrow.default_memory_pool().backend_name)"
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}

    def backend(**extra: str) -> str:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                             env={**env, **extra})
        return out.stdout.strip()

    assert backend() == "system"
    assert backend(ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"


def test_lazy_module_imports_on_first_use() -> None:
    from forensics._lazy import lazy

    m = lazy("json")
    assert "not imported" not in repr(m) and "(imported)" not in repr(m)
    assert m.dumps([1]) == "[1]" and "(imported)" in repr(m)


# --- what each command loads (a check on modules, not a timing) -----------------------------------

def loaded_by(code: str, modules: list[str]) -> list[str]:
    """Which of `modules` a fresh interpreter holds after running `code` (a SystemExit from a
    command is caught, as the process would end there)."""
    probe = (f"import json, sys\ntry:\n" + "".join(f"    {line}\n" for line in code.splitlines())
             + "except SystemExit:\n    pass\n"
             + f"print(json.dumps([m for m in {modules!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


START = [*HEAVY, "polars", "pydantic", "forensics.timeline", "forensics.store", "forensics.passes"]


def test_version_and_help_load_no_library() -> None:
    # --version says whether the scanner is compiled without importing the ingest package
    assert loaded_by("from forensics.cli import main\nsys.argv = ['forensics', '--version']\nmain()", START) == []
    for argv in (["--help"], ["last-10s", "--help"], ["diagnose", "--help"], ["rules", "list", "--help"]):
        assert loaded_by(f"from forensics.cli import main\nsys.argv = ['forensics', *{argv!r}]\nmain()", START) == [], argv


def test_version_says_what_the_ingest_package_says() -> None:
    code = ("import io, contextlib\nfrom forensics.cli import main\nbuf = io.StringIO()\n"
            "sys.argv = ['forensics', '--version']\n"
            "try:\n    with contextlib.redirect_stdout(buf):\n        main()\nexcept SystemExit:\n    pass\n"
            "from forensics.ingest import native\n"
            "print(json.dumps([('compiled' in buf.getvalue()) == native.available()]))")
    for env in ({}, {"FORENSICS_NATIVE": "0"}):
        out = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], capture_output=True, text=True,
                             check=True, cwd=REPO, env={**os.environ, **env})
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [True], env
    # a scanner build named by FORENSICS_SCAN_LIB that is not there: not compiled
    out = subprocess.run([sys.executable, "-m", "forensics", "--version"], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "FORENSICS_SCAN_LIB": "/nonexistent/_scan.so"})
    assert "pure Python" in out.stdout


def test_post_mortem_commands_load_only_their_own_modules(tmp_path: Path) -> None:
    store = tmp_path / "st"
    forensics.ingest([str(REPO / "sample_logs" / "healthy")], store)
    unwanted = [*HEAVY, "pydantic", "forensics.passes", "forensics.timeline.arrivals", "forensics.timeline.steps",
                "forensics.timeline.clocks", "rich.progress"]
    for argv in (["last-10s", str(store), "--rank", "0"], ["last-10s", str(store), "--format", "json"],
                 ["events", str(store), "--rank", "1", "-n", "3"]):
        code = f"from forensics.cli import main\nsys.argv = ['forensics', *{argv!r}]\nmain()"
        assert loaded_by(code, unwanted) == [], argv
    # the store with another schema version fails before the snapshot's modules are loaded
    mf = store / "manifest.json"
    mf.write_text(json.dumps({**json.loads(mf.read_text()), "schema_version": 999}))
    code = f"from forensics.cli import main\nsys.argv = ['forensics', 'last-10s', {str(store)!r}]\nmain()"
    assert loaded_by(code, [*unwanted, "forensics.timeline.windows", "forensics.render.timeline"]) == []


def test_ranks_and_timeline_load_neither_the_ingest_nor_the_diagnosis(tmp_path: Path) -> None:
    """`ranks` and `timeline` answer from the store's summaries: no ingest package, numpy,
    pyarrow, passes or rules; `ranks` not the arrival machinery `timeline` uses."""
    store = tmp_path / "st"
    forensics.ingest([str(REPO / "sample_logs" / "healthy")], store)
    unwanted = [*HEAVY, "pydantic", "forensics.passes", "forensics.rules", "forensics.report.html", "rich.progress"]
    for argv, more in ((["ranks", str(store), "--format", "json"], ["forensics.timeline.arrivals"]),
                       (["ranks", str(store)], ["forensics.timeline.arrivals"]),
                       (["timeline", str(store), "--format", "json"], []),
                       (["timeline", str(store), "--rank", "0"], [])):
        code = f"from forensics.cli import main\nsys.argv = ['forensics', *{argv!r}]\nmain()"
        assert loaded_by(code, [*unwanted, *more]) == [], argv


def test_the_passes_do_not_load_the_trace_reader() -> None:
    assert loaded_by("import forensics.passes", ["forensics.traces.stats", "forensics.traces.reader"]) == []


def test_diagnose_of_a_store_without_flight_recorder_dumps_loads_neither_ingest_nor_pyarrow(tmp_path: Path) -> None:
    """The Flight Recorder table (stuck_collective asks for it on every run) reads dumps with the
    ingest package's loader: imported only when there are dumps to read (it brought in the ingest
    package and pyarrow, ~0.4 s of a diagnose's serial start-up)."""
    store = tmp_path / "st"
    forensics.ingest([str(REPO / "sample_logs" / "healthy")], store)
    code = f"from forensics.cli import main\nsys.argv = ['forensics', 'diagnose', {str(store)!r}, '--format', 'json']\nmain()"
    assert loaded_by(code, ["forensics.ingest", "pyarrow", "forensics.fr_table"]) == ["forensics.fr_table"]


def test_an_ingest_of_json_lines_loads_no_other_reader(tmp_path: Path) -> None:
    """formats.reader_for imports a reader's module when its format is first met: JSON-lines
    logs load none of the others (~65 ms of CPU per ingest); a console log loads its reader."""
    readers = ["forensics.ingest.console", "forensics.ingest.telemetry", "forensics.ingest.flight_recorder",
               "forensics.ingest.hf_state", "forensics.ingest.kineto"]
    logs = REPO / "sample_logs" / "healthy"
    code = f"import forensics\nforensics.ingest([{str(logs / 'rank_0.jsonl')!r}], {str(tmp_path / 'a')!r})"
    assert loaded_by(code, readers) == []
    (tmp_path / "train.log").write_text("step 1 loss 2.5\n")
    code = f"import forensics\nforensics.ingest([{str(tmp_path / 'train.log')!r}], {str(tmp_path / 'b')!r})"
    assert loaded_by(code, readers) == ["forensics.ingest.console"]


def test_the_cli_keeps_numpy_s_blas_to_one_thread_unless_the_user_chose() -> None:
    """numpy's OpenBLAS threads busy-wait after start-up (CPU for no work: forensics does no linear
    algebra); `main` sets their number before any command imports numpy, a user's setting stays."""
    code = ("import os, sys\nsys.argv = ['forensics', '--version']\nfrom forensics import cli\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "import numpy\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def threads(**extra: str) -> str:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                             env={**env, **extra})
        return out.stdout.strip().splitlines()[-1]

    assert threads() == "1"
    assert threads(OPENBLAS_NUM_THREADS="4") == "4"


def test_the_cli_gives_polars_one_arena_but_for_an_ingest_unless_the_user_chose() -> None:
    """Each jemalloc arena keeps the pages its threads free (diagnose of 4,096 ranks: ~460 vs ~390
    MB peak); `main` asks for one arena before any command imports polars, not for an ingest (its
    writer threads would share it), and a user's choice of arenas stays."""
    code = ("import os, sys\nsys.argv = ['forensics', *sys.argv[1:], '--help']\nfrom forensics import cli\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "print('polars' in sys.modules, os.environ.get('_RJEM_MALLOC_CONF'))")
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}

    def conf(*argv: str, **extra: str) -> str:
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True,
                             cwd=REPO, env={**env, **extra})
        return out.stdout.strip().splitlines()[-1]

    assert conf("diagnose") == "False narenas:1"       # set, and polars not loaded before it
    assert conf("--color", "never", "ranks") == "False narenas:1"
    assert conf("ingest") == "False None"
    assert conf("diagnose", _RJEM_MALLOC_CONF="narenas:4") == "False narenas:4"
    # what polars' import writes there, inherited from a parent that imported it, is no choice
    inherited = "dirty_decay_ms:500,muzzy_decay_ms:1000"
    assert conf("diagnose", _RJEM_MALLOC_CONF=inherited) == f"False {inherited},narenas:1"
    assert conf("diagnose", _RJEM_MALLOC_CONF="") == "False narenas:1"


def _graph(package: Path) -> dict[str, set[str]]:
    """forensics' own import graph from the source (module-level and deferred imports alike)."""
    import ast

    mods = {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = base.split(".")
                mod = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                subs = {f"{mod}.{a.name}" for a in node.names} & mods.keys()
                # `from . import expr` imports the submodule; the package itself only for other names
                out |= subs | ({mod} & mods.keys() if len(subs) < len(node.names) else set())
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in mods}
        graph[name] = out - {name}
    return graph


def _reaches(graph: dict[str, set[str]], a: str, b: str) -> bool:
    seen, todo = set(), [a]
    while todo:
        m = todo.pop()
        if m == b:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return False


def test_the_rules_compiler_does_not_know_the_planner() -> None:
    # the planner uses the compiler; the evaluation of a rule set (rules/evaluate.py) uses both
    g = _graph(REPO / "forensics")
    assert "forensics.rules.compile" in g["forensics.rules.plan"]
    assert not _reaches(g, "forensics.rules.compile", "forensics.rules.plan")
    assert {"forensics.rules.compile", "forensics.rules.plan"} <= g["forensics.rules.evaluate"]


def test_the_split_packages_have_no_cycle_among_their_modules() -> None:
    """passes/failures/ and ingest/console/ (each one module per question): a module imports its
    siblings, never its package's __init__ (the pass entry / the reader entry that imports them
    all), and the modules of one package import one another without a circle."""
    g = _graph(REPO / "forensics")
    for pkg in ("forensics.passes.failures", "forensics.ingest.console"):
        mods = {m for m in g if m.startswith(pkg + ".")}
        assert len(mods) >= 5, pkg
        inner = {m: g[m] & mods for m in mods}
        for m in mods:
            assert pkg not in g[m], m
            assert not any(_reaches(inner, n, m) for n in inner[m]), m


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import cycles of `graph`: its strongly connected parts of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(part)

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


# The import cycles left between forensics' modules (package front doors aside, below): each one
# named here, so that a new one fails this test and one untied shrinks this list.
CYCLES_LEFT = [
    # a JSON-lines block's text lines go to the console parser (text_lines), whose modules import
    # the Block and ReaderContext types back from jsonl and formats
    {"forensics.ingest.console.frames", "forensics.ingest.console.parser", "forensics.ingest.formats",
     "forensics.ingest.jsonl", "forensics.ingest.text_lines"},
]


def test_the_modules_import_no_circle_but_the_ones_listed() -> None:
    """ingest jsonl <-> native <-> normalize (the stringify helper is normalize's), summaries <->
    timeline.steps (the aggregation both use is timeline.steptable) and rules compile <-> plan are
    untied. The packages' __init__ modules (`forensics`, `forensics.ingest`: lazy front doors that
    import everything on first use) are left out: importing any submodule runs them anyway."""
    g = _graph(REPO / "forensics")
    packages = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                for p in (REPO / "forensics").rglob("__init__.py")}
    modules = {m: outs - packages for m, outs in g.items() if m not in packages}
    assert sorted(map(sorted, _cycles(modules))) == sorted(map(sorted, CYCLES_LEFT))
    for a, b in (("forensics.ingest.jsonl", "forensics.ingest.normalize"), ("forensics.ingest.native", "forensics.ingest.normalize"),
                 ("forensics.ingest.jsonl", "forensics.ingest.native"), ("forensics.summaries", "forensics.timeline.steps"),
                 ("forensics.summaries", "forensics.timeline.steptable"), ("forensics.rules.compile", "forensics.rules.plan")):
        assert not (_reaches(modules, a, b) and _reaches(modules, b, a)), (a, b)


def test_loading_the_rules_imports_no_numpy() -> None:
    """Loading and listing the rules needs neither numpy nor the census (forensics.rules.plan):
    diagnose loads them on the rules' thread, whose evaluation imports those beside the step table."""
    code = "import sys\nfrom forensics.rules import load_rules\nload_rules()\nassert 'forensics.rules.plan' not in sys.modules"
    assert "numpy" not in loaded(code)
