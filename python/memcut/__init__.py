"""memcut from Python: the post-mortem on GPU memory.

Every answer comes from memcut's Rust library (the same code as the ``memcut``
command): :func:`analyze` returns exactly the JSON report of
``memcut analyze -f json``, :func:`render` turns it into text, Markdown or
HTML, and the seed's three functions (:func:`summarize_peak_sources`,
:func:`plan_memory_cuts`, :func:`recommend_memory_followup`) run the component
planner of ``memcut plan``. Errors are :class:`MemcutError` with the CLI's
one-line message. The GIL is released while a trace is analysed, so threads
analyse in parallel.

Also here: :func:`install_oom_report` (write a snapshot and its reports when
``torch.cuda`` runs out of memory) and :mod:`memcut.ray` (``memcut batch`` on
Ray Data).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import MemcutError
from .oom import install_oom_report

__version__: str = _native.__version__

__all__ = [
    "MemcutError",
    "MemcutWarning",
    "Report",
    "analyze",
    "diff",
    "install_oom_report",
    "plan_memory_cuts",
    "recommend_memory_followup",
    "render",
    "summarize_peak_sources",
    "summary_rows",
    "__version__",
]

#: A file to read, or the bytes of a trace already in memory.
Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
#: A size: bytes as an int, or a string as the CLI takes it ("80GiB", "79.6GB", "4096").
Size = Union[int, str]
#: Levers or rules: a JSON file, or the list it would hold.
JsonArg = Union[str, "os.PathLike[str]", Sequence[Mapping[str, Any]]]


class MemcutWarning(UserWarning):
    """A warning of the report (damaged content, an input read only in part, …):
    what the CLI prints on stderr as `memcut: warning: …`."""


#: The JSON report of ``memcut analyze -f json`` as a plain dict: what
#: :func:`analyze` returns and :func:`render` takes (a saved report loaded
#: with ``json.load`` is one too; it carries the plotted series).
Report = Dict[str, Any]


def _size(value: Optional[Size], what: str) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}: give bytes as an int or a size such as '80GiB', not {type(value).__name__}")
    if isinstance(value, int):
        if value < 0:
            raise MemcutError(f"{what}: {value} is not a size (bytes must be >= 0)")
        # An int is bytes: said so, since a bare number is refused where it
        # would be read as a handful of bytes (`headroom="10"`, `budget="40"`).
        return f"{value}B"
    return value


def _json_arg(value: Optional[JsonArg], what: str) -> Dict[str, Optional[str]]:
    """A levers/rules argument as the native Options takes it: a file or JSON text."""
    if value is None:
        return {what: None, f"{what}_file": None}
    if isinstance(value, (str, os.PathLike)):
        return {what: None, f"{what}_file": os.fspath(value)}
    if isinstance(value, (list, tuple)):
        return {what: json.dumps(list(value)), f"{what}_file": None}
    raise TypeError(f"{what}: give a path to a JSON file or a list, not {type(value).__name__}")


def _options(
    budget: Optional[Size] = None,
    headroom: Size = "10%",
    levers: Optional[JsonArg] = None,
    rules: Optional[JsonArg] = None,
    device: Optional[str] = None,
    top: int = 10,
    dp_ranks: int = 1,
    order: str = "cheapest",
    what_if: Sequence[str] = (),
    at: Optional[str] = None,
    device_memory: Optional[Size] = None,
) -> _native.Options:
    headroom_arg = _size(headroom, "headroom")
    assert headroom_arg is not None
    return _native.Options(
        budget=_size(budget, "budget"),
        headroom=headroom_arg,
        **_json_arg(levers, "levers"),
        **_json_arg(rules, "rules"),
        device=device,
        top=top,
        dp_ranks=dp_ranks,
        order=order,
        what_if=list(what_if),
        at=at,
        device_memory=_size(device_memory, "device_memory"),
    )


def _data(source: Source) -> Optional[bytes]:
    """The bytes of an in-memory trace, or None for a path."""
    if isinstance(source, bytes):
        return source
    if isinstance(source, (bytearray, memoryview)):
        # A copy: the GIL is released during the analysis, and a bytearray
        # could change under it.
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        return None
    raise TypeError(f"expected a path or bytes, not {type(source).__name__}")


def analyze(
    path_or_bytes: Source,
    *,
    budget: Optional[Size] = None,
    headroom: Size = "10%",
    levers: Optional[JsonArg] = None,
    rules: Optional[JsonArg] = None,
    name: Optional[str] = None,
    device: Optional[str] = None,
    top: int = 10,
    dp_ranks: int = 1,
    order: str = "cheapest",
    what_if: Sequence[str] = (),
    at: Optional[str] = None,
    device_memory: Optional[Size] = None,
) -> Report:
    """Analyses one trace and returns the JSON report of ``memcut analyze -f json``.

    ``path_or_bytes``: a snapshot pickle, Chrome trace or memory-timeline
    export (gzipped or not; the format is sniffed from the content), as a
    path or as its bytes. ``budget``/``headroom``/``levers``/``rules``/
    ``device``/``top``/``dp_ranks``/``order`` mean what the CLI's flags of the
    same names mean; ``what_if`` is ``--what-if``'s list of levers (the
    report's ``devices[].what_if``); ``at`` is ``--at``'s instant (``"1234"``,
    ``"12.5ms"``, ``"oom:0"``, ``"end"``: the report's ``devices[].at``);
    ``device_memory`` is ``--device-memory`` (the device's memory, which a
    snapshot does not record); sizes are ints (bytes) or strings such as ``"80GiB"``;
    ``levers`` and ``rules`` are a JSON file or the list it would hold.
    ``name`` is the report's ``source.path`` for bytes (default ``"-"``, as
    the CLI names stdin).

    Raises :class:`MemcutError` with the CLI's message (``FILE: reason``).
    An input read only in part gives a report and a :class:`MemcutWarning`.
    """
    options = _options(
        budget, headroom, levers, rules, device, top, dp_ranks, order, what_if, at, device_memory
    )
    data = _data(path_or_bytes)
    if data is None:
        text = _native.analyze_file(os.fspath(path_or_bytes), options)  # type: ignore[arg-type]
    else:
        text = _native.analyze_bytes(data, "-" if name is None else name, options)
    report: Report = json.loads(text)
    for d in report["diagnostics"]:
        if d.get("level") == "warning":  # what the CLI prints on stderr
            warnings.warn(f"{report['source']['path']}: {d['message']}", MemcutWarning, stacklevel=2)
    return report


def render(report: Mapping[str, Any], format: str = "md") -> str:
    """Renders a report (a dict as :func:`analyze` returns it, or a saved JSON
    report loaded with ``json.load``) as ``"md"``, ``"html"``, ``"text"`` or
    ``"json"``: the same bytes as ``memcut analyze -f FORMAT``. A diff (as
    :func:`diff` returns it) renders as ``memcut diff -f FORMAT`` does.

    The report is read from the dict, so edits show. The JSON carries the
    plotted series, so a report loaded from a file draws the same HTML chart.
    """
    if report.get("kind") == "diff":
        return _native.render_diff(json.dumps(report), format)
    return _native.render(json.dumps(report), format)


def _diff_side(source: Union[Source, Mapping[str, Any]]) -> "tuple[str, bytes]":
    if isinstance(source, Mapping):
        return "json", json.dumps(source).encode()
    data = _data(source)  # type: ignore[arg-type]
    if data is None:
        return "path", os.fsencode(source)  # type: ignore[arg-type]
    return "bytes", data


def diff(
    before: Union[Source, Mapping[str, Any]],
    after: Union[Source, Mapping[str, Any]],
    *,
    budget: Optional[Size] = None,
    headroom: Size = "10%",
    device: Optional[str] = None,
    top: int = 20,
    fail_if_peak_grows: Optional[float] = None,
) -> Dict[str, Any]:
    """Compares two runs as ``memcut diff BEFORE AFTER -f json`` does and
    returns its JSON (``"kind": "diff"``, its own ``schema_version``).

    Each side is a trace (a path or its bytes) or a report dict (as
    :func:`analyze` returns it). ``fail_if_peak_grows`` (percent) fills the
    diff's ``check``; render the result with :func:`render`.
    """
    options = _options(budget, headroom, None, None, None, 10, 1, "cheapest")
    (bk, b), (ak, a) = _diff_side(before), _diff_side(after)
    text = _native.diff(bk, b, ak, a, options, device, top, fail_if_peak_grows)
    result: Dict[str, Any] = json.loads(text)
    return result


def summary_rows(
    path_or_bytes: Source,
    *,
    name: Optional[str] = None,
    budget: Optional[Size] = None,
    headroom: Size = "10%",
    levers: Optional[JsonArg] = None,
    dp_ranks: int = 1,
    order: str = "cheapest",
    device_memory: Optional[Size] = None,
) -> List[Dict[str, Any]]:
    """The rows ``memcut batch --summary s.jsonl`` writes for one input: one
    per device, or one ``skipped``/``failed`` row with the reason (never
    raises for a bad trace). ``name`` is the rows' ``file`` (default: the
    path as given, or ``"-"`` for bytes). For batches run by other engines:
    see :mod:`memcut.ray`.
    """
    options = _options(
        budget, headroom, levers, None, None, 10, dp_ranks, order, device_memory=device_memory
    )
    data = _data(path_or_bytes)
    if data is None:
        path = os.fspath(path_or_bytes)  # type: ignore[arg-type]
        with open(path, "rb") as f:
            data = f.read()
        label = path if name is None else name
    else:
        label = "-" if name is None else name
    rows: List[Dict[str, Any]] = json.loads(_native.summary_rows(data, label, options))
    return rows


# ---------------------------------------------------------------------------
# The seed's method: component lists [{"name", "peak_gb", "cuttable"}]
# ---------------------------------------------------------------------------


def _components(components: Sequence[Mapping[str, Any]]) -> str:
    if isinstance(components, (str, bytes)) or not isinstance(components, Sequence):
        raise TypeError('components: give a list of {"name", "peak_gb", "cuttable"} dicts')
    return json.dumps([dict(c) for c in components])


def summarize_peak_sources(components: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The largest source at the peak (ties: the first listed).

    Returns ``{"largest_source": name, "peak_gb": its peak_gb,
    "total_peak_gb": sum of all}`` (decimal GB, rounded to whole bytes).
    """
    s = json.loads(_native.summarize_peak_sources(_components(components)))
    return {
        "largest_source": s["largest_source"],
        "peak_gb": s["largest_peak_gb"],
        "total_peak_gb": s["total_peak_gb"],
    }


def _target_gb(value: Any) -> float:
    # The check of `memcut plan --target-gb`, with its message.
    try:
        target = float(value)
    except (TypeError, ValueError):
        target = float("nan")
    if isinstance(value, bool) or not (target >= 0.0 and target != float("inf")):
        raise MemcutError(f"`{value}` is not a size in GB (a number >= 0)")
    return target


def plan_memory_cuts(components: Sequence[Mapping[str, Any]], target_peak_gb: float) -> Dict[str, Any]:
    """Cuttable components, largest first, cut while the total is above the target.

    Returns ``{"cut_order": [names], "estimated_peak_gb", "target_gb",
    "peak_before_gb", "steps": [{"name", "saved_gb", "peak_after_gb"}]}``.
    """
    plan: Dict[str, Any] = json.loads(
        _native.plan_memory_cuts(_components(components), _target_gb(target_peak_gb))
    )
    return plan


def recommend_memory_followup(summary: Mapping[str, Any], plan: Mapping[str, Any]) -> Dict[str, Any]:
    """Whether the peak needs a follow-up, from the results of the two functions above.

    Returns ``{"needs_dedicated_page": bool, "reason": one line, "verdict":
    "fits"|"fits_after_cuts"|"does_not_fit", "gap_gb": GB still over the
    target}``. A dedicated page (a follow-up ticket) is needed unless the peak
    already fits the target.
    """
    try:
        native_summary = {
            "largest_source": summary["largest_source"],
            "largest_peak_gb": summary["peak_gb"],
            "total_peak_gb": summary["total_peak_gb"],
        }
    except KeyError as e:
        raise MemcutError(f"summary: missing key {e} (pass what summarize_peak_sources returns)") from None
    rec = json.loads(_native.recommend(json.dumps(native_summary), json.dumps(dict(plan))))
    return {
        "needs_dedicated_page": rec["verdict"] != "fits",
        "reason": rec["reason"],
        "verdict": rec["verdict"],
        "gap_gb": rec["gap_gb"],
    }
