"""Names from files and the command line never become paths outside the folders they belong in."""

import json

import mlflow
import pytest

from prism_rec.cli import main
from prism_rec.names import inside, path_name
from prism_rec.tracking.records import RECORD_FORMAT
from prism_rec.tracking.store import experiment_id
from prism_rec.tracking.tables import write_tables
from prism_rec.training.checkpoint import checkpoint_file

HOSTILE = {"..": "relative folder", "../../..": "separator", "/etc": "absolute path", "a/b": "separator",
           "a\\b": "separator", "a\0b": "NUL", "": "empty", ".": "relative folder", "-rf": "expected a plain name"}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused_saying_why(name):
    with pytest.raises(ValueError, match=HOSTILE[name]):
        path_name(name, "experiment")
    with pytest.raises(ValueError):
        checkpoint_file("ml-100k", name, 0, "abc")
    with pytest.raises(ValueError):
        checkpoint_file(name, "sasrec", 0, "abc")


def test_plain_names_pass():
    for name in ("ml-100k", "gated_deltanet", "sasrec-s0", "amazon-beauty", "v2.1", "a+b=c"):
        assert path_name(name, "name") == name
    with pytest.raises(ValueError, match="lies outside"):
        inside("/tmp/x/../y", "/tmp/x", "folder")


def test_import_runs_refuses_an_escaping_experiment(store, capsys):
    records = store / "in" / "gpu.records.jsonl"
    records.parent.mkdir()
    records.write_text(json.dumps({"format": RECORD_FORMAT, "experiment": "../../..", "run_name": "sasrec-s0"}) + "\n")
    with pytest.raises(SystemExit) as exit:
        main(["import-runs", str(records)])
    assert exit.value.code == (f"prism-rec import-runs: {records}:1: experiment '../../..': contains a path "
                               "separator; expected a plain name")
    assert mlflow.search_experiments(filter_string="name != 'Default'") == []
    assert sorted(p.name for p in store.iterdir()) == ["in", "mlflow.db"]  # nothing written beside the store


@pytest.mark.parametrize("name", ["../../escape", "/tmp/escape", "a\0b"])
def test_store_and_tables_never_take_an_escaping_name(store, name):
    with pytest.raises(ValueError, match="expected a plain name"):
        experiment_id(name)
    with pytest.raises(ValueError, match="expected a plain name"):
        write_tables(name, store / "results")


def test_tables_skip_an_experiment_an_older_import_made(store, capsys):
    mlflow.create_experiment("../../escape", artifact_location=(store / "artifacts").as_uri())
    results = store / "deep" / "results"
    main(["tables", "--results-dir", str(results)])
    assert "experiment '../../escape' skipped: not a plain name" in capsys.readouterr().err
    assert not (results / "../../escape").resolve().exists() and not results.exists()
