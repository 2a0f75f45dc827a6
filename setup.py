"""The one compiled part: the JSON-lines scanner (forensics/ingest/_scan.c). Everything else is in
pyproject.toml. If it cannot be built, ingest falls back to the pure-Python path (same results,
slower) and `forensics --version` says so."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "forensics.ingest._scan",
            sources=["forensics/ingest/_scan.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
