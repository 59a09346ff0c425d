"""Encoders: shapes, unit-norm output, the ResNet stems (3x3 for 32x32 input, ImageNet's 7x7 + max-pool for 224), and argument errors."""
from __future__ import annotations

import pytest
import torch

from ctl_explore.models import (BACKBONES, DEFAULT_STEMS, STEMS, Encoder, SmallConvNet, build_encoder, resnet, resnet18_cifar,
                                resnet50)


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
    (lambda: build_encoder("resnet50", 3, stem="tiny"), "stem must be one of"),
    (lambda: build_encoder("convnet", stem="imagenet"), "stem applies to the ResNets only"),
    (lambda: resnet(101), "depth must be 18 or 50"),
    (lambda: resnet50(in_channels=0), "in_channels must be an integer >= 1"),
])
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_backbone_names():
    assert BACKBONES == ("convnet", "resnet18", "resnet50")


def _stem_output(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(): return net.maxpool(net.relu(net.bn1(net.conv1(x))))


def test_resnet50_has_the_imagenet_stem_by_default():
    "[WL21]'s ImageNet100 network: 7x7 stride-2 convolution, then a 3x3 stride-2 max-pool: 224 -> 56 before the first stage."
    for net in (resnet50(), build_encoder("resnet50", in_channels=3).backbone):
        assert net.conv1.kernel_size == (7, 7) and net.conv1.stride == (2, 2) and net.conv1.padding == (3, 3)
        assert isinstance(net.maxpool, torch.nn.MaxPool2d) and net.maxpool.stride == 2
        assert net.stem == "imagenet" and net.feature_dim == 2048
        assert _stem_output(net, torch.randn(1, 3, 224, 224)).shape == (1, 64, 56, 56)


@pytest.mark.parametrize("backbone", ["resnet18", "resnet50"])
@pytest.mark.parametrize("stem", STEMS)
def test_either_stem_for_either_resnet(backbone, stem):
    net = build_encoder(backbone, in_channels=1, stem=stem).backbone
    assert net.stem == stem and net.conv1.in_channels == 1
    size = _stem_output(net, torch.randn(1, 1, 32, 32)).shape[-1]
    assert size == (32 if stem == "cifar" else 8)                                  # the ImageNet stem divides by 4
    assert build_encoder(backbone, 3).backbone.stem == DEFAULT_STEMS[backbone]     # the paper's choice unless told


def test_default_stems_keep_the_weights_initialisation():
    "A default stem builds the same network, with the same initial weights, as before the stem became a choice."
    import torchvision
    torch.manual_seed(0); new = build_encoder("resnet18", in_channels=3).backbone
    torch.manual_seed(0); old = torchvision.models.resnet18(weights=None)   # built as resnet18_cifar always built it
    old.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    old.maxpool, old.fc = torch.nn.Identity(), torch.nn.Identity()
    assert new.state_dict().keys() == old.state_dict().keys()
    assert all(torch.equal(new.state_dict()[k], old.state_dict()[k]) for k in old.state_dict())
