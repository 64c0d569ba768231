#!/usr/bin/env python3
"""The anchor side of the quantization benchmark (bench/quant_vs_anchors.sh).

One trained float model (a safetensors state dict with PyTorch's names:
scripts/lenet_torch.py's LeNet or scripts/resnet20_torch.py's ResNet20, or a
kiln-lenet training checkpoint, whose "model." keys are taken) is run by every
anchor runtime, float32 and int8, on the same CIFAR-10 images:

  runtime        mode     what runs
  torch-eager    float32  the nn.Module
  torch-compile  float32  torch.compile (inductor, default options)
  torch-eager    static   torch.ao.quantization eager mode: x86 engine, the
                          per-channel get_default_qconfig("x86"), conv+bn+relu /
                          conv+relu / linear+relu fused, calibrated, converted
  torch-eager    dynamic  quantize_dynamic on the Linear layers (int8 weights,
                          activations quantized per batch at run time)
  torch-pt2e     static   torchao's PT2E: torch.export, prepare_pt2e with
                          X86InductorQuantizer, calibration, convert_pt2e, then
                          torch.compile with inductor freezing (torchao's x86 recipe)
  onnxruntime    float32  the ONNX export, CPU execution provider
  onnxruntime    static   quantize_static: QDQ, per-channel QInt8 weights, QUInt8
                          activations, MinMax calibration on the calibration images
  onnxruntime    dynamic  quantize_dynamic (QInt8 weights, per channel)
  openvino       float32  the ONNX export, CPU plugin, INFERENCE_PRECISION_HINT f32
  openvino       static   the QDQ model above (OpenVINO turns it into int8 kernels;
                          the layers it leaves in float run in f32 too)

Each prints one line, whitespace-separated key=value fields in this order:

  quant model=lenet runtime=torch-eager mode=float32 acc=61.23 bytes=248024 b1_ms=0.260 b64_ms=1.234 path=onednn:...

  acc     top-1 accuracy in percent on the test images (all 10,000 by default)
  bytes   the stored model: for torch, the size of torch.save() of the tensors
          the model runs with (its state dict; for a PT2E graph its parameters,
          buffers and constants); for ONNX Runtime the .onnx file; for OpenVINO
          its IR (.xml + .bin, saved uncompressed from the ONNX model it reads)
  b1_ms   median latency of one forward of a batch of 1, in milliseconds
  b64_ms  the same for a batch of 64
  path    what ran, as far as the runtime tells: oneDNN's primitive
          implementations (from its verbose log), the quantized engine, ONNX
          Runtime's op types after graph optimisation and the CPU's int8
          features, OpenVINO's primitive types; no spaces
A runtime that fails prints its line with acc=nan bytes=0 b1_ms=nan b64_ms=nan
and path=failed:<the error>, the traceback goes to stderr, and the other
runtimes still run.

Latency: 1 thread everywhere (OMP_NUM_THREADS=1, torch.set_num_threads(1),
ONNX Runtime intra- and inter-op threads 1, OpenVINO INFERENCE_NUM_THREADS 1),
fixed random inputs (seeded), warm-up runs, then the median of at least
--b1-runs runs and --min-seconds seconds at batch 1, --b64-runs runs and
--min-seconds at batch 64. Every runtime sees only batches of 1 and 64 (the
last partial batch of the accuracy pass is padded), so static-shape compiles
stay valid.

Data: CIFAR-10 found as scripts/get-cifar10.sh finds it (--data, else
$KILN_DATA, else the repository's data/, else ../shared/data/): the binary
release (cifar-10-batches-bin/ or cifar-10-binary.tar.gz) or the JPEG image
folder (cifar10-jpeg/ or cifar10-jpeg.tar.gz), normalised as kiln-lenet does
(x / 255 - mean) / std with mean (0.4914, 0.4822, 0.4465), std (0.2470,
0.2435, 0.2616) (apps/lenet/data_source.h). JPEGs are decoded by Pillow here
and by Kiln's decoder on the Kiln side; the two may differ in a few pixels.
Calibration uses --calib-images images of the TRAINING set (a seeded random
subset); accuracy uses --test-images test images (a seeded random subset when
fewer than 10,000).

Usage:
  $KILN_ANCHORS_PYTHON bench/quant_anchors.py --model lenet --weights /work/artifacts/lenet.safetensors
      [--data PATH] [--calib-images 512] [--test-images 10000]
      [--only torch-eager:static,onnxruntime] [--skip torch-compile]
"""

import os

# Before torch, onnxruntime and openvino load their OpenMP / TBB pools.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# One inductor compile worker: no pool of compile processes left behind
# beside the timed runs.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import ctypes  # noqa: E402
import io  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import safetensors_torch  # noqa: E402  (the package-free reader; Kiln's files are standard safetensors)
from lenet_torch import LeNet  # noqa: E402

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
# apps/lenet/data_source.h: kCifar10Mean, kCifar10Std.
MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32).reshape(1, 3, 1, 1)
EVAL_BATCH = 64
ALL_VARIANTS = [
    ("torch-eager", "float32"),
    ("torch-compile", "float32"),
    ("torch-eager", "static"),
    ("torch-eager", "dynamic"),
    ("torch-pt2e", "static"),
    ("onnxruntime", "float32"),
    ("onnxruntime", "static"),
    ("onnxruntime", "dynamic"),
    ("openvino", "float32"),
    ("openvino", "static"),
]


def log(*args):
    print("quant_anchors:", *args, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# CIFAR-10


def find_data(explicit):
    """The CIFAR-10 path to read: `explicit`, else the first candidate found in
    $KILN_DATA, the repository's data/ and ../shared/data (get-cifar10.sh's order)."""
    names = ["cifar-10-batches-bin", "cifar-10-binary.tar.gz", "cifar10-jpeg", "cifar10-jpeg.tar.gz"]
    if explicit:
        if not os.path.exists(explicit):
            sys.exit(f"quant_anchors: --data {explicit!r} does not exist")
        bases = [explicit]
    else:
        bases = [b for b in (os.environ.get("KILN_DATA"), os.path.join(REPO, "data"),
                             os.path.join(REPO, "..", "shared", "data")) if b]
    for base in bases:
        if os.path.isfile(base):
            return base
        if os.path.isdir(base):
            if os.path.isfile(os.path.join(base, "test_batch.bin")) or (
                    os.path.isdir(os.path.join(base, "train")) and os.path.isdir(os.path.join(base, "test"))):
                return base
            for name in names:
                if os.path.exists(os.path.join(base, name)):
                    return os.path.join(base, name)
    sys.exit(f"quant_anchors: no CIFAR-10 found in {bases} (looked for {names}); pass --data")


def _decode_jpeg(blob):
    from PIL import Image

    with Image.open(io.BytesIO(blob)) as im:
        a = np.asarray(im.convert("RGB"), dtype=np.uint8)  # (32, 32, 3)
    if a.shape != (32, 32, 3):
        raise ValueError(f"expected a 32x32 image, got {a.shape}")
    return a.transpose(2, 0, 1)  # (3, 32, 32)


def _binary_records(blob, where):
    if len(blob) % 3073:
        raise ValueError(f"{where}: {len(blob)} bytes is not a whole number of 3073-byte CIFAR-10 records")
    r = np.frombuffer(blob, dtype=np.uint8).reshape(-1, 3073)
    return r[:, 1:].reshape(-1, 3, 32, 32), r[:, 0].astype(np.int64)


def _raw_splits(path):
    """{"train": [(key, payload)], "test": [...]} with payload a JPEG's bytes,
    or, for the binary release, {"train_bin": [bytes...], "test_bin": [...]}."""
    out = {"train": [], "test": [], "train_bin": [], "test_bin": []}

    def take(name, read):
        parts = name.replace("\\", "/").split("/")
        base = parts[-1]
        if re.fullmatch(r"data_batch_\d\.bin", base):
            out["train_bin"].append((base, read()))
        elif base == "test_batch.bin":
            out["test_bin"].append((base, read()))
        elif base.lower().endswith((".jpg", ".jpeg", ".png")) and len(parts) >= 3 and parts[-3] in ("train", "test"):
            if parts[-2] in CLASSES:
                out[parts[-3]].append(((CLASSES.index(parts[-2]), base), read()))

    if os.path.isdir(path):
        for root, _, files in os.walk(path):
            for f in files:
                full = os.path.join(root, f)
                take(os.path.relpath(full, path), lambda full=full: open(full, "rb").read())
    else:
        with tarfile.open(path, "r|*") as tar:  # one pass through the (gzipped) stream
            for member in tar:
                if member.isfile():
                    take(member.name, lambda member=member: tar.extractfile(member).read())
    return out


def load_cifar(path, calib_images, test_images, seed):
    """(calib uint8 (C, 3, 32, 32), test uint8 (T, 3, 32, 32), test labels (T,))."""
    t0 = time.perf_counter()
    raw = _raw_splits(path)
    rng = np.random.default_rng(seed)
    if raw["test_bin"]:
        train = [_binary_records(b, n) for n, b in sorted(raw["train_bin"])]
        if not train:
            sys.exit(f"quant_anchors: {path} holds test_batch.bin but no data_batch_N.bin")
        train_x = np.concatenate([x for x, _ in train])
        test_x, test_y = _binary_records(raw["test_bin"][0][1], "test_batch.bin")
        calib_idx = np.sort(rng.choice(len(train_x), min(calib_images, len(train_x)), replace=False))
        calib = train_x[calib_idx]
    else:
        if not raw["test"] or not raw["train"]:
            sys.exit(f"quant_anchors: {path} holds neither CIFAR-10 batch files nor train/<class>/ and test/<class>/ images")
        train = sorted(raw["train"])
        test = sorted(raw["test"])
        calib_idx = np.sort(rng.choice(len(train), min(calib_images, len(train)), replace=False))
        calib = np.stack([_decode_jpeg(train[i][1]) for i in calib_idx])
        test_x = None
        test_y = np.array([key[0] for key, _ in test], dtype=np.int64)
    n_test = len(test_y)
    if test_images < n_test:
        keep = np.sort(rng.choice(n_test, test_images, replace=False))
    else:
        keep = np.arange(n_test)
    if test_x is None:
        test_x = np.stack([_decode_jpeg(test[i][1]) for i in keep])
    else:
        test_x = test_x[keep]
    test_y = test_y[keep]
    log(f"data: {path}: {len(calib)} calibration (train) and {len(test_x)} test images "
        f"in {time.perf_counter() - t0:.1f} s")
    return calib, test_x, test_y


def normalize(images):
    """uint8 (N, 3, H, W) -> float32 (x / 255 - mean) / std, as kiln-lenet's normalize_batch."""
    return ((images.astype(np.float32) / np.float32(255.0) - MEAN) / STD).astype(np.float32)


def batches(x, size):
    for i in range(0, len(x), size):
        yield x[i:i + size]


# ----------------------------------------------------------------------------
# Models


def load_state_dict(path):
    """A model state dict from a safetensors file: a plain state dict, or a
    kiln-lenet training checkpoint (its "model." keys, prefix removed)."""
    tensors = safetensors_torch.load_file(path)
    if any(k.startswith("model.") for k in tensors):
        tensors = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    return {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}


class QuantLeNet(LeNet):
    """LeNet with its ReLUs as modules and Quant/DeQuantStub around it: what
    eager-mode quantization needs. The same state dict keys as LeNet."""

    def __init__(self):
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.dequant = torch.ao.quantization.DeQuantStub()
        self.relu1, self.relu2, self.relu3, self.relu4 = nn.ReLU(), nn.ReLU(), nn.ReLU(), nn.ReLU()

    def forward(self, x):
        x = self.quant(x)
        x = self.pool(self.relu1(self.conv1(x)))  # (N, 6, 14, 14)
        x = self.pool(self.relu2(self.conv2(x)))  # (N, 16, 5, 5)
        x = torch.flatten(x, 1)  # (N, 400)
        x = self.relu3(self.fc1(x))
        x = self.relu4(self.fc2(x))
        return self.dequant(self.fc3(x))  # (N, 10)

    def fuse_groups(self):
        return [["conv1", "relu1"], ["conv2", "relu2"], ["fc1", "relu3"], ["fc2", "relu4"]]


def _resnet20_classes():
    from resnet20_torch import ResNet20  # scripts/resnet20_torch.py: ReLUs are modules, adds FloatFunctional

    class QuantResNet20(ResNet20):
        """ResNet20 between a QuantStub and a DeQuantStub; the same state dict keys."""

        def __init__(self):
            super().__init__()
            self.quant = torch.ao.quantization.QuantStub()
            self.dequant = torch.ao.quantization.DeQuantStub()

        def forward(self, x):
            return self.dequant(super().forward(self.quant(x)))

        def fuse_groups(self):
            groups = [["conv1", "bn1", "relu"]]
            for stage in ("layer1", "layer2", "layer3"):
                for i, block in enumerate(getattr(self, stage)):
                    p = f"{stage}.{i}."
                    groups.append([p + "conv1", p + "bn1", p + "relu1"])
                    groups.append([p + "conv2", p + "bn2"])
                    if block.downsample is not None:
                        groups.append([p + "downsample.0", p + "downsample.1"])
            return groups

    return ResNet20, QuantResNet20


def make_model(name, state, quantizable=False):
    if name == "lenet":
        net = QuantLeNet() if quantizable else LeNet()
    else:
        plain, quant = _resnet20_classes()
        net = quant() if quantizable else plain()
    # Strict, but for BatchNorm's step counters, which only training reads
    # and which a Kiln checkpoint need not hold.
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise KeyError(f"the weights do not fit {name}: missing {missing}, unexpected {unexpected}")
    return net.eval()


# ----------------------------------------------------------------------------
# What ran: oneDNN's verbose log, ONNX Runtime's optimised graph, OpenVINO's runtime model


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def int8_isa():
    """The CPU's best int8 dot-product feature, as /proc/cpuinfo names it."""
    flags = cpu_flags()
    for flag in ("amx_int8", "avx512_vnni", "avx_vnni", "avx512bw", "avx2"):
        if flag in flags:
            return flag
    return "no-avx2"


def clean(text, limit=300):
    """`text` with no whitespace or '=' (one field of the line), at most `limit` characters."""
    text = re.sub(r"[^A-Za-z0-9_.:,+/()\[\]-]+", "_", str(text)).strip("_")
    return text[:limit] or "unknown"


@contextlib.contextmanager
def captured_stdout_fd():
    """Captures what C code writes to file descriptor 1 (oneDNN's verbose log)."""
    sys.stdout.flush()
    libc = ctypes.CDLL(None)
    saved = os.dup(1)
    sink = tempfile.TemporaryFile()
    box = {"text": ""}
    os.dup2(sink.fileno(), 1)
    try:
        yield box
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)
        sink.seek(0)
        box["text"] = sink.read().decode("utf-8", "replace")
        sink.close()


_ONEDNN_KIND = {"convolution": "conv", "inner_product": "ip", "matmul": "matmul", "deconvolution": "deconv"}


def onednn_path(run):
    """oneDNN's implementations of the heavy primitives during run(), e.g.
    'onednn:conv:brg_conv_fwd:avx512_core_amx,ip:...'; '' when none ran."""
    try:
        with captured_stdout_fd() as out:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                run()
    except Exception as e:  # the trace is a nicety; never fail the measurement for it
        return f"onednn-trace-failed:{type(e).__name__}"
    seen = Counter()
    for line in out["text"].splitlines():
        fields = line.split(",")
        if not fields or not fields[0].startswith("onednn_verbose") or "exec" not in fields:
            continue
        try:
            i = fields.index("cpu")
        except ValueError:
            continue
        kind, impl = fields[i + 1], fields[i + 2]
        if kind in ("convolution", "inner_product", "matmul", "deconvolution"):
            seen[f"{_ONEDNN_KIND[kind]}:{impl}"] += 1
    if not seen:
        return ""
    return "onednn:" + ",".join(k for k, _ in seen.most_common())


# ----------------------------------------------------------------------------
# Measurement


class Variant:
    """One runtime and mode, ready to run: `run(native_input) -> output`,
    `to_input(np array) -> native_input`, `to_numpy(output) -> np array`."""

    def __init__(self, run, to_input=None, to_numpy=None, nbytes=0, path=""):
        self.run = run
        self.to_input = to_input or (lambda x: x)
        self.to_numpy = to_numpy or (lambda y: np.asarray(y))
        self.nbytes = nbytes
        self.path = path


def accuracy(variant, x, y):
    """Top-1 accuracy in percent, in batches of EVAL_BATCH (the last one padded)."""
    correct = 0
    for i in range(0, len(x), EVAL_BATCH):
        chunk = x[i:i + EVAL_BATCH]
        n = len(chunk)
        if n < EVAL_BATCH:
            chunk = np.concatenate([chunk, np.zeros((EVAL_BATCH - n,) + chunk.shape[1:], chunk.dtype)])
        logits = variant.to_numpy(variant.run(variant.to_input(chunk)))[:n]
        correct += int((logits.argmax(axis=1) == y[i:i + n]).sum())
    return 100.0 * correct / len(x)


def median_ms(variant, x, warmup, min_runs, min_seconds):
    native = variant.to_input(x)
    for _ in range(warmup):
        variant.run(native)
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        variant.run(native)
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def build_running():
    """Whether a build compiles on this machine (its load would slow the timed
    runs); one only waiting for the build lock ("flock ... cmake --build") does not count."""
    import subprocess

    try:
        return subprocess.run(["pgrep", "-f", "^(/usr/bin/)?cmake --build|cc1plus|nvcc|cicc|ptxas"], capture_output=True).returncode == 0
    except OSError:
        return False


def torch_saved_bytes(tensors_or_state):
    buf = io.BytesIO()
    torch.save(tensors_or_state, buf)
    return buf.tell()


def torch_variant(module, path):
    def run(x):
        with torch.inference_mode():
            return module(x)

    return Variant(run, to_input=torch.from_numpy, to_numpy=lambda y: y.detach().float().numpy(), path=path)


# ----------------------------------------------------------------------------
# The runtimes


class Context:
    def __init__(self, args, state, calib, workdir):
        self.args = args
        self.state = state
        self.calib = calib  # float32 (C, 3, 32, 32), normalised
        self.workdir = workdir
        self._onnx = {}

    def calibrate_torch(self, module):
        with torch.inference_mode():
            for chunk in batches(self.calib, EVAL_BATCH):
                module(torch.from_numpy(chunk))

    def onnx_float(self):
        """The float model exported to ONNX (input "x" (batch, 3, 32, 32), output "logits")."""
        if "float" not in self._onnx:
            path = os.path.join(self.workdir, "float.onnx")
            export_onnx(make_model(self.args.model, self.state), path)
            self._onnx["float"] = path
        return self._onnx["float"]

    def onnx_preprocessed(self):
        """The float model after ONNX Runtime's quant_pre_process (shape inference,
        graph optimisation), as its quantization docs advise."""
        if "pre" not in self._onnx:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            path = os.path.join(self.workdir, "float-pre.onnx")
            quant_pre_process(self.onnx_float(), path, skip_symbolic_shape=False)
            self._onnx["pre"] = path
        return self._onnx["pre"]

    def onnx_qdq(self):
        """ONNX Runtime's static int8 model: QDQ, per-channel QInt8 weights, QUInt8 activations."""
        if "qdq" not in self._onnx:
            from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                                  quantize_static)

            calib = self.calib

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.it = iter(batches(calib, EVAL_BATCH))

                def get_next(self):
                    chunk = next(self.it, None)
                    return None if chunk is None else {"x": chunk}

                def rewind(self):
                    self.it = iter(batches(calib, EVAL_BATCH))

            path = os.path.join(self.workdir, "int8-qdq.onnx")
            quantize_static(self.onnx_preprocessed(), path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            calibrate_method=CalibrationMethod.MinMax)
            self._onnx["qdq"] = path
        return self._onnx["qdq"]

    def onnx_dynamic(self):
        if "dyn" not in self._onnx:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            path = os.path.join(self.workdir, "int8-dynamic.onnx")
            quantize_dynamic(self.onnx_preprocessed(), path, per_channel=True, weight_type=QuantType.QInt8)
            self._onnx["dyn"] = path
        return self._onnx["dyn"]


def export_onnx(model, path):
    with contextlib.redirect_stdout(sys.stderr):  # the exporter's progress messages are not result lines
        _export_onnx(model, path)


def _export_onnx(model, path):
    example = torch.zeros(EVAL_BATCH, 3, 32, 32)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, (example,), input_names=["x"], output_names=["logits"],
                                        dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=4096)}},
                                        dynamo=True, external_data=False, opset_version=18)
        program.save(path, external_data=False)
    except Exception as e:
        log(f"the dynamo ONNX exporter failed ({type(e).__name__}: {e}); using the TorchScript exporter")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (example,), path, input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                              dynamo=False)


def build_torch_eager_float32(ctx):
    model = make_model(ctx.args.model, ctx.state)
    v = torch_variant(model, "")
    v.nbytes = torch_saved_bytes(model.state_dict())
    v.path = "torch-cpu," + (onednn_path(lambda: v.run(torch.zeros(1, 3, 32, 32))) or "aten-native")
    return v


def build_torch_compile_float32(ctx):
    model = make_model(ctx.args.model, ctx.state)
    compiled = torch.compile(model)
    v = torch_variant(compiled, "")
    t0 = time.perf_counter()
    for b in (1, EVAL_BATCH):
        v.run(torch.zeros(b, 3, 32, 32))  # compiles both shapes before anything is timed
    log(f"torch.compile: {time.perf_counter() - t0:.1f} s to compile batch 1 and {EVAL_BATCH}")
    v.nbytes = torch_saved_bytes(model.state_dict())
    v.path = "inductor," + (onednn_path(lambda: v.run(torch.zeros(1, 3, 32, 32))) or "no-onednn")
    return v


def build_torch_eager_static(ctx):
    import torch.ao.quantization as tq

    torch.backends.quantized.engine = "x86"
    model = make_model(ctx.args.model, ctx.state, quantizable=True)
    tq.fuse_modules(model, model.fuse_groups(), inplace=True)
    model.qconfig = tq.get_default_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq.prepare(model, inplace=True)
        ctx.calibrate_torch(model)
        tq.convert(model, inplace=True)
    v = torch_variant(model, "")
    v.nbytes = torch_saved_bytes(model.state_dict())
    trace = onednn_path(lambda: v.run(torch.zeros(1, 3, 32, 32)))
    v.path = "engine=x86," + (trace or "fbgemm")
    return v


def build_torch_eager_dynamic(ctx):
    import torch.ao.quantization as tq

    torch.backends.quantized.engine = "x86"
    model = make_model(ctx.args.model, ctx.state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tq.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    v = torch_variant(model, "")
    v.nbytes = torch_saved_bytes(model.state_dict())
    trace = onednn_path(lambda: v.run(torch.zeros(1, 3, 32, 32)))
    v.path = "engine=x86,int8-linear-only," + (trace or "fbgemm")
    return v


def graph_module_bytes(gm):
    """torch.save() size of the tensors a GraphModule's graph reads (its
    get_attr nodes): after convert_pt2e, the int8 weights, their scales and
    zero points and the float biases. The float weights stay attributes of the
    module but the graph no longer reads them, so they are not counted."""
    tensors = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target not in tensors:
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, torch.Tensor):
                tensors[node.target] = obj.detach()
    return torch_saved_bytes(tensors)


def build_torch_pt2e_static(ctx):
    import torch._inductor.config as inductor_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)

    model = make_model(ctx.args.model, ctx.state)
    example = (torch.from_numpy(ctx.calib[:EVAL_BATCH]),)
    batch = torch.export.Dim("batch", min=1, max=4096)
    exported = torch.export.export(model, example, dynamic_shapes=({0: batch},)).module()
    quantizer = X86InductorQuantizer()
    quantizer.set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for chunk in batches(ctx.calib, EVAL_BATCH):
            prepared(torch.from_numpy(chunk))
    converted = convert_pt2e(prepared)
    try:
        from torchao.quantization.pt2e import move_exported_model_to_eval

        move_exported_model_to_eval(converted)
    except ImportError:
        pass
    nbytes = graph_module_bytes(converted)
    # torchao's x86 recipe: lower with inductor's freezing, which folds the
    # int8 weights into oneDNN's packed qconv / qlinear. The patch must hold
    # at every call that may compile, so every call runs under it.
    compiled = torch.compile(converted)

    def run(x):
        with inductor_config.patch(freezing=True), torch.no_grad():
            return compiled(x)

    v = Variant(run, to_input=torch.from_numpy, to_numpy=lambda y: y.detach().float().numpy(), nbytes=nbytes)
    t0 = time.perf_counter()
    for b in (1, EVAL_BATCH):
        run(torch.zeros(b, 3, 32, 32))
    log(f"torch-pt2e: {time.perf_counter() - t0:.1f} s to compile batch 1 and {EVAL_BATCH}")
    v.path = "x86-inductor-quantizer,inductor-freezing," + (
        onednn_path(lambda: run(torch.zeros(1, 3, 32, 32))) or "no-onednn")
    return v


def ort_variant(model_path, ctx, label):
    import onnx
    import onnxruntime as ort

    def options(optimized_path=None):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if optimized_path:
            so.optimized_model_filepath = optimized_path
            so.log_severity_level = 3  # not the warning that NCHWc graphs are specific to this CPU
        return so

    providers = ["CPUExecutionProvider"]
    session = ort.InferenceSession(model_path, options(), providers=providers)
    # What the graph became after ORT's optimisations (QDQ groups fused into
    # QLinearConv / QGemm, or left as float ops between Q and DQ).
    ops = ""
    try:
        optimized = os.path.join(ctx.workdir, os.path.basename(model_path) + ".optimized.onnx")
        ort.InferenceSession(model_path, options(optimized), providers=providers)
        graph = onnx.load(optimized, load_external_data=False).graph
        heavy = re.compile(r"(Conv|Gemm|MatMul)")
        counts = Counter(n.op_type for n in graph.node if heavy.search(n.op_type))
        ops = "+".join(f"{op}x{n}" for op, n in counts.most_common())
    except Exception as e:
        ops = f"ops-unknown:{type(e).__name__}"
    input_name = session.get_inputs()[0].name

    def run(x):
        return session.run(None, {input_name: x})[0]

    path = f"ort-{ort.__version__}-{session.get_providers()[0]},{ops},cpu-{int8_isa()}"
    return Variant(run, nbytes=os.path.getsize(model_path), path=path)


def build_onnxruntime_float32(ctx):
    return ort_variant(ctx.onnx_float(), ctx, "float32")


def build_onnxruntime_static(ctx):
    return ort_variant(ctx.onnx_qdq(), ctx, "static")


def build_onnxruntime_dynamic(ctx):
    return ort_variant(ctx.onnx_dynamic(), ctx, "dynamic")


def ov_variant(model_path, ctx, label):
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": "1", "NUM_STREAMS": "1",
              "PERFORMANCE_HINT": "LATENCY"}
    model = core.read_model(model_path)
    ir = os.path.join(ctx.workdir, f"openvino-{label}.xml")
    ov.save_model(model, ir, compress_to_fp16=False)
    nbytes = os.path.getsize(ir) + os.path.getsize(ir[:-4] + ".bin")
    compiled = {}
    for b in (1, EVAL_BATCH):
        m = core.read_model(model_path)
        m.reshape({m.inputs[0].get_any_name(): [b, 3, 32, 32]})  # static shapes, one compile per batch size
        compiled[b] = core.compile_model(m, "CPU", config)
    requests = {b: c.create_infer_request() for b, c in compiled.items()}

    def run(x):
        req = requests[len(x)]
        req.infer({0: x}, share_inputs=True)
        return req.get_output_tensor(0).data

    # The CPU plugin's kernels for the heavy layers, e.g.
    # "Convolution:brgconv_avx512_amx_I8x2" (I8: int8, runtime precision u8/i8).
    kinds = Counter()
    for op in compiled[EVAL_BATCH].get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        layer = rt["layerType"].astype(str) if "layerType" in rt else op.get_type_name()
        if layer in ("Convolution", "FullyConnected", "MatMul", "GroupConvolution", "Gemm"):
            prim = rt["primitiveType"].astype(str) if "primitiveType" in rt else "unknown"
            kinds[f"{layer}:{prim}"] += 1
    hint = compiled[EVAL_BATCH].get_property("INFERENCE_PRECISION_HINT").get_type_name()
    path = (f"ov-{ov.__version__.split('-')[0]}-cpu,hint:{hint},"
            + ",".join(f"{k}x{n}" for k, n in kinds.most_common()))
    return Variant(run, to_numpy=lambda y: np.array(y), nbytes=nbytes, path=path)


def build_openvino_float32(ctx):
    return ov_variant(ctx.onnx_float(), ctx, "float32")


def build_openvino_static(ctx):
    return ov_variant(ctx.onnx_qdq(), ctx, "static")


BUILDERS = {
    ("torch-eager", "float32"): build_torch_eager_float32,
    ("torch-compile", "float32"): build_torch_compile_float32,
    ("torch-eager", "static"): build_torch_eager_static,
    ("torch-eager", "dynamic"): build_torch_eager_dynamic,
    ("torch-pt2e", "static"): build_torch_pt2e_static,
    ("onnxruntime", "float32"): build_onnxruntime_float32,
    ("onnxruntime", "static"): build_onnxruntime_static,
    ("onnxruntime", "dynamic"): build_onnxruntime_dynamic,
    ("openvino", "float32"): build_openvino_float32,
    ("openvino", "static"): build_openvino_static,
}


def selected(spec, runtime, mode):
    """Whether runtime:mode matches one of spec's comma-separated RUNTIME or RUNTIME:MODE."""
    for item in spec.split(","):
        item = item.strip()
        if item and (item == runtime or item == f"{runtime}:{mode}"):
            return True
    return False


def line(model, runtime, mode, acc, nbytes, b1, b64, path):
    return (f"quant model={model} runtime={runtime} mode={mode} acc={acc:.2f} bytes={nbytes} "
            f"b1_ms={b1:.3f} b64_ms={b64:.3f} path={clean(path)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["lenet", "resnet20"], required=True)
    p.add_argument("--weights", required=True, help="the float model: a safetensors state dict (or kiln-lenet checkpoint)")
    p.add_argument("--data", help="CIFAR-10 (default: $KILN_DATA, data/, ../shared/data)")
    p.add_argument("--calib-images", type=int, default=512, help="training images for calibration (default 512)")
    p.add_argument("--test-images", type=int, default=10000, help="test images for accuracy (default all 10,000)")
    p.add_argument("--seed", type=int, default=0, help="of the image subsets and the random timing inputs")
    p.add_argument("--only", default="", help="comma-separated RUNTIME or RUNTIME:MODE to run (default: all)")
    p.add_argument("--skip", default="", help="comma-separated RUNTIME or RUNTIME:MODE to leave out")
    p.add_argument("--warmup", type=int, default=20, help="untimed runs before timing (default 20)")
    p.add_argument("--b1-runs", type=int, default=200, help="at least this many timed batch-1 runs (default 200)")
    p.add_argument("--b64-runs", type=int, default=30, help="at least this many timed batch-64 runs (default 30)")
    p.add_argument("--min-seconds", type=float, default=1.0, help="and at least this long per batch size (default 1)")
    p.add_argument("--keep", help="keep the exported ONNX / OpenVINO files in this folder")
    args = p.parse_args()
    if args.calib_images < 1 or args.test_images < 1:
        p.error(f"--calib-images and --test-images must be >= 1, got {args.calib_images} and {args.test_images}")

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    state = load_state_dict(args.weights)
    make_model(args.model, state)  # fails here, once, when the weights do not fit the model
    calib_u8, test_u8, test_y = load_cifar(find_data(args.data), args.calib_images, args.test_images, args.seed)
    calib, test_x = normalize(calib_u8), normalize(test_u8)
    rng = np.random.default_rng(args.seed + 1)
    x1 = rng.standard_normal((1, 3, 32, 32), dtype=np.float32)
    x64 = rng.standard_normal((EVAL_BATCH, 3, 32, 32), dtype=np.float32)

    workdir = args.keep or tempfile.mkdtemp(prefix="quant_anchors.")
    os.makedirs(workdir, exist_ok=True)
    ctx = Context(args, state, calib, workdir)
    log(f"torch {torch.__version__}, quantized engines {torch.backends.quantized.supported_engines}, "
        f"{torch.get_num_threads()} thread(s), files in {workdir}")
    try:
        for runtime, mode in ALL_VARIANTS:
            if args.only and not selected(args.only, runtime, mode):
                continue
            if args.skip and selected(args.skip, runtime, mode):
                continue
            t0 = time.perf_counter()
            try:
                v = BUILDERS[(runtime, mode)](ctx)
                acc = accuracy(v, test_x, test_y)
                busy = build_running()
                b1 = median_ms(v, x1, args.warmup, args.b1_runs, args.min_seconds)
                b64 = median_ms(v, x64, max(3, args.warmup // 4), args.b64_runs, args.min_seconds)
                if busy or build_running():
                    log(f"warning: a build ran while {runtime} {mode} was timed; its latencies are unreliable")
                out = line(args.model, runtime, mode, acc, v.nbytes, b1, b64, v.path)
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                out = line(args.model, runtime, mode, float("nan"), 0, float("nan"), float("nan"),
                           f"failed:{type(e).__name__}:{msg}")
            print(out, flush=True)
            log(f"{runtime} {mode}: {time.perf_counter() - t0:.1f} s")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
