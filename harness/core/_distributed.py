"""Where this process stands among the trial's processes (Determined's `core.DistributedContext`).

Only the chief (rank 0) talks to the control plane for the trial: it reports metrics and progress and
uploads checkpoints; on other ranks those calls are no-ops. Every rank may restore checkpoints.
"""

from __future__ import annotations

from typing import Any

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

    @classmethod
    def from_torch_distributed(cls) -> DistributedContext:
        """Ranks of an initialised `torch.distributed` process group (Determined's name), with the local
        ranks from LOCAL_RANK / LOCAL_WORLD_SIZE as torchrun sets them."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "torch.distributed is not initialised; call torch.distributed.init_process_group() first, "
                "or use DistributedContext.from_env()."
            )
        env = load_rank_info()
        rank, size = dist.get_rank(), dist.get_world_size()
        local_size = env.local_size if env.size == size else 1
        local_rank = env.local_rank if env.size == size else 0
        return cls(rank=rank, size=size, local_rank=local_rank, local_size=local_size)

    # Determined's getters.
    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    @property
    def has_process_group(self) -> bool:
        """True when a `torch.distributed` process group is initialised (collectives work)."""
        if self.size == 1:
            return False
        try:
            import torch.distributed as dist
        except ImportError:
            return False
        return bool(dist.is_available() and dist.is_initialized())

    def broadcast(self, obj: Any) -> Any:
        """The chief's `obj` on every rank (a collective with a process group; identity without one)."""
        if not self.has_process_group:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (a collective with a process group; `[obj]` without one)."""
        if not self.has_process_group:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj` on the chief (None on other ranks)."""
        gathered = self.allgather(obj)
        return gathered if self.is_chief else None

    def close(self) -> None:
        """Determined's call at the end of `core.init()`; nothing to release here."""

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
