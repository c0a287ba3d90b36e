"""``memcut batch`` on Ray Data: traces read as bytes wherever Ray can read
(local folders, ``s3://``, ``gs://``, …), analysed on the cluster's workers,
summarised as ``memcut batch`` summarises them.

Needs ``pip install 'memcut[ray]'``. The rows are made by the same library
code as ``memcut batch``'s summary (:func:`memcut.summary_rows`), sorted the
same way, and written byte for byte as ``memcut batch --summary`` writes them
(``.jsonl``, ``.csv``, ``.md``); ``.parquet`` is written with pyarrow.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from . import _native, _options

if TYPE_CHECKING:
    from . import JsonArg, Size

Paths = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


class _Rows:
    """The per-file step: a trace's bytes → its summary rows, each as one
    JSON string. A class, so Ray pickles the checked options once per
    worker, not once per file. Strings, not dicts: Ray Data stores rows as
    Arrow tables, whose struct columns would give every row the union of all
    rows' keys (a rank's ``peak_by_category`` would gain null categories)."""

    def __init__(self, options: _native.Options) -> None:
        self.options = options

    def __call__(self, item: Dict[str, Any]) -> List[Dict[str, str]]:
        rows = json.loads(_native.summary_rows(item["bytes"], item["path"], self.options))
        return [{"row": json.dumps(r)} for r in rows]


def analyze_dataset(
    paths_or_uri: Paths,
    *,
    budget: Optional[Size] = None,
    headroom: Size = "10%",
    levers: Optional[JsonArg] = None,
    dp_ranks: int = 1,
    order: str = "cheapest",
    device_memory: Optional[Size] = None,
    summary: Optional[Union[str, "os.PathLike[str]"]] = None,
    **read_args: Any,
) -> List[Dict[str, Any]]:
    """Analyses every file under ``paths_or_uri`` on Ray and returns the
    summary rows of ``memcut batch`` (one per device; files that are not
    traces or are broken get a ``skipped``/``failed`` row), sorted as the
    batch sorts them. Each row's ``file`` is the path as Ray lists it.

    ``budget``/``headroom``/``levers``/``dp_ranks``/``order``/``device_memory`` are the batch's
    options. ``summary``: also write the rows there, by extension: ``.jsonl``,
    ``.csv`` or ``.md`` (the bytes ``memcut batch --summary`` writes) or
    ``.parquet``. ``read_args`` go to ``ray.data.read_binary_files`` (e.g.
    ``filesystem=``, ``file_extensions=``). Starts a local Ray if none is
    running, as Ray Data does.
    """
    import ray.data

    # Checked (and any levers file read) here, before any task starts.
    options = _options(
        budget, headroom, levers, None, None, 10, dp_ranks, order, device_memory=device_memory
    )
    paths: Union[str, List[str]]
    if isinstance(paths_or_uri, (str, os.PathLike)):
        paths = os.fspath(paths_or_uri)
    else:
        paths = [os.fspath(p) for p in paths_or_uri]
    files = ray.data.read_binary_files(paths, include_paths=True, **read_args)
    rows = files.flat_map(_Rows(options)).take_all()
    joined = "[" + ",".join(r["row"] for r in rows) + "]"
    ordered: List[Dict[str, Any]] = json.loads(_native.sort_rows(joined))
    if summary is not None:
        write_summary(ordered, summary)
    return ordered


def write_summary(rows: List[Dict[str, Any]], path: Union[str, "os.PathLike[str]"]) -> None:
    """Writes summary rows to ``path``: ``.jsonl``/``.csv``/``.md`` exactly as
    ``memcut batch --summary`` does, or ``.parquet`` (needs pyarrow)."""
    target = os.fspath(path)
    if target.lower().endswith(".parquet"):
        _write_parquet(rows, target)
        return
    text = _native.render_summary(json.dumps(rows), target)
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)


def _write_parquet(rows: List[Dict[str, Any]], target: str) -> None:
    """The summary's columns, then a row's rank (``rank``, ``world_size``,
    ``rank_from``: null when the row has none) and its bytes by category at
    the peak (``peak_by_category``, a map), so a query can group by job and
    rank."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [
        (c, pa.int64() if c.endswith("_bytes") else pa.string()) for c in _native.SUMMARY_COLUMNS
    ]
    rank_columns = [
        ("rank", pa.int64()),
        ("world_size", pa.int64()),
        ("rank_from", pa.string()),
        ("peak_by_category", pa.map_(pa.string(), pa.int64())),
    ]
    flat = []
    for r in rows:
        d = r.get("distributed") or {}
        flat.append(
            {
                **{c: r.get(c) for c, _ in columns},
                "rank": d.get("rank"),
                "world_size": d.get("world_size"),
                "rank_from": d.get("from"),
                "peak_by_category": d.get("peak_by_category"),
            }
        )
    pq.write_table(pa.Table.from_pylist(flat, schema=pa.schema(columns + rank_columns)), target)
