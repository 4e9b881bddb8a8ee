"""The `loaderlab` command (`python -m loaderlab`, and the script pip puts on PATH): the same
code as the Rust binary's `main`, run in this process."""

import sys

from ._loaderlab import main as _main


def main() -> int:
    return _main(["loaderlab", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
