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


def watch_command(argv: list[str]) -> int:
    """`loaderlab watch --out DIR [--every N] -- COMMAND ...`: run COMMAND (a Python script that
    cannot be edited) with every torch DataLoader it iterates watched into DIR (the first; the
    next into DIR-2, …), then complete the folder; exit with COMMAND's status."""
    import os
    import subprocess
    from pathlib import Path

    if "--" not in argv:
        print(
            "error: loaderlab watch --out DIR [--every N] -- COMMAND ...: the command after --",
            file=sys.stderr,
        )
        return 2
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="loaderlab watch", description=watch_command.__doc__)
    p.add_argument("--out", required=True, help="the results folder (refused if it holds another run)")
    p.add_argument("--every", type=int, default=16, help="one item in N timed transform by transform")
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    if not command:
        print("error: loaderlab watch: no command after --", file=sys.stderr)
        return 2
    hook = str(Path(__file__).parent / "_hook")
    package = str(Path(__file__).parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([hook, package, *filter(None, [env.get("PYTHONPATH")])])
    env["LOADERLAB_WATCH_OUT"] = os.path.abspath(args.out)
    env["LOADERLAB_WATCH_EVERY"] = str(args.every)
    try:
        status = subprocess.call(command, env=env)
    except OSError as e:
        print(f"error: loaderlab watch: cannot run {command[0]!r}: {e}", file=sys.stderr)
        return 2
    if status == 0 and not os.path.isdir(env["LOADERLAB_WATCH_OUT"]):
        print(
            f"error: loaderlab watch: {args.out} was not written: the command iterated no torch "
            "DataLoader, or the hook could not load (a message above says why)",
            file=sys.stderr,
        )
        return 1
    return status


def main() -> int:
    """Run the command with this process's arguments."""
    if sys.argv[1:2] == ["check-transforms"]:
        return check_transforms(sys.argv[2:])
    if sys.argv[1:2] == ["watch"]:
        return watch_command(sys.argv[2:])
    from ._loaderlab import main as _main

    return _main(["loaderlab", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
