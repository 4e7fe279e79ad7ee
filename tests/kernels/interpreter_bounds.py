"""Out-of-bounds accesses of Triton kernels run by its interpreter (TRITON_INTERPRET=1), which reads and writes
host memory without faulting: while ``recording_accesses`` is active, every load and store whose unmasked
addresses do not all lie inside one tensor argument of its launch is recorded (kernel, access, the range hit)."""

import contextlib
import inspect

import numpy as np
import torch
from triton.runtime import interpreter


@contextlib.contextmanager
def recording_accesses():
    """Yields the list that the out-of-bounds loads and stores of the kernels launched inside are appended to."""
    violations, launch = [], {"kernel": None, "tensors": []}
    builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    original_call, original_load, original_store = (executor.__call__, builder.create_masked_load,
                                                    builder.create_masked_store)

    def call(self, *args, **kwargs):
        bound = {**dict(zip(inspect.getfullargspec(self.fn).args, args)), **kwargs}
        launch["kernel"] = self.fn.__name__
        launch["tensors"] = [(name, x.data_ptr(), x.data_ptr() + x.numel() * x.element_size())
                             for name, x in bound.items() if isinstance(x, torch.Tensor)]
        return original_call(self, *args, **kwargs)

    def check(access, pointers, mask):
        element_size = np.dtype(interpreter._get_np_dtype(pointers.get_element_ty())).itemsize
        addresses = pointers.data.astype(np.uint64)[np.broadcast_to(mask.data, pointers.data.shape)]
        if addresses.size == 0:
            return
        low, high = int(addresses.min()), int(addresses.max()) + element_size
        if not any(start <= low and high <= end for _, start, end in launch["tensors"]):
            hit = [(name, low - start, end - start) for name, start, end in launch["tensors"] if start <= low < end]
            violations.append(f"{launch['kernel']} {access}: bytes [{low}, {high}) leave every tensor argument; "
                              f"(tensor, first byte, its size) {hit}")

    def load(self, pointers, mask, other, *rest):
        check("load", pointers, mask)
        return original_load(self, pointers, mask, other, *rest)

    def store(self, pointers, value, mask, *rest):
        check("store", pointers, mask)
        return original_store(self, pointers, value, mask, *rest)

    executor.__call__, builder.create_masked_load, builder.create_masked_store = call, load, store
    try:
        yield violations
    finally:
        executor.__call__, builder.create_masked_load, builder.create_masked_store = (original_call, original_load,
                                                                                      original_store)
