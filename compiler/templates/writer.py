"""What template renderers share: an expression writer over tile variables, and the module text."""

from __future__ import annotations

import hashlib

from compiler.codegen.base import RenderedKernel
from compiler.codegen.triton import SYMBOL_PLACEHOLDER, TL_DTYPE, TritonRenderer, _KernelWriter
from compiler.ir import Expr, Op
from compiler.kernel_names import kernel_symbol
from compiler.scheduler import Kernel


# the templates' batch index: one program's scalar ``tl.program_id``, not a tile of indices
SCALAR_INDEX = "xb"


class ExprWriter(_KernelWriter):
    """Renders IR expressions inside a template: XVAR(d) is ``var_names[d]`` (a tile of indices), every
    load is masked by ``mask`` and reads of the template's accumulator are ``acc_code``. Writers of
    one kernel share the parameter names (``shared``) and get distinct temporaries (``prefix``)."""

    def __init__(self, renderer: TritonRenderer, k: Kernel, var_names: dict[int, str], mask: str | None,
                 acc: str = "", acc_code: str = "acc", prefix: str = "t", shared: ExprWriter | None = None) -> None:
        super().__init__(renderer, k)
        self.var_names = var_names
        self.mask = mask
        self.acc = acc
        self.acc_code = acc_code
        self.prefix = prefix
        # the writers of one kernel: any of them may call libdevice, which the module then imports
        self.family: list[ExprWriter] = shared.family if shared is not None else []
        self.family.append(self)
        if shared is not None:
            self.params = shared.params

    def uses_libdevice(self) -> bool:
        """Whether an expression of this kernel's writers calls ``triton.language.extra.libdevice``."""
        return any(w.libdevice for w in self.family)

    def param(self, buffer: str) -> str:
        """The kernel parameter holding ``buffer`` (positional, shared by the kernel's writers)."""
        return self.params.name(buffer)

    def signature(self) -> tuple[list[str], list[str]]:
        """Parameter names and their buffers, in order."""
        return [name for _, name in self.params.signature()], list(self.params.buffers)

    def tmp(self, e: Expr, code: str, section: list[str] | None = None) -> str:
        name = f"{self.prefix}{self.counter}"
        self.counter += 1
        (section if section is not None else self.pre).append(f"{name} = {code}")
        self.names[e] = name
        return name

    def expr(self, e: Expr) -> str:
        if e.op is Op.XVAR:
            return self.var_names[e.arg]
        return super().expr(e)

    def mask_for(self, e: Expr) -> str | None:
        """The tile mask for a load at index ``e``; none when ``e`` depends on no tile variable (only on
        the scalar batch index ``xb``, or nothing): a scalar pointer takes no block mask (Triton:
        "Mask argument cannot be block type if pointer argument is not a block"; an attention query
        broadcast along its sequence and head dims, fuzzer, crucible-interpret:extern=none, seed 1),
        and every lane would read the same in-bounds element anyway."""
        tiles = any(s.op is Op.XVAR and self.var_names[s.arg] != SCALAR_INDEX for s in e.walk())
        return self.mask if tiles else None

    def load(self, e: Expr) -> str:
        if e.arg == self.acc:
            return self.acc_code
        return super().load(e)

    def value(self, e: Expr) -> str:
        """``e`` rendered (lines in ``self.pre``), as an expression of its compute dtype."""
        return self.expr(e)

    def stores(self, k: Kernel, shape: str) -> list[str]:
        """The epilogue: every kept store of ``k`` at its index, masked by ``self.mask``."""
        for store in k.live_stores():
            value = self.expr(store.value)
            if store.value.op is Op.CONST or not any(s.op is Op.XVAR for s in store.value.walk()):
                # (a Python float has no type to broadcast: add it to a tile instead)
                value = f"(tl.full({shape}, 0, tl.float32) + {value})"
            index = self.index_code(store.index)
            if self.mask_for(store.index) is None and self.mask is not None:
                # an output whose every dim is 1 (a 1x1 GEMM): its index is a constant, a scalar
                # pointer, which takes neither the tile's value nor its mask (Triton: "Value argument
                # cannot be block type if pointer argument is not a block"; fuzzer,
                # crucible-interpret:extern=none, seed 171: log10(addmm) of a [1, 2] x [2, 1]
                # product). A pointer per lane, all to that element; the mask keeps the one in range.
                index = f"{index} + tl.full({shape}, 0, tl.int32)"
            ptr = self.param(store.buffer)
            self.pre.append(f"tl.store({ptr} + ({index}), ({value}).to({TL_DTYPE[store.value.dtype]}), {self.mask})")
        return self.pre


def finish_source(k: Kernel, params: list[str], consts: list[str], body: list[str], title: str,
                  args: list[str], launches: list[tuple[tuple[int, ...], dict]], tuning_key: str = "",
                  libdevice: bool = False, size_launch: object = None) -> RenderedKernel:
    """The ``@triton.jit`` module text, named by content like the pointwise kernels; ``tuning_key``
    names what the tuned launch config depends on (``compiler.tuning_cache``); ``libdevice``: the body
    calls it (``ExprWriter.uses_libdevice``); ``size_launch``: a size-generic kernel's per-launch
    config (``compiler.templates.launch``), whose size arguments end ``params``."""
    origins = ", ".join(dict.fromkeys(k.origins)) or "(none)"
    src = ["import triton", "import triton.language as tl",
           *(["from triton.language.extra import libdevice"] if libdevice else []), "", "", "@triton.jit",
           f"def {SYMBOL_PLACEHOLDER}({', '.join(params + [c + ': tl.constexpr' for c in consts])}):",
           f"    # template {title}; fused: {origins}"]
    src += ["    " + line if line else "" for line in body]
    text = "\n".join(src) + "\n"
    # readable in profiles like the pointwise kernels' names: the template's family, then the ops it
    # fuses (``k_gemm_addmm_gelu_3f2a9b1c04de``)
    symbol = kernel_symbol([title.split()[0], *k.origins], hashlib.sha256(text.encode()).hexdigest())
    grid, meta = launches[0]
    return RenderedKernel(k.name, "triton", text.replace(SYMBOL_PLACEHOLDER, symbol), tuple(args), grid, meta,
                          tuple(launches[1:]), symbol, tuning_key if len(launches) > 1 else "",
                          sizes=k.size_args if size_launch is not None else (), size_launch=size_launch)
