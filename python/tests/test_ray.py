"""`memcut.ray.analyze_dataset` on a local Ray cluster gives the summary of
`memcut batch` for the same files, row for row and byte for byte.

Needs Ray (`pip install '.[ray]'`). Without it these tests are skipped,
unless MEMCUT_REQUIRE_RAY=1 (set by .ci/run, which installs Ray), where a
missing Ray fails them.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT, run_cli

import memcut
from memcut.ray import analyze_dataset, write_summary

if os.environ.get("MEMCUT_REQUIRE_RAY") == "1":
    import ray
else:
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]' (CI installs it)")

# A folder of traces and non-traces, the 4 ranks of a DDP step, a broken
# file and a skipped one.
INPUTS = [
    str(ROOT / "sample_traces"),
    str(ROOT / "tests" / "data" / "ranks"),  # rows with `distributed`
    str(ROOT / "tests" / "data" / "broken" / "truncated_pickle_at_40.pkl"),
    str(ROOT / "tests" / "data" / "broken" / "chrome_deeply_nested.json.gz"),
]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def batch_summary(cli, tmp_path, name, *flags):
    path = tmp_path / name
    out = run_cli(cli, ["batch", *INPUTS, "--summary", str(path), *flags])
    assert out.returncode == 1, out.stderr.decode()  # the broken file fails
    return path.read_text()


def test_rows_equal_memcut_batch(cli, local_ray, tmp_path):
    expected = batch_summary(cli, tmp_path, "batch.jsonl", "--budget", "16MiB")
    rows = analyze_dataset(INPUTS, budget="16MiB", summary=tmp_path / "ray.jsonl")
    assert rows == [json.loads(line) for line in expected.splitlines()]
    assert (tmp_path / "ray.jsonl").read_text() == expected
    statuses = {r["status"] for r in rows}
    assert {"ok", "over_budget", "failed", "skipped"} <= statuses

    # The same rows, written as the batch writes CSV and Markdown, and as Parquet.
    for ext in ("csv", "md"):
        write_summary(rows, tmp_path / f"ray.{ext}")
        assert (tmp_path / f"ray.{ext}").read_text() == batch_summary(cli, tmp_path, f"batch.{ext}", "--budget", "16MiB")
    import pyarrow.parquet as pq

    write_summary(rows, tmp_path / "ray.parquet")
    table = pq.read_table(tmp_path / "ray.parquet").to_pylist()
    assert len(table) == len(rows)
    ranked = 0
    for t, r in zip(table, rows):
        d = r.get("distributed")
        # tests/data/ranks: one 4-rank step; sample_traces/matrix's DDP runs record rank 0 of 2.
        ranked += d is not None and d["world_size"] == 4
        assert {c: t[c] for c in memcut._native.SUMMARY_COLUMNS} == {c: r[c] for c in memcut._native.SUMMARY_COLUMNS}
        assert (t["rank"], t["world_size"], t["rank_from"]) == (
            (d["rank"], d["world_size"], d["from"]) if d else (None, None, None)
        )
        assert dict(t["peak_by_category"] or []) == (d["peak_by_category"] if d else {})
    assert ranked == 4, "the DDP step's 4 ranks"


def test_rows_without_a_budget_and_one_file(cli, local_ray, tmp_path):
    expected = batch_summary(cli, tmp_path, "batch.jsonl")
    rows = analyze_dataset(INPUTS)
    assert rows == [json.loads(line) for line in expected.splitlines()]
    one = str(ROOT / "sample_traces" / "grad_accum.trace.json.gz")
    assert analyze_dataset(one) == memcut.summary_rows(one)


def test_bad_options_fail_before_any_task(local_ray):
    with pytest.raises(memcut.MemcutError, match="budget: "):
        analyze_dataset(INPUTS, budget="eighty")
    with pytest.raises(memcut.MemcutError, match="--summary x.txt: name it .csv, .jsonl or .md"):
        write_summary([], "x.txt")
