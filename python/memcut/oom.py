"""The OOM hook: when ``torch.cuda`` runs out of memory, write the snapshot and
its memcut reports (Markdown and HTML) next to each other.

PyTorch is imported only when the hook is installed: ``import memcut`` works
without it.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Union

if TYPE_CHECKING:
    from . import Size

#: What PyTorch calls on an OOM: (device, requested bytes, bytes allocated on
#: the device, bytes free on the device).
Observer = Callable[[int, int, int, int], None]


def _rank(torch: Any) -> Optional[int]:
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # a half-set-up process group must not stop the report
        pass
    rank = os.environ.get("RANK")
    return int(rank) if rank is not None and rank.isdigit() else None


def install_oom_report(
    path_dir: Union[str, "os.PathLike[str]"],
    *,
    max_entries: int = 100_000,
    budget: Optional[Size] = None,
    headroom: Size = "10%",
    max_reports: int = 1,
) -> Observer:
    """Records allocator history and, on a CUDA out-of-memory error, writes
    ``oom-cuda{D}-pid{P}[-rank{R}][-{n}].pickle`` (the snapshot, from
    ``torch.cuda.memory._dump_snapshot``) and its memcut reports ``.md`` and
    ``.html`` into ``path_dir`` (created if missing).

    Call it once, early (before the model is built, so that the history
    holds the allocations that led to the OOM). ``max_entries`` is the
    allocator history kept (``_record_memory_history``); ``budget`` and
    ``headroom`` are those of :func:`memcut.analyze` (by default the budget is
    what the snapshot says was free plus reserved at the OOM). At most
    ``max_reports`` OOMs per process are written: a retry loop must not fill
    the disk. The OOM itself still raises as before; a failure to write the
    report is printed to stderr and never raised from inside the allocator.

    Without a CUDA device (``torch.cuda.is_available()`` is false: a CPU
    run of the same script) there is nothing to record: it warns
    (``RuntimeWarning``) and attaches nothing, rather than stop the script.

    Returns the observer (attached when CUDA is there; call it to test the
    wiring).
    """
    try:
        import torch
    except ImportError:
        raise ImportError("memcut.install_oom_report needs PyTorch: `import torch` failed") from None

    directory = os.fspath(path_dir)
    cuda = bool(torch.cuda.is_available())
    if cuda:
        os.makedirs(directory, exist_ok=True)
        torch.cuda.memory._record_memory_history(max_entries=max_entries)
    else:
        warnings.warn(
            "memcut.install_oom_report: no CUDA device (torch.cuda.is_available() is False); "
            "no OOM report will be written",
            RuntimeWarning,
            stacklevel=2,
        )
    written: List[str] = []

    def observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        if len(written) >= max_reports:
            return
        stem = f"oom-cuda{device}-pid{os.getpid()}"
        rank = _rank(torch)
        if rank is not None:
            stem += f"-rank{rank}"
        if written:
            stem += f"-{len(written)}"
        base = os.path.join(directory, stem)
        written.append(base)
        try:
            torch.cuda.memory._dump_snapshot(base + ".pickle")
            from . import analyze, render

            report = analyze(base + ".pickle", budget=budget, headroom=headroom)
            for fmt in ("md", "html"):
                with open(f"{base}.{fmt}", "w", encoding="utf-8") as f:
                    f.write(render(report, fmt))
            print(
                f"memcut: out of memory on cuda:{device} (asked for {alloc} bytes, "
                f"{device_free} free): wrote {base}.pickle, .md, .html",
                file=sys.stderr,
            )
        except Exception as e:  # never raise inside the allocator's OOM path
            print(f"memcut: error: OOM report {base}: {e}", file=sys.stderr)

    if cuda:
        torch._C._cuda_attach_out_of_memory_observer(observer)
    return observer
