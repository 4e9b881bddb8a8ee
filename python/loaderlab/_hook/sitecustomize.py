"""Loaded at start-up by `loaderlab watch --out DIR -- COMMAND` (this folder leads PYTHONPATH):
every torch DataLoader the script iterates is watched (`loaderlab.watch`)."""

import os

if os.environ.get("LOADERLAB_WATCH_OUT"):
    from loaderlab.hook import install

    install(os.environ["LOADERLAB_WATCH_OUT"], int(os.environ.get("LOADERLAB_WATCH_EVERY", "16")))
