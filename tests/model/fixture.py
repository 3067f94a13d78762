"""A config in the shape of Torch Spyre's model-op and module configs, and the
upstream-style test file it injects into (our own, written for these tests)."""

from __future__ import annotations

# What each declared call must look like inside the test: by (op, entry axis), the
# shape, stride and storage offset of every tensor argument, and where it lives.
EXPECTED = {
    ("torch.mul", "1"): [([2, 41, 64], [5248, 128, 1], 64, "emu")],
    ("torch.nn.functional.embedding", "1"): [
        ([1, 7], [7, 1], 0, "emu"),
        ([100, 16], [1, 100], 0, "emu"),
    ],
    ("torch.cat", "1"): [([1, 5, 8], [80, 1, 5], 0, "emu"), ([1, 5, 8], [80, 1, 5], 40, "emu")],
    ("torch.getitem", "#3"): [([4, 6], [1, 4], 3, "emu")],
    ("torch.to", "1"): [([2, 3], [3, 1], 0, "cpu")],
    ("torch.reshape", "1"): [([2, 8, 4, 16], [128, 16, 0, 1], 0, "emu")],
    ("torch.le", "1"): [
        ([1, 1, 1, 9], [9, 9, 9, 1], 0, "emu"),
        ([1, 1, 5, 1], [5, 5, 1, 1], 0, "emu"),
    ],
    ("torch.add", "big"): [([1024, 1024], [1024, 1], 0, "emu")],
}

TEST_FILE = """
import json
import os

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_modules import modules
from torch.testing._internal.common_utils import TestCase

EXPECTED = EXPECTED_HERE
LOG = os.environ["MODEL_LOG"]


def _tensors(sample):
    out = []
    for x in (sample.input, *sample.args, *sample.kwargs.values()):
        out += x if isinstance(x, list) else [x]
    return [t for t in out if isinstance(t, torch.Tensor)]


def _fingerprint(t):
    flat = t.detach().cpu().double().flatten()
    return [round(float(flat.sum()), 6), [round(float(v), 6) for v in flat[:4]]]


class TestModelOps(TestCase):
    # Empty, as Torch Spyre's model_ops_db is without its config: the config fills it.
    @ops([])
    def test_model_ops_db(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            tensors = _tensors(sample)
            got = [
                (list(t.shape), list(t.stride()), t.storage_offset(), t.device.type)
                for t in tensors
            ]
            # exactly the declared layout, on the device under test
            self.assertEqual(got, [tuple(x) for x in EXPECTED[f"{op.name}|{op.model.entry}"]])
            with open(LOG, "a") as fh:
                fh.write(json.dumps({
                    "op": op.name, "entry": op.model.entry, "dtype": str(dtype),
                    "precision": self.precision, "rel_tol": self.rel_tol,
                    "values": [_fingerprint(t) for t in tensors],
                }) + "\\n")
            with torch.no_grad():
                actual = op(sample.input, *sample.args, **sample.kwargs)
                cpu = next(iter(op.sample_inputs("cpu", dtype)))
                expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            self.assertEqual(actual, expected, exact_device=False)

    @modules([])
    def test_forward(self, device, dtype, module_info, training):
        inputs = module_info.module_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=False, training=training
        )
        for mi in inputs:
            c, f = mi.constructor_input, mi.forward_input
            m = module_info.module_cls(*c.args, **c.kwargs).to(device).to(dtype)
            m.train(training)
            with torch.no_grad():
                out = m(*f.args, **f.kwargs)
                self.assertEqual(out, mi.reference_fn(m, *f.args, **f.kwargs), exact_device=False)
            with open(LOG, "a") as fh:
                shapes = [[list(t.shape), list(t.stride())] for t in f.args]
                fh.write(json.dumps({"module": module_info.name, "forward": shapes,
                                     "scale": m.scale, "hidden": m.lin.in_features}) + "\\n")


instantiate_device_type_tests(TestModelOps, globals())
"""


def upstream_file() -> str:
    expected = {f"{op}|{entry}": specs for (op, entry), specs in EXPECTED.items()}
    return TEST_FILE.replace("EXPECTED_HERE", repr(expected))


MODULES_FILE = '''
import torch


class TinyConfig:
    """Stands for a model config class (transformers' GraniteConfig...)."""

    def __init__(self):
        self.hidden = 8


class TinyBlock(torch.nn.Module):
    def __init__(self, config, scale=1.0):
        super().__init__()
        self.lin = torch.nn.Linear(config.hidden, config.hidden)
        self.scale = scale

    def forward(self, x, mask=None):
        y = self.lin(x) * self.scale
        return y if mask is None else y * mask
'''

CONFIG = """
test_suite_config:
  device: emu:full
  labels: [trunk]
  global:
    supported_dtypes:
      - {name: bfloat16, precision: {atol: 0.02, rtol: 0.016}}
      - {name: float16, precision: {atol: 0.005, rtol: 0.004}}
      - {name: float32, precision: {atol: 0.0001, rtol: 0.0002}}
      - {name: int64}
      - {name: bool}
    input_config:
      seed: 123
  files:
    - path: ./test_model_ops.py
      unlisted_test_mode: skip
      tests:
        - names:
            - TestModelOps::test_model_ops_db
          mode: mandatory_success
          tags:
            - model__tiny-llm
          edits:
            ops:
              include:
                - name: torch.mul
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [2, 41, 64]
                          stride: [5248, 128, 1]
                          storage_offset: 64
                          dtype: torch.bfloat16
                          device: cuda:0
                          init: rand
                      - value: 12.0
                  description: 'modeling_tiny.py#L40 in forward, code: x = x * self.multiplier'
                  tags:
                    - bf16operation
                    - constant
                    - torch.mul.1
                - name: torch.nn.functional.embedding
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [1, 7]
                          stride: [7, 1]
                          storage_offset: 0
                          dtype: torch.int64
                          device: cuda:0
                          init: randint
                          init_args:
                            high: 100
                      - tensor:
                          shape: [100, 16]
                          stride: [1, 100]
                          storage_offset: 0
                          dtype: torch.float32
                          device: cuda:0
                          init: randn
                      - value: 0
                      - value: null
                      - value: 2.0
                      - value: false
                      - value: false
                  tags:
                    - torch.nn.functional.embedding.1
                - name: torch.cat
                  sample_inputs_func:
                    args:
                      - tensor_list:
                          - shape: [1, 5, 8]
                            stride: [80, 1, 5]
                            storage_offset: 0
                            dtype: torch.float16
                            device: cuda:0
                            init: uniform
                            init_args: {low: -2, high: 2}
                          - shape: [1, 5, 8]
                            stride: [80, 1, 5]
                            storage_offset: 40
                            dtype: torch.float16
                            device: cuda:0
                            init: xavier
                    kwargs:
                      dim: -1
                  tags:
                    - torch.cat.1
                - name: torch.getitem
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [4, 6]
                          stride: [1, 4]
                          storage_offset: 3
                          dtype: torch.float32
                          device: cuda:0
                          init: normal
                          init_args: {mean: 1.0, std: 0.5}
                      - py: (slice(None, None, None), None, slice(1, 4, None))
                - name: torch.to
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [2, 3]
                          stride: [3, 1]
                          storage_offset: 0
                          dtype: torch.float32
                          device: cpu
                          init: arange
                    kwargs:
                      dtype: torch.float16
                      device: cuda:0
                  tags:
                    - tensorsoncpu
                    - torch.to.1
                - name: torch.reshape
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [2, 8, 4, 16]
                          stride: [128, 16, 0, 1]
                          storage_offset: 0
                          dtype: torch.bfloat16
                          device: cuda:0
                          init: rand
                      - value: (2, 32, 16)
                  tags:
                    - torch.reshape.1
                - name: torch.le
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [1, 1, 1, 9]
                          stride: [9, 9, 9, 1]
                          dtype: torch.int64
                          device: cuda:0
                          init: randint
                          init_args: {high: 10}
                      - tensor:
                          shape: [1, 1, 5, 1]
                          stride: [5, 5, 1, 1]
                          dtype: torch.int64
                          device: cuda:0
                          init: randint
                          init_args: {low: 2, high: 8}
                  tags:
                    - torch.le.1
                - name: torch.add
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [1024, 1024]
                          dtype: torch.float32
                          device: cuda:0
                      - value: 1
                  tags:
                    - torch.add.big
        - names:
            - TestModelOps::test_forward
          tags:
            - model__tiny-llm
          edits:
            modules:
              include:
                - name: TinyBlock_8
                  module_path: tiny_modules.TinyBlock
                  description: 'Module: tiny_modules.TinyBlock'
                  constructor_inputs:
                    args:
                      - value: <config:tiny_modules.TinyConfig>
                    kwargs:
                      scale: 0.5
                  forward_inputs:
                    - args:
                        - tensor:
                            shape: [2, 8]
                            stride: [1, 2]
                            storage_offset: 0
                            dtype: torch.float32
                            device: cuda:0
                            init: randn
                      kwargs: {}
                    - args:
                        - tensor:
                            shape: [1, 8]
                            stride: null
                            storage_offset: 0
                            dtype: torch.float32
                            device: cuda:0
                            init: randn
                      kwargs:
                        mask:
                          tensor:
                            shape: [1, 8]
                            stride: null
                            dtype: torch.float32
                            device: cuda:0
                            init: ones
                - name: GraniteRMSNorm_4096
                  module_path: not_installed_pkg.models.granite.GraniteRMSNorm
                  constructor_inputs:
                    args:
                      - value: 4096
                  forward_inputs:
                    - args:
                        - tensor:
                            shape: [1, 128, 4096]
                            dtype: torch.bfloat16
                            device: cuda:0
                            init: randn
"""
