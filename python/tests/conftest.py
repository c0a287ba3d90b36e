"""Shared fixtures: the repository, the `memcut` CLI built from it (the
reference every Python answer is compared with), and the sample traces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "sample_traces").glob("*.gz"))
BROKEN = sorted(
    p.relative_to(ROOT).as_posix()
    for p in (ROOT / "tests" / "data" / "broken").iterdir()
    if p.suffix not in (".py", ".md")
)


@pytest.fixture(scope="session")
def cli() -> Path:
    """The release `memcut` binary of this checkout ($MEMCUT_BIN, else built
    with cargo: a no-op after `cargo test --release`)."""
    if os.environ.get("MEMCUT_BIN"):
        return Path(os.environ["MEMCUT_BIN"])
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "memcut"], cwd=ROOT, check=True
    )
    return ROOT / "target" / "release" / "memcut"


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in the repository root, so that relative paths name files as the CLI sees them."""
    monkeypatch.chdir(ROOT)
    return ROOT


def run_cli(cli: Path, args: List[str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args], cwd=ROOT, input=stdin, capture_output=True)


@pytest.fixture(scope="session")
def big_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A realistically shaped 100k-entry CUDA snapshot with an OOM near the
    end (scripts/make_big_snapshot.py, plain Python, ~15 MB)."""
    out = tmp_path_factory.mktemp("big") / "snapshot.pickle"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_big_snapshot.py"), "--entries", "100000",
         "--seed", "7", "--out", str(out)],
        check=True, capture_output=True,
    )
    return out
