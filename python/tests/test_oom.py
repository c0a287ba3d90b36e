"""The OOM hook's wiring, with PyTorch's functions replaced by fakes: no GPU
(and no torch) needed. What the fakes stand for is checked against the real
PyTorch where it is installed."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import memcut


class FakeTorch(types.ModuleType):
    """The names the hook uses: cuda.is_available, _record_memory_history,
    _dump_snapshot, _cuda_attach_out_of_memory_observer, and torch.distributed."""

    def __init__(self, snapshot: Path, rank=None, cuda: bool = True) -> None:
        super().__init__("torch")
        self.calls = []
        self.observers = []

        def record(**kwargs):
            self.calls.append(("record", kwargs))

        def dump(filename):
            self.calls.append(("dump", filename))
            shutil.copyfile(snapshot, filename)

        self.cuda = types.SimpleNamespace(
            is_available=lambda: cuda,
            memory=types.SimpleNamespace(_record_memory_history=record, _dump_snapshot=dump),
        )
        self._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=self.observers.append)
        self.distributed = types.SimpleNamespace(
            is_available=lambda: rank is not None,
            is_initialized=lambda: rank is not None,
            get_rank=lambda: rank,
        )


def test_an_oom_writes_the_snapshot_and_its_reports(monkeypatch, tmp_path, big_snapshot, capsys):
    torch = FakeTorch(big_snapshot)
    monkeypatch.setitem(sys.modules, "torch", torch)
    out = tmp_path / "oom"
    observer = memcut.install_oom_report(out, max_entries=5000)
    assert out.is_dir()
    assert torch.calls == [("record", {"max_entries": 5000})]
    assert torch.observers == [observer]

    observer(0, 2 << 30, 70 << 30, 1 << 30)  # as the allocator calls it
    stem = out / f"oom-cuda0-pid{__import__('os').getpid()}"
    pickle_path = stem.with_suffix(".pickle")
    assert torch.calls[-1] == ("dump", str(pickle_path))
    assert pickle_path.read_bytes() == big_snapshot.read_bytes()
    report = memcut.analyze(str(pickle_path))
    md = stem.with_suffix(".md").read_text()
    assert md == memcut.render(report, "md")
    assert "Out-of-memory events" in md
    html = stem.with_suffix(".html").read_text()
    assert html == memcut.render(report, "html") and "<svg" in html
    assert f"wrote {stem}.pickle, .md, .html" in capsys.readouterr().err

    # One report per process by default: a retry loop does not fill the disk.
    observer(0, 2 << 30, 70 << 30, 1 << 30)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [pickle_path.name, stem.with_suffix(".md").name, stem.with_suffix(".html").name])


def test_ranks_and_repeated_ooms_get_their_own_files(monkeypatch, tmp_path, big_snapshot):
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(big_snapshot, rank=3))
    observer = memcut.install_oom_report(tmp_path, max_reports=2, budget="80GiB")
    observer(1, 1, 0, 0)
    observer(1, 1, 0, 0)
    observer(1, 1, 0, 0)
    pid = __import__("os").getpid()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"oom-cuda1-pid{pid}-rank3{n}.{ext}" for n in ("", "-1") for ext in ("pickle", "md", "html"))
    assert "Budget 80.00 GiB" in (tmp_path / f"oom-cuda1-pid{pid}-rank3.md").read_text()


def test_a_failing_report_is_printed_never_raised(monkeypatch, tmp_path, capsys):
    broken = tmp_path / "not_a_snapshot.bin"
    broken.write_bytes(b"\x07 not a trace")
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(broken))
    observer = memcut.install_oom_report(tmp_path / "oom")
    observer(0, 1, 0, 0)
    err = capsys.readouterr().err
    assert "memcut: error: OOM report" in err and "not a memory trace" in err


def test_without_torch_the_hook_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ImportError, match="install_oom_report needs PyTorch"):
        memcut.install_oom_report(tmp_path)


def test_without_cuda_the_hook_warns_and_attaches_nothing(monkeypatch, tmp_path):
    torch = FakeTorch(tmp_path / "unused", cuda=False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.warns(RuntimeWarning, match=r"no CUDA device \(torch.cuda.is_available\(\) is False\)"):
        memcut.install_oom_report(tmp_path / "oom")
    assert torch.calls == [] and torch.observers == []
    assert not (tmp_path / "oom").exists()


def test_import_memcut_needs_neither_torch_nor_ray():
    code = "import sys, memcut, memcut.oom, memcut.ray; assert 'torch' not in sys.modules and 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_fakes_match_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the fakes' names are checked where it is")
    assert callable(torch._C._cuda_attach_out_of_memory_observer)
    assert callable(torch.cuda.is_available)
    assert "max_entries" in inspect.signature(torch.cuda.memory._record_memory_history).parameters
    assert list(inspect.signature(torch.cuda.memory._dump_snapshot).parameters)[0] == "filename"
