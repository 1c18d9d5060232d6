"""The pytest plugin for users' suites (``max.pytest_plugin``, entry point
``max_driver``): fixtures, parametrization ids, markers and the check that
errors a test which leaves work pending on a device.

Each case runs a small suite with ``pytester``.  A suite that leaves a gated
queue behind runs in a subprocess, so the gate never reaches this process's
CPU device.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from max import driver

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE_BUILD = REPO_ROOT / "tests" / "fake_driver" / "build.py"
# Load the plugin by its entry point name: this works whether pytest's plugin
# autoloading is on (then it is already loaded) or off.
PLUGIN = ("-p", "max_driver")
TIMEOUT = 60
GPU_IDS = [f"gpu{i}" for i in range(driver.accelerator_count())]


def _entry_point():
    eps = importlib.metadata.entry_points(group="pytest11")
    return next((ep for ep in eps if ep.name == "max_driver"), None)


@pytest.fixture(autouse=True)
def _needs_entry_point():
    if _entry_point() is None:
        pytest.fail(
            "the pytest11 entry point max_driver is not installed: reinstall "
            "the package (pip install -e .) after changing pyproject.toml"
        )


@pytest.fixture(autouse=True)
def _children_import_this_checkout(monkeypatch):
    """Subprocess runs import this checkout's max (and its plugin), whatever
    the environment's installed copy is."""
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", str(REPO_ROOT) + (os.pathsep + path if path else "")
    )


def run(pytester, *args, subprocess=False):
    args = (*PLUGIN, "-p", "no:cacheprovider", *args)
    if subprocess:
        return pytester.runpytest_subprocess(*args, timeout=TIMEOUT)
    return pytester.runpytest(*args)


# ---- loading ----------------------------------------------------------------


def test_entry_point_names_the_module():
    ep = _entry_point()
    assert ep.value == "max.pytest_plugin"
    assert ep.load() is sys.modules["max.pytest_plugin"]


def test_import_is_lazy():
    """Importing the plugin (as pytest does at startup) must not import
    ``max.driver``, which selects the backend and may initialize a GPU."""
    code = (
        "import sys, max.pytest_plugin\n"
        "bad = [m for m in ('max.driver', 'max._core.driver') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr


def test_lazy_for_suites_that_do_not_use_it(pytester):
    pytester.makepyfile(
        """
        import sys

        def test_untouched():
            assert "max.driver" not in sys.modules
        """
    )
    run(pytester, subprocess=True).assert_outcomes(passed=1)


def test_markers_and_ini_options_are_documented(pytester):
    markers = run(pytester, "--markers")
    markers.stdout.fnmatch_lines(
        ["@pytest.mark.max_accelerator(count=1):*", "@pytest.mark.max_allow_pending:*"]
    )
    help_ = run(pytester, "--help")
    help_.stdout.fnmatch_lines(
        ["*max_driver_leftover_timeout*", "*max_driver_check_pending*"]
    )


# ---- fixtures and ids -------------------------------------------------------


def test_fixtures(pytester):
    pytester.makepyfile(
        """
        from max.driver import CPU, Accelerator, Device, DeviceQueue

        def test_cpu(max_cpu):
            assert max_cpu is CPU()
            assert max_cpu.is_host

        def test_device(max_device):
            assert isinstance(max_device, Device)
            if max_device.is_host:
                assert max_device is CPU()
            else:
                assert max_device is Accelerator(max_device.id)
            q = DeviceQueue(max_device)
            q.synchronize(timeout=10)
        """
    )
    run(pytester).assert_outcomes(passed=2 + len(GPU_IDS))


def test_parametrization_ids(pytester):
    pytester.makepyfile(
        """
        def test_device(max_device):
            pass

        def test_accelerator(max_accelerator):
            pass

        def test_both(max_cpu, max_device):
            pass
        """
    )
    result = run(pytester, "--collect-only", "-q")
    expected = [f"test_parametrization_ids.py::test_device[{i}]" for i in ["cpu"]]
    expected += [f"test_parametrization_ids.py::test_device[{i}]" for i in GPU_IDS]
    accel = GPU_IDS or ["no-accelerator"]
    expected += [f"test_parametrization_ids.py::test_accelerator[{i}]" for i in accel]
    expected += [
        f"test_parametrization_ids.py::test_both[{i}]" for i in ["cpu", *GPU_IDS]
    ]
    result.stdout.fnmatch_lines(expected, consecutive=True)


def test_device_fixture_through_another_fixture(pytester):
    pytester.makepyfile(
        """
        import pytest
        from max.driver import DeviceQueue

        @pytest.fixture
        def queue(max_device):
            return DeviceQueue(max_device)

        def test_queue(queue):
            assert queue.device.label in ("cpu", "gpu")
        """
    )
    result = run(pytester, "-v")
    result.stdout.fnmatch_lines(["*test_queue?cpu? PASSED*"])
    result.assert_outcomes(passed=1 + len(GPU_IDS))


@pytest.mark.skipif(driver.accelerator_count() > 0, reason="an accelerator exists")
def test_accelerator_fixture_skips_without_accelerators(pytester):
    pytester.makepyfile(
        """
        import pytest

        def test_param(max_accelerator):
            raise AssertionError("must not run")

        @pytest.fixture
        def indirect(max_accelerator):
            return max_accelerator

        def test_indirect(indirect):
            raise AssertionError("must not run")
        """
    )
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no max.driver accelerator present*"])


# ---- the max_accelerator marker ---------------------------------------------


@pytest.mark.skipif(driver.accelerator_count() > 0, reason="an accelerator exists")
def test_marker_skips_without_accelerators(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.max_accelerator
        def test_one():
            raise AssertionError("must not run")

        @pytest.mark.max_accelerator(2)
        def test_two():
            raise AssertionError("must not run")

        @pytest.mark.max_accelerator
        class TestClass:
            def test_method(self):
                raise AssertionError("must not run")

        def test_cpu_still_runs(max_cpu):
            pass
        """
    )
    result = run(pytester, "-rs")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(
        [
            "*needs 1 max.driver accelerator, none present*",
            "*needs 2 max.driver accelerators, none present*",
        ]
    )


@pytest.fixture(scope="module")
def fake_gpu_lib(tmp_path_factory):
    if not FAKE_BUILD.exists():
        pytest.skip("fake driver sources missing")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the fake driver")
    spec = importlib.util.spec_from_file_location("_fake_build", FAKE_BUILD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return Path(mod.build_fake_driver(tmp_path_factory.mktemp("fake-gpu")))


def test_with_two_fake_gpus(pytester, monkeypatch, fake_gpu_lib):
    """With accelerators present (the test-only fake CUDA driver, two
    devices) the fixtures parametrize over them and the marker counts them."""
    for name in ("MAX_DRIVER_HIP_LIBRARY", "PYTHONWARNINGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MAX_DRIVER_BACKEND", "cuda")
    monkeypatch.setenv("MAX_DRIVER_CUDA_LIBRARY", str(fake_gpu_lib))
    monkeypatch.setenv("FAKE_GPU_DEVICES", "2")
    pytester.makepyfile(
        """
        import pytest
        from max.driver import CompletionFlag, DeviceQueue

        def test_device(max_device):
            assert max_device.api in ("cpu", "cuda")

        def test_accelerator(max_accelerator):
            assert max_accelerator.api == "cuda"

        @pytest.mark.max_accelerator(2)
        def test_two():
            pass

        @pytest.mark.max_accelerator(count=3)
        def test_three():
            raise AssertionError("must not run")

        def test_gpu_left_gated(max_accelerator):
            if max_accelerator.id == 1:
                q = DeviceQueue(max_accelerator)
                q.wait_for_host_value(CompletionFlag(max_accelerator), 1)

        @pytest.mark.max_accelerator
        def test_marker_alone_is_checked():
            from max.driver import Accelerator

            gpu = Accelerator(0)
            DeviceQueue(gpu).wait_for_host_value(CompletionFlag(gpu), 1)
        """
    )
    result = run(
        pytester,
        "-v",
        "-rs",
        "-o",
        "max_driver_leftover_timeout=0.3",
        subprocess=True,
    )
    result.stdout.fnmatch_lines_random(
        [
            "*::test_device?cpu? PASSED*",
            "*::test_device?gpu0? PASSED*",
            "*::test_device?gpu1? PASSED*",
            "*::test_accelerator?gpu0? PASSED*",
            "*::test_accelerator?gpu1? PASSED*",
            "*::test_two PASSED*",
            "*needs 3 max.driver accelerators, only 2 present*",
            "*work still pending on Device(type=gpu,id=1)*",
            "*ERROR at teardown of test_marker_alone_is_checked*",
            "*work still pending on Device(type=gpu,id=0)*",
        ]
    )
    result.assert_outcomes(passed=9, skipped=1, errors=2)


# ---- the pending-work check -------------------------------------------------

LEFT_GATED = """
    import pytest
    from max.driver import CompletionFlag, DeviceQueue

    def test_left_gated(max_cpu):
        queue = DeviceQueue(max_cpu)
        queue.wait_for_host_value(CompletionFlag(max_cpu), 1)
"""


def test_left_gated_queue_errors(pytester):
    pytester.makepyfile(LEFT_GATED)
    result = run(pytester, "-o", "max_driver_leftover_timeout=0.2", subprocess=True)
    result.assert_outcomes(passed=1, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_left_gated*",
            "max_driver: work still pending on Device(type=cpu,id=0) 0.2 s after "
            "the test ended (on a queue that is neither the device's default "
            "queue nor one the test's fixtures returned; the device was idle "
            "when the test started; gated by wait_for_host_value*"
            "max_allow_pending*",
        ]
    )


def test_message_names_the_gated_queue(pytester):
    pytester.makepyfile(
        """
        import pytest
        from max.driver import CompletionFlag, DeviceQueue

        @pytest.fixture
        def queue(max_cpu):
            return DeviceQueue(max_cpu)

        def test_default_gated(max_cpu):
            max_cpu.default_queue.wait_for_host_value(CompletionFlag(max_cpu), 1)

        def test_fixture_queue_gated(max_cpu, queue):
            queue.wait_for_host_value(CompletionFlag(max_cpu), 1)
        """
    )
    result = run(pytester, "-o", "max_driver_leftover_timeout=0.1", subprocess=True)
    result.stdout.fnmatch_lines(
        ["max_driver: work still pending*(cpu?0?:queue@0x* (default); gated*"]
    )
    # The first test wedged the device: the second is not blamed for it.
    result.assert_outcomes(passed=2, errors=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*PendingWorkWarning*left behind; pending-work check skipped*"]
    )


def test_later_tests_are_not_blamed_and_checks_resume(pytester):
    pytester.makepyfile(
        """
        import time
        import pytest
        from max.driver import CompletionFlag, DeviceQueue

        FLAGS = []

        def test_1_left_gated(max_cpu):
            flag = CompletionFlag(max_cpu)
            DeviceQueue(max_cpu).wait_for_host_value(flag, 1)
            FLAGS.append(flag)

        def test_2_while_wedged(max_cpu):
            pass

        def test_3_release(max_cpu):
            FLAGS[0].signal(1)
            max_cpu.synchronize(timeout=10)

        def test_4_left_gated_again(max_cpu):
            DeviceQueue(max_cpu).wait_for_host_value(CompletionFlag(max_cpu), 7)
        """
    )
    result = run(
        pytester, "-v", "-o", "max_driver_leftover_timeout=0.2", subprocess=True
    )
    result.stdout.fnmatch_lines(
        [
            "*::test_1_left_gated ERROR*",
            "*::test_2_while_wedged PASSED*",
            "*::test_3_release PASSED*",
            "*::test_4_left_gated_again ERROR*",
        ]
    )
    result.assert_outcomes(passed=4, errors=2, warnings=1)


UNCHECKED_THEN_FIXTURE = """
    from max.driver import CPU, CompletionFlag, DeviceQueue

    def test_a_without_fixtures():
        cpu = CPU()
        DeviceQueue(cpu).wait_for_host_value(CompletionFlag(cpu), 1)

    def test_b_with_max_device(max_device):
        pass
"""


def test_work_left_by_an_unchecked_test_is_not_blamed_on_the_next(pytester):
    """Issue 26: a gated queue left by a test without the fixtures was
    reported at the teardown of the next test using max_device, as a queue
    that test created.  It is that earlier test's, and the warning names
    it."""
    pytester.makepyfile(UNCHECKED_THEN_FIXTURE)
    result = run(pytester, "-o", "max_driver_leftover_timeout=0.2", subprocess=True)
    result.assert_outcomes(passed=2 + len(GPU_IDS), warnings=1)
    result.stdout.no_fnmatch_line("*work still pending*")
    result.stdout.fnmatch_lines(
        [
            "*PendingWorkWarning: max_driver: Device(type=cpu,id=0) still has "
            "work pending that *::test_a_without_fixtures (run after "
            "Device(type=cpu,id=0) was last seen idle and before "
            "*::test_b_with_max_device?cpu? started; not checked: it uses no "
            "max_driver fixture*) left behind; pending-work check skipped*",
        ]
    )


def test_several_unchecked_candidates_are_all_named(pytester):
    pytester.makepyfile(
        """
        from max.driver import CPU, CompletionFlag, DeviceQueue

        def test_1_clean(max_cpu):
            pass

        def test_2_plain():
            pass

        def test_3_leaves_work():
            cpu = CPU()
            DeviceQueue(cpu).wait_for_host_value(CompletionFlag(cpu), 1)

        def test_4_checked(max_cpu):
            pass
        """
    )
    result = run(pytester, "-o", "max_driver_leftover_timeout=0.2", subprocess=True)
    result.assert_outcomes(passed=4, warnings=1)
    result.stdout.fnmatch_lines(
        ["*work pending that one of *::test_2_plain, *::test_3_leaves_work (run*"]
    )
    result.stdout.no_fnmatch_line("*test_1_clean, *")


@pytest.mark.parametrize("how", ["option", "ini"])
def test_checking_every_test_is_opt_in(pytester, how):
    pytester.makepyfile(UNCHECKED_THEN_FIXTURE)
    if how == "ini":
        pytester.makeini("[pytest]\nmax_driver_check_all = true\n")
        args: tuple[str, ...] = ()
    else:
        args = ("--max-driver-check-all",)
    result = run(
        pytester, *args, "-o", "max_driver_leftover_timeout=0.2", subprocess=True
    )
    # Now the test that left the work is checked, and blamed; the next is
    # warned, not blamed.
    result.assert_outcomes(passed=2 + len(GPU_IDS), errors=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_a_without_fixtures*",
            "max_driver: work still pending on Device(type=cpu,id=0)*",
        ]
    )


def test_opt_out_marker(pytester):
    pytester.makepyfile(
        LEFT_GATED
        + """
    @pytest.mark.max_allow_pending
    def test_allowed(max_cpu):
        queue = DeviceQueue(max_cpu)
        queue.wait_for_host_value(CompletionFlag(max_cpu), 1)
    """
    )
    result = run(
        pytester, "-v", "-o", "max_driver_leftover_timeout=0.2", subprocess=True
    )
    result.stdout.fnmatch_lines(["*::test_allowed PASSED*"])
    result.assert_outcomes(passed=2, errors=1)


def test_opt_out_marker_waits_for_nothing(pytester):
    pytester.makepyfile(
        """
        import pytest
        from max.driver import CompletionFlag, DeviceQueue

        @pytest.mark.max_allow_pending
        def test_allowed(max_cpu):
            queue = DeviceQueue(max_cpu)
            queue.wait_for_host_value(CompletionFlag(max_cpu), 1)
        """
    )
    # A long timeout that the check must not spend.
    result = run(
        pytester,
        "--durations=0",
        "-vv",
        "-o",
        "max_driver_leftover_timeout=30",
        subprocess=True,
    )
    result.assert_outcomes(passed=1)
    assert result.duration < 20


def test_opt_out_ini(pytester):
    pytester.makeini(
        """
        [pytest]
        max_driver_check_pending = false
        max_driver_leftover_timeout = 0.2
        """
    )
    pytester.makepyfile(LEFT_GATED)
    run(pytester, subprocess=True).assert_outcomes(passed=1)


def test_failed_test_gets_no_second_error(pytester):
    pytester.makepyfile(
        """
        from max.driver import CompletionFlag, DeviceQueue

        def test_fails_gated(max_cpu):
            DeviceQueue(max_cpu).wait_for_host_value(CompletionFlag(max_cpu), 1)
            assert False, "the real failure"
        """
    )
    result = run(pytester, "-o", "max_driver_leftover_timeout=0.2", subprocess=True)
    result.assert_outcomes(failed=1)
    result.stdout.no_fnmatch_line("*work still pending*")


def test_clean_tests_pass(pytester):
    pytester.makepyfile(
        """
        import threading
        import time
        import pytest
        from max.driver import CompletionFlag, DeviceEvent, DeviceQueue

        def enqueue(target, fn):
            getattr(target, "__unsafe_enqueue_py_host_func")(fn)

        def test_synchronized(max_device):
            q = DeviceQueue(max_device)
            flag = CompletionFlag(max_device)
            q.wait_for_host_value(flag, 1)
            flag.signal(1)
            q.synchronize(timeout=10)

        def test_gate_released_later(max_cpu):
            q = DeviceQueue(max_cpu)
            flag = CompletionFlag(max_cpu)
            q.wait_for_host_value(flag, 1)
            threading.Timer(0.1, flag.signal, args=(1,)).start()

        def test_work_still_running_at_the_end(max_cpu):
            # Finishes well inside the leftover timeout: not an error.
            enqueue(DeviceQueue(max_cpu), lambda: time.sleep(0.2))

        @pytest.fixture
        def gated(max_cpu):
            q = DeviceQueue(max_cpu)
            flag = CompletionFlag(max_cpu)
            q.wait_for_host_value(flag, 1)
            yield q
            flag.signal(1)  # released at teardown, before the check

        def test_fixture_releases_the_gate(gated):
            assert gated.device.is_host
        """
    )
    result = run(pytester, "-o", "max_driver_leftover_timeout=5", subprocess=True)
    result.assert_outcomes(passed=4 + len(GPU_IDS))


def test_devices_not_from_fixtures_are_not_checked(pytester):
    """The check covers the devices a test got from the plugin's fixtures;
    a suite that does not use them is not changed by the plugin."""
    pytester.makepyfile(
        """
        from max.driver import CPU, CompletionFlag, DeviceQueue

        def test_own_cpu():
            cpu = CPU()
            DeviceQueue(cpu).wait_for_host_value(CompletionFlag(cpu), 1)
        """
    )
    result = run(pytester, "-o", "max_driver_leftover_timeout=0.1", subprocess=True)
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_bad_timeout_is_a_usage_error(pytester, value):
    pytester.makepyfile(
        """
        def test_cpu(max_cpu):
            pass
        """
    )
    result = run(pytester, "-o", f"max_driver_leftover_timeout={value}")
    assert result.ret != pytest.ExitCode.OK
    result.stderr.fnmatch_lines(["*max_driver_leftover_timeout must be*"])


def test_documented_example_runs(pytester):
    """The example in docs/pytest-plugin.md passes as written."""
    doc = (REPO_ROOT / "docs" / "pytest-plugin.md").read_text()
    start = doc.index("```python\n", doc.index("## Example")) + len("```python\n")
    example = textwrap.dedent(doc[start : doc.index("```", start)])
    pytester.makepyfile(test_example=example)
    result = run(pytester, "-rs", subprocess=True)
    n = len(GPU_IDS)
    if n:
        result.assert_outcomes(passed=4 + 2 * n)
    else:
        result.assert_outcomes(passed=3, skipped=2)
