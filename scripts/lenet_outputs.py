#!/usr/bin/python3
"""PyTorch's side of the LeNet interchange test (tests/optim/lenet_interop_test.cpp).

    lenet_outputs.py init WEIGHTS           save a freshly initialised PyTorch LeNet
    lenet_outputs.py eval WEIGHTS IN OUT    load WEIGHTS into PyTorch's LeNet and save
                                            its logits for IN's "x" as OUT's "logits"
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_torch  # noqa: E402
from lenet_torch import LeNet  # noqa: E402


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "init":
        torch.manual_seed(11)
        net = LeNet()
        safetensors_torch.save_file({k: v.contiguous() for k, v in net.state_dict().items()}, sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "eval":
        net = LeNet()
        net.load_state_dict(safetensors_torch.load_file(sys.argv[2]))
        x = safetensors_torch.load_file(sys.argv[3])["x"]
        with torch.no_grad():
            logits = net(x)
        safetensors_torch.save_file({"logits": logits.contiguous()}, sys.argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
