"""The training image of a `sagemaker` pool that names none: AWS's PyTorch training image for the
region and the pool's instance type, looked up with the SageMaker Python SDK (`sagemaker.image_uris`,
whose tables ship inside the SDK: no AWS call) rather than a table of our own. The SDK is a deploy-side
dependency only, imported when a pool needs it (it installs far over Lambda's limit, and the CLI starts
without it)."""

from __future__ import annotations

import logging
import warnings

from det.errors import UsageError

#: The PyTorch version and Python of the image: the compute side needs Python >= 3.11.
PYTORCH_VERSION = "2.5"
PY_VERSION = "py311"


def pytorch_training_image(region: str, instance_type: str) -> str:
    """The image URI, e.g. `763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.5-gpu-py311`."""
    # Its config lookups (at INFO unless a level is set) and its v2 notice are not ours to show.
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    logging.getLogger("sagemaker").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK's v2 deprecation notice: v2 has the tables we use
            from sagemaker import image_uris
    except ImportError as e:
        raise UsageError(
            "a sagemaker pool without `image` takes AWS's PyTorch training image, found with the SageMaker "
            "Python SDK, which is not installed; `pip install 'sagemaker>=2.250,<3'` or give the pool's image"
        ) from e
    try:
        return str(
            image_uris.retrieve(
                framework="pytorch",
                region=region,
                version=PYTORCH_VERSION,
                py_version=PY_VERSION,
                instance_type=instance_type,
                image_scope="training",
            )
        )
    except ValueError as e:
        raise UsageError(
            f"no PyTorch {PYTORCH_VERSION} training image for {instance_type} in {region} ({e}); give the pool's image"
        ) from e
