"""``vllm_course.env.telemetry``: a process tree's CPU use, NVML readings through a fake pynvml."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from vllm_course.env.telemetry import (
    IDLE_CORES,
    NVML,
    MachineCPU,
    ProcessCPU,
    Telemetry,
    wait_until_idle,
)


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import pynvml`` fails (as without nvidia-ml-py)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


@contextlib.contextmanager
def _child(code: str) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def busy_child() -> Iterator[subprocess.Popen]:
    with _child("while True: pass") as proc:
        yield proc


@pytest.fixture
def sleeping_child() -> Iterator[subprocess.Popen]:
    with _child("import time; time.sleep(60)") as proc:
        yield proc


# -- ProcessCPU -----------------------------------------------------------------------------


def test_process_cpu_of_a_busy_child(busy_child: subprocess.Popen) -> None:
    cpu = ProcessCPU(busy_child.pid)
    assert cpu.sample() == {}   # the first call has nothing to compare with
    time.sleep(0.5)
    out = cpu.sample()
    assert set(out) == {"server_cpu_cores"}
    assert 0.3 <= out["server_cpu_cores"] <= 1.2   # one busy core (less on a loaded machine)


def test_process_cpu_of_a_sleeping_child(sleeping_child: subprocess.Popen) -> None:
    cpu = ProcessCPU(sleeping_child.pid)
    cpu.sample()
    time.sleep(0.3)   # the interpreter's start-up may still count a little
    cpu.sample()
    time.sleep(0.3)
    out = cpu.sample()
    assert 0.0 <= out["server_cpu_cores"] < 0.2


def test_process_cpu_counts_the_children_of_the_process() -> None:
    # a sleeping parent whose child burns a core: the tree is busy
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
        "try:\n    time.sleep(60)\nfinally:\n    c.kill()\n"
    )
    import psutil

    with _child(code) as parent:
        deadline = time.monotonic() + 5
        while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
            time.sleep(0.02)
        children = psutil.Process(parent.pid).children()
        assert children
        def busy_s() -> float:        # the child's own CPU seconds, as the kernel counts them
            t = children[0].cpu_times()
            return t.user + t.system

        try:
            # what the tree used must be what its child used: a share of a core the OS decides
            # (under load the busy child gets less than one), so compared, not fixed
            cpu = ProcessCPU(parent.pid)
            before, start = busy_s(), time.monotonic()
            cpu.sample()
            # at least 0.5 s, and until the child has had 0.2 s of CPU (a loaded or paused
            # machine may give it none for a while)
            while (time.monotonic() - start < 0.5 or busy_s() - before < 0.2) \
                    and time.monotonic() - start < 10:
                time.sleep(0.05)
            tree = cpu.sample()["server_cpu_cores"]
            child = (busy_s() - before) / (time.monotonic() - start)
            assert child > 0.01                          # it ran
            assert abs(tree - child) <= 0.1 + 0.1 * child, (tree, child)
        finally:
            for c in children:
                c.kill()


def test_process_cpu_of_a_missing_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()   # reaped: the pid is gone
    cpu = ProcessCPU(proc.pid)
    assert cpu.sample() == {}
    assert cpu.sample() == {}


def test_process_cpu_after_the_process_exits(sleeping_child: subprocess.Popen) -> None:
    cpu = ProcessCPU(sleeping_child.pid)
    cpu.sample()
    sleeping_child.kill()
    sleeping_child.wait()
    assert cpu.sample() == {}


# -- wait_until_idle ------------------------------------------------------------------------


def test_waiting_for_no_servers_returns_at_once() -> None:
    assert asyncio.run(wait_until_idle([])) is None


def test_waiting_for_an_idle_process(sleeping_child: subprocess.Popen) -> None:
    time.sleep(0.3)   # past the interpreter's start-up
    assert asyncio.run(wait_until_idle([sleeping_child.pid], timeout_s=5)) is None


def test_waiting_for_a_busy_process_gives_up_and_says_how_busy(
    busy_child: subprocess.Popen,
) -> None:
    t = time.monotonic()
    busy = asyncio.run(wait_until_idle([busy_child.pid], timeout_s=0.6))
    assert busy is not None and busy >= IDLE_CORES   # one busy core (less on a loaded machine)
    assert time.monotonic() - t >= 0.6


def test_waiting_until_a_spinning_process_goes_idle() -> None:
    # what a vLLM CPU server does after its last request: a core busy, then idle
    with _child("import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.0: pass\n"
                "time.sleep(60)") as proc:
        t = time.monotonic()
        assert asyncio.run(wait_until_idle([proc.pid], timeout_s=20)) is None
        assert time.monotonic() - t >= 0.7     # it spun for 1 s from its start
    # a process that is gone counts as idle
    assert asyncio.run(wait_until_idle([proc.pid], timeout_s=5)) is None


# -- NVML through a fake pynvml -------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_pynvml(gpus: list[dict], *, init_error: bool = False) -> types.ModuleType:
    """A ``pynvml`` stand-in; each GPU dict holds util (%), mem (bytes), power (mW), clock
    (MHz); a value of ``None`` makes that reading raise ``NVMLError``."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    nv.NVML_CLOCK_SM = 1
    nv.calls = []

    def init() -> None:
        nv.calls.append("init")
        if init_error:
            raise FakeNVMLError("Driver Not Loaded")

    def reading(key: str, wrap=lambda v: v):
        def read(handle: int, *args):
            value = gpus[handle][key]
            if value is None:
                raise FakeNVMLError("Not Supported")
            return wrap(value)

        return read

    def clock(handle: int, which: int) -> int:
        assert which == nv.NVML_CLOCK_SM
        return reading("clock")(handle)

    nv.nvmlInit = init
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetUtilizationRates = reading("util", lambda v: SimpleNamespace(gpu=v, memory=0))
    nv.nvmlDeviceGetMemoryInfo = reading("mem", lambda v: SimpleNamespace(used=v, total=2 * v))
    nv.nvmlDeviceGetPowerUsage = reading("power")
    nv.nvmlDeviceGetClockInfo = clock
    nv.nvmlShutdown = lambda: nv.calls.append("shutdown")
    return nv


TWO_GPUS = [
    {"util": 90, "mem": 10 * 2**30, "power": 300_000, "clock": 1980},
    {"util": 40, "mem": 6 * 2**30, "power": 150_500, "clock": 1500},
]


def _install(monkeypatch: pytest.MonkeyPatch, nv: types.ModuleType) -> types.ModuleType:
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


def test_nvml_sums_and_means_over_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _install(monkeypatch, fake_pynvml(TWO_GPUS))
    gpu = NVML.open()
    assert gpu is not None
    assert gpu.sample() == {
        "gpu_util_pct": 65.0,                 # mean
        "gpu_mem_used_bytes": 16.0 * 2**30,   # sum
        "gpu_power_w": 450.5,                 # sum, mW -> W
        "gpu_sm_clock_mhz": 1740.0,           # mean
    }
    gpu.close()
    assert nv.calls == ["init", "shutdown"]


def test_nvml_takes_only_the_gpus_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, fake_pynvml(TWO_GPUS))
    gpu = NVML.open([1, 5])   # 5 does not exist
    assert gpu is not None
    assert gpu.sample() == {
        "gpu_util_pct": 40.0, "gpu_mem_used_bytes": 6.0 * 2**30, "gpu_power_w": 150.5,
        "gpu_sm_clock_mhz": 1500.0,
    }


def test_nvml_leaves_out_what_it_cannot_read(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [
        {"util": 90, "mem": 4 * 2**30, "power": None, "clock": 1800},
        {"util": None, "mem": 2 * 2**30, "power": None, "clock": 1200},
    ]
    _install(monkeypatch, fake_pynvml(gpus))
    gpu = NVML.open()
    assert gpu is not None
    # util: GPU 0 only; power: neither GPU, so no key at all
    assert gpu.sample() == {
        "gpu_util_pct": 90.0, "gpu_mem_used_bytes": 6.0 * 2**30, "gpu_sm_clock_mhz": 1500.0,
    }


def test_nvml_close_twice_and_a_failing_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _install(monkeypatch, fake_pynvml(TWO_GPUS))
    gpu = NVML.open()
    assert gpu is not None
    gpu.close()

    def fail() -> None:
        raise FakeNVMLError("Uninitialized")

    nv.nvmlShutdown = fail
    gpu.close()   # does not raise


def test_nvml_open_without_pynvml(no_pynvml: None) -> None:
    assert NVML.open() is None


def test_nvml_open_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, fake_pynvml(TWO_GPUS, init_error=True))
    assert NVML.open() is None


def test_nvml_open_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, fake_pynvml([]))
    assert NVML.open() is None
    _install(monkeypatch, fake_pynvml(TWO_GPUS))
    assert NVML.open([7]) is None   # none of the GPUs asked for exists


def test_nvml_open_when_a_handle_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _install(monkeypatch, fake_pynvml(TWO_GPUS))

    def lost(i: int) -> int:
        raise FakeNVMLError("GPU is lost")

    nv.nvmlDeviceGetHandleByIndex = lost
    assert NVML.open() is None


# -- MachineCPU ----------------------------------------------------------------------------


def test_machine_cpu_is_busy_seconds_per_wall_second(monkeypatch: pytest.MonkeyPatch) -> None:
    # user + nice + system + irq + softirq; idle, iowait, steal and guest (inside user) are not
    times = iter([
        SimpleNamespace(user=10.0, nice=1.0, system=4.0, idle=100.0, iowait=5.0, irq=0.5,
                        softirq=0.5, steal=3.0, guest=2.0),
        SimpleNamespace(user=11.0, nice=1.0, system=4.4, idle=100.2, iowait=9.0, irq=0.5,
                        softirq=0.6, steal=9.0, guest=3.0),
    ])
    clock = iter([50.0, 51.0])
    monkeypatch.setattr("psutil.cpu_times", lambda: next(times))
    monkeypatch.setattr("vllm_course.env.telemetry.time.monotonic", lambda: next(clock))
    cpu = MachineCPU()
    assert cpu.sample() == {}   # the first call has nothing to compare with
    assert cpu.sample() == {"machine_cpu_cores": pytest.approx(1.5)}   # 17.5 s busy after 16.0


def test_machine_cpu_sees_a_busy_child(busy_child: subprocess.Popen) -> None:
    cpu, child = MachineCPU(), ProcessCPU(busy_child.pid)
    cpu.sample(), child.sample()
    time.sleep(0.5)
    machine, one = cpu.sample()["machine_cpu_cores"], child.sample()["server_cpu_cores"]
    assert one >= 0.3   # the child ran (less than a core on a loaded machine)
    assert machine >= 0.8 * one   # and the machine counted it (read a moment apart: slack)


# -- Telemetry ------------------------------------------------------------------------------


def test_telemetry_without_a_gpu_reads_the_server_cpu(
    no_pynvml: None, busy_child: subprocess.Popen
) -> None:
    t = Telemetry(server_pid=busy_child.pid)
    assert not t.has_gpu
    time.sleep(0.4)   # primed in the constructor: the first call already has a rate
    out = t()
    assert set(out) == {"server_cpu_cores", "machine_cpu_cores"}
    assert 0.3 <= out["server_cpu_cores"] <= 1.2
    # the whole machine includes the busy child (its rate is read a moment later: some slack)
    assert out["machine_cpu_cores"] >= 0.8 * out["server_cpu_cores"]
    t.close()
    t.close()


def test_telemetry_with_nothing_to_read(no_pynvml: None) -> None:
    t = Telemetry()
    assert not t.has_gpu
    assert t() == {}


def test_telemetry_with_gpus_and_a_server(
    monkeypatch: pytest.MonkeyPatch, sleeping_child: subprocess.Popen
) -> None:
    nv = _install(monkeypatch, fake_pynvml(TWO_GPUS))
    t = Telemetry(server_pid=sleeping_child.pid)
    assert t.has_gpu
    time.sleep(0.05)
    out = t()
    assert set(out) == {"server_cpu_cores", "machine_cpu_cores", "gpu_util_pct",
                        "gpu_mem_used_bytes", "gpu_power_w", "gpu_sm_clock_mhz"}
    assert out["gpu_power_w"] == 450.5
    t.close()
    assert not t.has_gpu and nv.calls == ["init", "shutdown"]
    # the CPU readings go on after close
    assert set(t()) == {"server_cpu_cores", "machine_cpu_cores"}


def test_telemetry_gpu_off(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _install(monkeypatch, fake_pynvml(TWO_GPUS))
    t = Telemetry(gpu=False)
    assert not t.has_gpu and nv.calls == []
    assert t() == {}


def test_nvml_reads_each_gpu_apart_in_the_order_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [dict(g) for g in TWO_GPUS]
    gpus[0]["util"] = None                       # one reading NVML cannot take is left out
    _install(monkeypatch, fake_pynvml(gpus))
    gpu = NVML.open([1, 0])
    assert gpu is not None
    assert gpu.per_device() == [{"gpu_util_pct": 40.0, "gpu_mem_used_bytes": 6.0 * 2**30},
                                {"gpu_mem_used_bytes": 10.0 * 2**30}]
    gpu.close()
