"""Run the child: ``python path/to/loaderlab_child/__main__.py [--versions]``."""

import os
import sys

if __name__ == "__main__":
    # The package's parent holds it and pytorch_model.py (loaderlab's networks in PyTorch).
    # (multiprocessing's fork server imports this file as __mp_main__: nothing runs then.)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from loaderlab_child.main import main

    sys.exit(main(sys.argv[1:]))
