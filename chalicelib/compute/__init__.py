"""Compute backends: implementations of `chalicelib.services.ports.ComputeBackend`, one module each.

    local      the agent (`stratus.harness.agent`) runs trials as processes on its machine and pulls its launches
               with its heartbeat; the agents it knows are the pool's hosts.

EC2 (an Auto Scaling group per pool, the same agent on each instance), Batch and SageMaker join here as
further modules with the same shape (DESIGN.md §2): the scheduler and the services do not change.
"""
