#!/usr/bin/env python3
"""OpenVINO's time per layer for a model quant_anchors.py exported, beside
bench/qconv's per-layer figures for Kiln (docs/BENCHMARKS.md).

    PY=$(bash ../shared/anchors/setup-torch2.sh)
    $PY bench/quant_anchors.py --model resnet20 --weights W --only openvino:static --keep /tmp/ov
    taskset -c 1 $PY bench/openvino_layers.py /tmp/ov/int8-qdq.onnx --batch 64
    taskset -c 1 build-cpu/bench/qconv

It compiles the model as quant_anchors.py does (1 thread, one stream,
latency hint, static shapes) with PERF_COUNT on, and prints each node's
best time over --runs inferences (the CPU plugin's own counters), with its
kernel, then the median whole inference. The convolutions come in the
model's order: stem, layer1.0.conv1, layer1.0.conv2 (+ add), ...
"""
import argparse
import time

import numpy as np
import openvino as ov


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an ONNX or OpenVINO IR file")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--runs", type=int, default=30, help="timed inferences (default 30, after 10 untimed)")
    args = p.parse_args()
    if args.batch < 1 or args.runs < 1:
        p.error(f"--batch and --runs must be >= 1, got {args.batch} and {args.runs}")

    core = ov.Core()
    model = core.read_model(args.model)
    model.reshape({model.inputs[0].get_any_name(): [args.batch, 3, 32, 32]})
    compiled = core.compile_model(model, "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": "1", "NUM_STREAMS": "1",
        "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": "YES"})
    request = compiled.create_infer_request()
    x = np.random.default_rng(0).standard_normal((args.batch, 3, 32, 32), dtype=np.float32)
    for _ in range(10):
        request.infer({0: x})

    best = {}  # (node, type, kernel) -> best microseconds, in the order first seen
    totals = []
    for _ in range(args.runs):
        start = time.perf_counter()
        request.infer({0: x})
        totals.append(time.perf_counter() - start)
        for info in request.get_profiling_info():
            key = (info.node_name, info.node_type, info.exec_type)
            us = info.real_time.total_seconds() * 1e6
            best[key] = min(best.get(key, us), us)

    total = 0.0
    for (node, kind, kernel), us in best.items():
        if us > 0:
            total += us
            print(f"openvino_layer us={us:.1f} type={kind} kernel={kernel} node={node}")
    print(f"openvino_layers sum_of_best_ms={total / 1e3:.3f} median_inference_ms={1e3 * float(np.median(totals)):.3f} "
          f"batch={args.batch}")


if __name__ == "__main__":
    main()
