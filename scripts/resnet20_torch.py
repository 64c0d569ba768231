#!/usr/bin/python3
"""The PyTorch twin of Kiln's nn::CifarResNet (nn/models/resnet.h).

ResNet-20 for CIFAR-10 (He et al. 2016, section 4.2) with the same module
names as Kiln's, so that a state dict saved by either loads into the other
("conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight", ...,
"layer2.0.downsample.0.weight", ..., "fc.bias"; 272,474 parameters). Every
ReLU is its own module and each residual add is a FloatFunctional, as
torch.ao.quantization's eager mode needs, so `prepare` / `convert` quantize
it as they do torchvision's quantizable ResNets:

    from resnet20_torch import ResNet20
    net = ResNet20()
    net.load_state_dict(safetensors_torch.load_file("resnet20.safetensors"))

Commands:
    resnet20_torch.py                              print the model, its parameters and their count
    resnet20_torch.py outputs WEIGHTS IN OUT       load WEIGHTS (float64) into the model and save,
                                                   for IN's "x": "eval" (eval-mode logits), "train"
                                                   (train-mode logits) and "after.<key>" (the state
                                                   dict after that training-mode forward)
    resnet20_torch.py extract CHECKPOINT OUT       the model state dict of a kiln-lenet training
                                                   checkpoint (its "model." keys, prefix removed)
    resnet20_torch.py onnx WEIGHTS OUT.onnx        export the model with WEIGHTS to ONNX
                                                   (input "x" (N, 3, 32, 32), dynamic batch)
"""

import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_torch  # noqa: E402


class BasicBlock(nn.Module):
    """relu2(add(bn2(conv2(relu1(bn1(conv1(x))))), shortcut(x)))."""

    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        # Option B: a 1x1 projection where the shape changes.
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )
        self.add = nn.quantized.FloatFunctional()
        self.relu2 = nn.ReLU()

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu2(self.add.add(out, identity))


class ResNet20(nn.Module):
    def __init__(self, blocks_per_stage=3, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.layer1 = self._stage(16, 16, blocks_per_stage, 1)
        self.layer2 = self._stage(16, 32, blocks_per_stage, 2)
        self.layer3 = self._stage(32, 64, blocks_per_stage, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        # torchvision's ResNet initialisation; fc keeps Linear's default.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _stage(in_channels, out_channels, blocks, stride):
        layers = [BasicBlock(in_channels, out_channels, stride)]
        layers += [BasicBlock(out_channels, out_channels) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))  # (N, 16, 32, 32)
        x = self.layer1(x)  # (N, 16, 32, 32)
        x = self.layer2(x)  # (N, 32, 16, 16)
        x = self.layer3(x)  # (N, 64, 8, 8)
        x = torch.flatten(self.avgpool(x), 1)  # (N, 64)
        return self.fc(x)  # (N, 10) logits


def main():
    args = sys.argv[1:]
    if not args:
        net = ResNet20()
        print(net)
        for name, p in net.named_parameters():
            print(f"{name:28s} {tuple(p.shape)}")
        print("parameters:", sum(p.numel() for p in net.parameters()))
    elif args[0] == "outputs" and len(args) == 4:
        net = ResNet20().double()
        net.load_state_dict(safetensors_torch.load_file(args[1]))
        x = safetensors_torch.load_file(args[2])["x"]
        out = {}
        with torch.no_grad():
            net.eval()
            out["eval"] = net(x)
            net.train()
            out["train"] = net(x)
        for key, value in net.state_dict().items():
            out["after." + key] = value
        safetensors_torch.save_file({k: v.contiguous() for k, v in out.items()}, args[3])
    elif args[0] == "extract" and len(args) == 3:
        state = safetensors_torch.load_file(args[1])
        model = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
        if not model:
            sys.exit(f"{args[1]}: no 'model.' keys; not a kiln-lenet training checkpoint")
        ResNet20().load_state_dict(model)  # a strict check of the keys and shapes
        safetensors_torch.save_file(model, args[2])
    elif args[0] == "onnx" and len(args) == 3:
        net = ResNet20()
        net.load_state_dict(safetensors_torch.load_file(args[1]))
        net.eval()
        torch.onnx.export(net, torch.zeros(1, 3, 32, 32), args[2], input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
