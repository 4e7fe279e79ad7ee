"""Fixtures of the end-to-end benchmark tests: a throwaway MLflow store, the tiny config, the CLI, and an
MLflow server over a tiny bench (on a free loopback port, stopped by its process id whatever happens)."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import torch

from prism_rec.cli import main

TINY_BENCH_ARGS = ["--epochs", "2", "--d-model", "16", "--max-len", "8", "--batch-size", "256",
                   "--eval-batch-size", "1024", "--no-progress"]


def use_store(folder, patch) -> None:
    """Points MLflow, in this process and in the subprocesses it starts, at the sqlite store in ``folder``."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    patch.setenv("MLFLOW_TRACKING_URI", uri)
    patch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
    import mlflow  # here, not at the top: the GPU tests run where mlflow is not installed (benchmarks/authors_gpu.sh)

    mlflow.set_tracking_uri(uri)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A temporary sqlite MLflow store, used by this process and by the subprocesses it starts. Sets
    OMP_NUM_THREADS too, so that an in-process `bench --threads auto` keeps this process's thread count
    (which would otherwise follow the load average and move float reductions between runs)."""
    use_store(tmp_path, monkeypatch)
    return tmp_path


@pytest.fixture
def tiny(tmp_path):
    """`prism-rec bench` options of a run that takes seconds on ml-100k, checkpoints kept in tmp_path."""
    return tiny_bench_args(tmp_path)


def tiny_bench_args(folder):
    """TINY_BENCH_ARGS with the run's checkpoints kept in folder/checkpoints."""
    return [*TINY_BENCH_ARGS, "--checkpoint-dir", str(folder / "checkpoints")]


@pytest.fixture
def run_cli():
    """Runs `python -m prism_rec.cli ARGS` in a subprocess (one torch thread); returns the CompletedProcess."""

    def run(*args, check=True, env=None):
        environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        return subprocess.run([sys.executable, "-m", "prism_rec.cli", *map(str, args)], capture_output=True,
                              text=True, check=check, env=environment)

    return run


@pytest.fixture(scope="module")
def one_torch_thread():
    """Train in this process on one thread, like the subprocesses (OMP_NUM_THREADS=1): equal float
    reductions, and no thread contention on the shared CI cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


STARTUP_SECONDS = 90


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (it was started in its own session), SIGKILL after 10 s."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


@pytest.fixture(scope="module")
def served_bench(tmp_path_factory, one_torch_thread):
    """A tiny bench of two seeds and pop (one run) in a store of its own, then `mlflow server` over it, once per
    test module (the tests only read it): yields the store's folder and the server's base URL."""
    folder = tmp_path_factory.mktemp("served_bench")
    with pytest.MonkeyPatch.context() as patch:
        use_store(folder, patch)
        main(["bench", "--models", "sasrec,pop", "--seeds", "2", "--epochs", "1", "--device", "cpu",
              "--results-dir", str(folder / "results"), *tiny_bench_args(folder)])
        port = free_loopback_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", os.environ["MLFLOW_TRACKING_URI"],
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "w"),  # noqa: SIM115 (the server's)
            start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while True:
                try:
                    urllib.request.urlopen(f"{url}/health", timeout=2).read()
                    break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    if server.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"mlflow server did not come up: {(folder / 'server.log').read_text()[-2000:]}")
                    time.sleep(0.5)
            yield folder, url
        finally:
            stop_server(server)
        assert server.returncode is not None


@pytest.fixture
def mlflow_server(served_bench, monkeypatch):
    """The base URL of `served_bench`'s server, with MLflow in this process pointed at its store for this test
    (another test's `store` may have pointed it elsewhere since)."""
    folder, url = served_bench
    use_store(folder, monkeypatch)
    return url
