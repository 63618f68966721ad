"""NNI's AdaptDL training service (`trainingServicePlatform: adl`, v2 `trainingService: {platform: adl}`):
an elastic trial, run by `stratus.launchers.adaptdl`, which gives AdaptDL's code the `ADAPTDL_*` variables and
folders that NNI's Kubernetes job had.

NNI's v1 schema (`nnictl/config_schema.py`, `adl_trial_schema`) puts the fields under `trial`. NNI v2's
`AdlConfig` had only `platform` and `dockerImage` (v1 adl configs never converted); Stratus also reads
v1's fields under v2's `trainingService`, as an extension, and says so in a warning.

| NNI field | Stratus |
|---|---|
| `command` / `trialCommand` | `entrypoint: python3 -m stratus.launchers.adaptdl -- <command>` |
| `gpuNum` / `trialGpuNumber` | `elastic.slots_per_replica` (0 -> 1, a CPU slot, with a note) |
| `adaptive: true` | `elastic.min_replicas: 1`, `max_replicas` unset: the pool's size, capped (`ElasticConfig`) |
| `adaptive: false` or unset | `elastic.min_replicas = max_replicas = 1` (still under the launcher: the code needs `ADAPTDL_*`) |
| `checkpoint.storageSize` | `elastic.checkpoint_size_limit`, kept but not enforced (parsing warns about it) |
| `checkpoint.storageClass` | warning: no storage classes |
| `nfs` | refused: no NFS mounts; `ADAPTDL_SHARE_PATH` is a folder synced to S3 |
| `image` / `dockerImage` | `environment.image`, with a warning: only Batch and SageMaker pools run it |
| `imagePullSecrets`, `namespace`, `cpuNum`, `memorySize` | warnings |

`resources.slots_per_trial` is left to the schema, which sets it to `min_replicas * slots_per_replica`,
so that `--config elastic.min_replicas=2` resizes the trial too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.config._nni_versions import NniReader
from chalicelib.config.errors import ConfigProblem
from chalicelib.config.schema import entrypoint_argv
from chalicelib.config.sections import DEFAULT_MAX_REPLICAS, MAX_REPLICAS_CAP, quantity_bytes
from stratus.contract.nni import nni_field_key

ADL_PLATFORM = "adl"
ADAPTDL_LAUNCHER = ("python3", "-m", "stratus.launchers.adaptdl")

#: NNI v1's adl trial fields beyond command, codeDir, gpuNum and image (read under v2's trainingService too).
ADL_FIELDS = ("adaptive", "checkpoint", "nfs", "imagePullSecrets", "namespace", "cpuNum", "memorySize")
_V2_SERVICE_FIELDS = ("platform", "dockerImage")
_V2_NAMES_OF_V1_FIELDS = {
    "command": "trialCommand",
    "codeDir": "trialCodeDirectory",
    "gpuNum": "trialGpuNumber",
    "image": "dockerImage",
}
_CHECKPOINT_FIELDS = ("storageClass", "storageSize")

_IGNORED = {
    "imagePullSecrets": "images are pulled with the pool's IAM role",
    "namespace": "Stratus has no Kubernetes namespaces; resources.resource_pool picks where trials run",
    "cpuNum": "a replica gets the CPUs and memory of the machine its slots are on",
    "memorySize": "a replica gets the CPUs and memory of the machine its slots are on",
}
_IMAGE = (
    "kept as environment.image, which only Batch and SageMaker pools run; agents (local, ec2) run the trial "
    "in their own Python, and the trial's log says so"
)


def is_adl(raw: Mapping[str, Any], version: int) -> bool:
    """Whether an NNI config (v2 keys already canonical) asks for the adl training service."""
    if version == 1:
        return raw.get("trainingServicePlatform") == ADL_PLATFORM
    service = raw.get("trainingService")
    return isinstance(service, Mapping) and _canonical(service).get("platform") == ADL_PLATFORM


def adaptdl_entrypoint(command: str) -> str | list[str]:
    """The entrypoint running `command` under `stratus.launchers.adaptdl`: a string while `command` is plain words;
    a list (`... -- sh -c <command>`) when it uses shell syntax, so the shell runs all of it, not the
    launcher."""
    argv = entrypoint_argv(command)
    if argv[:2] == ["sh", "-c"]:
        return [*ADAPTDL_LAUNCHER, "--", *argv]
    return f"{' '.join(ADAPTDL_LAUNCHER)} -- {command}"


class AdlTranslator(NniReader):
    """Rewrites the translation of an adl config into an elastic trial (module docstring)."""

    def __init__(
        self, raw: Mapping[str, Any], version: int, warnings: list[str], problems: list[ConfigProblem]
    ) -> None:
        super().__init__(raw, version, warnings, problems)
        self.path = "trial" if self.version == 1 else "trainingService"
        node = self.raw.get(self.path)
        self.fields: Mapping[str, Any] = (
            {} if not isinstance(node, Mapping) else node if self.version == 1 else _canonical(node)
        )

    def handled(self) -> frozenset[str]:
        """The fields this translator reads (or warns about): the generic warnings leave them out."""
        if self.version == 2:
            return frozenset({"trainingService"})
        return frozenset({"trainingServicePlatform", *(f"trial.{name}" for name in ADL_FIELDS)})

    def apply(self, config: dict[str, Any]) -> None:
        """Turn `config` (translated as a plain trial) into the elastic trial."""
        command = config.get("entrypoint")
        if isinstance(command, str) and command.strip():
            config["entrypoint"] = adaptdl_entrypoint(command)
        config.pop("resources", None)  # slots_per_trial follows elastic (module docstring)
        if self.version == 2:
            self._v2_fields()
        elastic: dict[str, Any] = {"framework": "adaptdl", "min_replicas": 1}
        if not self._adaptive():
            elastic["max_replicas"] = 1
        elastic["slots_per_replica"] = self.gpu_slots("replica", "elastic.slots_per_replica")
        size = self._checkpoint()
        if size is not None:
            elastic["checkpoint_size_limit"] = size
        config["elastic"] = elastic
        self._image(config)
        self._nfs()
        for name, why in _IGNORED.items():
            if self.fields.get(name) is not None:
                self.warn(self._at(name), f"ignored ({why})")

    def _at(self, *names: str) -> str:
        return ".".join((self.path, *names))

    def _v2_fields(self) -> None:
        extension = [name for name in ADL_FIELDS if self.fields.get(name) is not None]
        if extension:
            self.warn(
                self.path,
                f"{', '.join(extension)} read as a Stratus extension: NNI v2's adl training service has only "
                "platform and dockerImage (these are NNI v1's trial fields)",
            )
        for key, value in self.fields.items():
            if key in ADL_FIELDS or key in _V2_SERVICE_FIELDS or value is None:
                continue
            twin = _V2_NAMES_OF_V1_FIELDS.get(key)
            hint = f"; NNI v2 names it {twin}" if twin else ""
            self.warn(self._at(str(key)), f"ignored (not a field of NNI's adl training service{hint})")

    def _adaptive(self) -> bool:
        value = self.fields.get("adaptive")
        if value is None or value is False:
            return False
        if value is not True:
            self.problem(self._at("adaptive"), "must be true or false")
            return False
        self.warn(
            self._at("adaptive"),
            "an elastic trial of elastic.min_replicas (1) to elastic.max_replicas replicas (unset: as many "
            f"as its pool holds, at most {MAX_REPLICAS_CAP}; {DEFAULT_MAX_REPLICAS} where the pool's size "
            "is unknown), resized while it runs by the elastic allocator",
        )
        return True

    def _checkpoint(self) -> str | int | None:
        """`checkpoint.storageSize` (the soft limit), after warning about the rest of `checkpoint`."""
        node = self.fields.get("checkpoint")
        if node is None:
            return None
        if not isinstance(node, Mapping):
            self.problem(self._at("checkpoint"), "must be a mapping with storageClass and storageSize")
            return None
        fields = node if self.version == 1 else _canonical(node, _CHECKPOINT_FIELDS)
        if fields.get("storageClass") is not None:
            self.warn(
                self._at("checkpoint", "storageClass"),
                "ignored (AdaptDL's checkpoint folder is kept in the trial's S3 folder and synced around "
                "each restart; there are no storage classes)",
            )
        for key, value in fields.items():
            if key not in _CHECKPOINT_FIELDS and value is not None:
                self.warn(self._at("checkpoint", str(key)), "ignored (not a field of NNI's adl checkpoint)")
        size = fields.get("storageSize")
        if size is None:
            return None
        if not isinstance(size, bool) and isinstance(size, int | str) and _positive_size(size):
            return size
        self.problem(self._at("checkpoint", "storageSize"), 'must be a size like "1Gi" or "500M"')
        return None

    def _image(self, config: dict[str, Any]) -> None:
        name = "image" if self.version == 1 else "dockerImage"
        image = self.fields.get(name)
        if image is None:
            return
        if not isinstance(image, str) or not image.strip():
            self.problem(self._at(name), "must be an image name, e.g. registry.example/trainer:1")
            return
        config["environment"] = {"image": image}
        self.warn(self._at(name), _IMAGE)

    def _nfs(self) -> None:
        nfs = self.fields.get("nfs")
        if nfs is None:
            return
        what = "an NFS volume"
        if isinstance(nfs, Mapping):
            server, folder, mount = nfs.get("server"), nfs.get("path"), nfs.get("containerMountPath")
            what = f"{server}:{folder} at {mount}"
        self.problem(
            self._at("nfs"),
            f"no NFS mounts here, so {what} cannot be mounted; use ADAPTDL_SHARE_PATH, a folder synced to "
            "S3 that every replica and restart of the trial sees, and remove nfs",
        )


def _positive_size(size: int | str) -> bool:
    try:
        return quantity_bytes(size) > 0
    except ValueError:
        return False


def _canonical(node: Mapping[str, Any], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`node` with its keys spelled as NNI v2 documents them (v2 ignores case and underscores)."""
    known = names if names is not None else (*_V2_SERVICE_FIELDS, *ADL_FIELDS, *_V2_NAMES_OF_V1_FIELDS)
    by_key = {nni_field_key(name): name for name in known}
    return {
        (by_key.get(nni_field_key(key), key) if isinstance(key, str) else key): value
        for key, value in node.items()
    }
