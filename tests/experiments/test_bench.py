"""End to end: `prism-rec bench` on the embedded ml-100k with a tiny config, MLflow store and tables."""

import json
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch

from prism_rec.cli import main
from prism_rec.data.sources import load_dataset
from prism_rec.tracking.case_ranks import decode
from prism_rec.training.config import TrainConfig
from prism_rec.training.trainer import fit


def test_same_seed_same_metrics_on_cpu(one_torch_thread):
    dataset = load_dataset("ml-100k")
    config = TrainConfig(epochs=1, d_model=16, max_len=8, batch_size=256, eval_batch_size=1024, progress=False,
                         device="cpu")
    first, second = fit(dataset, "sasrec", config), fit(dataset, "sasrec", config)
    assert first.test == second.test and first.history == second.history
    other_seed = fit(dataset, "sasrec", TrainConfig(**{**config.__dict__, "seed": 1}))
    assert other_seed.test != first.test
    tf32_flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    fp32 = fit(dataset, "sasrec", TrainConfig(**{**config.__dict__, "precision": "fp32"}))
    assert fp32.test == first.test  # the CPU always trains in fp32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == tf32_flags  # restored


def test_precision_enters_the_settings_hash_only_when_not_the_default():
    from prism_rec.tracking.records import run_hash

    assert "precision" not in TrainConfig().identity()  # runs made before --precision keep their hashes
    assert TrainConfig(precision="fp32").identity()["precision"] == "fp32"
    assert run_hash("toy", {}, "sasrec", TrainConfig()) != run_hash("toy", {}, "sasrec", TrainConfig(precision="fp32"))
    with pytest.raises(ValueError, match="option --precision: 'fp16'"):
        TrainConfig(precision="fp16").validate()


def test_bench_logs_runs_and_writes_table(store, tiny, one_torch_thread, capsys):
    main(["bench", "--dataset", "ml-100k", "--models", "sasrec", "--seeds", "2",
          "--results-dir", str(store / "results"), *tiny])
    printed = capsys.readouterr().out
    assert "Your AUC table" in printed and "Published headline tables (H200, not touched" in printed
    table = (store / "results" / "ml-100k" / "auc.md").read_text()
    assert "| sasrec |" in table and "Produced by:" in table
    csv = (store / "results" / "ml-100k" / "auc.csv").read_text().splitlines()
    assert csv[0].startswith("model,n_seeds") and csv[1].startswith("sasrec,2,")
    runs = mlflow.search_runs(experiment_names=["ml-100k"])
    children = runs[runs["tags.prism_rec_role"] == "child"]
    assert sorted(children["tags.mlflow.runName"]) == ["sasrec-s0", "sasrec-s1"]
    assert set(runs["status"]) == {"FINISHED"}
    assert children["metrics.test_auc"].between(0, 1).all()
    history = mlflow.MlflowClient().get_metric_history(children["run_id"].iloc[0], "valid_auc")
    assert [m.step for m in history] == [1, 2]  # step = epoch, 1-based like best_epoch
    params = children["params.device"].tolist() + children["params.precision"].tolist()
    assert params == ["cpu", "cpu", "fp32", "fp32"]  # what ran (the CPU computes in fp32), not "auto" and bf16
    for tag in ("git_commit", "torch_version", "torch_threads", "device", "dataset", "model", "seed", "config_hash",
                "prism_rec_pid"):
        assert children[f"tags.{tag}"].notna().all()
    client = mlflow.MlflowClient()
    for run_id in children["run_id"]:
        assert {a.path for a in client.list_artifacts(run_id)} == {"config.json", "learning_curve.png",
                                                                    "case_ranks.json"}
        cases = decode(mlflow.artifacts.load_dict(f"runs:/{run_id}/case_ranks.json"))
        test_auc = children.set_index("run_id").loc[run_id, "metrics.test_auc"]
        assert cases.auc().mean() == pytest.approx(test_auc, abs=1e-12)
        config = json.loads(Path(client.download_artifacts(run_id, "config.json", str(store))).read_text())
        assert config["model"] == "sasrec" and config["train"]["d_model"] == 16
        assert config["train"]["device"] == "cpu" and config["train"]["precision"] == "fp32"
    parent = runs[runs["tags.prism_rec_role"] == "parent"].iloc[0]
    assert {a.path for a in client.list_artifacts(parent["run_id"])} == {"auc.md", "auc.csv", "auc.png",
                                                                        "learning_curves.png", "comparison.json",
                                                                        "auc.svg"}
    assert set(children["tags.bench"]) == {parent["tags.mlflow.runName"]}
    assert parent["params.seeds"] == "2" and parent["params.seed_values"] == "0,1"
    assert parent["metrics.n_seeds/sasrec"] == 2 and parent["metrics.n_test_users/sasrec"] == 943
    assert parent["metrics.test_auc_mean/sasrec"] == pytest.approx(children["metrics.test_auc"].mean())
    assert parent["metrics.test_auc_ci_low/sasrec"] < parent["metrics.test_auc_mean/sasrec"] < \
        parent["metrics.test_auc_ci_high/sasrec"]
    assert (store / "results" / "ml-100k" / "auc.png").read_bytes().startswith(b"\x89PNG")

    main(["tables", "--results-dir", str(store / "rebuilt")])
    assert "ml-100k" in capsys.readouterr().out
    rebuilt_csv = (store / "rebuilt" / "ml-100k" / "auc.csv").read_text()
    assert rebuilt_csv == (store / "results" / "ml-100k" / "auc.csv").read_text()


def test_params_name_every_backbone_option_with_its_default():
    from prism_rec.tracking.records import run_settings

    params = run_settings("prism", TrainConfig(device="auto", backbone_options={"L": 2}), torch.device("cpu"))
    assert params["device"] == "cpu" and params["precision"] == "fp32" and params["compile"] == "off"
    assert params["backbone.L"] == 2 and params["backbone.nonlinearity"] == "gelu"
    assert run_settings("prism-L1", TrainConfig(), torch.device("cpu"))["backbone.L"] == 1  # the preset's value
    assert "backbone.d_model" not in params  # the shared settings keep their own names


def test_one_seed_is_said_as_such_and_logged_as_a_count(store, tiny, one_torch_thread):
    main(["bench", "--models", "sasrec", "--seeds", "1", "--epochs", "1", "--results-dir", str(store / "r"), *tiny])
    parent = mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'parent'").iloc[0]
    assert parent["params.seeds"] == "1" and parent["params.seed_values"] == "0"
    table = mlflow.artifacts.load_text(f"runs:/{parent['run_id']}/auc.md")
    assert "One seed per model: no std over seeds" in table and " ± " not in table


def test_pop_beside_a_trained_backbone_runs_once_and_is_labelled_deterministic(store, tiny, one_torch_thread, capsys):
    main(["bench", "--models", "sasrec,pop", "--seeds", "2", "--epochs", "1", "--results-dir", str(store / "r"), *tiny])
    printed = capsys.readouterr().out
    assert "[3/3] pop seed 0" in printed and "pop seed 1" not in printed  # deterministic: one run
    runs = mlflow.search_runs(experiment_names=["ml-100k"])
    children = runs[runs["tags.prism_rec_role"] == "child"]
    assert sorted(children["tags.mlflow.runName"]) == ["pop-s0", "sasrec-s0", "sasrec-s1"]
    assert set(runs["status"]) == {"FINISHED"}
    table = (store / "r" / "ml-100k" / "auc.md").read_text()
    pop_row = next(line for line in table.splitlines() if line.startswith("| pop |"))
    sasrec_row = next(line for line in table.splitlines() if line.startswith("| sasrec |"))
    assert pop_row.rstrip(" |").endswith("| deterministic, 1 run") and " ± " not in pop_row
    assert sasrec_row.rstrip(" |").endswith("| 2") and " ± " in sasrec_row
    assert "A model that does not train (pop) is deterministic: one run." in table
    pop_id = children.loc[children["tags.model"] == "pop", "run_id"].iloc[0]
    assert {a.path for a in mlflow.MlflowClient().list_artifacts(pop_id)} == {"config.json", "case_ranks.json"}
    parent = runs[runs["tags.prism_rec_role"] == "parent"].iloc[0]
    assert parent["metrics.n_seeds/pop"] == 1 and parent["metrics.n_seeds/sasrec"] == 2
    comparison = mlflow.artifacts.load_text(f"runs:/{parent['run_id']}/auc.md")
    assert "| deterministic, 1 run |" in comparison


def test_crashing_training_marks_run_failed_and_the_others_still_run(store, tiny, monkeypatch, capsys):
    from prism_rec.experiments import bench as bench_command

    def crash_on_seed_0(dataset, model, config, **options):
        if config.seed == 0:
            raise RuntimeError("out of memory")
        return fit(dataset, model, config, **options)

    monkeypatch.setattr(bench_command, "fit", crash_on_seed_0)
    with pytest.raises(SystemExit, match="1 run\\(s\\) failed .*sasrec seed 0: RuntimeError: out of memory"):
        main(["bench", "--models", "sasrec", "--seeds", "2", "--results-dir", str(store / "r"), *tiny, "--epochs", "1"])
    assert "Traceback" in capsys.readouterr().err  # the crash's own traceback, once
    runs = mlflow.search_runs(experiment_names=["ml-100k"])
    children = runs[runs["tags.prism_rec_role"] == "child"].set_index("tags.mlflow.runName")
    assert children["status"].to_dict() == {"sasrec-s0": "FAILED", "sasrec-s1": "FINISHED"}
    assert children.loc["sasrec-s0", "tags.error"] == "RuntimeError: out of memory"


@pytest.mark.parametrize("args, expected", [(["--models", "nope"], "--models"), (["--dataset", "nope"], "nope"),
                                            (["--epochs", "0"], "--epochs"), (["--option", "L"], "key=value")])
def test_bad_options_name_the_option(store, capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *args])
    assert expected in str(exit_info.value) + capsys.readouterr().err


def test_fp32_turns_tf32_off_only_inside_the_block():
    from prism_rec.training.trainer import _tf32_off

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        with _tf32_off(True):
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        with _tf32_off(False):
            assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_runs_name_the_commit_their_process_loaded(monkeypatch):
    from prism_rec.tracking import store as tracking_store

    monkeypatch.delenv("PRISM_REC_GIT_COMMIT", raising=False)
    loaded = tracking_store.git_commit()
    monkeypatch.setattr(tracking_store, "_head_commit", lambda: "moved0n")  # HEAD moves on while a run trains
    assert tracking_store.git_commit() == loaded
    monkeypatch.setenv("PRISM_REC_GIT_COMMIT", "d3v1ce0")  # the GPU machine, where .git does not travel
    assert tracking_store.git_commit() == "d3v1ce0"


def test_bench_and_tables_write_a_git_ignored_folder_not_the_published_tables():
    import subprocess

    from prism_rec.cli import build_parser
    from prism_rec.paths import RESULTS_DIR
    from prism_rec.tracking.tables import LOCAL_RESULTS_DIR

    parser = build_parser()
    for command in (["bench"], ["tables"]):
        assert parser.parse_args(command).results_dir == LOCAL_RESULTS_DIR != RESULTS_DIR
    ignored = subprocess.run(["git", "check-ignore", "-q", str(LOCAL_RESULTS_DIR / "ml-100k" / "auc.md")],
                             cwd=RESULTS_DIR.parent)
    assert ignored.returncode == 0, "results/local/ must be git-ignored"


def test_threads_auto_is_one_thread_whatever_the_load(monkeypatch):
    """The default count never follows the machine's load: the same command gives the same metrics."""
    from prism_rec.errors import OptionError
    from prism_rec.experiments.bench import cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    for load in (0.2, 1.1, 5.0):
        monkeypatch.setattr("os.getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert cpu_threads("auto") == 1
    assert cpu_threads("2") == 2
    for bad in ("0", "two"):
        with pytest.raises(OptionError, match=f"option --threads: expected 'auto' or a count >= 1, got '{bad}'"):
            cpu_threads(bad)


def test_threads_auto_keeps_the_count_that_omp_num_threads_set(monkeypatch):
    from prism_rec.experiments.bench import cpu_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun sets it; so does the store fixture
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))
    assert cpu_threads("auto") == torch.get_num_threads()


def test_bench_options_are_made_from_train_config_fields(monkeypatch, capsys):
    import dataclasses

    from prism_rec import cli, registry
    from prism_rec.training.config import knob

    def parsed(*args):
        return cli.build_parser().parse_args(["bench", *args])

    source = registry.get_dataset("ml-100k")
    plain = cli.train_config(parsed(), source, backbone_options={})
    assert plain == TrainConfig(max_len=source.max_len)  # every default, the window the dataset's
    given = cli.train_config(parsed("--max-len", "9", "--compile", "off", "--no-progress", "--lr", "0.01"), source)
    assert (given.max_len, given.compile, given.progress, given.lr) == (9, "off", False, 0.01)

    @dataclasses.dataclass
    class WithANewField(TrainConfig):
        warmup_steps: int = knob(0, "linear warm-up steps of the learning rate")

    monkeypatch.setattr(cli, "TrainConfig", WithANewField)
    assert cli.train_config(parsed("--warmup-steps", "7"), source).warmup_steps == 7
    with pytest.raises(SystemExit):
        parsed("--help")
    assert "--warmup-steps WARMUP_STEPS" in capsys.readouterr().out


def test_bench_reports_paired_differences_against_the_best_and_runs_still_improving(store, tiny, one_torch_thread,
                                                                                   capsys):
    main(["bench", "--models", "sasrec,pop", "--seeds", "2", "--results-dir", str(store / "r"), *tiny])
    printed = capsys.readouterr().out
    runs = mlflow.search_runs(experiment_names=["ml-100k"])
    children = runs[runs["tags.prism_rec_role"] == "child"]
    means = children.groupby("tags.model")["metrics.test_auc"].mean()
    best, other = means.idxmax(), means.idxmin()
    assert f"Paired differences against the best mean, {best}" in printed
    parent = runs[runs["tags.prism_rec_role"] == "parent"].iloc[0]
    logged = mlflow.artifacts.load_dict(f"runs:/{parent['run_id']}/paired_differences.json")
    table = pd.DataFrame(logged["data"], columns=logged["columns"])  # mlflow.log_table's layout
    assert table["difference"].tolist() == [f"{best} − {other}"]
    assert table["mean"].iloc[0] == pytest.approx(means[best] - means[other], abs=1e-9)  # the table keeps 10 decimals
    assert table["users_low"].iloc[0] <= table["mean"].iloc[0] <= table["users_high"].iloc[0]
    assert table["n_users"].iloc[0] == 943 and table["seeds"].iloc[0] == f"{(children['tags.model'] == best).sum()}/" \
        f"{(children['tags.model'] == other).sum()}"
    assert table["verdict"].iloc[0] == "not resolved (seed spread unknown)"  # pop runs once: no seed spread
    assert "paired_differences.md" in {a.path for a in mlflow.MlflowClient().list_artifacts(parent["run_id"])}
    trained = children[children["tags.model"] == "sasrec"]
    improving = (trained["metrics.best_epoch"] == trained["metrics.epochs_run"]).sum()
    assert printed.count("warning: still improving at the last epoch") == improving
    assert ("still improving at the last epoch (best epoch = last)" in printed) == (improving > 0)
