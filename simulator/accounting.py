"""Memory traffic, FLOPs and a roofline time estimate per launch.

Bytes are counted from the lanes that really ran: *logical* bytes are active lanes x
itemsize (what a cache-less GPU moves), *unique* bytes are the distinct bytes touched.
A kernel's *ideal* bytes are its inputs read once and its outputs written once (the unique
bytes it loaded plus those it stored); ``traffic_ratio`` = logical / ideal, and a kernel
moving more than ``WASTE_RATIO`` times its ideal is flagged. The roofline estimate for a
named GPU is max(DRAM bytes / bandwidth, FLOPs / peak) plus a fixed launch latency, with
DRAM bytes = the ideal bytes (a GPU's caches absorb a program's re-reads of its own tile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.races import AccessLog, logical_bytes, unique_bytes

WASTE_RATIO = 1.5


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bandwidth: float  # bytes/s, HBM peak
    fp32: float  # FLOP/s, non-tensor fp32 (elementwise math)
    tensor16: float  # FLOP/s, dense fp16/bf16 matrix ops
    tf32: float  # FLOP/s, dense tf32 matrix ops (fp32 dots)
    # Fraction of peak bandwidth a streaming kernel reaches (what copy kernels measure), and the
    # time of an empty launch on the device: a small kernel is never faster than that.
    efficiency: float = 0.85
    latency_s: float = 2.5e-6


# Vendors' datasheet figures (SXM / OAM parts, dense math, no sparsity).
GPUS: dict[str, GpuSpec] = {s.name: s for s in (
    GpuSpec("A100", 2.039e12, 19.5e12, 312e12, 156e12),
    GpuSpec("H100", 3.35e12, 67e12, 989e12, 494e12),
    GpuSpec("H200", 4.8e12, 67e12, 989e12, 494e12),
    GpuSpec("B200", 8.0e12, 80e12, 2250e12, 1100e12),
    GpuSpec("MI300X", 5.3e12, 81.7e12, 1307e12, 653.7e12),
)}


def gpu_spec(name: str, bandwidth: float | None = None) -> GpuSpec:
    """The spec of ``name`` (case-insensitive); ``bandwidth`` (bytes/s, e.g. measured) replaces the
    datasheet bandwidth and is taken as reached in full."""
    spec = next((s for key, s in GPUS.items() if key.lower() == name.lower()), None)
    if spec is None:
        raise ValueError(f"unknown GPU {name!r}: known are {', '.join(GPUS)}")
    if bandwidth is not None:
        if bandwidth <= 0:
            raise ValueError(f"bandwidth must be positive bytes/s, got {bandwidth}")
        spec = GpuSpec(spec.name, bandwidth, spec.fp32, spec.tensor16, spec.tf32, 1.0, spec.latency_s)
    return spec


@dataclass
class LaunchAccounting:
    kernel: str
    grid: tuple[int, int, int]
    loaded_bytes: int  # logical: active lanes x itemsize
    stored_bytes: int
    atomic_bytes: int
    unique_loaded_bytes: int
    unique_stored_bytes: int
    flops: int  # elementwise and reduction FLOPs (one per active or masked lane the program computed)
    dot_flops: int  # 2*M*N*K of every tl.dot

    @staticmethod
    def from_log(kernel: str, grid: tuple[int, int, int], log: AccessLog, args: Any, flops: int,
                 dot_flops: int) -> LaunchAccounting:
        return LaunchAccounting(kernel, grid, logical_bytes(log.reads), logical_bytes(log.writes),
                                logical_bytes(log.atomics), unique_bytes(log.reads),
                                unique_bytes(log.writes + log.atomics), flops, dot_flops)

    @property
    def moved_bytes(self) -> int:
        return self.loaded_bytes + self.stored_bytes + self.atomic_bytes

    @property
    def ideal_bytes(self) -> int:
        return self.unique_loaded_bytes + self.unique_stored_bytes

    @property
    def traffic_ratio(self) -> float:
        return self.moved_bytes / self.ideal_bytes if self.ideal_bytes else 1.0

    @property
    def wasteful(self) -> bool:
        return self.traffic_ratio > WASTE_RATIO

    def estimate_s(self, gpu: str | GpuSpec = "H200") -> float:
        spec = gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)
        memory = self.ideal_bytes / (spec.bandwidth * spec.efficiency)
        compute = self.flops / spec.fp32 + self.dot_flops / spec.tensor16
        return spec.latency_s + max(memory, compute)

    def bound(self, gpu: str | GpuSpec = "H200") -> str:
        spec = gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)
        memory = self.ideal_bytes / (spec.bandwidth * spec.efficiency)
        compute = self.flops / spec.fp32 + self.dot_flops / spec.tensor16
        return "memory" if memory >= compute else "compute"

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "grid": list(self.grid), "loaded_bytes": self.loaded_bytes,
                "stored_bytes": self.stored_bytes, "atomic_bytes": self.atomic_bytes,
                "unique_loaded_bytes": self.unique_loaded_bytes, "unique_stored_bytes": self.unique_stored_bytes,
                "flops": self.flops, "dot_flops": self.dot_flops, "moved_bytes": self.moved_bytes,
                "ideal_bytes": self.ideal_bytes, "traffic_ratio": self.traffic_ratio,
                "est_h200_s": self.estimate_s("H200")}

    def describe(self, gpu: str = "H200") -> str:
        flag = "  (moves more than 1.5x its ideal bytes)" if self.wasteful else ""
        return (f"{self.kernel} grid {self.grid}: loaded {self.loaded_bytes} B ({self.unique_loaded_bytes} unique), "
                f"stored {self.stored_bytes} B ({self.unique_stored_bytes} unique), {self.flops + self.dot_flops} "
                f"FLOPs, traffic {self.traffic_ratio:.2f}x ideal{flag}; {gpu} estimate "
                f"{self.estimate_s(gpu) * 1e6:.2f} us ({self.bound(gpu)}-bound)")
