"""Compute backends behind the port `chalicelib.services.ports.ComputeBackend` (`router.ComputeRouter`).

    local         the agents (`stratus.harness.agent`) in every pool: runs are launched, stopped and nudged
                  through them; in a `local` pool they are also the pool's hosts
    pool_compute  what a cloud backend does for its pools (`PoolCompute`) and what it is made from
    backends      the registry: a cloud backend's module by its name (`stratus.contract.pools.Backend`)
    ec2           an Auto Scaling group per pool, sized from the queue (`ec2.for_pools`)
    batch         AWS Batch job queues: a job per run on the pool's lanes
    sagemaker     SageMaker training jobs: a job per run
    lanes, cloud  what the job backends share; the AWS services as the backends call them

The scheduler and the services never name a backend; what differs between backends is a trait
(`stratus.contract.pools.traits`) or a registry entry (docs/extending.md).
"""
