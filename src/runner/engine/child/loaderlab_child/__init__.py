"""loaderlab's pytorch engine: the child process that runs a real torch.utils.data.DataLoader.

loaderlab starts it with the interpreter the experiment names, writes one JSON line (the condition,
``protocol.ConditionSpec``), then one JSON line per command (``protocol.Request``). Every answer is one JSON
object per line on stdout with a ``kind`` field, typed on the Rust side by the same names
(src/runner/engine/child/protocol.rs); stderr is free for Python's own messages. Standard library +
torch/torchvision only.

Modules, one concern each: ``protocol`` (the line protocol as dataclasses), ``clocks`` (the stage clocks),
``twins`` (each transform op's torchvision twin), ``storage`` (emulated storage), ``datasets`` and
``shards`` (what the DataLoader reads), ``device`` (the step: the stand-in's host side and emulated device,
or a network), ``metering`` (fingerprint, CPU, memory), ``condition`` (the DataLoader and its feed),
``timed``, ``ranks``, ``profiled`` and ``headroom`` (the runs), ``main`` (the command loop).
"""
