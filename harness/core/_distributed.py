"""Where this process stands among the trial's processes (Determined's `core.DistributedContext`).

Only the chief (rank 0) talks to the control plane for the trial: it reports metrics and progress and
uploads checkpoints; on other ranks those calls are no-ops. Every rank may restore checkpoints.
"""

from __future__ import annotations

from harness._info import RankInfo, load_rank_info


class DistributedContext:
    """Ranks of this process; the default is a single process, rank 0 of 1."""

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int | None = None,
        local_size: int | None = None,
        cross_rank: int | None = None,
        cross_size: int | None = None,
    ) -> None:
        if size < 1 or not 0 <= rank < size:
            raise ValueError(
                f"rank {rank} of size {size} is impossible; need 0 <= rank < size and size >= 1."
            )
        self.rank = rank
        self.size = size
        self.local_rank = rank if local_rank is None else local_rank
        self.local_size = size if local_size is None else local_size
        self.cross_rank = rank // max(self.local_size, 1) if cross_rank is None else cross_rank
        self.cross_size = max(size // max(self.local_size, 1), 1) if cross_size is None else cross_size

    @classmethod
    def from_env(cls) -> DistributedContext:
        """Ranks from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (set by launchers)."""
        return cls.from_rank_info(load_rank_info())

    @classmethod
    def from_rank_info(cls, info: RankInfo) -> DistributedContext:
        return cls(
            rank=info.rank,
            size=info.size,
            local_rank=info.local_rank,
            local_size=info.local_size,
            cross_rank=info.cross_rank,
            cross_size=info.cross_size,
        )

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when `flag` is true on any rank.

        With several processes and an initialised `torch.distributed` process group this is a collective
        (an all-reduce): every rank must call it at the same step. Without a process group each rank
        only knows its own flag.
        """
        if self.size == 1:
            return flag
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            return flag
        if not (dist.is_available() and dist.is_initialized()):
            return flag
        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, cross_rank={self.cross_rank}, cross_size={self.cross_size})"
        )
