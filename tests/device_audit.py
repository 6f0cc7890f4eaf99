"""A virtual accelerator on a CPU-only build: device bugs found without a GPU.

On a GPU, DeepSpeed puts the model on ``cuda:LOCAL_RANK``, and any tensor the code builds without a
device lands on the CPU; the first op that mixes the two fails ("Expected all tensors to be on the
same device"). A CPU-only build of torch cannot make a CUDA tensor (FakeTensorMode cannot fake CUDA
ops there, and a meta-device HF forward stops at ``.item()``), so :class:`VirtualCuda` keeps every
tensor real and on the CPU and tracks, beside it, where it *would* live:

* a tensor is *on the device* when it was made with ``device=cuda…`` (a factory, ``.to``, ``.cuda()``)
  or computed from a tensor on the device; its ``.device`` then reads ``cuda:0``, so code that follows
  ``x.device`` behaves as on a GPU. Everything else (``torch.zeros(n)`` with no device, ``.cpu()``,
  ``device="cpu"``) is on the host;
* an op outside DeepSpeed's own code that mixes device tensors with host tensors of one or more
  dimensions raises :class:`DeviceMismatch`, as CUDA would (a 0-dim host tensor mixes freely, as on
  CUDA; ``copy_`` and indexing with host indices are allowed, as on CUDA);
* a sampler handed a host ``torch.Generator`` for device probabilities raises too;
* an op whose CUDA kernel refuses mixed floating dtypes (matmul, linear, attention, the index ops that
  write one tensor into another) raises :class:`DtypeMismatch` when its floating inputs of one or more
  dimensions differ in dtype (what a bf16 model meeting an fp32 tensor does on a GPU);
* every host synchronisation on a device tensor is counted in ``syncs`` (by kind) and ``sync_sites`` (by
  the caller's file and line): ``.item()``, ``.tolist()``, ``bool``/``int``/``float``/``index`` of a
  tensor, ``.cpu()``, ``.numpy()``, a blocking copy to the host, ``nonzero``, boolean-mask indexing,
  ``masked_select``, ``unique``, and ``repeat_interleave`` by a tensor (each waits for the device, or
  sizes its output from device data). A non-blocking copy to the host is not one.

DeepSpeed's engine keeps its own CPU accelerator here (its buffers are neither checked nor trusted:
a parameter stays on the device when DeepSpeed swaps its ``.data``), so the test sees the code that
oxbench owns, and HF's forward, under the placement a GPU would give.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

FAKE = torch.device("cuda", 0)
HOST = torch.device("cpu")
_FREE = {torch.Tensor.copy_, torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.index_put_}
_FREE |= {torch.Tensor.index_put, torch.Tensor.__repr__, torch.Tensor.__format__}
_FREE |= {torch._has_compatible_shallow_copy_type}  # metadata only


class DeviceMismatch(RuntimeError):
    """What CUDA would raise: an op mixed tensors on the accelerator with tensors on the host."""


class DtypeMismatch(RuntimeError):
    """What CUDA would raise: a matmul, attention or index op mixed floating dtypes (bf16 with fp32)."""


F = torch.nn.functional
T = torch.Tensor
# ops whose CUDA kernels take one floating dtype for all their tensor inputs
SAME_DTYPE = {torch.matmul, T.matmul, T.__matmul__, T.__rmatmul__, torch.mm, T.mm, torch.bmm, T.bmm}
SAME_DTYPE |= {torch.addmm, T.addmm, torch.baddbmm, T.baddbmm, torch.einsum, F.linear, F.bilinear}
SAME_DTYPE |= {F.scaled_dot_product_attention, torch.index_put, T.index_put, T.index_put_}
SAME_DTYPE |= {torch.scatter, T.scatter, T.scatter_, torch.scatter_add, T.scatter_add, T.scatter_add_}
SAME_DTYPE |= {torch.index_add, T.index_add, T.index_add_, torch.index_copy, T.index_copy, T.index_copy_}
SAME_DTYPE |= {T.masked_scatter, T.masked_scatter_, torch.masked_scatter}
# ops that read a device value on the host (each waits for the device to reach it)
SYNCS = {T.item: "item", T.tolist: "tolist", T.__bool__: "bool", T.__int__: "int", T.__float__: "float"}
SYNCS |= {T.__index__: "index", T.numpy: "numpy", torch.nonzero: "nonzero", T.nonzero: "nonzero"}
SYNCS |= {torch.masked_select: "masked_select", T.masked_select: "masked_select", torch.unique: "unique"}
SYNCS |= {T.unique: "unique", torch.argwhere: "nonzero", T.argwhere: "nonzero"}
_INDEXING = {T.__getitem__, T.__setitem__, T.index_put, T.index_put_, torch.index_put}


def _is_fake(dev) -> bool:
    if isinstance(dev, str):
        dev = torch.device(dev)
    return isinstance(dev, torch.device) and dev.type == "cuda"


def _is_device(x) -> bool:
    return isinstance(x, str | torch.device) and x not in ("", None)


class VirtualGenerator:
    """``torch.Generator(device=…)`` that accepts ``cuda`` on a CPU-only build and remembers it."""

    def __new__(cls, device="cpu"):
        gen = _REAL_GENERATOR("cpu")
        _GEN_DEVICE[gen] = _is_fake(device)
        return gen


_REAL_GENERATOR = torch.Generator
_DEVICE_ATTR = torch._C.TensorBase.__dict__["device"]
_IS_CUDA_ATTR = torch._C.TensorBase.__dict__["is_cuda"]
_GEN_DEVICE: WeakIdKeyDictionary = WeakIdKeyDictionary()


_PROPS = SimpleNamespace(
    name="virtual H200", major=9, minor=0, total_memory=140 * 2**30, multi_processor_count=132
)
# what libraries ask a GPU about itself once they see a cuda tensor (transformers' kernel lookup)
_CUDA_ANSWERS = {
    "get_device_capability": lambda device=None: (9, 0),
    "get_device_properties": lambda device=None: _PROPS,
    "get_device_name": lambda device=None: _PROPS.name,
    "current_device": lambda: 0,
}


_PASS_THROUGH = (
    "/torch/",
    "typing_extensions",
    "/contextlib.py",
    "/functools.py",
)  # frames between a call and its op


def _in_deepspeed() -> bool:
    """Whether the op's caller (the first frame outside torch itself) is DeepSpeed's own code."""
    f = sys._getframe(2)
    while f is not None and any(part in f.f_code.co_filename for part in _PASS_THROUGH):
        f = f.f_back
    return f is not None and "/deepspeed/" in f.f_code.co_filename


def _deepspeed_on_stack() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if "/deepspeed/" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def _tensors(args, kwargs) -> Iterator[torch.Tensor]:
    leaves, _ = tree_flatten((args, kwargs))
    return (x for x in leaves if isinstance(x, torch.Tensor))


class VirtualCuda(TorchFunctionMode):
    """The mode: enter it around code that should run on ``cuda:0``; ``errors`` collects what failed."""

    def __init__(self):
        super().__init__()
        self.on = WeakIdKeyDictionary()  # tensors that live on the virtual device
        self.ops: dict[str, int] = {"checked": 0, "moved": 0}
        self.syncs: Counter[str] = Counter()  # host synchronisations on device tensors, by kind
        self.sync_sites: Counter[str] = Counter()  # the same, by kind and the caller's file:line

    def __enter__(self):
        torch.Generator = VirtualGenerator
        self._saved = {name: getattr(torch.cuda, name) for name in _CUDA_ANSWERS}
        for name, answer in _CUDA_ANSWERS.items():
            setattr(torch.cuda, name, answer)
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Generator = _REAL_GENERATOR
        for name, fn in self._saved.items():
            setattr(torch.cuda, name, fn)
        return super().__exit__(*exc)

    def place(self, *modules: torch.nn.Module) -> None:
        """Mark modules as already on the device (what ``module.to(cuda)`` does)."""
        for m in modules:
            for t in (*m.parameters(), *m.buffers()):
                self.on[t] = True

    def fake(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t in self.on

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        owner = getattr(func, "__self__", None)
        if owner is _DEVICE_ATTR:
            return FAKE if self.fake(args[0]) else func(*args)
        if owner is _IS_CUDA_ATTR:
            return self.fake(args[0])
        kind = self._sync_kind(func, args, kwargs)
        if kind is not None:
            self.syncs[kind] += 1
            self.sync_sites[f"{kind} at {_caller()}"] += 1
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            return self._move(func, args, kwargs)
        target = kwargs.get("device")
        if target is not None:
            kwargs = {**kwargs, "device": HOST}
        if target is None and func in SAME_DTYPE:
            self._check_dtypes(func, args, kwargs)
        if target is None and not _in_deepspeed():
            self._check(func, args, kwargs)
        out = func(*args, **kwargs)
        if func is torch.Tensor.copy_:  # the destination stays where it lives, whatever it copies from
            return out
        if (target is not None and _is_fake(target)) or (
            target is None and any(self.fake(t) for t in _tensors(args, kwargs))
        ):
            tree_map(lambda x: self.on.__setitem__(x, True) if isinstance(x, torch.Tensor) else x, out)
        return out

    def _check_dtypes(self, func, args, kwargs) -> None:
        """Everywhere, DeepSpeed's code too (its ZeRO-3 wraps ``F.linear``): CUDA refuses it there too."""
        floats = {t.dtype for t in _tensors(args, kwargs) if t.is_floating_point() and t.dim() > 0}
        if len(floats) > 1 and any(self.fake(t) for t in _tensors(args, kwargs)):
            raise DtypeMismatch(f"{_name(func)}: mixed dtypes {sorted(map(str, floats))} on cuda:0")

    def _check(self, func, args, kwargs) -> None:
        if func in _FREE:
            return
        self.ops["checked"] += 1
        tensors = [t for t in _tensors(args, kwargs) if not isinstance(t, torch.nn.Parameter) or t.dim()]
        on = [t for t in tensors if self.fake(t)]
        if on:
            off = [t for t in tensors if not self.fake(t) and t.dim() > 0]
            if off:
                shapes = [tuple(t.shape) for t in off]
                raise DeviceMismatch(f"{_name(func)}: host tensors {shapes} mixed with cuda:0 tensors")
            gen = kwargs.get("generator")
            if gen is not None and not _GEN_DEVICE.get(gen, False):
                raise DeviceMismatch(f"{_name(func)}: a host generator for cuda:0 tensors")

    def _sync_kind(self, func, args, kwargs) -> str | None:
        """The kind of host synchronisation ``func`` is on these arguments, or None."""
        if not args or not any(self.fake(t) for t in _tensors(args, kwargs)):
            return None
        if func in SYNCS:
            return SYNCS[func]
        blocking = not kwargs.get("non_blocking", False)
        if func is torch.Tensor.cpu and self.fake(args[0]):
            return "cpu"
        if func is torch.Tensor.to and self.fake(args[0]) and blocking:
            return None if self._to_target(args[0], args, kwargs)[0] else "to host"
        if func is torch.Tensor.copy_ and self.fake(args[1]) and not self.fake(args[0]):
            return "copy to host" if blocking and not (len(args) > 2 and args[2]) else None
        if func in _INDEXING and self.fake(args[0]):
            index = tree_flatten(args[1])[0]
            return (
                "boolean index"
                if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
                else None
            )
        if func in (torch.repeat_interleave, torch.Tensor.repeat_interleave) and len(args) > 1:
            return "repeat_interleave" if isinstance(args[1], torch.Tensor) else None
        if func is torch.where and len(args) == 1:
            return "nonzero"
        return None

    def _move(self, func, args, kwargs):
        """``.to`` / ``.cuda()`` / ``.cpu()``: the copy runs on the host; only the label moves."""
        src = args[0]
        if func is torch.Tensor.cuda:
            dest, args, kwargs = True, (src,), {}
        elif func is torch.Tensor.cpu:
            dest = False
        else:
            dest, args, kwargs = self._to_target(src, args, kwargs)
        dest = dest or _deepspeed_on_stack()  # DeepSpeed's "cpu" accelerator stands for the GPU
        out = func(*args, **kwargs)
        if dest and not self.fake(src):
            self.ops["moved"] += 1
        if dest:
            self.on[out] = True
        elif out is src and self.fake(src):  # host copy of a device tensor: a new tensor on the host
            out = src.view_as(src)
        return out

    def _to_target(self, src, args, kwargs):
        """(lands on the device?, args and kwargs with any cuda device replaced by the host)."""
        dest = self.fake(src)
        rest = list(args[1:])
        for i, a in enumerate(rest):
            if isinstance(a, torch.Tensor):
                dest = self.fake(a)
            elif _is_device(a) and not isinstance(a, torch.dtype):
                dest, rest[i] = _is_fake(a), HOST
        if "device" in kwargs:
            dest, kwargs = _is_fake(kwargs["device"]), {**kwargs, "device": HOST}
        return dest, (src, *rest), kwargs


def _caller() -> str:
    """``file:line`` of the first frame outside torch and this audit."""
    f = sys._getframe(2)
    while f is not None and (
        any(p in f.f_code.co_filename for p in _PASS_THROUGH) or f.f_code.co_filename == __file__
    ):
        f = f.f_back
    return "?" if f is None else f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno}"


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
