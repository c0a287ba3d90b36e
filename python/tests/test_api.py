"""`memcut.analyze` and `memcut.render` give exactly what the CLI gives."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import pickle
import re
import threading
import time
import warnings
from pathlib import Path

import pytest
from conftest import BROKEN, ROOT, SAMPLES, run_cli

import memcut
from memcut import _native

ADAMW = "sample_traces/train_adamw.snapshot.pickle.gz"


def cli_json(cli: Path, args: list) -> dict:
    out = run_cli(cli, ["analyze", *args, "-f", "json"])
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def test_version_is_the_library_and_wheel_version():
    cargo = (ROOT / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert memcut.__version__ == version
    assert importlib.metadata.version("memcut") == version


@pytest.mark.parametrize("sample", SAMPLES)
def test_analyze_returns_the_cli_json(cli, in_root, sample):
    report = memcut.analyze(sample)
    assert isinstance(report, dict)
    assert report == cli_json(cli, [sample])
    assert list(report)[0] == "schema_version"


@pytest.mark.parametrize("rank", range(4))
def test_a_rank_of_a_ddp_run_says_which(cli, in_root, rank):
    # tests/data/ranks: a 4-rank gloo DDP step; Kineto's distributedInfo
    # becomes source.distributed (schema_version 2) and the rows' rank.
    path = f"tests/data/ranks/rank_step.{rank}.pt.trace.json.gz"
    report = memcut.analyze(path)
    assert report == cli_json(cli, [path])
    assert report["schema_version"] == 3
    assert report["source"]["distributed"] == {"rank": rank, "world_size": 4}
    assert "distributed" not in memcut.analyze(ADAMW)["source"]
    (row,) = memcut.summary_rows(path)
    assert row["distributed"]["rank"] == rank and row["distributed"]["from"] == "distributed_info"
    assert sum(row["distributed"]["peak_by_category"].values()) == row["peak_bytes"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_analyze_with_a_budget_returns_the_cli_json(cli, in_root, sample):
    expected = cli_json(cli, [sample, "--budget", "16MiB", "--headroom", "1MiB"])
    assert memcut.analyze(sample, budget="16MiB", headroom="1MiB") == expected
    # Ints are bytes.
    assert memcut.analyze(sample, budget=16 << 20, headroom=1 << 20) == expected


def test_every_cli_option_has_its_keyword(cli, in_root, tmp_path):
    levers = [{"name": "halve", "scales": {"activation": 0.5}, "cost": "cheap", "action": "halve it"}]
    rules = [{"name": "adam", "category": "temporary", "site_contains": "adam.py"}]
    (tmp_path / "levers.json").write_text(json.dumps(levers))
    (tmp_path / "rules.json").write_text(json.dumps(rules))
    args = [ADAMW, "--budget", "12MB", "--headroom", "5%", "--levers", str(tmp_path / "levers.json"),
            "--rules", str(tmp_path / "rules.json"), "--device", "cpu", "--top", "3", "--order", "largest"]
    expected = cli_json(cli, args)
    common = dict(budget="12MB", headroom="5%", device="cpu", top=3, order="largest")
    # Files, and the lists they hold, give the same report.
    assert memcut.analyze(ADAMW, levers=tmp_path / "levers.json", rules=str(tmp_path / "rules.json"), **common) == expected
    assert memcut.analyze(ADAMW, levers=levers, rules=rules, **common) == expected
    sharded = cli_json(cli, [ADAMW, "--budget", "12MB", "--dp-ranks", "4"])
    assert memcut.analyze(ADAMW, budget="12MB", dp_ranks=4) == sharded


def test_bytes_are_analysed_like_stdin(cli, in_root):
    data = (ROOT / ADAMW).read_bytes()
    out = run_cli(cli, ["analyze", "-", "-f", "json"], stdin=data)
    assert memcut.analyze(data) == json.loads(out.stdout)
    named = memcut.analyze(bytearray(data), name=ADAMW)
    assert named == memcut.analyze(ADAMW)
    assert memcut.analyze(memoryview(data), name=ADAMW) == named


@pytest.mark.parametrize("fmt", ["md", "html", "text", "json"])
def test_render_gives_the_cli_bytes(cli, in_root, fmt):
    for sample in (ADAMW, "sample_traces/kv_cache_decode.trace.json.gz"):
        # --top 10: analyze's default; the CLI's text alone defaults to 3.
        out = run_cli(cli, ["analyze", sample, "--budget", "16MiB", "--top", "10", "-f", fmt])
        assert out.returncode == 0
        report = memcut.analyze(sample, budget="16MiB")
        assert memcut.render(report, fmt) == out.stdout.decode()


def test_render_reads_the_dict(in_root, tmp_path):
    report = memcut.analyze(ADAMW)
    assert type(report) is dict
    edited = copy.deepcopy(report)
    edited["source"]["path"] = "renamed.pickle"
    assert "# memcut report: `renamed.pickle`" in memcut.render(edited, "md")
    assert memcut.render(report) == memcut.render(report, "md")


@pytest.mark.parametrize("sample", [ADAMW, "sample_traces/kv_cache_decode.trace.json.gz"])
def test_a_saved_report_renders_the_same_pages_chart_included(cli, in_root, tmp_path, sample):
    """The JSON carries the plotted series: a report saved by the CLI and
    loaded again renders the HTML chart the analysis drew."""
    saved = tmp_path / "report.json"
    out = run_cli(cli, ["analyze", sample, "--budget", "16MiB", "-f", "json", "-o", str(saved)])
    assert out.returncode == 0, out.stderr.decode()
    with open(saved) as f:
        loaded = json.load(f)
    assert any(d.get("timeline") for d in loaded["devices"])
    for fmt in ("md", "html", "text", "json"):
        direct = run_cli(cli, ["analyze", sample, "--budget", "16MiB", "--top", "10", "-f", fmt]).stdout.decode()
        assert memcut.render(loaded, fmt) == direct
    assert "<svg" in memcut.render(loaded, "html")
    # Pickled and copied, it is still the same report.
    for other in (pickle.loads(pickle.dumps(loaded)), copy.deepcopy(loaded)):
        assert memcut.render(other, "html") == memcut.render(loaded, "html")


def test_render_errors_are_memcut_errors(in_root):
    with pytest.raises(memcut.MemcutError, match="format must be one of text, md, json, html; got `pdf`"):
        memcut.render(memcut.analyze(ADAMW), "pdf")
    with pytest.raises(memcut.MemcutError, match="^not a memcut report: missing field `schema_version`"):
        memcut.render({"devices": []})


@pytest.mark.parametrize("broken", BROKEN)
def test_broken_files_fail_or_warn_with_the_cli_message(cli, in_root, broken):
    out = run_cli(cli, ["analyze", broken, "-f", "json"])
    stderr = out.stderr.decode().splitlines()
    if out.returncode != 0:
        assert len(stderr) == 1 and stderr[0].startswith("memcut: error: ")
        with pytest.raises(memcut.MemcutError) as e:
            memcut.analyze(broken)
        assert str(e.value) == stderr[0][len("memcut: error: "):]
        assert isinstance(e.value, ValueError)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = memcut.analyze(broken)
    assert report == json.loads(out.stdout)
    warned = [f"memcut: warning: {w.message}" for w in caught if w.category is memcut.MemcutWarning]
    assert warned == stderr


def test_option_errors_carry_the_cli_message(cli, in_root, tmp_path):
    missing = str(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"name": "x"}]')
    for flag in ("--levers", "--rules"):
        for path in (missing, str(bad)):
            out = run_cli(cli, ["analyze", ADAMW, flag, path])
            assert out.returncode == 2
            line = out.stderr.decode().strip()
            with pytest.raises(memcut.MemcutError) as e:
                memcut.analyze(ADAMW, **{flag[2:]: path})
            assert f"memcut: error: {e.value}" == line
    # The CLI and Python refuse the same bad budgets and headrooms with the
    # same message (the options spelled as each spells them).
    for args, kwargs in [
        (["--budget", "40"], {"budget": "40"}),
        (["--budget", "0%"], {"budget": "0%"}),
        (["--headroom", "10"], {"headroom": "10"}),
        (["--headroom", "-1MiB"], {"headroom": "-1MiB"}),
        (["--budget", "1GiB", "--headroom", "2GiB"], {"budget": "1GiB", "headroom": "2GiB"}),
        (["--device-memory", "80%"], {"device_memory": "80%"}),
        (["--device-memory", "40"], {"device_memory": "40"}),
    ]:
        out = run_cli(cli, ["analyze", ADAMW, *args])
        assert out.returncode == 2, args
        line = out.stderr.decode().strip().splitlines()[0]
        with pytest.raises(memcut.MemcutError) as e:
            memcut.analyze(ADAMW, **kwargs)
        said = str(e.value)
        if line.startswith("error: invalid value"):
            # clap: "error: invalid value 'V' for '--budget <…>': WHY"; Python: "budget: WHY".
            assert line.endswith(said.split(": ", 1)[1]), (line, said)
        else:
            # The library's check: the same sentence with the options spelled as Python's.
            assert line == "memcut: error: " + said.replace("headroom", "--headroom", 1).replace(
                "budget", "--budget", 1), (line, said)
    # A share of the peak, as the CLI takes it.
    assert memcut.analyze(ADAMW, budget="80%") == cli_json(cli, [ADAMW, "--budget", "80%"])
    with pytest.raises(memcut.MemcutError, match="budget: unknown unit `X` in `80X`"):
        memcut.analyze(ADAMW, budget="80X")
    with pytest.raises(memcut.MemcutError, match=r"headroom: headroom `100%` must be in \[0%, 100%\)"):
        memcut.analyze(ADAMW, headroom="100%")
    with pytest.raises(memcut.MemcutError, match="budget: -1 is not a size"):
        memcut.analyze(ADAMW, budget=-1)
    with pytest.raises(TypeError, match="budget: give bytes as an int"):
        memcut.analyze(ADAMW, budget=1.5)  # type: ignore[arg-type]
    with pytest.raises(memcut.MemcutError, match="^levers: bad levers file: missing field `scales`"):
        memcut.analyze(ADAMW, levers=[{"name": "x"}])
    with pytest.raises(memcut.MemcutError, match="is a directory"):
        memcut.analyze("sample_traces")
    with pytest.raises(TypeError):
        memcut.analyze(42)  # type: ignore[arg-type]


# Every option the CLI's `analyze` and Python's `analyze` share, refused
# alike: one bad value each, (CLI arguments, Python keywords).
BAD_OPTIONS = [
    (["--budget", "40"], {"budget": "40"}),
    (["--headroom", "10"], {"headroom": "10"}),
    (["--device-memory", "80%"], {"device_memory": "80%"}),
    (["--levers", "missing.json"], {"levers": "missing.json"}),
    (["--rules", "missing.json"], {"rules": "missing.json"}),
    (["--what-if", "nope"], {"what_if": ["nope"]}),
    (["--at", "nope"], {"at": "nope"}),
    (["--dp-ranks", "0"], {"dp_ranks": 0}),
    (["--order", "fastest"], {"order": "fastest"}),
    (["--top", "-1"], {"top": -1}),
    (["--device", "cuda:7"], {"device": "cuda:7"}),
]


@pytest.mark.parametrize("args,kwargs", BAD_OPTIONS, ids=[a[0] for a, _ in BAD_OPTIONS])
def test_the_cli_and_python_refuse_each_bad_option_alike(cli, in_root, args, kwargs):
    out = run_cli(cli, ["analyze", ADAMW, *args])
    # 2: a usage error; 1: the input cannot be analysed so (no such device in it).
    assert out.returncode == (1 if args[0] == "--device" else 2), (args, out.stderr)
    line = out.stderr.decode().strip().splitlines()[0]
    with pytest.raises(memcut.MemcutError) as e:
        memcut.analyze(ADAMW, **kwargs)
    said = str(e.value)
    if line.startswith("error: invalid value"):
        # clap: "error: invalid value 'V' for '--opt <…>': WHY"; Python: "opt: WHY".
        assert said.startswith(f"{next(iter(kwargs))}: "), said
        assert line.endswith(": " + said.split(": ", 1)[1]), (line, said)
    else:
        # The library's own check: the same line with the option spelled as the CLI spells it.
        python, flag = next(iter(kwargs)), args[0]
        spelled = ("memcut: error: " + said, "memcut: error: " + said.replace(python, flag, 1))
        assert line in spelled, (line, said)


def test_threads_get_the_same_reports(in_root):
    expected = {s: memcut.analyze(s) for s in SAMPLES}
    results = {}

    def work(s):
        results[s] = memcut.analyze(s)

    threads = [threading.Thread(target=work, args=(s,)) for s in SAMPLES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected


def test_the_gil_is_released_while_analysing(big_snapshot):
    """A Python thread keeps running while the library analyses: with the
    GIL held for the whole call it would make no progress in its middle."""
    data = big_snapshot.read_bytes()
    options = _native.Options()
    _native.analyze_bytes(data, "big", options)  # warm up: page in, start rayon
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    worker = threading.Thread(target=spin)
    worker.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    _native.analyze_bytes(data, "big", options)
    t1 = time.perf_counter()
    stop.set()
    worker.join()
    middle = [t for t in ticks if t0 + 0.3 * (t1 - t0) < t < t0 + 0.7 * (t1 - t0)]
    assert t1 - t0 > 0.01, "the input is too small to tell"
    assert middle, f"no Python progress during a {t1 - t0:.3f} s analysis: the GIL was held"


def test_options_pickle_with_their_files_read(in_root, tmp_path):
    """Ray ships the checked options to workers that may not see the files."""
    levers = tmp_path / "levers.json"
    levers.write_text(json.dumps([{"name": "halve", "scales": {"activation": 0.5}, "cost": "cheap", "action": "halve"}]))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"name": "adam", "category": "temporary", "site_contains": "adam.py"}]))
    options = _native.Options(budget="12MB", levers_file=str(levers), rules_file=str(rules),
                              order="largest", top=3, dp_ranks=2, headroom="5%",
                              device_memory="16GiB")
    shipped = pickle.loads(pickle.dumps(options))
    levers.unlink()
    rules.unlink()
    data = (ROOT / ADAMW).read_bytes()
    assert _native.analyze_bytes(data, "x", shipped) == _native.analyze_bytes(data, "x", options)
    assert '"lever": "halve"' in _native.analyze_bytes(data, "x", shipped)
    assert '"rule": "user:adam"' in _native.analyze_bytes(data, "x", shipped)


SGD = "sample_traces/train_sgd_momentum.snapshot.pickle.gz"


def test_device_memory_names_memory_outside_the_allocator(cli, in_root):
    """A snapshot does not record the device's memory: given, an OOM far
    below it is memory held outside PyTorch's allocator, as in the CLI."""
    oom = "tests/data/segments/fragmented_oom.pickle"
    report = memcut.analyze(oom, device_memory="16GiB")
    assert report == cli_json(cli, [oom, "--device-memory", "16GiB"])
    kinds = [f["kind"] for f in report["devices"][0]["findings"]]
    assert kinds == ["fragmentation_at_oom", "memory_outside_allocator"]
    assert "--device-memory" in report["devices"][0]["plan"]["budget_source"]
    assert [f["kind"] for f in memcut.analyze(oom)["devices"][0]["findings"]] == ["fragmentation_at_oom"]


@pytest.mark.parametrize("fmt", ["md", "html", "text", "json"])
def test_diff_gives_the_cli_bytes(cli, in_root, fmt):
    out = run_cli(cli, ["diff", ADAMW, SGD, "--fail-if-peak-grows", "1", "-f", fmt])
    assert out.returncode in (0, 4), out.stderr.decode()
    result = memcut.diff(ADAMW, SGD, fail_if_peak_grows=1)
    assert result["kind"] == "diff"
    assert memcut.render(result, fmt) == out.stdout.decode()


def test_diff_takes_reports_bytes_and_paths_alike(in_root):
    by_path = memcut.diff(ADAMW, SGD)
    with open(SGD, "rb") as f:
        data = f.read()
    by_bytes = memcut.diff(ADAMW, data)
    assert by_bytes["devices"] == by_path["devices"]
    same = memcut.diff(ADAMW, ADAMW)
    for d in same["devices"]:
        assert d["peak"]["change_bytes"] == 0, d["peak"]
    with pytest.raises(memcut.MemcutError, match="^after: not a memcut report"):
        memcut.diff(ADAMW, {"devices": []})


KEPT_GRAPH = "sample_traces/pairs/tuned/kept_graph.tinylm.warm.waste.trace.json.gz"


def test_findings_and_what_if_are_the_cli_json(cli, in_root):
    levers = ["free_kept_graph", "inference_mode"]
    report = memcut.analyze(KEPT_GRAPH, what_if=levers)
    assert report == cli_json(cli, [KEPT_GRAPH, "--what-if", ",".join(levers)])
    device = report["devices"][0]
    kinds = [f["kind"] for f in device["findings"]]
    assert kinds == ["graph_kept_alive", "autograd_in_inference"]
    assert device["what_if"]["levers"] == levers
    assert device["what_if"]["peak_allocated_bytes"] < device["peak"]["allocated_bytes"]
    assert device["what_if"]["estimate"] is False


KEPT_GRADIENTS = "sample_traces/pairs/levers_check/train.llama.cold.waste.snapshot.pickle.gz"


def test_a_training_finding_is_priced_as_its_catalogue_lever(cli, in_root):
    # zero_grad(set_to_none=False): the gradients live through the next
    # forward; the finding's fix is the catalogue's lever, and the finding
    # says what the what-if of that lever says.
    lever = "zero_grad_set_to_none"
    report = memcut.analyze(KEPT_GRADIENTS, what_if=[lever])
    assert report == cli_json(cli, [KEPT_GRADIENTS, "--what-if", lever])
    device = report["devices"][0]
    (finding,) = device["findings"]
    assert finding["kind"] == "gradients_kept_through_forward"
    assert finding["fix"] == lever
    assert finding["peak_after_bytes"] == device["what_if"]["peak_allocated_bytes"]
    assert finding["saving_bytes"] > 0


def test_an_unknown_what_if_lever_is_refused(in_root):
    with pytest.raises(memcut.MemcutError, match="unknown lever `nope` for what_if"):
        memcut.analyze(KEPT_GRAPH, what_if=["nope"])


def test_options_with_what_if_pickle(in_root):
    options = memcut._options(what_if=["inference_mode"])
    again = pickle.loads(pickle.dumps(options))
    assert json.loads(_native.analyze_file(KEPT_GRAPH, again)) == json.loads(
        _native.analyze_file(KEPT_GRAPH, options)
    )


FIRST_STEP = "sample_traces/pairs/next_step/first_step.tinylm.cold.waste.trace.json.gz"
TWO_STEPS = "sample_traces/pairs/next_step/first_step.tinylm.cold.two_steps.trace.json.gz"


def test_a_first_step_predicts_the_next_ones_peak(in_root, cli):
    # The same run recorded over one step and over two: the first predicts
    # the second's peak (the optimizer's state, made lazily in step one, is
    # alive through step two's forward and backward); the two-step
    # recording predicts nothing. Python gives what the CLI prints.
    report = memcut.analyze(FIRST_STEP)
    assert report == cli_json(cli, [FIRST_STEP])
    (device,) = report["devices"]
    two = memcut.analyze(TWO_STEPS)["devices"][0]
    assert device["next_step"]["peak_allocated_bytes"] == two["peak"]["allocated_bytes"]
    assert device["next_step"]["peak_allocated_bytes"] > device["peak"]["allocated_bytes"]
    assert device["next_step"]["carried_bytes"] > 0
    assert "next_step" not in two


def test_at_reports_an_instant_as_the_cli_does(in_root, cli):
    # `at` is `--at`: the same report, the same refusals.
    for spec in ("end", "peak", "100"):
        assert memcut.analyze(ADAMW, at=spec) == cli_json(cli, [ADAMW, "--at", spec]), spec
    trace = "sample_traces/train_adamw.trace.json.gz"
    assert memcut.analyze(trace, at="1ms") == cli_json(cli, [trace, "--at", "1ms"])
    assert memcut.analyze(ADAMW, at="100")["devices"][0]["at"]["spec"] == "100"
    out = run_cli(cli, ["analyze", ADAMW, "--at", "nope"])
    assert out.returncode == 2
    line = out.stderr.decode().strip().splitlines()[0]
    with pytest.raises(memcut.MemcutError) as e:
        memcut.analyze(ADAMW, at="nope")
    # clap: "error: invalid value 'nope' for '--at <…>': WHY"; Python: "at: WHY".
    assert line.endswith(str(e.value).split(": ", 1)[1]), (line, str(e.value))
    # An instant the trace does not have: the CLI's line after `memcut: error: `.
    out = run_cli(cli, ["analyze", ADAMW, "--at", "99999999"])
    assert out.returncode == 2
    with pytest.raises(memcut.MemcutError) as e:
        memcut.analyze(ADAMW, at="99999999")
    assert out.stderr.decode().strip() == f"memcut: error: {e.value}"
    # Picklable with the instant (for batch workers).
    options = memcut._options(at="end")
    again = pickle.loads(pickle.dumps(options))
    assert json.loads(_native.analyze_file(ADAMW, again)) == json.loads(
        _native.analyze_file(ADAMW, options)
    )


def test_diff_reads_a_saved_report_file_as_the_cli_does(in_root, cli, tmp_path):
    # `memcut diff before.json after.pickle` reads a report saved with
    # `-f json -o` back as it is; so does memcut.diff given its path.
    saved = tmp_path / "before.json"
    out = run_cli(cli, ["analyze", ADAMW, "-f", "json", "-o", str(saved)])
    assert out.returncode == 0, out.stderr.decode()
    out = run_cli(cli, ["diff", str(saved), SGD, "-f", "json"])
    assert out.returncode == 0, out.stderr.decode()
    assert memcut.diff(str(saved), SGD) == json.loads(out.stdout)
