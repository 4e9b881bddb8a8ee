# loaderlab's pytorch engine: the child process that runs a real torch.utils.data.DataLoader.
#
# loaderlab starts this script with the interpreter the experiment names, writes one JSON line
# (the condition: dataset, transforms, loader settings, step), then one JSON line per command
# ({"cmd": "run", ...} for a timed run, {"cmd": "quit"}). Every answer is one JSON object per
# line on stdout with a "kind" field, typed on the Rust side by a serde enum
# (src/runner/engine/pytorch.rs); stderr is free for Python's own messages. An exception in the
# user's code is answered with {"kind": "error"} naming where it happened and the end of the
# traceback. Standard library + torch/torchvision only.
import hashlib
import importlib.util
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback

PROTOCOL = 1


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(where, exc):
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    say({"kind": "error", "where": where, "message": f"{type(exc).__name__}: {exc}", "traceback": tail})


def versions():
    import torch
    import torchvision

    return {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "python": sys.version.split()[0],
    }


# --- stage clocks: what each part of a batch's build costs, in the process that builds it ----

# On only for the profiled run (a DataLoader's workers fork with the value it has when they
# start): name -> [count, wall ns, CPU ns]; "item" and "collate" keep the process's CPU time
# (torch's own threads work for the item too; a worker runs one). The collate
# hands each batch's clocks to the training loop with the batch and starts them afresh, so
# what a worker process measured reaches the main process.
CLOCKS = False
STAGES = {}

# (rank, ranks) of this process's share of every epoch (`[distributed] ranks`): the condition
# sets the ranks, each rank's process its rank; the profiled and headroom runs are rank 0's.
RANK = (0, 1)


def clock(name, count, ns, cpu_ns=0):
    entry = STAGES.setdefault(name, [0, 0, 0])
    entry[0] += count
    entry[1] += ns
    entry[2] += cpu_ns


class Clocked:
    """One transform op, timed per image while the clocks run."""

    def __init__(self, name, op):
        self.name, self.op = name, op

    def __call__(self, img):
        if not CLOCKS:
            return self.op(img)
        t0 = time.perf_counter_ns()
        out = self.op(img)
        clock(self.name, 1, time.perf_counter_ns() - t0)
        return out

    def __repr__(self):
        return repr(self.op)


class ClockedItems:
    """The dataset with each item's whole fetch timed (read, decode, transforms), wall and CPU."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        if not CLOCKS:
            return self.dataset[i]
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        item = self.dataset[i]
        clock("item", 1, time.perf_counter_ns() - t0, time.process_time_ns() - c0)
        return item


def clocked(dataset):
    """`dataset` with each item's fetch timed: by index, or (an IterableDataset) as it streams."""
    from torch.utils.data import IterableDataset

    if not isinstance(dataset, IterableDataset):
        return ClockedItems(dataset)

    class ClockedStream(IterableDataset):
        def __len__(self):
            return len(dataset)

        def __iter__(self):
            it = iter(dataset)
            while True:
                t0, c0 = time.perf_counter_ns(), time.process_time_ns()
                try:
                    item = next(it)
                except StopIteration:
                    return
                if CLOCKS:
                    clock("item", 1, time.perf_counter_ns() - t0, time.process_time_ns() - c0)
                yield item

    return ClockedStream()


def clocked_collate(collate):
    """`collate` timed per batch; while the clocks run, a batch travels as (batch, the moment
    it was ready, the clocks of its build), read by the profiled run."""

    def run(items):
        if not CLOCKS:
            return collate(items)
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        out = collate(items)
        clock("collate", 1, time.perf_counter_ns() - t0, time.process_time_ns() - c0)
        clocks = {k: list(v) for k, v in STAGES.items()}
        STAGES.clear()
        return out, time.perf_counter_ns(), clocks

    return run


# --- the declared pipeline ----------------------------------------------------------------


def twin(spec):
    """The torchvision twin of one of loaderlab's transform ops, with the same parameters."""
    from torchvision import transforms as T
    from torchvision.transforms import InterpolationMode

    op = spec["op"]
    size = spec.get("size")
    if op == "random_resized_crop":
        return T.RandomResizedCrop(
            size,
            scale=tuple(spec["scale"]),
            ratio=tuple(spec["ratio"]),
            interpolation=InterpolationMode.BILINEAR,
        )
    if op == "random_rotation":
        return T.RandomRotation(
            spec["degrees"], interpolation=InterpolationMode.NEAREST, fill=spec.get("fill", 0)
        )
    if op == "random_horizontal_flip":
        return T.RandomHorizontalFlip(spec["p"])
    if op == "random_vertical_flip":
        return T.RandomVerticalFlip(spec["p"])
    if op == "resize":
        max_size = spec.get("max_size") or None
        return T.Resize(size, interpolation=InterpolationMode.BILINEAR, max_size=max_size)
    if op == "center_crop":
        return T.CenterCrop(size)
    if op == "random_crop":
        padding = spec.get("padding") or None
        return T.RandomCrop(
            size,
            padding=padding,
            pad_if_needed=spec.get("pad_if_needed", False),
            fill=spec.get("fill", 0),
            padding_mode=spec.get("padding_mode", "constant"),
        )
    if op == "color_jitter":
        return T.ColorJitter(spec["brightness"], spec["contrast"], spec["saturation"], spec["hue"])
    if op == "grayscale":
        return T.Grayscale(spec["num_output_channels"])
    if op == "random_grayscale":
        return T.RandomGrayscale(spec["p"])
    if op == "to_tensor":
        return T.ToTensor()
    if op == "normalize":
        return T.Normalize(spec["mean"], spec["std"])
    if op == "cpu_work":
        return CpuWork(spec["us"])
    raise ValueError(f"op {op!r} has no torchvision twin")


class CpuWork:
    """loaderlab's cpu_work: a busy loop of `us` microseconds per image; the image passes unchanged."""

    def __init__(self, us):
        self.s = us / 1e6

    def __call__(self, img):
        end = time.thread_time() + self.s
        while time.thread_time() < end:
            pass
        return img

    def __repr__(self):
        return f"CpuWork(us={self.s * 1e6:g})"


class Storage:
    """loaderlab's emulated storage (`[dataset.storage]`, src/data/storage.rs) shared by the
    DataLoader's processes: every read waits the request's latency, then its bytes over a link
    all readers share (a FIFO reservation: a transfer starts when its latency has passed and the
    link is free), at most `max_in_flight` requests at once. Waiting sleeps, holding no core.
    Created before the workers start, so they share its lock, slots and link (CLOCK_MONOTONIC
    is one clock for every process)."""

    def __init__(self, cfg):
        import multiprocessing as mp

        self.latency = cfg["latency_ms"] / 1e3
        self.bytes_per_s = cfg["bandwidth_mb_s"] * 1e6
        self.slots = mp.BoundedSemaphore(cfg["max_in_flight"]) if cfg["max_in_flight"] else None
        self.free_at = mp.Value("d", 0.0)

    def transfer(self, nbytes, new=True):
        """`nbytes` over the link, after the request's latency when `new` (else the next bytes
        of a stream already open); returns when they have arrived."""
        if self.slots:
            self.slots.acquire()
        try:
            done = time.monotonic() + (self.latency if new else 0.0)
            if self.bytes_per_s > 0:
                with self.free_at.get_lock():
                    done = max(done, self.free_at.value) + nbytes / self.bytes_per_s
                    self.free_at.value = done
            wait = done - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        finally:
            if self.slots:
                self.slots.release()


class StoredImages:
    """Images loaderlab wrote into one file with a label file beside it (synthetic data exists
    only in its memory): the same bytes both engines read. The file is read in each worker,
    after the fork or spawn; `image(i, data)` makes sample i's PIL image of its bytes."""

    def __init__(self, path, labels, transform):
        self.path, self.transform = path, transform
        with open(labels, "rb") as f:
            self.targets = list(f.read())
        self.data = None

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        if self.data is None:
            with open(self.path, "rb") as f:
                self.data = f.read()
        return self.transform(self.image(i, self.data)), self.targets[i]


class RawImages(StoredImages):
    """Raw planar pixels of one shape."""

    def __init__(self, path, labels, shape, transform):
        super().__init__(path, labels, transform)
        self.shape = tuple(shape)

    def image(self, i, data):
        from PIL import Image

        c, h, w = self.shape
        raw = data[i * c * h * w : (i + 1) * c * h * w]
        if c == 1:
            return Image.frombytes("L", (w, h), raw)
        planes = [Image.frombytes("L", (w, h), raw[k * h * w : (k + 1) * h * w]) for k in range(c)]
        return Image.merge("RGB", planes)


class EncodedImages(StoredImages):
    """Encoded files (JPEG, PNG) one after another with their offsets, decoded with Pillow as
    torchvision does."""

    def __init__(self, path, offsets, labels, mode, transform, storage=None):
        super().__init__(path, labels, transform)
        self.offsets, self.mode, self.storage = offsets, mode, storage

    def image(self, i, data):
        import io

        from PIL import Image

        raw = data[self.offsets[i] : self.offsets[i + 1]]
        if self.storage:
            self.storage.transfer(len(raw))
        return Image.open(io.BytesIO(raw)).convert(self.mode)


def shards_dataset(d, shuffle, transform, storage=None):
    """WebDataset tar shards as a torch IterableDataset, read as the `webdataset` library reads
    them: each worker takes every n-th shard (split by worker), streams its members in archive
    order, groups `key.jpg|jpeg|png` with `key.cls` (the key: the path up to the file name's
    first dot), with `shuffle` draws the shards' order and a shuffle buffer of `shuffle_buffer`
    samples (their bytes) from the seed torch gives the worker for this epoch, and decodes each
    sample with Pillow and transforms it as it leaves the buffer."""
    import io
    import random
    import tarfile

    import torch
    from PIL import Image
    from torch.utils.data import IterableDataset, get_worker_info

    class Shards(IterableDataset):
        def __init__(self):
            self.shards, self.mode, self.buffer = d["shards"], d["mode"], d["shuffle_buffer"]
            self.count = sum(1 for _ in self.samples(self.shards))

        def __len__(self):
            return self.count

        def samples(self, shards, storage=None):
            """(image bytes, label) of every sample of `shards`, in archive order; behind
            emulated storage each shard is one request (its latency) streamed on (each image's
            bytes), as the native engine's storage streams a shard."""
            for shard in shards:
                pending, opened = {}, False
                with tarfile.open(shard, "r|") as tar:
                    for member in tar:
                        name = member.name
                        base = name.rfind("/") + 1
                        dot = name.find(".", base)
                        if not member.isfile() or dot < 0:
                            continue
                        key, ext = name[:dot], name[dot + 1 :].lower()
                        if ext not in ("jpg", "jpeg", "png", "cls"):
                            continue
                        data = tar.extractfile(member).read()
                        if storage and ext != "cls":
                            storage.transfer(len(data), new=not opened)
                            opened = True
                        part = pending.setdefault(key, {})
                        part["cls" if ext == "cls" else "image"] = data
                        if len(part) == 2:
                            del pending[key]
                            yield part["image"], int(part["cls"].decode().strip())
                for key, part in pending.items():
                    if "image" in part:
                        raise ValueError(f"{shard}: sample {key} has an image but no .cls label")

        def __iter__(self):
            for image, label in self.shuffled():
                yield transform(Image.open(io.BytesIO(image)).convert(self.mode)), label

        def shuffled(self):
            info = get_worker_info()
            # Each epoch's iterator gets its seed from the DataLoader's seeded generator: in a
            # worker, torch's seed for it; at 0 workers, a draw from the seeded main process.
            seed = info.seed if info else int(torch.empty((), dtype=torch.int64).random_().item())
            rng = random.Random(seed)
            shards = list(self.shards)
            if shuffle:
                rng.shuffle(shards)
            shards = shards[RANK[0] :: RANK[1]]
            if info:
                shards = shards[info.id :: info.num_workers]
            stream = self.samples(shards, storage)
            if not shuffle or self.buffer <= 1:
                yield from stream
                return
            buffer = []
            for sample in stream:
                if len(buffer) < self.buffer:
                    buffer.append(sample)
                    continue
                k = rng.randrange(len(buffer))
                buffer[k], sample = sample, buffer[k]
                yield sample
            rng.shuffle(buffer)
            yield from buffer

    return Shards()


def load_user(ref, base):
    """`file.py:function` relative to the experiment's folder: the function, imported by path."""
    file, _, func = ref.rpartition(":")
    path = os.path.join(base, file)
    spec = importlib.util.spec_from_file_location(
        "loaderlab_user_" + os.path.basename(file).replace(".", "_"), path
    )
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    return getattr(module, func)


def dataset_of(cfg):
    from torchvision import datasets
    from torchvision import transforms as T

    d = cfg["dataset"]
    transform = T.Compose([Clocked(s["op"], twin(s)) for s in cfg["transforms"]])
    kind = d["kind"]
    storage = Storage(cfg["storage"]) if cfg.get("storage") else None
    if kind == "user":
        return load_user(d["function"], d["base"])()
    if kind == "raw":
        return RawImages(d["images"], d["labels"], d["shape"], transform)
    if kind == "encoded":
        return EncodedImages(d["files"], d["offsets"], d["labels"], d["mode"], transform, storage)
    if kind in ("fashion_mnist", "mnist"):
        cls = datasets.FashionMNIST if kind == "fashion_mnist" else datasets.MNIST
        return cls(d["root"], train=d["train"], transform=transform, download=False)
    if kind == "webdataset":
        return shards_dataset(d, cfg["loader"]["shuffle"], transform, storage)
    if kind == "cifar10":
        return datasets.CIFAR10(d["root"], train=d["train"], transform=transform, download=False)
    if kind == "image_folder":
        mode = d.get("mode", "RGB")
        return datasets.ImageFolder(
            d["root"], transform=transform, loader=lambda p: pil_loader(p, mode, storage)
        )
    raise ValueError(f"dataset kind {kind!r} is not read by the pytorch engine")


def pil_loader(path, mode, storage=None):
    import io

    from PIL import Image

    with open(path, "rb") as f:
        if not storage:
            return Image.open(f).convert(mode)
        data = f.read()
    storage.transfer(len(data))
    return Image.open(io.BytesIO(data)).convert(mode)


# --- the step: the stand-in's emulated device -----------------------------------------------


class EmulatedDevice:
    """loaderlab's stand-in on the CPU, as the native engine runs it: the host copies the batch
    into device memory (h2d), then only enqueues the step; a device thread runs the steps in
    order on its own schedule (a step starts when enqueued or when the previous one ended,
    whichever is later, and ends step_ms later) and sleeps while busy, holding no core. The
    host's enqueue waits only when `depth` steps already wait behind the running one."""

    def __init__(self, step_ms, depth):
        self.step_s = step_ms / 1e3
        self.depth = depth
        self.cv = threading.Condition()
        self.queue = []
        self.enqueued = 0
        self.done = 0
        self.marks = []
        self.recording = False
        self.checksum = 0.0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        free_at = 0.0
        while True:
            with self.cv:
                while not self.queue and not self.stop:
                    self.cv.wait()
                if self.stop:
                    return
                images, labels, enqueued = self.queue[0]
            start = max(enqueued, free_at)
            # The device reads every byte of the batch (so the copy cannot be skipped).
            self.checksum += float(images.sum()) + float(labels.sum())
            end = start + self.step_s
            now = time.perf_counter()
            if end > now:
                time.sleep(end - now)
            free_at = end
            with self.cv:
                self.queue.pop(0)
                self.done += 1
                if self.recording:
                    self.marks.append((start, end))
                self.cv.notify_all()

    def enqueue(self, images, labels):
        with self.cv:
            while self.enqueued - self.done > self.depth:
                self.cv.wait()
            self.queue.append((images, labels, time.perf_counter()))
            self.enqueued += 1
            self.cv.notify_all()

    def synchronize(self):
        with self.cv:
            while self.done < self.enqueued:
                self.cv.wait()

    def record(self, on):
        with self.cv:
            self.recording = on
            if on:
                self.marks = []

    def close(self):
        with self.cv:
            self.stop = True
            self.cv.notify_all()


# What the host side's spin streams through (src/train/host.rs, HOST_BUFFER): 8 MiB, past a
# core's own caches, read 64 KiB at a time by a hash, which releases the GIL (CPython's hashlib
# does for 2 KiB or more), so the helpers spin on their own cores at once.
SPIN_BUFFER = memoryview(bytes(8 << 20))
SPIN_CHUNK = 64 << 10


def spin(seconds):
    """Spin until this thread has used `seconds` more of CPU time (its own CPU clock, as
    loaderlab's host side does), reading through SPIN_BUFFER as a real step's activations are
    read: it evicts what a worker beside it caches, as a real step does."""
    end = time.thread_time() + seconds
    at = 0
    while time.thread_time() < end:
        hashlib.blake2b(SPIN_BUFFER[at : at + SPIN_CHUNK])
        at = (at + SPIN_CHUNK) % len(SPIN_BUFFER)


class HostWork:
    """The stand-in's host side (`model.host_ms` on `model.host_threads` cores,
    src/train/host.rs): each step the training thread and `threads - 1` helpers each spin until
    their own thread has used `ms` more of CPU time, and the step goes on when all are done."""

    def __init__(self, ms, threads):
        self.s = max(0.0, ms) / 1e3
        self.threads = max(1, threads)
        self.helpers = []
        if self.s > 0 and self.threads > 1:
            self.start = threading.Barrier(self.threads)
            self.end = threading.Barrier(self.threads)
            for _ in range(self.threads - 1):
                helper = threading.Thread(target=self.help, daemon=True)
                helper.start()
                self.helpers.append(helper)

    def help(self):
        try:
            while True:
                self.start.wait()
                spin(self.s)
                self.end.wait()
        except threading.BrokenBarrierError:
            return

    def spend(self):
        if self.s <= 0:
            return
        if self.helpers:
            self.start.wait()
        spin(self.s)
        if self.helpers:
            self.end.wait()

    def close(self):
        if self.helpers:
            self.start.abort()
            self.end.abort()


class StandInStep:
    """loaderlab's stand-in step: its host side, then (unless `step_ms` is 0: the step is all
    host, synchronous as a CPU job's) its emulated device."""

    def __init__(self, step):
        self.host = HostWork(step.get("host_ms", 0.0), step.get("host_threads", 1))
        self.device = EmulatedDevice(step["step_ms"], step["queue_depth"]) if step["step_ms"] > 0 else None
        self.synchronous = self.device is None
        self.loss = None

    @property
    def marks(self):
        return self.device.marks if self.device else []

    def upload(self, images, labels):
        """The host's copy into the device's memory; all host, nothing to copy."""
        return host_copy(images, labels) if self.device else (images, labels)

    def enqueue(self, images, labels):
        self.host.spend()
        if self.device:
            self.device.enqueue(images, labels)

    def synchronize(self):
        if self.device:
            self.device.synchronize()

    def record(self, on):
        if self.device:
            self.device.record(on)

    def close(self):
        self.host.close()
        if self.device:
            self.device.close()


class NetworkStep:
    """A network of loaderlab's (its layer list, built by net/pytorch_model.py as `bench step`
    builds it) trained with the experiment's optimizer on the CPU. Synchronous, so the host's
    times are the device's; every run starts from the same initial weights and optimizer state."""

    synchronous = True

    def __init__(self, step, seed):
        import copy

        import torch

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import pytorch_model

        torch.set_num_threads(step["threads"])
        torch.manual_seed(seed)
        self.build = pytorch_model
        self.model = pytorch_model.build(step["layers"])
        self.initial = copy.deepcopy(self.model.state_dict())
        self.optimizer_settings = step["optimizer"]
        self.marks = []
        self.loss = None
        self.reset()

    def upload(self, images, labels):
        return host_copy(images, labels)

    def reset(self):
        self.model.load_state_dict(self.initial)
        self.optimizer = self.build.make_optimizer(self.model.parameters(), self.optimizer_settings)

    def enqueue(self, images, labels):
        """One training step on the batch: forward, loss, backward, the optimizer's step."""
        import torch.nn.functional as F

        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(images), labels)
        loss.backward()
        self.optimizer.step()
        self.loss = float(loss)

    def synchronize(self):
        pass

    def record(self, on):
        pass

    def close(self):
        pass


# --- what a run measures ---------------------------------------------------------------------


# The fingerprint reads this many of a batch's image values, evenly spaced, and every label.
FINGERPRINT_SAMPLE = 4096


def fingerprint(images, labels):
    """64 bits of the batch (this engine's own): its labels as int64 and FINGERPRINT_SAMPLE of
    its image values as float32, evenly spaced over the batch. A sample, not every byte: it runs
    on the training thread inside the timed window, where a user's loop does nothing like it
    (a full hash of a 256×3×224×224 batch costs tens of ms); two batches that differ anywhere
    but between the sampled values still differ here."""
    import torch

    flat = images.reshape(-1)
    stride = max(1, flat.numel() // FINGERPRINT_SAMPLE)
    h = hashlib.blake2b(digest_size=8)
    h.update(flat[::stride].to(dtype=torch.float32).contiguous().numpy().tobytes())
    h.update(labels.to(dtype=torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()


def cpu_s(pid):
    """User + system CPU seconds of process `pid` (/proc), 0 where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def peak_rss_mib(pids):
    """The peak resident memory of each process (VmHWM), summed over the tree, MiB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class Condition:
    def __init__(self, cfg):
        import torch

        self.cfg = cfg
        torch.manual_seed(cfg["seed"])
        self.dataset = clocked(dataset_of(cfg))
        step = cfg["step"]
        if step["kind"] == "network":
            self.device = NetworkStep(step, cfg["seed"])
        else:
            # The stand-in runs with the host side's threads as torch's intra-op threads (one
            # by default): the emulated device's read of a batch spawns no others.
            torch.set_num_threads(max(1, step.get("host_threads", 1)))
            self.device = StandInStep(step)
        self.torch = torch
        self.epoch = 0
        global RANK
        RANK = (0, cfg.get("ranks", 1))

    def loader(self):
        import torch
        from torch.utils.data import DataLoader

        lc = self.cfg["loader"]
        workers = lc["workers"]
        generator = torch.Generator()
        generator.manual_seed(self.cfg["seed"])
        extra = {}
        if workers > 0:
            extra = {"prefetch_factor": lc["prefetch_factor"], "persistent_workers": lc["persistent_workers"]}
        from torch.utils.data import default_collate

        user = self.cfg.get("user", {})
        collate = default_collate
        if user.get("collate_fn"):
            collate = load_user(user["collate_fn"], user["base"])
        extra["collate_fn"] = clocked_collate(collate)
        if user.get("worker_init_fn"):
            extra["worker_init_fn"] = load_user(user["worker_init_fn"], user["base"])
        from torch.utils.data import DistributedSampler, IterableDataset

        stream = isinstance(self.dataset, IterableDataset)
        rank, ranks = RANK
        if ranks > 1 and not stream:
            # This rank's share of every epoch, as a DDP job deals it.
            extra["sampler"] = DistributedSampler(
                self.dataset,
                num_replicas=ranks,
                rank=rank,
                shuffle=lc["shuffle"],
                seed=self.cfg["seed"],
                drop_last=lc["drop_last"],
            )
        return DataLoader(
            self.dataset,
            batch_size=lc["batch_size"],
            # A stream (WebDataset shards) shuffles itself: the DataLoader refuses a sampler.
            shuffle=lc["shuffle"] and not stream and "sampler" not in extra,
            num_workers=workers,
            pin_memory=lc["pin_memory"] and torch.cuda.is_available(),
            drop_last=lc["drop_last"],
            generator=generator,
            **extra,
        )

    def start(self):
        """A new DataLoader (every run draws the same random transform parameters: at 0 workers
        from this process's generator, with workers from the per-worker seeds the loader's own
        seeded generator hands out) and its first batch; its workers' start-up is timed to it."""
        self.torch.manual_seed(self.cfg["seed"])
        if isinstance(self.device, NetworkStep):
            self.device.reset()
        return Feed(self.loader())

    def warm_up(self, feed, steps):
        for _ in range(steps):
            self.device.enqueue(*self.device.upload(*feed.next()))
        self.device.synchronize()

    def run(self, warmup, timed):
        """One timed run: a new DataLoader, `warmup` untimed steps, then `timed` steps each on
        the monotonic clock."""
        device = self.device
        # Exactly one "started": Ctrl-C lands between any two bytecodes, so it is said outside
        # the guarded start.
        try:
            feed = self.start()
        except KeyboardInterrupt:
            feed = None
        say({"kind": "started", "startup_ms": feed.startup_ms if feed else 0.0})
        if feed is None:
            return interrupted_early()
        try:
            self.warm_up(feed, warmup)
        except KeyboardInterrupt:
            return interrupted_early()
        workers = feed.worker_pids()
        me = os.getpid()
        cpu0 = {pid: cpu_s(pid) for pid in workers}
        main0 = time.process_time()
        rows = []
        interrupted = False
        device.record(True)
        window = time.perf_counter()
        try:
            for step in range(timed):
                rows.append(self.timed_step(feed, step))
        except KeyboardInterrupt:
            interrupted = True
        device.synchronize()
        elapsed_s = time.perf_counter() - window
        device.record(False)
        main_cpu = time.process_time() - main0
        workers_cpu = sum(cpu_s(pid) - cpu0.get(pid, 0.0) for pid in workers)
        peak = peak_rss_mib([me] + workers)
        for row, (start, end) in zip(rows, device.marks):
            row["device_ms"] = (end - start) * 1e3
        images = sum(row.pop("images") for row in rows)
        for row in rows:
            say({"kind": "step", **row})
        say(
            {
                "kind": "done",
                "elapsed_s": elapsed_s,
                "images": images,
                "process_cpu_s": main_cpu + workers_cpu,
                "workers_cpu_s": workers_cpu,
                "training_cpu_s": main_cpu,
                "peak_rss_mib": peak,
                "interrupted": interrupted,
            }
        )

    def timed_step(self, feed, step):
        """One timed step on the monotonic clock: its steps.csv row (`images` for the total)."""
        device = self.device
        t0 = time.perf_counter()
        images, labels = feed.next()
        t1 = time.perf_counter()
        on_device = device.upload(images, labels)
        t2 = time.perf_counter()
        device.enqueue(*on_device)
        t3 = time.perf_counter()
        return {
            "step": step,
            # A synchronous step (a network's, a stand-in's that is all host): the device's
            # time is the host's.
            "device_ms": (t3 - t1) * 1e3 if device.synchronous else None,
            "loss": device.loss,
            "batch_wait_ms": (t1 - t0) * 1e3,
            "h2d_ms": (t2 - t1) * 1e3,
            "compute_ms": (t3 - t2) * 1e3,
            "step_ms": (t3 - t0) * 1e3,
            "fingerprint": fingerprint(images, labels),
            "epoch": feed.epoch,
            "images": int(labels.shape[0]),
        }

    def run_ranks(self, warmup, timed):
        """A timed run of a node (`[distributed] ranks = R`): a process per rank, as torchrun
        starts them, each with its own DataLoader (its own workers, over its DistributedSampler
        share of every epoch) and its own emulated device, meeting at a barrier after every step
        — the stand-in for the gradient all-reduce; the wait there is the step's `sync_ms`,
        inside its `step_ms`. The window runs from the ranks' common start to every rank's
        device having finished; images, CPU time and peak memory count every rank's processes.
        Ctrl-C here is decided at the barrier, so every rank stops after the same step."""
        import functools
        import multiprocessing as mp

        # Each rank starts from a fork server, a clean process with torch imported and no thread
        # pool run yet (a process forked from this one after torch's threads ran would hang in
        # its first parallel op), and builds the condition from the same description.
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torchvision.transforms", "PIL.Image"])
        ranks = RANK[1]
        stop, decided = ctx.Value("b", 0), ctx.Value("b", 0)
        barrier = ctx.Barrier(ranks, action=functools.partial(decide, stop, decided))
        results = ctx.Queue()
        procs = [
            ctx.Process(target=rank_entry, args=(self.cfg, r, warmup, timed, barrier, decided, results))
            for r in range(ranks)
        ]
        for proc in procs:
            proc.start()
        started, done, rows, errors = [], [], [], []
        # Until every rank has answered (done or failed); a rank that dies unanswered (killed)
        # is a failure too, and any failure releases the others from the barrier.
        while len(done) + len(errors) < ranks:
            try:
                kind, payload = results.get(timeout=1.0)
            except KeyboardInterrupt:
                stop.value = 1
                continue
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead and not errors:
                    errors.append(f"rank {dead[0]} ended with exit status {procs[dead[0]].exitcode}")
                    barrier.abort()
                if dead and all(p.exitcode is not None for p in procs):
                    break
                continue
            if kind == "started":
                started.append(payload)
                if len(started) == ranks:
                    say({"kind": "started", "startup_ms": max(started)})
            elif kind == "step":
                rows.append(payload)
            elif kind == "done":
                done.append(payload)
            else:
                errors.append(payload)
                barrier.abort()
        for proc in procs:
            proc.join(timeout=None if not errors else 5)
            if proc.is_alive():
                proc.kill()
        if errors:
            # The rank that failed first, not one the broken barrier released.
            first = [e for e in errors if "BrokenBarrierError" not in e] or errors
            raise RuntimeError(first[0])
        images = sum(row.pop("images") for row in rows)
        for row in sorted(rows, key=lambda r: (r["step"], r["rank"])):
            say({"kind": "step", **row})
        training = sum(d["training_cpu_s"] for d in done)
        workers = sum(d["workers_cpu_s"] for d in done)
        say(
            {
                "kind": "done",
                "elapsed_s": max(d["elapsed_s"] for d in done),
                "images": images,
                "process_cpu_s": training + workers,
                "workers_cpu_s": workers,
                "training_cpu_s": training,
                "peak_rss_mib": sum(d["peak_rss_mib"] for d in done),
                "interrupted": bool(decided.value) or any(d["interrupted"] for d in done),
            }
        )

    def rank_main(self, rank, warmup, timed, barrier, decided, results):
        """Rank `rank`'s part of [`run_ranks`], in its own process."""
        try:
            feed = self.start()
            results.put(("started", feed.startup_ms))
            for _ in range(warmup):
                self.device.enqueue(*self.device.upload(*feed.next()))
                barrier.wait()
                if decided.value:
                    break
            self.device.synchronize()
            barrier.wait()
            workers, me = feed.worker_pids(), os.getpid()
            cpu0 = {pid: cpu_s(pid) for pid in workers}
            main0 = time.process_time()
            self.device.record(True)
            window = time.perf_counter()
            rows = []
            for k in range(timed):
                if decided.value:
                    break
                row = self.timed_step(feed, k)
                arrived = time.perf_counter()
                barrier.wait()
                row["sync_ms"] = (time.perf_counter() - arrived) * 1e3
                row["step_ms"] += row["sync_ms"]
                row["rank"] = rank
                rows.append(row)
            self.device.synchronize()
            # The window closes when every rank's device has finished.
            barrier.wait()
            elapsed_s = time.perf_counter() - window
            self.device.record(False)
            for row, (start, end) in zip(rows, self.device.marks):
                row["device_ms"] = (end - start) * 1e3
            for row in rows:
                results.put(("step", row))
            results.put(
                (
                    "done",
                    {
                        "elapsed_s": elapsed_s,
                        "training_cpu_s": time.process_time() - main0,
                        "workers_cpu_s": sum(cpu_s(pid) - cpu0.get(pid, 0.0) for pid in workers),
                        "peak_rss_mib": peak_rss_mib([me] + workers),
                        "interrupted": bool(decided.value),
                    },
                )
            )
            self.device.close()
        except Exception as exc:  # noqa: BLE001 - the launcher says it, with the traceback
            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
            results.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}\n{tail}"))
            barrier.abort()
        results.close()
        results.join_thread()

    def profile(self, warmup, steps, path):
        """The profiled run: separate from the timed ones, `steps` steps under torch.profiler
        with the seed's record_function spans (at 0 workers the batch's build inside batch_wait
        as build_batch: the loader's work on one thread), the Chrome trace written to `path`.
        Its stage clocks (each op per image, the item's whole fetch, the collate, and with
        workers the hand-off: from the later of a worker's batch being ready and this loop
        asking for it, to this loop holding it — the trip through the queue, less any time the
        batch sat ready in it before the loop asked) come back with it."""
        global CLOCKS
        # The clocks run for the whole profiled run: at 0 workers the batches are built here;
        # with workers, the workers started now carry them.
        CLOCKS = True
        try:
            self.clocked_profile(warmup, steps, path)
        finally:
            CLOCKS = False

    def clocked_profile(self, warmup, steps, path):
        from torch.profiler import ProfilerActivity, profile, record_function, schedule

        device = self.device
        inline = self.cfg["loader"]["workers"] == 0
        feed = self.start()
        stages, handoff = {}, [0, 0]

        def take(counted):
            asked_ns = time.perf_counter_ns()
            batch, ready_ns, clocks = feed.next()
            if counted:
                if not inline:
                    handoff[0] += 1
                    handoff[1] += time.perf_counter_ns() - max(ready_ns, asked_ns)
                for name, v in clocks.items():
                    entry = stages.setdefault(name, [0, 0, 0])
                    for k in range(3):
                        entry[k] += v[k]
            return batch

        # At 0 workers the warm-up's batches are built on this thread: their build times,
        # outside the profiler (whose per-operator recording slows a build by tens of percent),
        # are the loader's work per batch on one thread. The first batch was taken as the
        # loader started (its start-up): not a timed build.
        builds = []
        if feed.pending and warmup > 0:
            device.enqueue(*device.upload(*take(False)))
            warmup -= 1
        for _ in range(warmup):
            t0 = time.perf_counter()
            batch = take(True)
            builds.append(time.perf_counter() - t0)
            device.enqueue(*device.upload(*batch))
        device.synchronize()
        # A schedule, as a user's own profiling has, so the trace marks each step with
        # ProfilerStep#N (what `loaderlab diagnose` reads): one step of the profiler's warm-up
        # (recorded by no one), then `steps` recorded ones, written as the last one ends.
        when = schedule(wait=0, warmup=1, active=steps, repeat=1)
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=when,
            on_trace_ready=lambda p: p.export_chrome_trace(path),
        ) as prof:
            for i in range(steps + 1):
                # The profiler records this process's operators: at 0 workers the builds under
                # it are slowed, so only the warm-up's clocks count; workers build unrecorded.
                with record_function("batch_wait"):
                    if inline:
                        with record_function("build_batch"):
                            images, labels = take(False)
                    else:
                        images, labels = take(True)
                with record_function("h2d_transfer"):
                    on_device = device.upload(images, labels)
                with record_function("forward_backward_adam"):
                    device.enqueue(*on_device)
                # The device's queue drains inside the last recorded step.
                if i == steps:
                    device.synchronize()
                prof.step()
        keep_spans(path)
        item, collate = stages.pop("item", [0, 0, 0]), stages.pop("collate", [0, 0, 0])
        ops = [{"name": k, "count": v[0], "ns": v[1]} for k, v in stages.items()]
        # The item's fetch less its ops: reading and decoding.
        read_ns = max(0, item[1] - sum(o["ns"] for o in ops))
        clocks = [{"name": "read_decode", "count": item[0], "ns": read_ns}] + ops
        clocks.append({"name": "collate", "count": collate[0], "ns": collate[1]})
        say(
            {
                "kind": "profiled",
                "startup_ms": feed.startup_ms,
                # At 0 workers the build as this thread saw it; with workers, a worker's own
                # work per batch (its items and the collate) on its clocks.
                "build_ns": int(sum(builds) * 1e9) if inline else item[1] + collate[1],
                "batches": len(builds) if inline else collate[0],
                # The build's time on a CPU, over the wall time of the same clocks (the items
                # and the collate): what is asleep in them (a Dataset waiting for storage)
                # stretches the worker cap.
                "clocked_ns": item[1] + collate[1],
                "clocked_cpu_ns": item[2] + collate[2],
                "stages": clocks if item[0] else [],
                "handoff_batches": handoff[0],
                "handoff_ns": handoff[1],
            }
        )


def keep_spans(path):
    """The trace without its per-operator events (category cpu_op: every aten call of every
    sample's transforms, tens of MB at batch 256): the steps, the record_function spans and the
    DataLoader's own spans stay, which is what Perfetto and loaderlab read of it."""
    with open(path) as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace.get("traceEvents", []) if e.get("cat") != "cpu_op"]
    with open(path, "w") as f:
        json.dump(trace, f)


def interrupted_early():
    """Ctrl-C before the timed window: a run with no steps, marked interrupted."""
    say(
        {
            "kind": "done",
            "elapsed_s": 0.0,
            "images": 0,
            "process_cpu_s": 0.0,
            "workers_cpu_s": 0.0,
            "training_cpu_s": 0.0,
            "peak_rss_mib": 0.0,
            "interrupted": True,
        }
    )


def decide(stop, decided):
    """The ranks' barrier's action, run once all have arrived: whether they all stop here."""
    decided.value = stop.value


def rank_entry(cfg, rank, warmup, timed, barrier, decided, results):
    """A rank's process (`[distributed] ranks`): the condition built afresh, this rank's share."""
    global RANK

    import multiprocessing as mp

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The rank's DataLoader forks its workers, as on a node torchrun started (a process the fork
    # server started has the fork server as its default).
    mp.set_start_method("fork", force=True)
    # One intra-op thread per rank, as torchrun sets OMP_NUM_THREADS=1 for several processes
    # per node.
    __import__("torch").set_num_threads(1)
    try:
        cond = Condition(cfg)
    except Exception as exc:  # noqa: BLE001 - the launcher says it, with the traceback
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
        results.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}\n{tail}"))
        barrier.abort()
        return
    RANK = (rank, RANK[1])
    cond.rank_main(rank, warmup, timed, barrier, decided, results)


def host_copy(images, labels):
    """The host's copy of a batch into the emulated device's memory."""
    return images.clone(), labels.clone()


class Feed:
    """One DataLoader's batches across epochs, its first one taken at once (time to the first
    batch: the workers' start-up)."""

    def __init__(self, loader):
        self.loader = loader
        started = time.perf_counter()
        self.it = iter(loader)
        self.pending = [next(self.it)]
        self.startup_ms = (time.perf_counter() - started) * 1e3
        self.epoch = 0

    def next(self):
        if self.pending:
            return self.pending.pop()
        try:
            return next(self.it)
        except StopIteration:
            self.epoch += 1
            if hasattr(self.loader.sampler, "set_epoch"):
                self.loader.sampler.set_epoch(self.epoch)
            self.it = iter(self.loader)
            return next(self.it)

    def worker_pids(self):
        return [w.pid for w in getattr(self.it, "_workers", [])]


HEADROOM_BATCHES, HEADROOM_SEGMENTS, HEADROOM_WARMUP = 4, 3, 3


def headroom(cond, steps):
    """The step on batches built once and already in the emulated device's memory, replayed with
    no loader running (the native engine's headroom run, src/runner/headroom.rs): the ceiling."""
    device = cond.device
    loader = cond.loader()
    it = iter(loader)
    batches = [next(it) for _ in range(max(1, min(steps, HEADROOM_BATCHES)))]
    on_device = [device.upload(x, y) for x, y in batches]
    # The loader stops: the replay must not share the cores with its workers.
    del it, loader, batches
    for k in range(HEADROOM_WARMUP):
        device.enqueue(*on_device[k % len(on_device)])
    device.synchronize()
    step_ms, segments, images, k = [], [], 0, 0
    window = time.perf_counter()
    count = min(HEADROOM_SEGMENTS, steps)
    for segment in range(count):
        end = steps * (segment + 1) // count
        start, first_k, first_images = time.perf_counter(), k, images
        while k < end:
            x, y = on_device[k % len(on_device)]
            t0 = time.perf_counter()
            device.enqueue(x, y)
            step_ms.append((time.perf_counter() - t0) * 1e3)
            images += int(y.shape[0])
            k += 1
        device.synchronize()
        segments.append([end - first_k, images - first_images, time.perf_counter() - start])
    say(
        {
            "kind": "headroom",
            "batches": len(on_device),
            "steps": steps,
            "images": images,
            "elapsed_s": time.perf_counter() - window,
            "step_ms": step_ms,
            "segments": segments,
        }
    )


def check_items(dataset, where, items):
    """The user's Dataset must give (image tensor, label); where a network was built for its
    items (`[pytorch] image_shape`, `classes`), a float tensor of that shape and a label below
    `classes`."""
    import torch

    item = dataset[0]
    if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], torch.Tensor)):
        raise TypeError(f"{where}: items must be (image tensor, label), item 0 is {type(item).__name__}")
    if not items:
        return
    image, label = item
    if list(image.shape) != items["shape"] or not image.is_floating_point():
        raise TypeError(
            f"{where}: the network was built for float image tensors of shape {items['shape']} "
            f"([pytorch] image_shape); item 0's is {list(image.shape)}, {image.dtype}"
        )
    if not 0 <= int(label) < items["classes"]:
        raise ValueError(
            f"{where}: item 0's label {int(label)} is not below [pytorch] classes = {items['classes']}"
        )


def main():
    try:
        say({"kind": "ready", "protocol": PROTOCOL, **versions()})
    except Exception as exc:  # noqa: BLE001 - any import failure is the answer
        fail("import torch, torchvision", exc)
        return 2
    if len(sys.argv) > 1 and sys.argv[1] == "--versions":
        return 0
    cfg = json.loads(sys.stdin.readline())
    where = cfg["dataset"].get("function") or f"dataset {cfg['dataset']['kind']}"
    try:
        cond = Condition(cfg)
        if cfg["dataset"]["kind"] == "user":
            check_items(cond.dataset, where, cfg["dataset"].get("items"))
    except Exception as exc:  # noqa: BLE001
        fail(where, exc)
        return 1
    say({"kind": "prepared", "len": len(cond.dataset)})
    # Ctrl-C reaches this process too (loaderlab passes it on): between commands it only
    # means that loaderlab is stopping, which it says with its next command or by closing stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        try:
            if cmd["cmd"] == "headroom":
                headroom(cond, cmd["steps"])
            elif cmd["cmd"] == "profile":
                cond.profile(cmd["warmup"], cmd["steps"], cmd["trace"])
            elif RANK[1] > 1:
                cond.run_ranks(cmd["warmup"], cmd["timed"])
            else:
                cond.run(cmd["warmup"], cmd["timed"])
        except Exception as exc:  # noqa: BLE001
            fail(where, exc)
            return 1
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    cond.device.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
