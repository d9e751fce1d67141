"""Vision models shaped like the ones the seed issue could not lower (MobileNetV2/V3, a YOLO neck).

Channel counts and input sizes are small so an audit takes well under a second; the op patterns
(depthwise convs, hardswish, squeeze-excite, batch-1 classifier, C2f split/cat, SPPF, upsampling)
are the ones that matter for which kernels Inductor calls.
"""

from __future__ import annotations

import torch
from torch import nn

from shimkit.audit.zoo._seeded import seeded


def conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.hardsigmoid(self.expand(nn.functional.relu(self.reduce(self.pool(x)))))
        return x * scale


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, hidden: int, cout: int, stride: int, kernel: int = 3,
                 act: type[nn.Module] = nn.ReLU6, squeeze: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(conv_bn(cin, hidden, 1, act=act))
        layers.append(conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=act))
        if squeeze:
            layers.append(SqueezeExcite(hidden, max(8, hidden // 4)))
        layers.append(conv_bn(hidden, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.residual else out


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 100) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.Hardswish),
            InvertedResidual(16, 16, 16, 2, act=nn.ReLU, squeeze=True),
            InvertedResidual(16, 72, 24, 2, act=nn.ReLU),
            InvertedResidual(24, 96, 24, 1, kernel=5, act=nn.Hardswish, squeeze=True),
            conv_bn(24, 96, 1, act=nn.Hardswish),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(96, 128), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


@seeded
def mobilenet_v3_small():
    return MobileNetV3Small(), (torch.randn(1, 3, 64, 64),)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 100) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.ReLU6),
            InvertedResidual(16, 16, 8, 1),
            InvertedResidual(8, 48, 16, 2),
            InvertedResidual(16, 64, 16, 1),
            conv_bn(16, 64, 1, act=nn.ReLU6),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


@seeded
def mobilenet_v2():
    return MobileNetV2(), (torch.randn(1, 3, 64, 64),)


class C2f(nn.Module):
    """YOLOv8's C2f: split the projection in two, grow it with bottlenecks, concatenate all."""

    def __init__(self, cin: int, cout: int, blocks: int = 2) -> None:
        super().__init__()
        self.hidden = cout // 2
        self.project = conv_bn(cin, 2 * self.hidden, 1, act=nn.SiLU)
        self.blocks = nn.ModuleList(
            conv_bn(self.hidden, self.hidden, 3, act=nn.SiLU) for _ in range(blocks))
        self.fuse = conv_bn((2 + blocks) * self.hidden, cout, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.project(x).split((self.hidden, self.hidden), dim=1))
        for block in self.blocks:
            parts.append(parts[-1] + block(parts[-1]))
        return self.fuse(torch.cat(parts, dim=1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.reduce = conv_bn(cin, cin // 2, 1, act=nn.SiLU)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.fuse = conv_bn(cin * 2, cout, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)
        p1 = self.pool(x)
        p2 = self.pool(p1)
        return self.fuse(torch.cat((x, p1, p2, self.pool(p2)), dim=1))


class YoloNeckHead(nn.Module):
    """A two-scale YOLO neck (SPPF, upsample, C2f) and a detection head per scale."""

    def __init__(self, classes: int = 8, reg_max: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 3, 2, act=nn.SiLU), conv_bn(16, 32, 3, 2, act=nn.SiLU))
        self.down = conv_bn(32, 64, 3, 2, act=nn.SiLU)
        self.sppf = SPPF(64, 64)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.merge = C2f(64 + 32, 32, 1)
        self.outputs = 4 * reg_max + classes
        self.heads = nn.ModuleList(
            nn.Sequential(conv_bn(c, 32, 3, act=nn.SiLU), nn.Conv2d(32, self.outputs, 1)) for c in (32, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.stem(x)
        p4 = self.sppf(self.down(p3))
        p3 = self.merge(torch.cat((self.up(p4), p3), dim=1))
        flat = [head(p).flatten(2) for head, p in zip(self.heads, (p3, p4))]
        return torch.cat(flat, dim=2)


@seeded
def yolo_neck_head():
    return YoloNeckHead(), (torch.randn(1, 3, 64, 64),)


class SegformerDecodeHead(nn.Module):
    """SegFormer's all-MLP decode head: each stage's tokens projected, laid back out as an image
    (``permute`` then ``reshape``: a channels-last view once view_copy becomes view) and upsampled
    bilinearly to the first stage's size, then fused."""

    def __init__(self, widths: tuple[int, ...] = (16, 32), hidden: int = 16, labels: int = 4) -> None:
        super().__init__()
        self.projections = nn.ModuleList(nn.Linear(width, hidden) for width in widths)
        self.fuse = nn.Conv2d(hidden * len(widths), hidden, 1)
        self.classify = nn.Conv2d(hidden, labels, 1)

    def forward(self, large: torch.Tensor, small: torch.Tensor) -> torch.Tensor:
        maps = []
        for tokens, side, projection in ((large, 16, self.projections[0]), (small, 8, self.projections[1])):
            image = projection(tokens).permute(0, 2, 1).reshape(tokens.shape[0], -1, side, side)
            maps.append(nn.functional.interpolate(image, size=(16, 16), mode="bilinear", align_corners=False))
        return self.classify(torch.relu(self.fuse(torch.cat(maps[::-1], dim=1))))


@seeded
def segformer_decode_head():
    return SegformerDecodeHead(), (torch.randn(1, 256, 16), torch.randn(1, 64, 32))
