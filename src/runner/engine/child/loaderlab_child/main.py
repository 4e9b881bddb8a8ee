"""The child's command loop: say ready, build the condition, run each command loaderlab sends."""

from __future__ import annotations

import signal
import sys

from .protocol import PROTOCOL, ConditionSpec, Error, Prepared, Ready, Request, say


def versions() -> Ready:
    """The versions loaderlab records, once torch and torchvision import."""
    import torch
    import torchvision

    return Ready(PROTOCOL, torch.__version__, torchvision.__version__, sys.version.split()[0])


def serve(spec: ConditionSpec, where: str) -> int:
    """Build the condition, then run each command until ``quit`` (or stdin closes); the exit status."""
    from . import headroom, profiled, ranks, timed
    from .condition import Condition
    from .datasets import check_items
    from .watchdog import StallError

    try:
        cond = Condition(spec)
        if spec.dataset["kind"] == "user":
            check_items(cond.user_dataset, where, spec.dataset.get("items"))
    except Exception as exc:  # the user's code may raise anything: said, with where
        say(Error.of(where, exc))
        return 1
    say(Prepared(len(cond.dataset)))
    commands = {
        "run": lambda r: (ranks.run if spec.ranks > 1 else timed.run)(cond, r.warmup, r.timed),
        "profile": lambda r: profiled.run(cond, r.warmup, r.steps, r.trace),
        "headroom": lambda r: headroom.run(cond, r.steps),
    }
    # Ctrl-C reaches this process too (loaderlab passes it on): between commands it only means
    # that loaderlab is stopping, which it says with its next command or by closing stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin:
        request = Request.parse(line)
        if request.cmd == "quit":
            break
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            commands[request.cmd](request)
        except StallError as exc:
            say(Error(where, str(exc), ""))
            return 1
        except KeyboardInterrupt:
            # A stall outside a timed run's window (a profiled run) interrupts as Ctrl-C does.
            stalled = cond.watchdog.take()
            if not stalled:
                raise
            say(Error(where, stalled, ""))
            return 1
        except Exception as exc:  # the user's code may raise anything: said, with where
            say(Error.of(where, exc))
            return 1
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    cond.device.close()
    return 0


def main(argv: list[str]) -> int:
    """Say ready (or why not), then serve the condition on stdin; the exit status."""
    try:
        ready = versions()
    except Exception as exc:  # any import failure is the answer
        say(Error.of("import torch, torchvision", exc))
        return 2
    say(ready)
    if "--versions" in argv:
        return 0
    spec = ConditionSpec.parse(sys.stdin.readline())
    where = spec.dataset.get("function") or f"dataset {spec.dataset['kind']}"
    return serve(spec, where)
