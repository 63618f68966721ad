"""Where this process stands among the trial's processes (Determined's `core.DistributedContext`).

Only the chief (rank 0) talks to the control plane for the trial: it reports metrics and progress and
uploads checkpoints; on other ranks those calls are no-ops. Every rank may restore checkpoints.

Collectives (`broadcast`, `allgather`, `gather`, `any_rank`) go through an initialised
`torch.distributed` process group when there is one, else through the chief's sockets when the context
was given ``chief_ip`` (`stratus.harness.core._collective`, Determined's framework-free way). With several ranks
and neither, `broadcast`/`allgather`/`gather` raise `CollectiveError` rather than answer with this
rank's object alone.
"""

from __future__ import annotations

from typing import Any

from stratus.harness._info import RankInfo, load_collective_port, load_rank_info
from stratus.harness.core._collective import CollectiveError, SocketCollectives


class DistributedContext:
    """Ranks of this process; the default is a single process, rank 0 of 1.

    ``chief_ip`` (the chief's address as this rank reaches it) turns on the socket collectives, with the
    chief listening on ``port`` (default: `stratus.harness._info.load_collective_port()`).
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int | None = None,
        local_size: int | None = None,
        cross_rank: int | None = None,
        cross_size: int | None = None,
        chief_ip: str | None = None,
        port: int | None = None,
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
        self._sockets: SocketCollectives | None = None
        if chief_ip is not None and size > 1:
            self._sockets = SocketCollectives(
                rank=rank,
                size=size,
                chief_ip=chief_ip,
                port=load_collective_port() if port is None else port,
                bind_all=self.cross_size > 1,
            )

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
        """The chief's `obj` on every rank (a collective: every rank calls it at the same step)."""
        if self.size == 1:
            return obj
        if self.has_process_group:
            import torch.distributed as dist

            box = [obj]
            dist.broadcast_object_list(box, src=0)
            return box[0]
        return self._require_sockets("broadcast").broadcast(obj)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank (a collective)."""
        if self.size == 1:
            return [obj]
        if self.has_process_group:
            import torch.distributed as dist

            out: list[Any] = [None] * self.size
            dist.all_gather_object(out, obj)
            return out
        return self._require_sockets("allgather").allgather(obj)

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj` on the chief (None on other ranks); a collective."""
        if self.size > 1 and not self.has_process_group:
            return self._require_sockets("gather").gather(obj)
        gathered = self.allgather(obj)
        return gathered if self.is_chief else None

    def close(self) -> None:
        """Close the socket collectives' connections, if any (Determined's call at the end of training)."""
        if self._sockets is not None:
            self._sockets.close()

    def _require_sockets(self, what: str) -> SocketCollectives:
        if self._sockets is None:
            raise CollectiveError(
                f"{what}() across {self.size} ranks needs a way to talk to them, and this rank has none: "
                "initialise a torch.distributed process group (stratus.launchers.torch_distributed does it for "
                "PyTorchTrial), or build the context with chief_ip= (Determined's "
                "DistributedContext(..., chief_ip=...))."
            )
        return self._sockets

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when `flag` is true on any rank.

        With several processes and an initialised `torch.distributed` process group, or the socket
        collectives (``chief_ip``), this is a collective: every rank must call it at the same step.
        Without either, each rank only knows its own flag.
        """
        if self.size == 1:
            return flag
        if self._sockets is not None and not self.has_process_group:
            return any(self._sockets.allgather(bool(flag)))
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
