"""What a run measures besides time: the batch's fingerprint, CPU time and peak memory."""

from __future__ import annotations

import hashlib
import os

import torch


def fingerprint(images: torch.Tensor, labels: torch.Tensor, sample: int) -> str:
    """64 bits of the batch (this engine's own).

    Its labels as int64 and ``sample`` of its image values as float32, evenly spaced over the batch.

    A sample, not every byte: it runs on the training thread inside the timed window, where a user's
    loop does nothing like it; two batches that differ anywhere but between the sampled values still
    differ here.
    """
    flat = images.reshape(-1)
    stride = max(1, flat.numel() // sample)
    h = hashlib.blake2b(digest_size=8)
    h.update(flat[::stride].to(dtype=torch.float32).contiguous().numpy().tobytes())
    h.update(labels.to(dtype=torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (/proc), 0 where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def peak_rss_mib(pids: list[int]) -> float:
    """The peak resident memory of each process (VmHWM), summed over the tree, MiB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        except OSError:
            pass
    return total / 1024
