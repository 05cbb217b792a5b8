"""Reads a folder of event files with TensorBoard's own reader and prints what it finds
as JSON: scalars and histograms per tag (step and values), images (step, size), and the
graph's node count. The summary tests compare it with what training recorded.

    python3 read_events.py DIR
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(path):
    acc = event_accumulator.EventAccumulator(
        path,
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.HISTOGRAMS: 0,
            event_accumulator.IMAGES: 0,
        },
    )
    acc.Reload()
    tags = acc.Tags()
    out = {"scalars": {}, "histograms": {}, "images": {}, "graph_nodes": 0}
    for tag in tags["scalars"]:
        out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        out["histograms"][tag] = [
            [e.step, e.histogram_value.num, e.histogram_value.min, e.histogram_value.max,
             sum(e.histogram_value.bucket)]
            for e in acc.Histograms(tag)
        ]
    for tag in tags["images"]:
        out["images"][tag] = [[e.step, e.width, e.height] for e in acc.Images(tag)]
    if tags.get("graph"):
        out["graph_nodes"] = len(acc.Graph().node)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
