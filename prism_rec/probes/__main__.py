"""``python -m prism_rec.probes ...``: the ``prism-rec probe`` command on its own."""

import argparse
import sys

from .cli import add_parser


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m prism_rec.probes")
    subparsers = parser.add_subparsers(dest="command")
    add_parser(subparsers)
    args = parser.parse_args(["probe", *(argv if argv is not None else sys.argv[1:])])
    try:
        args.func(args)
    except (ValueError, KeyError, FileNotFoundError) as error:
        raise SystemExit(f"prism-rec probe: {error}")


if __name__ == "__main__":
    main()
