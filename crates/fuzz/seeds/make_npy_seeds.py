"""Writes the .npy seeds of the `npy` fuzz target with NumPy itself, so that the fuzzer
starts from files the reference tool wrote (format 1.0 and 2.0, every dtype Spore reads,
scalars, empty and multi-dimensional arrays).

Run from the repository root: python3 crates/fuzz/seeds/make_npy_seeds.py
"""
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npy")


def save(name, array, version=None):
    path = os.path.join(OUT, name)
    if version is None:
        np.save(path, array)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, version=version)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(0)
    save("f32_2x3.npy", rng.standard_normal((2, 3)).astype(np.float32))
    save("f64_vector.npy", np.linspace(-1.0, 1.0, 5))
    save("i32_scalar.npy", np.array(7, dtype=np.int32))
    save("i64_3d.npy", np.arange(24, dtype=np.int64).reshape(2, 3, 4))
    save("u8_image.npy", rng.integers(0, 255, (4, 4, 3), dtype=np.uint8))
    save("bool_mask.npy", np.array([True, False, True]))
    save("f32_empty.npy", np.zeros((0, 3), dtype=np.float32))
    save("f32_version2.npy", np.ones((2, 2), dtype=np.float32), version=(2, 0))


if __name__ == "__main__":
    main()
