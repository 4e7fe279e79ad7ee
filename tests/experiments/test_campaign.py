"""The campaign runner: outcomes counted by status, follow-up jobs, the manifest as resume state, merging,
and the executor options (the dask executor itself: test_campaign_dask.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from prism_rec.errors import OptionError
from prism_rec.experiments.campaign import (
    Campaign,
    LocalExecutor,
    Manifest,
    Status,
    deadline_after,
    merge_manifests,
    parse_cluster_options,
)


@dataclass(frozen=True)
class Job:
    label: str
    outcome: str


def outcome(job: Job) -> dict:
    if job.outcome == "raise":
        raise RuntimeError(f"{job.label} broke")
    return {"status": job.outcome}


def test_outcomes_are_counted_by_status_and_results_queue_follow_ups(capsys):
    seen = []

    def on_result(job: Job, status: Status, result: dict) -> list[Job]:
        seen.append((job.label, status))
        return [Job(f"{job.label}+", "finished")] if job.label == "a" else []

    campaign = Campaign(LocalExecutor(1, "cpu"), deadline_after(None), {"already in manifest": 4})
    not_started = campaign.run([Job("a", "finished"), Job("b", "raise"), Job("c", "abandoned")], outcome, on_result)
    assert not_started == []
    assert seen == [("a", Status.FINISHED), ("b", Status.FAILED), ("c", Status.ABANDONED), ("a+", Status.FINISHED)]
    assert campaign.counts == {"already in manifest": 4, "finished": 2, "failed": 1, "abandoned": 1, "not started": 0}
    assert campaign.summary() == "already in manifest: 4, finished: 2, failed: 1, abandoned: 1, not started: 0"
    assert "b: FAILED RuntimeError: b broke\nTraceback" in capsys.readouterr().out


def test_no_job_starts_after_the_deadline():
    campaign = Campaign(LocalExecutor(1, "cpu"), time.time() - 1)
    assert campaign.run([Job("a", "finished")], outcome, lambda job, status, result: None) == [Job("a", "finished")]
    assert campaign.counts["not started"] == 1 and campaign.counts["finished"] == 0
    with pytest.raises(OptionError, match="option --time-budget: must be > 0 seconds, got 0"):
        deadline_after(0, "--time-budget")


def test_the_manifest_is_what_a_later_call_resumes_from(tmp_path):
    manifest = Manifest(tmp_path / "m.jsonl", key=lambda entry: entry["run"])
    manifest.add({"run": "a", "auc": 0.5})
    manifest.add({"run": "b", "auc": 0.6})
    again = Manifest(tmp_path / "m.jsonl", key=lambda entry: entry["run"])
    assert again.entries == manifest.entries and again.keys() == {"a", "b"}


def test_manifests_merge_once_per_key_the_first_copy_kept(tmp_path):
    for name, entries in (("one", [{"run": "a", "v": 1}, {"run": "b", "v": 2}]),
                          ("two", [{"run": "a", "v": 9}, {"run": "c", "v": 3}])):
        manifest = Manifest(tmp_path / f"{name}.jsonl", key=lambda entry: entry["run"])
        for entry in entries:
            manifest.add(entry)
    merged = merge_manifests([tmp_path / "one.jsonl", tmp_path / "two.jsonl"], key=lambda entry: entry["run"])
    assert merged == [{"run": "a", "v": 1}, {"run": "b", "v": 2}, {"run": "c", "v": 3}]


def test_cluster_options_read_json_values_and_refuse_a_pair_without_a_key():
    assert parse_cluster_options(["queue=gpu", "cores=4", 'job_script_prologue=["a", "b"]']) == {
        "queue": "gpu", "cores": 4, "job_script_prologue": ["a", "b"]}
    with pytest.raises(OptionError, match="option --cluster-option '=gpu': expected KEY=VALUE"):
        parse_cluster_options(["=gpu"])
    with pytest.raises(OptionError, match="option --cluster-option 'queue': expected KEY=VALUE"):
        parse_cluster_options(["queue"])
