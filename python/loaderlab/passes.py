"""One pass of a `loaderlab.Loader` over one epoch: each batch handed to torch without a copy
(`torch.from_dlpack` of the native pass's capsules), and with `pin_memory` each buffer page-locked
once where torch has CUDA."""

from __future__ import annotations

from typing import Any

from ._loaderlab import LoaderError


class Pass:
    """One pass of a Loader over one epoch: its batches as torch tensors, without a copy."""

    def __init__(self, native: Any, pin: bool) -> None:  # noqa: ANN401 - a NativePass
        """The pass `native`; `pin`: page-lock each buffer once where torch has CUDA."""
        self._native, self._pin = native, pin
        self._pinned: set[int] = set()

    def __iter__(self) -> Pass:
        """The pass itself."""
        return self

    def __len__(self) -> int:
        """Batches left."""
        return self._native.left

    def __next__(self) -> tuple[Any, Any]:
        """The next batch: (images, labels)."""
        import torch

        handed = self._native.next()
        if handed is None:
            self.close()
            raise StopIteration
        images, labels = torch.from_dlpack(handed[0]), torch.from_dlpack(handed[1])
        if self._pin:
            self._pin_buffer(images)
        return images, labels

    def _pin_buffer(self, images: Any) -> None:  # noqa: ANN401 - a tensor
        """Page-lock the buffer `images` lies in, once, where torch has CUDA (PyTorch's
        pin_memory=True copies each batch into pinned memory instead)."""
        import torch

        if not torch.cuda.is_available():
            return
        ptr = images.data_ptr()
        for start, size in self._native.buffers():
            if start <= ptr < start + size and start not in self._pinned:
                err = torch.cuda.cudart().cudaHostRegister(start, size, 0)
                if int(err) != 0:
                    raise LoaderError(f"pin_memory: cudaHostRegister failed ({err})")
                self._pinned.add(start)
                # The native side keeps it until it is unregistered (close).
                self._native.pin(start)

    def buffers(self) -> list[tuple[int, int]]:
        """(address, bytes) of every buffer a batch of this pass was handed over in."""
        return self._native.buffers()

    def close(self) -> None:
        """Stop the workers; every buffer page-locked is unregistered first."""
        native = self._native
        pinned = native.pinned()
        if pinned:
            import torch

            for start, _size in pinned:
                torch.cuda.cudart().cudaHostUnregister(start)
            self._pinned.clear()
        native.close()

    def __del__(self) -> None:
        """Close the pass."""
        self.close()
