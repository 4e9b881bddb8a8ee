"""loaderlab.Loader as a drop-in for torch.utils.data.DataLoader: the user's torchvision dataset
object and Compose, DataLoader's names and defaults, the translation proven op by op.

Run: `bash scripts/test-python.sh` (builds the module into target/venv, then runs pytest).
"""

import hashlib
from pathlib import Path
import re

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.v2 as v2
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler

import loaderlab
from loaderlab import TranslationError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# Deterministic: the same tensors from both loaders, in the same order.
FIXED = [T.Resize(20), T.CenterCrop(16), T.ToTensor(), T.Normalize(MEAN, STD)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """40 RGB PNG images of two sizes in 3 class folders (14, 13, 13)."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(3)
    for i in range(40):
        folder = root / f"c{i % 3}"
        folder.mkdir(exist_ok=True)
        size = (30, 26) if i % 2 else (24, 36)
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:03d}.png")
    return root


def folder(root, chain):
    return torchvision.datasets.ImageFolder(str(root), transform=T.Compose(chain))


def items(batches):
    """Each sample of `batches` as (label, digest of its tensor)."""
    out = []
    for x, y in batches:
        for image, label in zip(x, y):
            out.append((int(label), hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()))
    return out


def assert_same_batches(ours, theirs, tolerance=0.0):
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs)
    for (x, y), (tx, ty) in zip(ours, theirs):
        assert x.shape == tx.shape and x.dtype == tx.dtype
        assert torch.equal(y, ty)
        assert float((x - tx).abs().max()) <= tolerance


@pytest.mark.parametrize("workers", [0, 2])
def test_a_deterministic_chain_gives_the_dataloaders_tensors(root, workers):
    ds = folder(root, FIXED)
    loader = loaderlab.Loader(ds, batch_size=8, num_workers=workers)
    report = loader.check(n=8)
    assert report.passed, str(report)
    # Resize is the one op whose torchvision form may round differently: check states its bound.
    assert_same_batches(loader, DataLoader(ds, batch_size=8), tolerance=1 / 255 / min(STD))


def test_with_no_argument_it_yields_every_sample_in_order_one_at_a_time(root):
    ds = folder(root, FIXED)
    loader = loaderlab.Loader(ds)
    assert (loader.batch_size, loader.num_workers, loader.dataset) == (1, 0, ds)
    batches = list(loader)
    assert len(loader) == len(batches) == len(ds) == 40
    assert all(x.shape == (1, 3, 16, 16) for x, _ in batches)
    assert [int(y) for _, y in batches] == ds.targets


@pytest.mark.parametrize("batch_size", [3, 8, 40, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_and_drop_last_are_the_dataloaders(root, batch_size, drop_last):
    ds = folder(root, FIXED)
    ours = loaderlab.Loader(ds, batch_size=batch_size, drop_last=drop_last)
    theirs = DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert [len(y) for _, y in ours] == [len(y) for _, y in theirs]


def test_shuffle_and_num_workers_as_the_dataloader(root):
    ds = folder(root, FIXED)
    in_order = items(loaderlab.Loader(ds, batch_size=8))
    loader = loaderlab.Loader(ds, batch_size=8, shuffle=True, seed=11)
    first, second = items(loader), items(loader)
    # Each pass a permutation of the whole set, each epoch its own.
    assert sorted(first) == sorted(second) == sorted(in_order)
    assert first != in_order and second != first
    # The same epochs at any worker count.
    workers = loaderlab.Loader(ds, batch_size=8, shuffle=True, seed=11, num_workers=2)
    assert (items(workers), items(workers)) == (first, second)
    # The seed drawn from torch's generator, as a DataLoader's: torch.manual_seed repeats it.
    torch.manual_seed(4)
    a = items(loaderlab.Loader(ds, batch_size=8, shuffle=True))
    torch.manual_seed(4)
    assert items(loaderlab.Loader(ds, batch_size=8, shuffle=True)) == a
    g = torch.Generator().manual_seed(4)
    assert items(loaderlab.Loader(ds, batch_size=8, shuffle=True, generator=g)) != first


def worker_threads():
    """This process's loader worker threads, by name."""
    return sorted(
        p.read_text().strip() for p in Path("/proc/self/task").glob("*/comm") if "worker" in p.read_text()
    )


@pytest.mark.parametrize("persistent", [True, False])
def test_a_finished_pass_hands_its_loader_to_the_next(root, persistent):
    ds = folder(root, FIXED)
    args = dict(batch_size=8, shuffle=True, seed=5, num_workers=2, persistent_workers=persistent)
    loader = loaderlab.Loader(ds, **args)
    epochs = []
    for _ in range(3):
        batches = list(loader)
        epochs.append(items(batches))
        if persistent:
            # Its workers live on between epochs, as a DataLoader's persistent workers.
            assert len(worker_threads()) == 2, worker_threads()
        del batches
    # Each epoch the batches of a fresh loader set to it, break or not.
    for e in range(3):
        fresh = loaderlab.Loader(ds, **args)
        fresh.set_epoch(e)
        assert items(fresh) == epochs[e]
        fresh.close()
    # A pass left early: the next pass starts its own epoch from its first batch.
    it = iter(loader)
    next(it)
    del it
    fresh = loaderlab.Loader(ds, **args)
    fresh.set_epoch(4)
    assert items(loader) == items(fresh)
    loader.close()
    fresh.close()
    assert not worker_threads()


def test_two_live_iterators_each_see_a_whole_epoch(root):
    ds = folder(root, FIXED)
    loader = loaderlab.Loader(ds, batch_size=4, num_workers=2)
    one = iter(loader)
    seen_one = [next(one)]
    two = iter(loader)
    seen_two = []
    for a, b in zip(one, two):
        seen_one.append(a)
        seen_two.append(b)
    seen_one += list(one)
    seen_two += list(two)
    assert sorted(items(seen_one)) == sorted(items(seen_two))
    assert len(items(seen_one)) == 40


def test_a_distributed_sampler_gives_each_rank_its_disjoint_share(root):
    ds = folder(root, FIXED)
    shares = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=False)
        ours = items(loaderlab.Loader(ds, batch_size=5, sampler=sampler))
        assert ours == items(DataLoader(ds, batch_size=5, sampler=sampler))
        shares.append(ours)
    assert len(shares[0]) == len(shares[1]) == 20
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == sorted(items(loaderlab.Loader(ds, batch_size=5)))
    # rank= and world_size= say the same without a sampler.
    assert items(loaderlab.Loader(ds, batch_size=5, rank=1, world_size=2, seed=1)) == shares[1]
    with pytest.raises(ValueError, match="seed="):
        loaderlab.Loader(ds, rank=1, world_size=2)
    # Each rank with a shuffling sampler of its own, as a DDP job builds them: still disjoint.
    shuffled = [
        items(
            loaderlab.Loader(ds, batch_size=5, sampler=DistributedSampler(ds, num_replicas=2, rank=r, seed=8))
        )
        for r in range(2)
    ]
    assert not set(shuffled[0]) & set(shuffled[1])
    assert sorted(shuffled[0] + shuffled[1]) == sorted(shares[0] + shares[1])
    # set_epoch through the sampler: the epoch's own order, the same on a second loader.
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = loaderlab.Loader(ds, batch_size=5, sampler=sampler)
    sampler.set_epoch(3)
    third = items(loader)
    sampler.set_epoch(1)
    first = items(loader)
    assert first != third and sorted(first) != sorted(third)
    sampler.set_epoch(3)
    assert items(loaderlab.Loader(ds, batch_size=5, sampler=sampler)) == third


EVERY_OP = [
    T.RandomResizedCrop(24, scale=(0.5, 1.0), ratio=(0.8, 1.25)),
    T.RandomCrop(20, padding=2, fill=9),
    T.RandomHorizontalFlip(),
    T.RandomVerticalFlip(p=0.3),
    T.RandomRotation(20, fill=40),
    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.RandomGrayscale(p=0.5),
    T.CenterCrop(18),
    T.Resize((14, 12)),
    T.ToTensor(),
    T.Normalize(MEAN, STD),
]


@pytest.mark.parametrize(
    "chain",
    [
        EVERY_OP,
        [
            T.Resize(22, max_size=30),
            T.Grayscale(num_output_channels=1),
            T.RandomCrop(30, pad_if_needed=True, padding_mode="reflect"),
            T.ToTensor(),
        ],
        [T.CenterCrop(22), T.Grayscale(num_output_channels=3), T.RandomRotation(30), T.ToTensor()],
    ],
    ids=["every-op", "grayscale-1", "grayscale-3"],
)
def test_check_passes_on_every_supported_op(root, chain):
    loader = loaderlab.Loader(folder(root, chain), batch_size=8, num_workers=2)
    report = loader.check(n=24)
    assert report.passed, str(report)
    assert report.images == 24
    ops = [o.op for o in report.ops]
    assert len(ops) == len(chain) - sum(type(t).__name__ == "Normalize" for t in chain)
    # The batches come, in the chain's shape.
    x, _ = next(iter(loader))
    assert x.dtype == torch.float32 and x.shape[0] == 8


@pytest.mark.parametrize(
    "plant, op",
    [
        (lambda c: setattr(c[4], "fill", 200), "random_rotation"),
        (lambda c: setattr(c[1], "padding_mode", "edge"), "random_crop"),
        (lambda c: setattr(c[8], "size", [14, 13]), "resize"),
        (lambda c: setattr(c[10], "mean", (0.5, 0.5, 0.5)), "to_tensor + normalize"),
    ],
    ids=["rotation-fill", "crop-padding-mode", "resize-size", "normalize-mean"],
)
def test_check_fails_naming_the_op_a_parameter_was_planted_wrong_in(root, plant, op):
    chain = [type(t)(**vars_of(t)) for t in EVERY_OP]
    loader = loaderlab.Loader(folder(root, chain), batch_size=8)
    # Changed after the translation: loaderlab runs the old value, torchvision's form the new.
    plant(chain)
    report = loader.check(n=16)
    assert not report.passed
    assert op in report.failed and len(report.failed) == 1, str(report)
    assert f"FAILED: {op} differ" in str(report)


def vars_of(t):
    """A transform's constructor arguments, to build a fresh copy of it."""
    import inspect

    names = inspect.signature(type(t)).parameters
    return {k: getattr(t, k) for k in names if hasattr(t, k)}


class Invert:
    def __call__(self, img):
        return img


@pytest.mark.parametrize(
    "chain, named",
    [
        ([T.Resize(20), T.Lambda(lambda x: x), T.ToTensor()], r"transform 1 of the Compose, Lambda"),
        ([T.CenterCrop(16), T.ToTensor(), Invert()], r"transform 2 of the Compose, Invert"),
        (
            [T.RandomRotation(15, expand=True), T.ToTensor()],
            r"transform 0 of the Compose, RandomRotation: expand=True",
        ),
        (
            [T.Resize(20, interpolation=T.InterpolationMode.BICUBIC), T.ToTensor()],
            r"transform 0 of the Compose, Resize: interpolation=bicubic",
        ),
        ([T.GaussianBlur(3), T.ToTensor()], r"transform 0 of the Compose, GaussianBlur"),
        ([T.Resize(20)], r"ends without ToTensor"),
    ],
    ids=["lambda", "user-class", "expand", "bicubic", "unsupported-op", "no-tensor"],
)
def test_what_loaderlab_does_not_run_exactly_is_refused_named(root, chain, named):
    with pytest.raises(TranslationError, match=named) as refused:
        loaderlab.Loader(folder(root, chain))
    assert "pytorch engine runs any Dataset" in str(refused.value)


def test_a_target_transform_a_custom_getitem_and_dataloaders_own_arguments_are_refused(root):
    ds = torchvision.datasets.ImageFolder(str(root), transform=T.ToTensor(), target_transform=int)
    with pytest.raises(TranslationError, match="target_transform"):
        loaderlab.Loader(ds)

    class Mine(torchvision.datasets.ImageFolder):
        def __getitem__(self, i):
            return super().__getitem__(i)

    with pytest.raises(TranslationError, match="Mine: its own __getitem__"):
        loaderlab.Loader(Mine(str(root), transform=T.ToTensor()))
    with pytest.raises(ValueError, match="collate_fn"):
        loaderlab.Loader(folder(root, FIXED), collate_fn=lambda b: b)
    # The value meaning "none of it" is DataLoader's default, and accepted.
    assert len(loaderlab.Loader(folder(root, FIXED), batch_size=4, collate_fn=None, timeout=0)) == 10


def test_the_v2_spellings_are_read(root):
    v1 = loaderlab.Loader(
        folder(
            root, [T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
        ),
        batch_size=8,
        seed=2,
    )
    chain = [
        v2.RandomResizedCrop(16),
        v2.RandomHorizontalFlip(),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
    ds = torchvision.datasets.ImageFolder(str(root), transform=v2.Compose(chain))
    ours = loaderlab.Loader(ds, batch_size=8, seed=2)
    assert ours._translated.transforms == v1._translated.transforms
    assert items(ours) == items(v1)
    assert ours.check(n=8).passed
    # A deterministic v2 chain: the DataLoader's tensors.
    fixed = [v2.Resize(20), v2.CenterCrop(16), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    ds = torchvision.datasets.ImageFolder(str(root), transform=v2.Compose(fixed))
    assert_same_batches(loaderlab.Loader(ds, batch_size=8), DataLoader(ds, batch_size=8), tolerance=1 / 255)


def test_repr_shows_each_transform_beside_the_op_it_became(root):
    text = repr(loaderlab.Loader(folder(root, EVERY_OP[:5] + [T.ToTensor()]), batch_size=8))
    assert text.startswith("loaderlab.Loader(batch_size=8, shuffle=False, num_workers=0,")
    assert re.search(
        r"RandomRotation\(degrees=\[-20\.0, 20\.0\].*fill=40\)\s+->  random_rotation\(degrees=20\.0, fill=40\)",
        text,
    ), text
    assert re.search(
        r"RandomCrop\(size=\(20, 20\), padding=2\)\s+->  random_crop\(size=\[20, 20\], padding=\[2\]", text
    ), text
    assert re.search(r"ToTensor\s+->  to_tensor", text), text


def idx(path, magic, dims, data):
    with open(path, "wb") as f:
        f.write(magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + data.tobytes())


def test_fashion_mnist_and_cifar10_objects_work(tmp_path):
    rng = np.random.default_rng(5)
    # FashionMNIST's test split as torchvision lays it out: root/FashionMNIST/raw, uncompressed.
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    images = rng.integers(0, 256, (10_000, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 10_000, dtype=np.uint8)
    idx(raw / "t10k-images-idx3-ubyte", 2051, [10_000, 28, 28], images)
    idx(raw / "t10k-labels-idx1-ubyte", 2049, [10_000], labels)
    # torchvision asks for the train files too, even for the test split.
    idx(raw / "train-images-idx3-ubyte", 2051, [1, 28, 28], images[:1])
    idx(raw / "train-labels-idx1-ubyte", 2049, [1], labels[:1])
    ds = torchvision.datasets.FashionMNIST(str(tmp_path), train=False, transform=T.ToTensor())
    ours = loaderlab.Loader(ds, batch_size=500, num_workers=2)
    assert len(ours) == 20
    assert_same_batches(ours, DataLoader(ds, batch_size=500))
    seed = torchvision.datasets.FashionMNIST(
        str(tmp_path),
        train=False,
        transform=T.Compose([T.RandomResizedCrop(28, scale=(0.75, 1.0)), T.RandomRotation(15), T.ToTensor()]),
    )
    assert loaderlab.Loader(seed, batch_size=256).check(n=32).passed

    # CIFAR10 as torchvision holds it (its pixels in memory), built without its download.
    cifar = torchvision.datasets.CIFAR10.__new__(torchvision.datasets.CIFAR10)
    cifar.root, cifar.train = str(tmp_path), False
    cifar.data = rng.integers(0, 256, (10_000, 32, 32, 3), dtype=np.uint8)
    cifar.targets = [int(v) for v in rng.integers(0, 10, 10_000)]
    cifar.classes = [f"class{k}" for k in range(10)]
    cifar.transform = T.Compose([T.CenterCrop(30), T.ToTensor(), T.Normalize(MEAN, STD)])
    cifar.target_transform = None
    ours = loaderlab.Loader(cifar, batch_size=1000)
    assert_same_batches(ours, DataLoader(cifar, batch_size=1000), tolerance=1e-6)


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"


def test_the_examples_differ_by_the_one_line_and_both_train(tmp_path):
    import difflib
    import subprocess
    import sys

    theirs = (EXAMPLES / "seed_dataloader.py").read_text().splitlines()
    ours = (EXAMPLES / "seed_loaderlab.py").read_text().splitlines()
    # Past the docstring: the import and the loader's line, nothing else.
    body = lambda lines: lines[lines.index('"""', 1) + 1 :]  # noqa: E731
    changed = [
        d
        for d in difflib.unified_diff(body(theirs), body(ours), lineterm="", n=0)
        if d[:1] in "+-" and d[:3] not in ("+++", "---")
    ]
    assert changed == [
        "-from torch.utils.data import DataLoader",
        "+import loaderlab",
        "-    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=args.workers, drop_last=True)",
        "+    loader = loaderlab.Loader(dataset, batch_size=256, shuffle=True, num_workers=args.workers, drop_last=True)",
    ], changed
    for name in ("seed_dataloader", "seed_loaderlab"):
        args = [
            str(EXAMPLES / f"{name}.py"),
            "--fake",
            "--root",
            str(tmp_path),
            "--workers",
            "2",
            "--steps",
            "3",
        ]
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("3 steps, "), done.stdout


def test_check_transforms_checks_an_experiments_chain(tmp_path):
    import subprocess
    import sys

    file = tmp_path / "chain.toml"
    file.write_text(
        '[loader]\nbatch_size = 16\n\n[dataset]\nkind = "synthetic"\nsynthetic_size = 64\nchannels = 3\nsize = [40, 36]\n\n'
        '[[transforms]]\nop = "random_resized_crop"\nsize = 24\n\n'
        '[[transforms]]\nop = "random_horizontal_flip"\n\n'
        '[[transforms]]\nop = "color_jitter"\nbrightness = 0.3\nhue = 0.05\n\n'
        '[[transforms]]\nop = "to_tensor"\n\n'
        '[[transforms]]\nop = "normalize"\nmean = [0.5, 0.5, 0.5]\nstd = [0.2, 0.2, 0.2]\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "loaderlab", "check-transforms", str(file), "-n", "12"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on 12 images" in done.stdout and done.stdout.rstrip().endswith("passed")
    for op in ("random_resized_crop", "random_horizontal_flip", "color_jitter", "to_tensor + normalize"):
        assert op in done.stdout
    # The Rust binary's form hands over to this interpreter (built by `cargo test`, which CI
    # runs before these tests).
    binary = EXAMPLES.parent / "target" / "debug" / "loaderlab"
    if binary.exists():
        import os

        env = {**os.environ, "LOADERLAB_PYTHON": sys.executable}
        done = subprocess.run(
            [binary, "check-transforms", str(file), "-n", "4"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "on 4 images" in done.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "loaderlab", "check-transforms", str(tmp_path / "none.toml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and "none.toml" in missing.stderr
