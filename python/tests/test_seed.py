"""The method's own three functions, with its names, signatures and keys,
answered by the component planner of `memcut plan`."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

import memcut
from memcut import plan_memory_cuts, recommend_memory_followup, summarize_peak_sources

COMPONENTS = [
    {"name": "weights", "peak_gb": 10.0, "cuttable": False},
    {"name": "activations", "peak_gb": 8.0, "cuttable": True},
    {"name": "temporary_buffers", "peak_gb": 3.0, "cuttable": True},
]


def test_worked_example():
    # The method's own test, unchanged but for the import.
    summary = summarize_peak_sources(COMPONENTS)
    plan = plan_memory_cuts(COMPONENTS, target_peak_gb=15.0)
    recommendation = recommend_memory_followup(summary, plan)
    assert summary["largest_source"] == "weights"
    assert summary["peak_gb"] == 10.0
    assert plan["cut_order"] == ["activations"]
    assert plan["estimated_peak_gb"] == 13.0
    assert recommendation["needs_dedicated_page"] is True
    assert recommendation["reason"]


def test_same_answer_as_memcut_plan(cli, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(COMPONENTS))
    for target in ("21.0", "15.0", "10.5", "9.0"):
        out = run_cli(cli, ["plan", str(path), "--target-gb", target, "--format", "json"])
        assert out.returncode == 0, out.stderr
        expected = json.loads(out.stdout)
        summary = summarize_peak_sources(COMPONENTS)
        plan = plan_memory_cuts(COMPONENTS, float(target))
        rec = recommend_memory_followup(summary, plan)
        assert (summary["largest_source"], summary["peak_gb"], summary["total_peak_gb"]) == (
            expected["largest_source"], expected["largest_peak_gb"], expected["peak_gb"])
        for key in ("cut_order", "steps", "estimated_peak_gb", "target_gb"):
            assert plan[key] == expected[key], key
        assert (rec["verdict"], rec["gap_gb"], rec["reason"]) == (
            expected["verdict"], expected["gap_gb"], expected["reason"])
        assert rec["needs_dedicated_page"] == (expected["verdict"] != "fits")


def test_a_peak_that_fits_needs_no_page():
    summary = summarize_peak_sources(COMPONENTS)
    plan = plan_memory_cuts(COMPONENTS, 21.0)
    rec = recommend_memory_followup(summary, plan)
    assert plan["cut_order"] == []
    assert rec["needs_dedicated_page"] is False
    assert rec["verdict"] == "fits"
    nope = recommend_memory_followup(summary, plan_memory_cuts(COMPONENTS, 9.0))
    assert nope["needs_dedicated_page"] is True
    assert nope["gap_gb"] == 1.0
    assert "1.0 GB over" in nope["reason"]


def test_bad_components_raise_the_cli_message(cli, tmp_path):
    bad = [{"name": "w", "peak_gb": -1.0, "cuttable": True}]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(bad))
    out = run_cli(cli, ["plan", str(path), "--target-gb", "1"])
    cli_reason = out.stderr.decode().strip().split(f"{path}: ", 1)[1]
    with pytest.raises(memcut.MemcutError) as e:
        summarize_peak_sources(bad)
    assert str(e.value) == f"components: {cli_reason}"
    with pytest.raises(memcut.MemcutError, match="components: empty component list"):
        plan_memory_cuts([], 1.0)
    with pytest.raises(memcut.MemcutError, match=r"`-1` is not a size in GB \(a number >= 0\)"):
        plan_memory_cuts(COMPONENTS, -1)
    with pytest.raises(memcut.MemcutError, match="`nan` is not a size in GB"):
        plan_memory_cuts(COMPONENTS, float("nan"))
    with pytest.raises(memcut.MemcutError, match="summary: missing key 'peak_gb'"):
        recommend_memory_followup({"largest_source": "w"}, plan_memory_cuts(COMPONENTS, 1.0))
    with pytest.raises(memcut.MemcutError, match="plan: missing field `target_gb`"):
        recommend_memory_followup(summarize_peak_sources(COMPONENTS), {"cut_order": []})
    with pytest.raises(TypeError):
        summarize_peak_sources("weights")  # type: ignore[arg-type]
