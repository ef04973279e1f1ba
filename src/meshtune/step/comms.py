"""Communication around the mesh: the DP gradient reduction, ZeRO-3 gathers, stage sends.

Ring times follow MeshSlice §3.2.2: a collective of ``shard`` bytes per step over a ring of P
chips takes ``t_launch + (P − 1)·(t_sync + shard / bw)`` on the network level the ring lands on
(:mod:`meshtune.hardware.tiers`): the DP ring covers all ``dp · pp · tp`` chips of the cluster, a
stage-to-stage hop ``pp · tp``.

* **DP reduction** (ZeRO stages 0-2): each chip's gradients are reduced over the DP ring as
  a reduce-scatter (of fp32 gradients where they are reduced in fp32) then an all-gather: of
  the gradients (ZeRO-0: the ring all-reduce) or of the updated weights (ZeRO-1/2 shard the
  optimizer: the same number of elements, at the weights' width: ZeRO §7; DeepSpeed's BF16
  optimizer all-reduces the gradients first all the same: ``all_reduce``), issued in buckets
  of one block as the last micro-batch's backward pass finishes each block (PyTorch DDP, Li et
  al. VLDB 2020, §3.2.3; Megatron's overlapped gradient reduction). With ``t_r`` one block's
  reduction and ``t_b`` one block's backward time the reductions end
  ``max(t_r, L · t_r − (L − 1) · t_b)`` after the backward pass (L blocks on the chip): only
  this tail shows (:func:`dp_exposed`).
* **ZeRO-3 / FSDP** (Zhao et al., PyTorch FSDP 2023, §3): every micro-batch all-gathers each
  block's weights before its forward and again before its backward, and reduce-scatters its
  gradients after; the next block's gather is prefetched during the current block's compute,
  so a block shows ``max(0, t_ag − t_fwd)`` in the forward and ``max(0, t_ag + t_rs − t_bwd)``
  in the backward (:func:`fsdp_exposed`). Under full recompute PyTorch FSDP's checkpointed
  unit reruns its forward on the backward's gather; DeepSpeed ZeRO-3 releases a module's
  weights after every forward, the recomputed one included, and gathers them a third time
  (its forward hooks fire again in the recompute: deepspeedai/DeepSpeed#4784, #8130), so the
  backward shows ``max(0, 2·t_ag + t_rs − t_bwd)``.
* **Overlap is not free on a GPU** (:func:`overlap_exposed`): while a collective runs beside
  compute on the same chip, its kernels take SMs and HBM bandwidth from the GeMMs, which run
  ``1 + σ`` times slower meanwhile (``HardwareProfile.overlap_slowdown``; Lee et al., arXiv
  2507.03114, 2025, measured σ = 18.9 % on average over GPT and Llama layers on A100, H100,
  MI250 and MI210). ``c`` seconds of communication beside ``f`` of compute then show
  ``max(c − f, c · σ / (1 + σ))`` beyond ``f``: the compute done while the collective runs
  takes ``σ / (1 + σ)`` of its time longer, and a collective longer than the slowed compute
  shows its excess. The DP tail, the ZeRO-3 gathers, the CP ring and DualPipe's hidden
  all-to-alls all go through it.
* **Stage-to-stage sends**: one send-recv of a micro-batch's activation shard,
  ``e · b · s · h / tp`` bytes, forward, and of its gradient backward, on the critical path.
"""

from __future__ import annotations

from meshtune.cost.schedule import comm_time, overlap_penalty_s, ring_collective, shift
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile, ProfileMemo
from meshtune.hardware.tiers import level_axis, tier_profile


def ring_s(
    profile: HardwareProfile, kind: CollectiveKind, ring: int, bytes_per_chip: float
) -> float:
    """One all-gather or reduce-scatter of ``bytes_per_chip`` (shards of ``bytes / ring``) over
    a ring of ``ring`` replicas on the DP / PP level axis; 0 when ring = 1. Cached: the
    cluster search prices the same rings for many splits."""
    return _RING_S.get(
        profile, (kind, ring, bytes_per_chip), lambda: _ring_s(profile, kind, ring, bytes_per_chip)
    )


# ring_s's answers: (profile, (kind, ring, bytes per chip)) → seconds.
_RING_S: ProfileMemo[tuple[CollectiveKind, int, float], float] = ProfileMemo(8192)


def _ring_s(
    profile: HardwareProfile, kind: CollectiveKind, ring: int, bytes_per_chip: float
) -> float:
    """:func:`ring_s`, priced."""
    comms = ring_collective(kind, level_axis(profile, kind), ring, bytes_per_chip / ring)
    return comm_time(comms, profile).total_s


def dp_reduce_block_s(
    profile: HardwareProfile,
    dp: int,
    grad_bytes_per_chip: float,
    weight_bytes_per_chip: float | None = None,
    *,
    all_reduce: bool = False,
) -> float:
    """One bucket's DP reduction over a ring of ``dp`` replicas (shards of ``bytes / dp``); 0
    when dp = 1. ``weight_bytes_per_chip`` None: the ring all-reduce of the gradients,
    reduce-scatter + all-gather of ``grad_bytes_per_chip`` (ZeRO-0). Given: a sharded
    optimizer (ZeRO-1/2), the gradients reduce-scattered and the updated weights of
    ``weight_bytes_per_chip`` all-gathered; with ``all_reduce`` the gradients are all-reduced
    whole first all the same (DeepSpeed's BF16 optimizer, :class:`~meshtune.step.StepOptions`),
    so the all-gather runs twice: at the gradients' width, then at the weights'."""
    reduce = ring_s(profile, CollectiveKind.REDUCE_SCATTER, dp, grad_bytes_per_chip)
    gather = ring_s(profile, CollectiveKind.ALL_GATHER, dp, grad_bytes_per_chip)
    if weight_bytes_per_chip is None:
        return reduce + gather
    weights = ring_s(profile, CollectiveKind.ALL_GATHER, dp, weight_bytes_per_chip)
    return reduce + weights + (gather if all_reduce else 0.0)


def p2p_s(profile: HardwareProfile, pp: int, activation_bytes_per_chip: float) -> float:
    """One send-recv of a micro-batch's activation shard to the next stage; 0 when PP = 1.
    Cached, as :func:`ring_s`."""
    shard = activation_bytes_per_chip
    return _P2P_S.get(profile, (pp, shard), lambda: _p2p_s(profile, pp, shard))


# p2p_s's answers: (profile, (PP, activation bytes per chip)) → seconds.
_P2P_S: ProfileMemo[tuple[int, float], float] = ProfileMemo(8192)


def _p2p_s(profile: HardwareProfile, pp: int, activation_bytes_per_chip: float) -> float:
    """:func:`p2p_s`, priced."""
    axis = level_axis(profile, CollectiveKind.SEND_RECV)
    return comm_time(shift(axis, pp, activation_bytes_per_chip), profile).total_s


def dp_profiles(
    profile: HardwareProfile, *, tp: int, dp: int, pp: int
) -> tuple[HardwareProfile, HardwareProfile]:
    """(DP ring's profile, PP hop's profile): axis 2 on the tier the DP ring (``dp · pp · tp``
    chips) and a stage hop (``pp · tp`` chips) span."""
    return tier_profile(profile, {2: dp * pp * tp}), tier_profile(profile, {2: pp * tp})


def level_times(
    profile: HardwareProfile,
    *,
    tp: int,
    dp: int,
    pp: int,
    grad_bytes: float,
    activation_bytes: float,
) -> tuple[float, float]:
    """(one block's DP reduction, one stage-to-stage send-recv), each on the tier its ring
    spans."""
    dp_profile, pp_profile = dp_profiles(profile, tp=tp, dp=dp, pp=pp)
    return dp_reduce_block_s(dp_profile, dp, grad_bytes), p2p_s(pp_profile, pp, activation_bytes)


def overlap_exposed(comm_s: float, compute_s: float, slowdown: float = 0.0) -> float:
    """The part of ``comm_s`` seconds of communication that shows beyond ``compute_s`` seconds
    of compute when the two start together and the compute runs ``1 + σ`` times slower while
    the communication runs (module docstring): ``max(c − f, c · σ / (1 + σ))``, never
    negative; with σ = 0 the plain ``max(0, c − f)``."""
    return max(0.0, comm_s - compute_s) + overlap_penalty_s(comm_s, 0.0, compute_s, slowdown)


def dp_exposed(
    reduce_block_s: float,
    backward_block_s: float,
    blocks: int,
    *,
    overlap: bool = True,
    slowdown: float = 0.0,
) -> float:
    """Tail of the per-block DP reductions after the backward pass: ``t_r +`` what the first
    ``L − 1`` blocks' reductions show beyond the backward of the other ``L − 1`` blocks
    (:func:`overlap_exposed` with ``slowdown`` σ), i.e. ``max(t_r, L · t_r − (L − 1) · t_b)``
    with σ = 0, when they overlap it; ``L · t_r`` when they start after it (Megatron-LM
    before Megatron-Core, DeepSpeed's pipeline engine); 0 when nothing is reduced."""
    if reduce_block_s == 0.0:
        return 0.0
    if not overlap:
        return blocks * reduce_block_s
    hidden = (blocks - 1) * reduce_block_s
    return reduce_block_s + overlap_exposed(hidden, (blocks - 1) * backward_block_s, slowdown)


def fsdp_exposed(
    gather_s: float,
    scatter_s: float,
    forward_block_s: float,
    backward_block_s: float,
    *,
    backward_gathers: int = 1,
    slowdown: float = 0.0,
) -> float:
    """One block's ZeRO-3 traffic not hidden by its compute, one micro-batch:
    ``max(0, t_ag − t_fwd) + max(0, g·t_ag + t_rs − t_bwd)`` with σ = 0, each term
    :func:`overlap_exposed` with ``slowdown`` σ; ``g`` the gathers the backward pass makes (2
    when the recomputed forward gathers again, module docstring)."""
    return overlap_exposed(gather_s, forward_block_s, slowdown) + overlap_exposed(
        backward_gathers * gather_s + scatter_s, backward_block_s, slowdown
    )
