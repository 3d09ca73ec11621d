"""The optimizer's storage per parameter (weights, gradients, Adam's states) and what its step moves: one
definition for the memory model (schedule.memory.stage_memory) and the optimizer step's time
(workload.graph.optimizer_traffic)."""
from __future__ import annotations

from ..constants import value
from ..specs.framework import FrameworkProfile

_ADAM_WITH_MASTER = value("memory.adam_bytes_per_param_with_master")        # fp32 master, m, v
_ADAM_WITHOUT_MASTER = value("memory.adam_bytes_per_param_without_master")  # fp32 m, v
_ADAM_BF16_MOMENTS = value("memory.adam_bytes_per_param_bf16_moments")  # fp32 master, bf16 m, v
_ADAM_BF16_NO_MASTER = value("memory.adam_bytes_per_param_bf16_moments_without_master")  # bf16 m, v
_BF16_MASTER = value("memory.bf16_master_bytes_per_param")   # a bf16 master copy (apex DistributedFusedAdam)


def optimizer_storage_bytes(fw: FrameworkProfile, precision: str) -> tuple[int, int, float]:
    """(bytes per parameter of the stored weights, of the gradients, of the optimizer's states): the one
    definition ``stage_memory`` holds and the optimizer step's traffic reads and writes
    (workload.graph.optimizer_traffic)."""
    fp32 = precision == "fp32"
    if fw.master_in_optimizer and not fp32 and not fw.master_weights:
        # the optimizer steps the 16-bit weights themselves, its moments in their dtype (torch.optim.Adam
        # on bf16 parameters; for_plan's default without a master copy) or in fp32
        return 2, fw.grad_reduce_bytes, _ADAM_BF16_NO_MASTER if fw.adam_moments_bf16 else _ADAM_WITHOUT_MASTER
    if fw.master_in_optimizer and not fp32 and fw.master_weights_bf16:
        # the moments in their dtype beside a bf16 master shard (apex DistributedFusedAdam store_params with
        # dtype=bf16)
        return 2, fw.grad_reduce_bytes, \
            (_ADAM_BF16_NO_MASTER if fw.adam_moments_bf16 else _ADAM_WITHOUT_MASTER) + _BF16_MASTER
    if fw.master_in_optimizer and not fp32:
        return 2, fw.grad_reduce_bytes, _ADAM_BF16_MOMENTS if fw.adam_moments_bf16 else _ADAM_WITH_MASTER
    return 4, 4, _ADAM_WITHOUT_MASTER


def adam_step_bytes(fw: FrameworkProfile, precision: str, param_bytes: float) -> float:
    """Bytes per parameter of its shard that the fused Adam step moves: it reads the gradient (fp32), reads
    and writes every state it stores (``optimizer_storage_bytes``: the moments, and the master copy where it
    keeps one) and writes the model weights (``param_bytes`` each) from it; without a master copy
    (torch.optim.Adam on bf16 parameters, torch/optim/adam.py: the update applied to the parameter in
    place) it reads and writes the 16-bit weights themselves; fp32 weights (autocast, fp32 training) are
    read and written beside their moments, and the 16-bit weights written as before."""
    w_bytes, _, o_bytes = optimizer_storage_bytes(fw, precision)
    grad = 4
    if w_bytes == 4:                      # the fp32 weights are the stepped copy
        return grad + 2 * (o_bytes + w_bytes) + param_bytes
    if not fw.master_weights:             # the 16-bit weights stepped in place
        return grad + 2 * (o_bytes + w_bytes)
    return grad + 2 * o_bytes + param_bytes
