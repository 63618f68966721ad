"""Adapters over AWS: the only modules of the control plane that import boto3."""

from __future__ import annotations

from chalicelib.aws.autoscaling import AwsAutoScaling
from chalicelib.aws.batch import AwsBatch
from chalicelib.aws.bells import SqsBells
from chalicelib.aws.checkpoint_table import DynamoCheckpoints, DynamoIds, DynamoMetrics
from chalicelib.aws.experiment_table import DynamoExperiments
from chalicelib.aws.logs import CloudWatchLogs
from chalicelib.aws.messaging import SqsQueues, StepFunctions
from chalicelib.aws.metrics import metrics_sink
from chalicelib.aws.prices import AwsPrices
from chalicelib.aws.quotas import AwsQuotas
from chalicelib.aws.run_table import DynamoAgents, DynamoRuns
from chalicelib.aws.sagemaker import AwsSageMaker
from chalicelib.aws.storage import S3Blobs
from chalicelib.aws.trial_table import DynamoTrials
from chalicelib.compute.cloud import JobCredentials
from chalicelib.compute.local import LocalAgents
from chalicelib.compute.pool_compute import BackendParts, CloudClients
from chalicelib.compute.router import ComputeRouter
from chalicelib.services.clock import SystemClock
from chalicelib.services.ports import Ports
from chalicelib.settings import get_settings


def aws_ports() -> Ports:
    settings = get_settings()
    runs, agents, bells, experiments = DynamoRuns(), DynamoAgents(), SqsBells(), DynamoExperiments()
    timeout, clock = settings.agent_timeout_s, SystemClock()
    blobs = S3Blobs()
    credentials = JobCredentials(blobs, settings.agent_token)
    clients = CloudClients(
        autoscaling=AwsAutoScaling, batch=AwsBatch, sagemaker=AwsSageMaker, quotas=AwsQuotas
    )
    parts = BackendParts(
        agents, runs, clock, timeout, settings.stack, settings.api_url, experiments, credentials, clients
    )
    compute = ComputeRouter(LocalAgents(runs, agents, timeout, bells), runs, settings, parts)
    return Ports(
        experiments=experiments,
        trials=DynamoTrials(),
        runs=runs,
        agents=agents,
        checkpoints=DynamoCheckpoints(),
        metrics=DynamoMetrics(),
        ids=DynamoIds(),
        blobs=blobs,
        workflows=StepFunctions(),
        queues=SqsQueues(),
        logs=CloudWatchLogs(),
        settings=settings,
        clock=clock,
        compute=compute,
        bells=bells,
        telemetry=metrics_sink(settings),
        prices=AwsPrices(),
    )
