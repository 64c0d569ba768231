#!/usr/bin/python3
"""The PyTorch twin of Kiln's nn::LeNet (nn/models/lenet.h).

The classic LeNet-5 of the PyTorch CIFAR-10 tutorial, with the same submodule
names as Kiln's, so that a state dict saved by either loads into the other
("conv1.weight", "conv1.bias", ..., "fc3.bias"; 62,006 parameters). The parity
tests import it:

    from lenet_torch import LeNet
    net = LeNet()
    net.load_state_dict(safetensors_torch.load_file("lenet.safetensors"))

As a command, `lenet_torch.py` prints the model and its parameter names,
shapes and count.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))  # (N, 6, 14, 14)
        x = self.pool(F.relu(self.conv2(x)))  # (N, 16, 5, 5)
        x = torch.flatten(x, 1)  # (N, 400)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)  # (N, 10) logits


if __name__ == "__main__":
    net = LeNet()
    print(net)
    for name, p in net.named_parameters():
        print(f"{name:14s} {tuple(p.shape)}")
    print("parameters:", sum(p.numel() for p in net.parameters()))
