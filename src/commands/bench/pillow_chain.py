import io
import json
import os
import random
import sys
import time
import numpy as np
import PIL
from PIL import Image

folder, spec = sys.argv[1], json.loads(sys.argv[2])
blobs = [open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))]


def decode(b):
    return Image.open(io.BytesIO(b)).convert("RGB")


try:
    import torch
    import torchvision
    import torchvision.transforms as T

    ops = []
    for t in spec:
        op = t["op"]
        if op == "random_resized_crop":
            s = t["size"]
            ops.append(
                T.RandomResizedCrop(
                    s if isinstance(s, int) else tuple(s), scale=tuple(t["scale"]), ratio=tuple(t["ratio"])
                )
            )
        elif op == "random_horizontal_flip":
            ops.append(T.RandomHorizontalFlip(t["p"]))
        elif op == "to_tensor":
            ops.append(T.ToTensor())
        elif op == "normalize":
            ops.append(T.Normalize(t["mean"], t["std"]))
    chain = T.Compose(ops)
    torch.set_num_threads(1)
    which = f"torchvision {torchvision.__version__} + Pillow {PIL.__version__}"
except ImportError:

    def chain(img):
        x = img
        for t in spec:
            op = t["op"]
            if op == "random_resized_crop":
                s = t["size"]
                (oh, ow) = (s, s) if isinstance(s, int) else s
                w, h = x.size
                area = w * h
                for _ in range(10):
                    ta = area * random.uniform(*t["scale"])
                    ar = np.exp(random.uniform(np.log(t["ratio"][0]), np.log(t["ratio"][1])))
                    cw, ch = int(round(np.sqrt(ta * ar))), int(round(np.sqrt(ta / ar)))
                    if 0 < cw <= w and 0 < ch <= h:
                        i, j = random.randint(0, h - ch), random.randint(0, w - cw)
                        break
                else:
                    cw, ch, i, j = w, h, 0, 0
                x = x.crop((j, i, j + cw, i + ch)).resize((ow, oh), Image.BILINEAR)
            elif op == "random_horizontal_flip":
                if random.random() < t["p"]:
                    x = x.transpose(Image.FLIP_LEFT_RIGHT)
            elif op == "to_tensor":
                x = np.asarray(x, dtype=np.uint8).transpose(2, 0, 1).astype(np.float32) / 255.0
            elif op == "normalize":
                x = (x - np.array(t["mean"], np.float32)[:, None, None]) / np.array(t["std"], np.float32)[
                    :, None, None
                ]
        return x

    which = f"Pillow {PIL.__version__} + numpy {np.__version__} (torchvision not installed)"


def rate(f):
    for b in blobs:
        f(b)
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.5:
        f(blobs[k % len(blobs)])
        k += 1
    return k / (time.perf_counter() - t0)


d = rate(decode)
w = rate(lambda b: chain(decode(b)))
print(json.dumps([d, w, which]))
