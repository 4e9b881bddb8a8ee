"""The `loaderlab` command (`python -m loaderlab`, and the script pip puts on PATH): the same
code as the Rust binary's `main`, run in this process — and `check-transforms`, which runs
here, in Python, where torchvision is."""

from __future__ import annotations

import argparse
import sys


def check_transforms(argv: list[str]) -> int:
    """`loaderlab check-transforms FILE [--condition C] [-n N]`: a condition's chain against
    torchvision's functional form of each op on N images of its dataset; exit 0 when every op
    agrees (exactly, or within 1/255 where torchvision rounds differently), 1 when one differs,
    2 when the file cannot be read."""
    from . import Loader, LoaderError

    p = argparse.ArgumentParser(prog="loaderlab check-transforms", description=check_transforms.__doc__)
    p.add_argument("file")
    p.add_argument("--condition", "-c", help="the condition whose chain to check (default: the first)")
    p.add_argument("-n", type=int, default=64, help="images of the dataset to check (default 64)")
    args = p.parse_args(argv)
    try:
        loader = Loader.from_experiment(args.file, args.condition)
    except (OSError, ValueError, LoaderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = loader.check(args.n)
    print(report)
    return 0 if report.passed else 1


def main() -> int:
    """Run the command with this process's arguments."""
    if sys.argv[1:2] == ["check-transforms"]:
        return check_transforms(sys.argv[2:])
    from ._loaderlab import main as _main

    return _main(["loaderlab", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
