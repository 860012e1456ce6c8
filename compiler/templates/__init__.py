"""Kernel templates: matmuls and attention as generated Triton kernels instead of ATen calls.

A template is data: ``spec.GemmTemplate`` / ``spec.AttentionTemplate`` say which op, on which
operand expressions (loop IR over the template's index variables), with which output. Lowering
(``rules``, ``conv``) turns ``aten.mm``/``addmm``/``bmm``, the SDPA ops and 2-d convolutions (an
implicit GEMM on the GEMM template) into a ``TemplateNode`` when the
``extern`` option and the measured rule (``policy``) say so; otherwise the op stays an extern call
with its reason. The scheduler (``scheduling``) fuses the pointwise consumers of a template's output
into its epilogue, in the same expression IR pointwise kernels use; the Triton renderer
(``render``: ``gemm``, ``attention``) writes the template's loop and renders operand prologues and
the epilogue with the pointwise kernels' expression renderer. Tile configs come from ``tiles``.
"""
