"""benchmarks/recbole_check.py's scheduling and verdict: the rate each side chooses on seed 0 (the suite's
rule), the runs at other rates dropped, the time estimate a run must fit in, and the verdict (the headline's
rule: Welch over seeds, the paired bootstrap over test users, the detectable difference) against direct
computations on synthetic inputs."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

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
                                      expected_epochs=9, ladder=())
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


def fake_run(valid_auc: float) -> dict:
    return {"valid": {"auc": valid_auc}, "best_epoch": 3, "epochs_run": 8, "wall_seconds": 10.0}


def test_a_choice_at_the_edge_extends_the_grid_as_the_headline_does(check, tmp_path):
    schedule = check.initial_schedule([("d", FakeDataset(5))], [0, 1], [1e-3, 3e-3], expected_epochs=9)
    schedule.queue = [job for job in schedule.queue if job.model == "sasrec"]
    low, high = schedule.grid["d", "sasrec"]
    schedule.finished[low], schedule.finished[high] = fake_run(0.80), fake_run(0.85)
    schedule.queue = [job for job in schedule.queue if job not in (low, high)]
    schedule.choose()
    assert ("d", "sasrec") not in schedule.chosen  # 3e-3 is the top of the grid: one ladder step up first
    up = check.Job("d", "sasrec", 0, 1e-2)
    assert schedule.grid["d", "sasrec"][-1] == up and schedule.queue[0] == up
    assert check.Job("d", "sasrec", 1, 1e-2) in schedule.queue  # its later seed works ahead
    up.path(tmp_path).parent.mkdir(parents=True)
    up.path(tmp_path).write_text(json.dumps(fake_run(0.84)))  # an earlier call finished it
    schedule.take_finished(tmp_path)
    schedule.choose()
    assert schedule.chosen["d", "sasrec"] == 3e-3 and not schedule.at_edge(("d", "sasrec"))  # inside 1e-3..1e-2
    table = "\n".join(check.grid_table("d", schedule))
    assert "| sasrec | 0.003 (chosen) |" in table and "| sasrec | 0.01 | 0.8400 |" in table


def test_a_choice_still_at_the_edge_is_flagged(check):
    schedule = check.initial_schedule([("d", FakeDataset(5))], [0], [1e-3, 3e-3], expected_epochs=9,
                                      ladder=(1e-3, 3e-3))  # the ladder ends where the grid does
    low, high = schedule.grid["d", "sasrec"]
    schedule.finished[low], schedule.finished[high] = fake_run(0.80), fake_run(0.85)
    schedule.choose()
    assert schedule.chosen["d", "sasrec"] == 3e-3 and schedule.at_edge(("d", "sasrec"))
    assert "| sasrec | 0.003 (chosen, at the grid's edge) |" in "\n".join(check.grid_table("d", schedule))


def test_a_choice_whose_extension_did_not_start_is_flagged(check):
    schedule = check.initial_schedule([("d", FakeDataset(5))], [0], [1e-3, 3e-3], expected_epochs=9)
    low, high = schedule.grid["d", "sasrec"]
    schedule.finished[low], schedule.finished[high] = fake_run(0.80), fake_run(0.85)
    schedule.choose()
    schedule.left_out[schedule.grid["d", "sasrec"][-1]] = "not started: the --budget left less than its estimate"
    schedule.choose()
    assert schedule.chosen["d", "sasrec"] == 3e-3 and schedule.at_edge(("d", "sasrec"))


def test_a_start_rate_off_the_ladder_is_refused_naming_the_option(check):
    with pytest.raises(SystemExit, match="--lr-grid"):
        check.main(["--lr-grid", "2e-3,5e-3", "--datasets", "ml-100k"])


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


def test_the_rate_choice_is_the_suites_tie_rule(check):
    schedule = check.initial_schedule([("d", FakeDataset(5))], [0], [1e-3, 3e-3], expected_epochs=9, ladder=())
    low, high = schedule.grid["d", "sasrec"]
    schedule.finished[low] = schedule.finished[high] = {"valid": {"auc": 0.8}}
    schedule.choose()
    assert schedule.chosen["d", "sasrec"] == 1e-3  # tuning.choose_rate: a tie goes to the smaller rate


def welch_direct(a, b, level=0.95):
    """Welch's interval and two-sided p of mean(a) - mean(b), from the Welch-Satterthwaite formula."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    mean, se = a.mean() - b.mean(), math.sqrt(va + vb)
    half = stats.t.ppf((1 + level) / 2, dof) * se
    return mean - half, mean + half, 2 * stats.t.sf(abs(mean) / se, dof)


def power_direct(difference, std, n_a, n_b, alpha=0.05):
    """The power of the two-sided two-sample t test (pooled) at a true ``difference``: noncentral t."""
    dof, shift = n_a + n_b - 2, difference / (std * math.sqrt(1 / n_a + 1 / n_b))
    critical = stats.t.ppf(1 - alpha / 2, dof)
    return stats.nct.sf(critical, dof, shift) + stats.nct.cdf(-critical, dof, shift)


def per_user(seed_values, users=400, spread=0.1, offset=0.0, noise=0.0, rng_seed=0):
    """Per-user AUC [S, U]: a user effect shared by both sides (the same rng_seed) plus each seed's value."""
    rng = np.random.default_rng(rng_seed)
    base = rng.normal(0, spread, users)
    extra = np.random.default_rng(rng_seed + 1).normal(0, noise, users) if noise else 0
    return np.stack([value + base + offset + extra for value in seed_values])


def test_as_good_needs_the_seed_interval_inside_the_margin(check):
    ours, theirs = [0.8010, 0.8030, 0.8050], [0.8020, 0.8035, 0.8045]
    comparison = check.compare_sides(ours, theirs, per_user(ours), per_user(theirs), 0.005)
    low, high, p = welch_direct(ours, theirs)
    assert (comparison.seeds.low, comparison.seeds.high, comparison.seeds.p) == pytest.approx((low, high, p))
    assert max(abs(low), abs(high)) <= 0.005
    assert check.outcome(comparison) == f"as good (equal within ±{max(abs(low), abs(high)):.4f} AUC over seeds, " \
        "inside the --margin ±0.005)"
    narrow = check.compare_sides(ours, theirs, per_user(ours), per_user(theirs), max(abs(low), abs(high)) / 2)
    assert check.outcome(narrow).startswith("not resolved (a gap of ±")  # the same data, a tighter margin
    std = math.sqrt((np.var(ours, ddof=1) * 2 + np.var(theirs, ddof=1) * 2) / 4)
    assert power_direct(comparison.seeds.detectable, std, 3, 3) == pytest.approx(0.8, abs=1e-3)


def test_better_needs_the_seeds_and_the_test_users_on_one_side(check):
    ours, theirs = [0.8200, 0.8210, 0.8225], [0.8000, 0.8010, 0.8020]
    comparison = check.compare_sides(ours, theirs, per_user(ours), per_user(theirs), 0.005)
    assert welch_direct(ours, theirs)[2] < 0.05 and check.outcome(comparison) == "better"
    differences = per_user(ours).mean(0) - per_user(theirs).mean(0)
    assert (comparison.users.low, comparison.users.high) == pytest.approx((differences.mean(),) * 2)  # one value each
    assert check.outcome(check.compare_sides(theirs, ours, per_user(theirs), per_user(ours), 0.005)) == "worse"
    noisy = check.compare_sides(ours, theirs, per_user(ours, offset=-0.0205, noise=0.3), per_user(theirs), 0.005)
    users = noisy.users  # the per-user differences: about N(0, 0.3) over 400 users, so the interval spans 0
    spread = (per_user(ours, offset=-0.0205, noise=0.3).mean(0) - per_user(theirs).mean(0))
    half = 1.96 * spread.std(ddof=1) / math.sqrt(len(spread))
    assert (users.low, users.high) == pytest.approx((spread.mean() - half, spread.mean() + half), abs=0.004)
    assert check.outcome(noisy) == "not resolved (seeds separate them; the test users' interval includes 0)"


def test_one_seed_a_side_is_not_resolved(check):
    comparison = check.compare_sides([0.80], [0.70], per_user([0.80]), per_user([0.70]), 0.005)
    assert check.outcome(comparison) == "not resolved (seed spread unknown)"
    assert "n/a: seed spread unknown" in check.verdict_sentence(comparison, 0, 2, 50)


def test_runs_at_the_cap_leave_the_verdict_open(check):
    ours, theirs = [0.8000, 0.8010, 0.8020], [0.8200, 0.8210, 0.8225]
    comparison = check.compare_sides(ours, theirs, per_user(ours), per_user(theirs), 0.005)
    assert check.converged_outcome(comparison, 0, 6, 50) == "worse"
    assert check.converged_outcome(comparison, 2, 6, 50) == (
        "not resolved: 2 of the 6 runs compared reached the epoch cap (50) instead of stopping early (the capped "
        "runs read: worse)")
    sentence = check.verdict_sentence(comparison, 0, 6, 50)
    low, high, p = welch_direct(ours, theirs)
    assert f"[{low:+.4f}, {high:+.4f}], p {p:.3g}" in sentence
    assert "paired bootstrap interval over test users" in sentence and sentence.endswith("worse.**")
    assert f"detect (80% power, α 0.05): {comparison.seeds.detectable:.4f}" in sentence


def test_bad_rates_are_refused_by_name(check):
    for bad in ("1e-3,x", "0,1e-3", "1e-3,1e-3", "3e-3,1e-3"):
        with pytest.raises(SystemExit, match="option --lr-grid"):
            check.main(["--lr-grid", bad])


def test_an_unmet_recbole_requirement_stops_the_check_before_any_run(check, monkeypatch):
    monkeypatch.setattr(check, "unmet_requirements", lambda: ["pandas<3"])
    monkeypatch.setattr(check, "load_dataset", lambda name: pytest.fail("a dataset was loaded"))
    with pytest.raises(SystemExit, match=r"the RecBole check needs pandas<3 \(prism_rec/recbole_bridge/compat"):
        check.main(["--datasets", "ml-100k"])


def test_several_test_cases_a_user_are_refused(check):
    class TimeSplit:
        test_cases = np.array([[0, 1], [0, 2], [1, 3]])
        options = {"split": "time"}

    with pytest.raises(SystemExit, match="option --datasets: d .split time. has users with several test cases"):
        check.check_one_case_a_user("d", TimeSplit())


def test_a_run_records_the_commit_of_the_code_that_trained_it(check, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from prism_rec.tracking import store

    result = SimpleNamespace(test={"auc": 0.7}, valid={"auc": 0.8}, best_epoch=2, epochs_run=3,
                             test_case_ranks={"users": np.arange(3), "twice_rank": np.array([2, 4, 6]), "n_items": 9})
    monkeypatch.setattr(check, "load_dataset", lambda name: name)
    monkeypatch.setitem(check.MODELS, "sasrec", lambda dataset, model, config, on_epoch: result)
    job = check.Job("d", "sasrec", 0, 1e-3)
    job.path(tmp_path).parent.mkdir(parents=True)
    monkeypatch.delenv("PRISM_REC_GIT_COMMIT", raising=False)
    check.train_one(job, check.TrainConfig(), tmp_path)
    assert json.loads(job.path(tmp_path).read_text())["git_commit"] == store._head_commit()  # git rev-parse here
    monkeypatch.setenv("PRISM_REC_GIT_COMMIT", "abc1234")  # a tree that travelled without .git
    check.train_one(job, check.TrainConfig(), tmp_path)
    assert json.loads(job.path(tmp_path).read_text())["git_commit"] == "abc1234"


class EndedProcess:
    returncode = 0

    def poll(self):
        return 0


def test_the_header_counts_the_runs_reused_and_trained_by_this_call(check, tmp_path, capsys):
    schedule = check.initial_schedule([("d", FakeDataset(5)), ("e", FakeDataset(4))], [0], [1e-3],
                                      expected_epochs=9, ladder=())
    reused = [check.Job("d", "sasrec", 0, 1e-3), check.Job("d", "recbole:SASRec", 0, 1e-3),
              check.Job("e", "sasrec", 0, 1e-3)]
    trained = check.Job("e", "recbole:SASRec", 0, 1e-3)
    for job, commit in zip([*reused, trained], ["aaa1111", None, "aaa1111", "bbb2222"], strict=True):
        job.path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
        run = fake_run(0.8) | {"test": {"auc": 0.75}}
        job.path(tmp_path).write_text(json.dumps(run | ({"git_commit": commit} if commit else {})))
    schedule.queue.remove(trained)
    schedule.running[trained] = EndedProcess(), 0.0  # it ended this call, its result just written
    check.run_schedule(schedule, [], tmp_path, jobs=1, deadline=math.inf)
    assert schedule.reused == set(reused) and set(schedule.finished) == {*reused, trained}
    assert check.runs_sentence(schedule) == ("Runs: 1 trained by this call, 3 reused from --runs-dir (finished by "
                                             "earlier calls); the code that trained them: aaa1111 (2 runs), bbb2222 "
                                             "(1 run), not recorded (1 run).")
    assert "e recbole:SASRec lr 0.001 seed 0" in capsys.readouterr().out
    assert check.runs_sentence(check.initial_schedule([], [0], [1e-3], 9)) == (
        "Runs: 0 trained by this call, 0 reused from --runs-dir (finished by earlier calls); the code that trained "
        "them: none.")
