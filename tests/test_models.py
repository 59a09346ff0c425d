"""Encoders: shapes, unit-norm output, the ResNet18 stem for 32x32 input, and argument errors."""
from __future__ import annotations

import pytest
import torch

from ctl_explore.models import BACKBONES, Encoder, SmallConvNet, build_encoder, resnet18_cifar


@pytest.mark.parametrize("head", ["linear", "mlp"])
@pytest.mark.parametrize("size", [16, 32])
def test_convnet_encoder_output_on_sphere(head, size):
    torch.manual_seed(0)
    enc = build_encoder("convnet", in_channels=1, out_dim=32, head=head)
    z = enc(torch.randn(4, 1, size, size))
    assert z.shape == (4, 32)
    torch.testing.assert_close(z.norm(dim=1), torch.ones(4))
    assert enc.features(torch.randn(4, 1, size, size)).shape == (4, enc.feature_dim)


def test_resnet18_stem_keeps_resolution():
    net = resnet18_cifar(3)
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert isinstance(net.maxpool, torch.nn.Identity)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 512)


def test_encoder_trains():
    torch.manual_seed(0)
    enc = build_encoder("convnet", in_channels=1, out_dim=16, width=8)
    opt = torch.optim.SGD(enc.parameters(), lr=0.1)
    x = torch.randn(8, 1, 16, 16)
    target = torch.nn.functional.normalize(torch.randn(8, 16), dim=1)
    losses = []
    for _ in range(20):
        loss = -(enc(x) * target).sum(1).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1


@pytest.mark.parametrize("call, message", [
    (lambda: build_encoder("vgg"), "backbone must be one of"),
    (lambda: build_encoder(head="deep"), "head must be one of"),
    (lambda: build_encoder(out_dim=0), "out_dim must be an integer >= 1"),
    (lambda: SmallConvNet(in_channels=0), "in_channels must be an integer >= 1"),
    (lambda: SmallConvNet(width=2.5), "width must be an integer >= 1"),
    (lambda: Encoder(torch.nn.Linear(3, 3)), "feature_dim"),
])
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_backbone_names():
    assert BACKBONES == ("convnet", "resnet18", "resnet50")
