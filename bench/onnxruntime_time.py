"""Times onnxruntime on a model: python3 onnxruntime_time.py MODEL BATCH THREADS RUNS
Prints the milliseconds per run (after one warm-up) on random inputs of the model's
input shape with the given batch size, on THREADS intra-op threads."""
import sys
import time

import numpy as np
import onnxruntime as ort


def main(model, batch, threads, runs):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [batch] + [d for d in inp.shape[1:]]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sess.run(None, {inp.name: x})
    start = time.perf_counter()
    for _ in range(runs):
        sess.run(None, {inp.name: x})
    print(f"{(time.perf_counter() - start) * 1e3 / runs:.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
