"""The benchmark graph of issue 3: a pre-norm transformer exported to the edge dialect.

48 blocks of width 32 on input (1, 8, 32) give 2,546 edge nodes with torch 2.13; each block adds 53.
"""

from __future__ import annotations

import time

import torch
from torch import nn

NODES_PER_BLOCK = 53
FIXED_NODES = 2546 - 48 * NODES_PER_BLOCK


class Block(nn.Module):
    """LayerNorm → Linear(d, 3d) → split q, k, v → softmax(q @ kᵀ) @ v → Linear(d, d), residual;
    LayerNorm → Linear(d, 4d) → GELU → Linear(4d, d), residual."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.norm1, self.qkv, self.proj = nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.norm2, self.fc1, self.fc2 = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).split(x.shape[-1], dim=-1)
        x = x + self.proj(torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, blocks: int, width: int = 32) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def blocks_for(nodes: int) -> int:
    """How many blocks give (about) ``nodes`` edge nodes."""
    return max(1, round((nodes - FIXED_NODES) / NODES_PER_BLOCK))


def edge_program(blocks: int = 48, seed: int = 0):
    """``(model, example_input, edge ExportedProgram, seconds to build)``: export, then ``to_edge``
    with the IR validity check off, as in the issue."""
    from executorch.exir import EdgeCompileConfig, to_edge

    torch.manual_seed(seed)
    model = Transformer(blocks).eval()
    example = torch.randn(1, 8, 32)
    started = time.perf_counter()
    exported = torch.export.export(model, (example,))
    edge = to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return model, example, edge.exported_program(), time.perf_counter() - started


def repeated_program(program, copies: int):
    """``program`` with its body run ``copies`` times in a chain, the copies sharing its parameters.

    Builds a graph of about ``copies`` times the nodes in seconds, where ``to_edge`` on a model that
    large takes many minutes (1,221 s at 100k nodes). The body maps ``(1, 8, 32)`` to ``(1, 8, 32)``, so
    each copy's values (``meta["val"]``) hold unchanged; the signature is kept: the last copy is the
    original body, whose output node names the program's output.
    """
    import copy

    from torch import fx

    module = copy.deepcopy(program.graph_module)
    graph = module.graph
    (user_input,) = [n for n in graph.find_nodes(op="placeholder")
                     if n.name in program.graph_signature.user_inputs]
    body = [n for n in graph.nodes if n.op == "call_function"]
    (body_output,) = graph.output_node().args[0]
    current = user_input
    for _ in range(copies - 1):
        env: dict[fx.Node, fx.Node] = {user_input: current}
        with graph.inserting_before(body[0]):
            for node in body:
                env[node] = graph.node_copy(node, lambda n: env.get(n, n))
        current = env[body_output]
    for node in body:
        node.replace_input_with(user_input, current)
    graph.lint()
    module.recompile()
    return program._update(module, program.graph_signature)
