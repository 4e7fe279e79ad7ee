"""benchmarks/recbole_check.py's scheduling and verdict: the rate each side chooses on seed 0, the runs at
other rates dropped, the time estimate a run must fit in, and the words of the verdict."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from prism_rec.tracking.bootstrap import PairedDifference

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "recbole_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("recbole_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "recbole_check", module)  # what its dataclasses look themselves up in
        spec.loader.exec_module(module)
        yield module


class FakeProcess:
    stopped = False

    def terminate(self):
        self.stopped = True

    def wait(self):
        return -15


class FakeDataset:
    def __init__(self, n_items):
        self.items = range(n_items)


def test_the_grid_comes_first_and_only_the_chosen_rate_stays(check):
    schedule = check.initial_schedule([("small", FakeDataset(10)), ("large", FakeDataset(20))], [0, 1], [1e-3, 3e-3],
                                      expected_epochs=9)
    head = [(job.model, job.dataset, job.seed) for job in schedule.queue[:8]]
    assert head == [("recbole:SASRec", "large", 0)] * 2 + [("recbole:SASRec", "small", 0)] * 2 + \
        [("sasrec", "large", 0)] * 2 + [("sasrec", "small", 0)] * 2  # every seed-0 run, RecBole's, larger first
    assert len(schedule.queue) == 16 and {job.seed for job in schedule.queue[8:]} == {1}
    low, high = schedule.grid["small", "sasrec"]
    speculative = check.Job("small", "sasrec", 1, 1e-3)
    process = FakeProcess()
    schedule.running[speculative] = process, 0.0
    for started in (speculative, low, high):
        schedule.queue.remove(started)
    schedule.finished[low] = {"valid": {"auc": 0.80}}
    schedule.choose()
    assert ("small", "sasrec") not in schedule.chosen  # 3e-3 still training
    schedule.finished[high] = {"valid": {"auc": 0.85}}
    schedule.choose()
    assert schedule.chosen == {("small", "sasrec"): 3e-3}
    assert process.stopped and schedule.left_out[speculative].startswith("dropped")
    order = [schedule.priority(job) for job in schedule.queue]
    assert order == sorted(order) and order[0] == 0  # the grid runs left, then the decided runs, then the rest
    assert schedule.queue[order.index(1)] == check.Job("small", "sasrec", 1, 3e-3) and order.count(1) == 1
    assert all((job.dataset, job.model, job.lr) != ("small", "sasrec", 1e-3) for job in schedule.queue)


def test_a_failed_grid_run_leaves_the_choice_to_the_others(check):
    schedule = check.initial_schedule([("d", FakeDataset(5))], [0], [1e-3, 3e-3], expected_epochs=9)
    first, second = schedule.grid["d", "recbole:SASRec"]
    schedule.finished[first] = {"valid": {"auc": 0.7}}
    schedule.left_out[second] = "failed (exit 1)"
    schedule.choose()
    assert schedule.chosen["d", "recbole:SASRec"] == 1e-3


def test_the_estimate_follows_the_epochs_seen(check, tmp_path):
    schedule = check.initial_schedule([("d", FakeDataset(5))], [0, 1], [1e-3], expected_epochs=20)
    grid_run = schedule.grid["d", "sasrec"][0]
    later = check.Job("d", "sasrec", 1, 1e-3)
    assert schedule.estimate(later, tmp_path) == 0  # nothing seen yet: no estimate
    grid_run.path(tmp_path, ".progress").parent.mkdir(parents=True)
    grid_run.path(tmp_path, ".progress").write_text("100\n130\n140\n152\n")  # start-up + epoch 1: 30 s, then 10, 12
    schedule.running[grid_run] = FakeProcess(), 100.0
    assert schedule.estimate(later, tmp_path) == pytest.approx(30 + 11 * 19)  # --expected-epochs before a run finished
    del schedule.running[grid_run]
    schedule.finished[grid_run] = {"epochs_run": 6}
    assert schedule.estimate(later, tmp_path) == pytest.approx(30 + 11 * 5)
    assert schedule.estimate(check.Job("d", "recbole:SASRec", 1, 1e-3), tmp_path) == 0  # another model's


@pytest.mark.parametrize(("low", "high", "seed_p", "words"), [
    (-0.003, 0.004, 0.5, "as good"), (0.01, 0.02, 0.01, "better"), (-0.02, -0.01, 0.01, "worse"),
    (-0.02, -0.01, 0.3, "not resolved"), (-0.02, 0.01, math.nan, "not resolved"),
])
def test_the_verdict(check, low, high, seed_p, words):
    difference = PairedDifference((low + high) / 2, low, high, low > 0 or high < 0, 0.01, 100, seed_p)
    assert check.outcome(difference, 0.005).startswith(words)


def test_bad_rates_are_refused_by_name(check):
    for bad in ("1e-3,x", "0,1e-3", "1e-3,1e-3"):
        with pytest.raises(SystemExit, match="option --rates"):
            check.parse_rates(bad)


def test_runs_at_the_cap_leave_the_verdict_open(check):
    difference = PairedDifference(-0.015, -0.02, -0.01, True, 0.01, 100, 0.01)
    assert check.converged_outcome(difference, 0.005, 0, 6, 50) == "worse"
    assert check.converged_outcome(difference, 0.005, 2, 6, 50) == (
        "not resolved: 2 of the 6 runs compared reached the epoch cap (50) instead of stopping early (the capped "
        "runs read: worse)")
