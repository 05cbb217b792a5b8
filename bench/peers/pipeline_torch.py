"""Peer of `cargo run --release -p spore-data --example bench_pipeline`: the same
transforms as seed 001's pipeline (bilinear resize to 32x32 with OpenCV, rescale by
1/255, normalise by (x - 0.1307) / 0.3081, HWC to CHW, int32 labels, shuffled batches
of 32 with drop_last) in a torch DataLoader over the same bundled IDX files, printing
samples/s for 1 and 2 worker processes (and for loading in the main process).

    pip install torch numpy opencv-python-headless
    python bench/peers/pipeline_torch.py [--epochs 5] [--data data/mnist/train]
"""

import argparse
import gzip
import os
import time

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def find(folder, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f"no {stem}[.gz] in {folder}")


class Mnist(Dataset):
    def __init__(self, folder):
        self.images = read_idx(find(folder, "train-images-idx3-ubyte"))
        self.labels = read_idx(find(folder, "train-labels-idx1-ubyte"))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = cv2.resize(self.images[i], (32, 32), interpolation=cv2.INTER_LINEAR)
        x = img.astype(np.float32) * np.float32(1 / 255.0)
        x = x * np.float32(1 / 0.3081) + np.float32(-0.1307 / 0.3081)
        return torch.from_numpy(x[None]), torch.tensor(int(self.labels[i]), dtype=torch.int32)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=os.path.join(here, "..", "..", "data", "mnist", "train"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", default="0,1,2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    data = Mnist(args.data)
    print(f"torch {torch.__version__} DataLoader, seed 001 transforms on {args.data}, "
          f"{args.epochs} epochs after 1 warm-up epoch, {os.cpu_count()} cores")
    for workers in [int(w) for w in args.workers.split(",")]:
        torch.manual_seed(58)
        loader = DataLoader(data, batch_size=32, shuffle=True, drop_last=True,
                            num_workers=workers, persistent_workers=workers > 0)
        for _ in loader:  # warm-up epoch (starts the worker processes)
            pass
        samples = 0
        start = time.perf_counter()
        for _ in range(args.epochs):
            for image, label in loader:
                samples += image.shape[0]
        secs = time.perf_counter() - start
        where = "main process" if workers == 0 else f"{workers} worker process(es)"
        print(f"workers={workers} ({where}): {samples / secs:.0f} samples/s "
              f"({samples} samples, {len(loader)} batches/epoch, {secs:.3f} s)")


if __name__ == "__main__":
    main()
