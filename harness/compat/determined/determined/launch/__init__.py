"""Determined's launchers (`python3 -m determined.launch.<name>`), served by Stratus's `launchers`:
`torch_distributed`, `deepspeed`, `horovod` and `wrap_rank` take Determined's command lines."""

from stratus.harness.compat._determined import unsupported

__getattr__ = unsupported("determined.launch")
