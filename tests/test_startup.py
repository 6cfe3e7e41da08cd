"""A command's start-up and end: what importing the CLI and the simulator loads, the console's exit, and
the sweep workers' warm start (``benchmarks/bench_vidur.py`` shows the CPU seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from cli_helpers import SMALL
from specplan.simulator.control import DRAFT_WIDTH, RUNTIME_WIDTH, STATIC_WIDTH, verified_width
from specplan.startup import BLAS_THREAD_VARIABLES

ROOT = Path(__file__).resolve().parents[1]

# numba's CPU target initialises (``BaseContext.refresh``) on the first kernel compiled or loaded from
# the cache: it starts the NRT and imports numba's implementation modules, ``numba.np.arraymath`` among
# them (which imports scipy.linalg to look for BLAS). Creating a dispatcher (``@njit``) does neither.
_STATE = """
import json, sys
numba = "numba" in sys.modules
target = numba and (sys.modules["numba.core.runtime"].rtsys._init or "numba.np.arraymath" in sys.modules)
print(json.dumps({"target": target, "numba": numba,
                  "heavy": [m for m in ("scipy.linalg", "pandas", "matplotlib", "pyarrow") if m in sys.modules]}))
"""


def _python(code: str, env: dict | None = None) -> list:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_importing_the_cli_and_the_simulator_initialises_no_numba_target_and_no_heavy_package():
    cli, run, called = _python(f"import specplan.cli\n{_STATE}\nimport specplan.simulator.run\n{_STATE}\n"
                               "from specplan.simulator.control import verified_width\n"
                               f"verified_width(0, 1, 2, 3)\n{_STATE}")
    assert cli == {"target": False, "numba": False, "heavy": []}  # the CLI alone loads no numba at all
    assert run == {"target": False, "numba": True, "heavy": []}
    assert called["target"] is True  # the markers do flip once a kernel runs


def test_verified_width_equals_the_rule_by_hand_over_a_grid():
    reference = {STATIC_WIDTH: lambda k, k_static, drafted: k_static,
                 RUNTIME_WIDTH: lambda k, k_static, drafted: k,
                 DRAFT_WIDTH: lambda k, k_static, drafted: drafted}
    drafts = np.arange(0, 7, dtype=np.int64)
    for code, rule in reference.items():
        for k in range(0, 6):
            for k_static in range(0, 6):
                assert [verified_width(code, k, k_static, d) for d in drafts.tolist()] == \
                    [rule(k, k_static, d) for d in drafts.tolist()]
                # Python callers hand the draft lengths as one array (``drafts.prepare_draft_tokens``)
                widths = np.broadcast_to(verified_width.py_func(code, k, k_static, drafts), drafts.shape)
                assert widths.tolist() == [rule(k, k_static, d) for d in drafts.tolist()]


def test_the_console_flushes_its_output_and_runs_exit_handlers_before_it_ends(tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    console = subprocess.run([sys.executable, "-m", "specplan", "simulate", str(scenario), "--format", "json"],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
    in_process = subprocess.run([sys.executable, "-c", "from specplan.cli import main; main()", "simulate",
                                 str(scenario), "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                                timeout=300)
    assert console.returncode == 0 and in_process.returncode == 0, console.stderr + in_process.stderr
    assert json.loads(console.stdout) == json.loads(in_process.stdout)

    hooked = subprocess.run([sys.executable, "-c", "import atexit, sys\nfrom specplan.cli import console\n"
                             "atexit.register(print, 'exit handler ran')\n"
                             "sys.argv = ['specplan', 'simulate', '--set', 'seed=-1']\nconsole()"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert hooked.returncode == 2 and hooked.stdout == "exit handler ran\n"
    assert hooked.stderr.startswith("error: ") and hooked.stderr.count("\n") == 1


def test_sweep_workers_start_with_the_kernels_a_run_loads(tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    loaded = ("from numba.core.dispatcher import Dispatcher\n"
              "print(json.dumps(sorted(f'{n}.{k}' for n, m in list(sys.modules.items()) if n.startswith('specplan.') "
              "and m for k, v in vars(m).items() if isinstance(v, Dispatcher) and v.__module__ == n and v.overloads)))")
    (ran,) = _python("import json, sys\nfrom specplan.config import load_config\n"
                     "from specplan.simulator.run import simulate\n"
                     f"simulate(load_config({str(scenario)!r}))\n{loaded}")
    (preloaded,) = _python(f"import json, sys\nimport specplan.sweeps.warm_start\n{loaded}")
    assert ran and set(ran) <= set(preloaded)
    # a worker (a fork of the preloaded server) starts with the collector off; its first loop turns it on
    (collector,) = _python("import gc, json\nimport specplan.sweeps.warm_start\nfrom specplan.config import load_config\n"
                           "from specplan.simulator.run import simulate\npreloaded = gc.isenabled()\n"
                           f"simulate(load_config({str(scenario)!r}))\nprint(json.dumps([preloaded, gc.isenabled()]))")
    assert collector == [False, True]


_NO_BLAS_SETTING = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}


def test_one_blas_thread_keeps_a_users_setting_and_acts_only_before_numpy_loads():
    (unset, users, late) = _python(
        "import json\nfrom specplan.startup import one_blas_thread\n"
        "env = {}\nprint(json.dumps([one_blas_thread(env), env]))\n"
        "env = {'OMP_NUM_THREADS': '4'}\nprint(json.dumps([one_blas_thread(env), env]))\n"
        "import numpy\nenv = {}\nprint(json.dumps([one_blas_thread(env), env]))", env=_NO_BLAS_SETTING)
    assert unset == [True, {"OPENBLAS_NUM_THREADS": "1"}]
    assert users == [False, {"OMP_NUM_THREADS": "4"}]
    assert late == [False, {}]  # numpy (and its OpenBLAS) already loaded: too late to matter


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_numpy_loads_with_one_thread_after_one_blas_thread():
    count = "import json, os\nimport numpy\nprint(json.dumps(len(os.listdir('/proc/self/task'))))"
    (threads,) = _python(f"from specplan.startup import one_blas_thread\none_blas_thread()\n{count}",
                         env=_NO_BLAS_SETTING)
    assert threads == 1


def test_numba_finds_blas_through_scipys_table_without_importing_scipy_linalg():
    probe = ("import json, sys\nimport numpy as np\nfrom numba import njit\n"
             "from numba.core.registry import cpu_target\ncpu_target.target_context.refresh()\n"
             "import numba.np.arraymath as am\n"
             "linalg_before = 'scipy.linalg' in sys.modules\n"
             "a = np.arange(12.0).reshape(3, 4)\n"
             "dot = njit(lambda x, y: np.dot(x, y))(a, a.T)\n"
             "import scipy.linalg\nfrom scipy.linalg import cython_blas\n"
             "print(json.dumps({'blas': am._HAVE_BLAS, 'linalg': linalg_before, 'dot': dot.tolist(),"
             " 'same': cython_blas is sys.modules['scipy.linalg.cython_blas'],"
             " 'solve': scipy.linalg.solve(np.eye(2) * 2, np.ones(2)).tolist()}))")
    (loaded,) = _python(f"from specplan.startup import load_scipy_blas\nassert load_scipy_blas()\n{probe}")
    (plain,) = _python(probe)
    expected = (np.arange(12.0).reshape(3, 4) @ np.arange(12.0).reshape(3, 4).T).tolist()
    assert loaded == {"blas": True, "linalg": False, "dot": expected, "same": True, "solve": [0.5, 0.5]}
    assert plain == {**loaded, "linalg": True}  # numba's own probe imports the whole package


def test_the_console_sets_the_process_up_before_the_cli(tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    report = ("import atexit, json, os, sys\nfrom specplan.entry import console\n"
              "atexit.register(lambda: print(json.dumps([os.environ.get('OPENBLAS_NUM_THREADS'),"
              " 'scipy.linalg' in sys.modules, 'scipy.linalg.cython_blas' in sys.modules])))\n"
              f"sys.argv = ['specplan', 'simulate', {str(scenario)!r}, '--format', 'json']\nconsole()")
    summary, state = _python(report, env=_NO_BLAS_SETTING)
    assert summary["output_tokens"] > 0
    assert state == ["1", False, True]


def test_commands_that_time_a_device_keep_the_machines_blas_threading():
    report = ("import atexit, json, os, sys\nfrom specplan.entry import console\n"
              "atexit.register(lambda: print(json.dumps(os.environ.get('OPENBLAS_NUM_THREADS'))))\n"
              "sys.argv = ['specplan', {command!r}, '--help']\nconsole()")
    for command, expected in (("calibrate", None), ("validate", None), ("sweep", "1")):
        proc = subprocess.run([sys.executable, "-c", report.format(command=command)], capture_output=True,
                              text=True, cwd=ROOT, timeout=300, env=_NO_BLAS_SETTING)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[-1]) == expected, command


def test_a_blas_table_that_fails_to_load_alone_leaves_numbas_own_probe(tmp_path):
    fake = tmp_path / "scipy" / "linalg"
    fake.mkdir(parents=True)
    (fake / "cython_blas.py").write_text("raise ImportError('needs scipy.linalg first')\n")
    (result,) = _python(
        "import importlib.machinery, importlib.util, json, sys\nfrom specplan import startup\n"
        "fake = importlib.machinery.ModuleSpec('scipy', None, is_package=True)\n"
        f"fake.submodule_search_locations = [{str(tmp_path / 'scipy')!r}]\n"
        "real = importlib.util.find_spec\nimportlib.util.find_spec = lambda name, *a: fake if name == 'scipy' else real(name, *a)\n"
        "loaded = startup.load_scipy_blas()\nimportlib.util.find_spec = real\n"
        "left = startup.SCIPY_BLAS in sys.modules\n"
        "from numba.core.registry import cpu_target\ncpu_target.target_context.refresh()\n"
        "import numba.np.arraymath as am\n"
        "print(json.dumps([loaded, left, am._HAVE_BLAS, 'scipy.linalg' in sys.modules]))")
    assert result == [False, False, True, True]  # not loaded, nothing left behind; numba imported it itself


def test_pause_collector_turns_off_only_what_it_turns_back_on():
    (fresh, users) = _python(
        "import gc, json\nfrom specplan import startup\n"
        "steps = [startup.pause_collector(), gc.isenabled(), startup.resume_collector(), gc.isenabled(),"
        " startup.resume_collector(), gc.isenabled()]\nprint(json.dumps(steps))\n"
        "gc.disable()\n"  # the user's own choice, before any pause
        "print(json.dumps([startup.pause_collector(), gc.isenabled(), startup.resume_collector(), gc.isenabled()]))")
    assert fresh == [True, False, True, True, False, True]
    assert users == [False, False, False, False]  # left off: resuming is not ours to do


def test_simulate_starts_with_the_collector_off_and_loops_with_it_on(tmp_path):
    """The console's ``simulate``: no collection while it imports and builds; the run's loop turns the
    collector back on (``memory.collector_spared``) before it freezes what start-up made; other
    commands keep it on throughout. The summary is the in-process ``main``'s, whose collector ran."""
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    report = ("import atexit, gc, json, sys\nimport simpy\nfrom specplan.entry import console\n"
              "seen = {}\nrun = simpy.Environment.run\n"
              "def watched(env, *a):\n    seen.setdefault('loop', [gc.isenabled(), gc.get_freeze_count() > 0])\n"
              "    return run(env, *a)\n"
              "simpy.Environment.run = watched\n"
              "from specplan.simulator import engine\ninit = engine.Executor.__init__\n"
              "def built(self, *a):\n    seen.setdefault('build', gc.isenabled())\n    init(self, *a)\n"
              "engine.Executor.__init__ = built\n"
              "atexit.register(lambda: print(json.dumps([seen, gc.isenabled()])))\n"
              "sys.argv = ['specplan', ARGS]\nconsole()")
    args = f"'simulate', {str(scenario)!r}, '--format', 'json'"
    summary, (seen, at_exit) = _python(report.replace("ARGS", args))
    assert seen == {"build": False, "loop": [True, True]} and at_exit
    in_process = subprocess.run([sys.executable, "-c", "from specplan.cli import main; main()", "simulate",
                                 str(scenario), "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                                timeout=300)
    assert json.loads(in_process.stdout) == summary
    other = subprocess.run([sys.executable, "-c", report.replace("ARGS", "'workloads', '--help'")],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout.splitlines()[-1]) == [{}, True]
