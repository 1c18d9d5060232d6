"""The CPU benchmark command (``python -m benchmarks``): its table sections,
the Buffer-against-NumPy figures, the GIL figures on the fake GPU driver,
and how each optional section says why it did not run.  These check that
every figure is produced with the target DESIGN.md gives it, not what the
figures are (a loaded test machine says nothing about them)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # for `benchmarks`, a top-level directory
    sys.path.insert(0, str(REPO))

from benchmarks import (  # noqa: E402
    buffers,
    capture,
    common,
    fake_gpu,
    fake_overhead,
    fake_pipelines,
    protocols,
)
from benchmarks import run as runner  # noqa: E402
from benchmarks.common import Result, Run, Section, table  # noqa: E402
from benchmarks.cpu import trace_overhead, wake_latency  # noqa: E402


def test_table_heads_each_section_once():
    rows = [
        Result("a", 1.0, "x", 2, section="one"),
        Result("b", 1.0, "x", 2, section="one"),
        Result("c", 3.0, "x", 2, section="two"),
    ]
    lines = table(rows).splitlines()
    assert lines[2] == "[one]" and lines[5] == "[two]", lines
    assert [line.split(" |")[0].strip() for line in lines[3:5]] == ["a", "b"]
    assert "MISS" in lines[6]
    # Without sections (benchmarks/gpu.py before it had any): no headings.
    assert "[" not in table([Result("a", 1.0, "x")])


def test_wake_latency_targets_what_a_user_sees():
    """Issue 12: the target row times a Python host function behind the
    gate; the queue-only figure is reported without a target."""
    fn, queue = wake_latency(samples=3)
    assert "Python host function" in fn.name and fn.target == 1
    assert "queue only" in queue.name and queue.target is None
    for r in (fn, queue):
        assert r.ratio > 0 and math.isfinite(r.ratio) and "threading.Event" in r.detail


def test_trace_overhead_is_measured():
    r = trace_overhead(reps=1, number=50)
    assert r.ratio > 0 and "recording" in r.detail and r.target is None


needs_numpy = pytest.mark.skipif(
    buffers.numpy_skip_reason() is not None, reason="NumPy is not installed"
)


@needs_numpy
def test_buffer_figures_have_design_targets():
    results = buffers.per_call(reps=1, number=200)
    targets = {r.name: r.target for r in results}
    assert targets == {
        "Buffer(DType.float32, (1024,)) create+drop": 1,
        "DType.float32 (the enum lookup)": None,
        "Buffer.from_numpy(a)": 1.5,
        "buf.to_numpy()": 1.5,
        "np.from_dlpack(buf)": 1.5,
        "buf[1:3, ::2] (a view)": 1.5,
        "buf.item() (one element)": 1.5,
        "buf[i, j] = v": 1.5,
        "Buffer.zeros((4, 6), DType.float32)": None,
        "dst.inplace_copy_from(src) (24 floats)": None,
    }
    for r in results:
        assert r.ratio > 0 and math.isfinite(r.ratio), r
        assert r.section == buffers.SECTION
        assert r.status in (("PASS", "MISS") if r.target else ("info",))


@needs_numpy
def test_buffer_copy_bandwidth_is_higher_is_better():
    r = buffers.copy_bandwidth(reps=1, mib=1)
    assert r.higher_is_better and r.target == 0.9
    assert r.ratio > 0 and "GB/s vs np.copyto" in r.detail


@needs_numpy
def test_buffer_memory_growth_is_measured():
    r = buffers.memory_growth(count=1000)
    assert r.target == 1 and r.name.startswith("1,000 Buffer(")
    assert "RSS" in r.detail


@pytest.mark.skipif(fake_gpu.skip_reason() is not None, reason="no fake driver")
def test_gil_figures_run_on_the_fake_driver():
    results = fake_gpu.benchmark(reps=1, number=200)
    assert {r.section for r in results} == {"fake GPU (CPU-side)"}
    assert all(r.target is None and r.status == "info" for r in results)
    names = {r.name for r in results}
    for op, _ in fake_gpu.CALLS:
        assert f"{op}: nothing pending (GIL held)" in names
        assert f"{op}: host dependency pending (GIL released)" in names
        assert f"{op}: cost of releasing the GIL, ns" in names
    assert "reference: releasing the GIL around a C call, ns" in names
    # Both states were measured on the fake GPU: enqueues cost more than a
    # no-op call there.
    held = [r for r in results if "(GIL held)" in r.name]
    assert all(r.ratio > 1 for r in held), held


@pytest.mark.skipif(fake_gpu.skip_reason() is not None, reason="no fake driver")
def test_pipeline_overlap_runs_on_the_fake_driver():
    """SPEC §12.6's overlap: two pipelines on two queues, and sharing one,
    against the same pipelines one after the other, info figures (the child
    checks that both pipelines kept their data)."""
    two, one = fake_pipelines.benchmark(reps=1, mib=1, steps=2)
    for r in (two, one):
        assert r.section == "fake GPU (CPU-side)" and r.status == "info"
        assert r.name.endswith("/ one after the other") and r.ratio > 0
    assert two.name.startswith("two pipelines") and "on two queues" in two.name
    assert "ms concurrently vs" in two.detail and "MiB/s" in two.detail


def test_gil_child_refuses_a_backend_other_than_the_fake():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    env.update(MAX_DRIVER_BACKEND="cpu", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.fake_gpu", "1", "10"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert proc.returncode != 0 and "not on the fake CUDA driver" in proc.stderr


def test_optional_sections_say_why_they_did_not_run(monkeypatch, capsys):
    monkeypatch.setattr(buffers, "numpy_skip_reason", lambda: "no NumPy here")
    monkeypatch.setattr(fake_gpu, "skip_reason", lambda: "no compiler here")
    optional = [s for s in runner.load_sections() if s.title != CPU_SECTION]
    ran = runner.run_sections(optional, Run(quick=True))
    # Only the asyncio rows need nothing optional.
    assert {r.section for r in ran} == {protocols.ASYNC_SECTION}
    lines = capsys.readouterr().out.splitlines()
    assert f"[{buffers.SECTION}] skipped: no NumPy here" in lines
    assert f"[{protocols.PICKLE_SECTION}] skipped: no NumPy here" in lines
    # Three sections share the fake GPU's heading: it is said once.
    assert lines.count(f"[{fake_gpu.SECTION}] skipped: no compiler here") == 1


# ---- the section registry ---------------------------------------------------

CPU_SECTION = "CPU device: queues, events, flags, host functions"


def test_every_module_registers_its_sections_in_order():
    titles = [s.title for s in runner.load_sections()]
    assert titles == [
        CPU_SECTION,
        buffers.SECTION,
        protocols.ASYNC_SECTION,
        protocols.PICKLE_SECTION,
        fake_gpu.SECTION,
        fake_gpu.SECTION,
        fake_gpu.SECTION,
        capture.CPU_SECTION,
        fake_overhead.SECTION,
    ]


def test_a_section_registers_with_a_decorator(monkeypatch, capsys):
    """What a new benchmark module does (CONTRIBUTING.md): decorate a
    function; its results land under its title, in order; a flag makes it
    opt-in; a skip reason is printed instead of running it."""
    monkeypatch.setattr(common, "_SECTIONS", {})

    @common.section("late", order=2)
    def late(run: Run) -> list[Result]:
        return [Result("b", 1.0, f"quick={run.quick}")]

    @common.section("early", order=1)
    def early(run: Run) -> list[Result]:
        return [Result("a", 1.0, "x"), Result("own", 1.0, "x", section="mine")]

    @common.section("opt-in", order=3, flag="--vs-thing", flag_help="compare")
    def opt_in(run: Run) -> list[Result]:
        return [Result("c", 1.0, "x")]

    @common.section("absent", order=4, skip_reason=lambda: "nothing here")
    def absent(run: Run) -> list[Result]:
        raise AssertionError("a skipped section ran")

    @common.section("early", order=1)  # registered again: replaces
    def early(run: Run) -> list[Result]:  # noqa: F811
        return [Result("a", 1.0, "x"), Result("own", 1.0, "x", section="mine")]

    sections = common.sections()
    assert [s.title for s in sections] == ["early", "late", "opt-in", "absent"]
    args = runner.parser(sections).parse_args(["--quick"])
    results = runner.run_sections(sections, Run(quick=True, options=args))
    assert [(r.name, r.section) for r in results] == [
        ("a", "early"),
        ("own", "mine"),
        ("b", "late"),
    ]
    assert results[2].detail == "quick=True"
    assert "[absent] skipped: nothing here" in capsys.readouterr().out
    args = runner.parser(sections).parse_args(["--vs-thing"])
    results = runner.run_sections(sections, Run(options=args))
    assert ("c", "opt-in") in [(r.name, r.section) for r in results]
    assert "--vs-thing" in runner.parser(sections).format_help()


@needs_numpy
def test_capture_figures_have_the_issue_targets():
    """Issue 25: launching a graph of 100 copies at least 5x cheaper per
    operation than enqueueing them one by one; the rest is info."""
    rows = capture.results(capture.measure("cpu", reps=1), capture.CPU_SECTION)
    targets = {r.name: (r.target, r.higher_is_better) for r in rows}
    assert targets == {
        "100 64-byte copies: one by one / one graph launch, per operation": (5, True),
        "100 host functions: one by one / one graph launch, per operation": (
            None,
            True,
        ),
        "end_capture() of 100 nodes, µs": (None, False),
    }
    assert all(r.ratio > 0 and math.isfinite(r.ratio) for r in rows)


@pytest.mark.skipif(
    fake_gpu.skip_reason() is not None, reason=str(fake_gpu.skip_reason())
)
def test_fake_overhead_reports_every_row_in_both_states():
    """Issue 23: each call against the raw fake entry point it makes, with no
    context current and with the device's context current, against DESIGN's
    150 ns (a small copy: raw + 300 ns), and the context push/pop's price."""
    rows = fake_overhead.benchmark(reps=1, sample_s=0.001)
    names = {r.name: r for r in rows}
    for state in fake_overhead.STATES:
        for row in fake_overhead.ROWS:
            r = names.pop(f"{row} [{state}]: overhead over raw driver, ns")
            assert math.isfinite(r.ratio) and r.section == fake_overhead.SECTION
            expect = 300 if row.startswith("4 KiB copy pinned") else 150
            assert r.target == (None if "[vs " in row else expect), row
    (context,) = names.values()
    assert context.name.startswith("context push + pop") and context.ratio > 0


def test_async_wake_latency_targets_half_of_run_in_executor():
    r = protocols.wake_latency(samples=3)
    assert r.target == 0.5 and not r.higher_is_better
    assert r.section == protocols.ASYNC_SECTION
    assert r.ratio > 0 and math.isfinite(r.ratio) and "run_in_executor" in r.detail


def test_concurrent_awaits_hold_threads_and_memory():
    rows = {r.name: r for r in protocols.concurrent_awaits(count=200)}
    threads = rows["200 concurrent awaits on one queue: thread growth"]
    assert threads.target == 0 and "armed watches left after 0" in threads.detail
    memory = rows["200 concurrent awaits: memory per waiter / a plain Future's"]
    assert memory.target == 1.5 and "B per awaiting task" in memory.detail
    assert rows["200 concurrent awaits: wake them all / plain Futures"].target is None


@needs_numpy
def test_pickling_compares_protocol_5_with_numpy():
    rows = protocols.pickling(reps=1, mib=1)
    assert [r.target for r in rows] == [0.9, None]
    assert all(
        r.higher_is_better and r.section == protocols.PICKLE_SECTION for r in rows
    )
    assert "GB/s vs NumPy" in rows[0].detail and "zero-copy" in rows[1].detail
    assert all(r.ratio > 0 and math.isfinite(r.ratio) for r in rows)


def test_the_command_changes_no_tracked_file_unless_saving(tmp_path, monkeypatch):
    """Issue 18: results go to a scratch folder; --save writes the tracked
    ones; --out chooses; --save and --out together are refused."""
    written = []
    only = Section("one", 1, lambda run: [Result("h", 1, "")])
    monkeypatch.setattr(runner, "load_sections", lambda: [only])
    monkeypatch.setattr(common, "plot", lambda results, path: written.append(path))
    monkeypatch.setattr(common, "SCRATCH_DIR", tmp_path / "scratch")
    monkeypatch.setattr(common, "OUT_DIR", tmp_path / "tracked")
    run = runner
    assert run.main(["--quick"]) == 0
    assert (tmp_path / "scratch" / "latest.json").exists()
    assert not (tmp_path / "tracked").exists()
    assert run.main(["--quick", "--save"]) == 0
    assert (tmp_path / "tracked" / "latest.txt").exists()
    assert run.main(["--quick", "--out", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / "latest.json").exists()
    with pytest.raises(SystemExit):
        run.main(["--save", "--out", str(tmp_path)])


@needs_numpy
def test_benchmarks_command_writes_every_section(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "latest.json").read_text())
    sections = {r["section"] for r in report["results"]}
    assert buffers.SECTION in sections
    assert "CPU device: queues, events, flags, host functions" in sections
    assert capture.CPU_SECTION in sections
    if fake_gpu.skip_reason() is None:
        assert fake_gpu.SECTION in sections
        assert capture.FAKE_SECTION in sections
        assert fake_overhead.SECTION in sections
    text = (tmp_path / "latest.txt").read_text()
    assert f"[{buffers.SECTION}]" in text
