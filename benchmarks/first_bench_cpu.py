"""Per-epoch cost and test AUC of one ``make bench`` training on the CPU, to choose the first bench's
epochs and patience: trains MODEL on ml-100k with the bench defaults (``--epochs`` and ``--patience`` as
given), evaluates the test cases after every epoch as well, and appends one JSON line per epoch to OUT
(epoch, seconds of training and validation, train loss, valid and test AUC). From these lines the test
AUC of any (epochs, patience) follows: early stopping picks its best epoch from the validation AUCs.

    python benchmarks/first_bench_cpu.py MODEL OUT [--threads N] [--compile inductor] [--epochs 50] [--patience 5]
                                         [--lr 1e-3] [--batch-size 128]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from prism_rec.data.sources import load_dataset
from prism_rec.registry import get_dataset
from prism_rec.training import trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--compile", default="off")
    parser.add_argument("--epochs", type=int, default=trainer.TrainConfig.epochs)
    parser.add_argument("--patience", type=int, default=trainer.TrainConfig.patience)
    parser.add_argument("--lr", type=float, default=trainer.TrainConfig.lr)
    parser.add_argument("--batch-size", type=int, default=trainer.TrainConfig.batch_size)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset = load_dataset("ml-100k")
    config = trainer.TrainConfig(max_len=get_dataset("ml-100k").max_len, epochs=args.epochs, patience=args.patience,
                               lr=args.lr, batch_size=args.batch_size, device="cpu", progress=False,
                               compile=args.compile)
    evaluate, clock = trainer.evaluate, {"start": time.perf_counter(), "test_seconds": 0.0}

    def evaluate_test_too(model, dataset, cases, *rest, **options):
        metrics = evaluate(model, dataset, cases, *rest, **options)
        if cases is dataset.valid_cases:
            started = time.perf_counter()
            clock["test_auc"] = evaluate(model, dataset, dataset.test_cases, *rest, **options)["auc"]
            clock["test_seconds"] += time.perf_counter() - started
        return metrics

    def record(epoch: int, metrics: dict) -> None:
        now = time.perf_counter()
        seconds = now - clock["start"] - clock["test_seconds"]
        clock.update(start=now, test_seconds=0.0)
        line = {"model": args.model, "threads": args.threads, "compile": args.compile, "lr": args.lr,
                "batch_size": args.batch_size, "epoch": epoch + 1,
                "seconds": round(seconds, 2), "train_loss": metrics["train_loss"],
                "valid_auc": metrics["valid_auc"], "test_auc": clock["test_auc"]}
        with open(args.out, "a") as handle:
            handle.write(json.dumps(line) + "\n")

    trainer.evaluate = evaluate_test_too
    result = trainer.fit(dataset, args.model, config, on_epoch=record)
    with open(args.out, "a") as handle:
        handle.write(json.dumps({"model": args.model, "threads": args.threads, "compile": args.compile,
                                 "best_epoch": result.best_epoch, "test_auc": result.test["auc"],
                                 "wall_seconds": result.wall_seconds}) + "\n")


if __name__ == "__main__":
    main()
