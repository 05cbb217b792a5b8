"""Peer of `cargo run --release -p spore-data --example bench_pipeline`: seed 001's
`create_dataset` on MindSpore's own dataset engine, over the same bundled MNIST digits,
printing samples/s for 1 and 2 parallel workers.

    pip install mindspore numpy
    python bench/peers/pipeline_mindspore.py [--epochs 5] [--data data/mnist/train]

MindSpore's MnistDataset reads raw IDX files only, so the bundled .gz files are
decompressed into a temporary folder first (not timed).
"""

import argparse
import gzip
import os
import shutil
import tempfile
import time

import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.transforms as transforms
import mindspore.dataset.vision as vision
from mindspore.dataset.vision import Inter


def create_dataset(data_path, batch_size=32, repeat_size=1, num_parallel_workers=1):
    """The seed's create_dataset, unchanged."""
    mnist_ds = ds.MnistDataset(data_path)
    resize_height, resize_width = 32, 32
    rescale = 1.0 / 255.0
    shift = 0.0
    rescale_nml = 1 / 0.3081
    shift_nml = -1 * 0.1307 / 0.3081
    resize_op = vision.Resize((resize_height, resize_width), interpolation=Inter.LINEAR)
    rescale_nml_op = vision.Rescale(rescale_nml, shift_nml)
    rescale_op = vision.Rescale(rescale, shift)
    hwc2chw_op = vision.HWC2CHW()
    type_cast_op = transforms.TypeCast(ms.int32)
    mnist_ds = mnist_ds.map(input_columns="label", operations=type_cast_op, num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(input_columns="image", operations=resize_op, num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(input_columns="image", operations=rescale_op, num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(input_columns="image", operations=rescale_nml_op, num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(input_columns="image", operations=hwc2chw_op, num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.shuffle(buffer_size=10000)
    mnist_ds = mnist_ds.batch(batch_size, drop_remainder=True)
    mnist_ds = mnist_ds.repeat(repeat_size)
    return mnist_ds


def raw_copy(src):
    """The IDX files of `src` (raw or .gz) decompressed into a temporary folder."""
    dst = tempfile.mkdtemp(prefix="mnist-raw-")
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as f, open(os.path.join(dst, name[:-3]), "wb") as g:
                shutil.copyfileobj(f, g)
        elif "idx" in name:
            shutil.copy(path, dst)
    return dst


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=os.path.join(here, "..", "..", "data", "mnist", "train"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    raw = raw_copy(args.data)
    try:
        print(f"MindSpore {ms.__version__} dataset engine, seed 001 pipeline on {args.data}, "
              f"{args.epochs} epochs after 1 warm-up epoch, {os.cpu_count()} cores")
        for workers in [int(w) for w in args.workers.split(",")]:
            ds.config.set_seed(58)
            data = create_dataset(raw, 32, 1, workers)
            batches = data.get_dataset_size()
            it = data.create_tuple_iterator(num_epochs=args.epochs + 1, output_numpy=True)
            for _ in it:  # warm-up epoch
                pass
            samples = 0
            start = time.perf_counter()
            for _ in range(args.epochs):
                for image, label in it:
                    samples += image.shape[0]
            secs = time.perf_counter() - start
            print(f"workers={workers}: {samples / secs:.0f} samples/s "
                  f"({samples} samples, {batches} batches/epoch, {secs:.3f} s)")
    finally:
        shutil.rmtree(raw, ignore_errors=True)


if __name__ == "__main__":
    main()
