"""ootest's generic test for model-derived op calls (docs/model.md).

Every ``edits.ops.include`` entry with ``sample_inputs_func`` listed under
``TestModelOps::test_model_op`` becomes one variant: the declared call runs on the
device under test and on the CPU with the same inputs (same values, same layout)
and the results must agree within the variant's precision. A call that raises on
the CPU must raise the same exception type on the device. What ``ootest model
record`` writes targets this test; a backend may list the same entries under its
own ``@ops`` test instead.

The op list is empty on purpose: only an ootest config fills it.
"""

from __future__ import annotations

import unittest
from typing import Any

import torch
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase, run_tests

if not getattr(ops._parametrize_test, "__ootest_injection__", False):
    raise unittest.SkipTest(
        "ootest's model-op test runs only with an ootest config that injects model calls "
        "(edits.ops.include entries with sample_inputs_func); see docs/model.md"
    )

SEED = 0
# Calls whose results are not determined by their inputs: uninitialized memory, or
# random numbers a device draws from its own generator. Only their metadata is compared.
_UNDETERMINED = {
    "torch.empty",
    "torch.empty_like",
    "torch.empty_strided",
    "torch.Tensor.new_empty",
    "torch.Tensor.new_empty_strided",
    "torch.rand",
    "torch.rand_like",
    "torch.randn",
    "torch.randn_like",
    "torch.randint",
    "torch.randint_like",
    "torch.randperm",
    "torch.normal",
    "torch.bernoulli",
    "torch.multinomial",
    "torch.poisson",
    "torch.Tensor.uniform_",
    "torch.Tensor.normal_",
    "torch.Tensor.random_",
    "torch.Tensor.bernoulli_",
    "torch.Tensor.exponential_",
    "torch.nn.functional.dropout",
}


def _call(op: Any, sample: Any) -> tuple[Any, BaseException | None]:
    torch.manual_seed(SEED)  # random ops (dropout...) draw the same numbers on both
    try:
        with torch.no_grad():
            return op(sample.input, *sample.args, **sample.kwargs), None
    except Exception as e:  # compared below: the device must fail the same way
        return None, e


class TestModelOps(TestCase):
    @ops([], dtypes=OpDTypes.supported)  # type: ignore[untyped-decorator]
    def test_model_op(self, device: str, dtype: torch.dtype, op: Any) -> None:
        samples = op.sample_inputs(device, dtype)
        references = op.sample_inputs("cpu", dtype)
        for sample, reference in zip(samples, references, strict=True):
            expected, cpu_error = _call(op, reference)
            actual, error = _call(op, sample)
            if cpu_error is not None:
                self.assertIsInstance(error, type(cpu_error), f"the CPU raised {cpu_error!r}")
                continue
            if error is not None:
                raise error
            if op.name in _UNDETERMINED:
                self.assertEqual(_meta(actual), _meta(expected))
                continue
            # outputs, and the inputs (in-place ops and setitem write into them)
            self.assertEqual(actual, expected, exact_device=False)
            self.assertEqual(sample.input, reference.input, exact_device=False)


def _meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype)
    if isinstance(x, list | tuple):
        return [_meta(v) for v in x]
    return x


instantiate_device_type_tests(TestModelOps, globals())  # type: ignore[no-untyped-call]

if __name__ == "__main__":
    run_tests()  # type: ignore[no-untyped-call]
