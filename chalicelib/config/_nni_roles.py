"""NNI's Kubeflow and FrameworkController configs, whose trial command lives in a role (`trial.worker`,
`trial.ps`, `trial.master`, `trial.taskRoles`; in v2 under `trainingService`) rather than in
`trial.command` / `trialCommand`.

What becomes of them (see `chalicelib.config.nni`):

- **one process** (a single role with one replica, or one task role with one task): one Stratus
  trial running the role's command on its GPUs (`gpuNum` -> `resources.slots_per_trial`), its image
  -> `environment.image`. This is what the job does on Kubernetes, minus the pod's size settings.
- **PyTorch's master and workers** (Kubeflow's pytorch-operator: one `master`, `worker` replicas, the
  same command, at most one GPU each, no `ps`): a distributed trial of `1 + replicas` slots run by
  `stratus.launchers.torch_distributed`, which gives each process the `MASTER_ADDR` / `RANK` / `WORLD_SIZE`
  that the operator sets, so `torch.distributed.init_process_group()` works unchanged.
- **everything else is refused with the reason**: TensorFlow's parameter servers and multi-worker jobs
  (`trial.ps`, tf-operator workers) find each other through the `TF_CONFIG` cluster spec, and
  FrameworkController's task roles through its `FC_*` variables; Stratus sets neither, and running
  such a script as N independent processes would give wrong results silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.config._nni_versions import NniReader, dotted
from chalicelib.config.nni_space import is_int

KUBEFLOW_ROLES = ("master", "worker", "ps")
DISTRIBUTED_LAUNCHER = "python3 -m stratus.launchers.torch_distributed"

# Role fields per config version: (replicas, gpus, image); `command` is the same in both.
_V1_FIELDS = {"kubeflow": ("replicas", "gpuNum", "image"), "tasks": ("taskNum", "gpuNum", "image")}
_V2_FIELDS = {
    "kubeflow": ("replicas", "gpuNumber", "dockerImage"),
    "tasks": ("taskNumber", "gpuNumber", "dockerImage"),
}


@dataclass(frozen=True)
class Role:
    path: str  # `trial.worker`, `trial.taskRoles[0]`, `trainingService.worker`, ...
    name: str
    replicas: int
    command: Any
    gpus: int
    image: Any
    ignored: tuple[str, ...]  # the role's settings that have no Stratus equivalent


@dataclass(frozen=True)
class RoleTrial:
    """The trial a role-based config becomes."""

    entrypoint: str
    slots: int
    image: str | None


class RoleTranslator(NniReader):
    """Finds the roles of a Kubeflow / FrameworkController config and maps them (module docstring)."""

    def section(self) -> tuple[str, Mapping[str, Any]] | None:
        """(path, mapping) holding the roles: v1 `trial`, v2 `trainingService`; None without roles."""
        path = "trial" if self.version == 1 else "trainingService"
        node = self.raw.get(path)
        if not isinstance(node, Mapping):
            return None
        if any(isinstance(node.get(r), Mapping) for r in KUBEFLOW_ROLES) or node.get("taskRoles") is not None:
            return path, node
        return None

    def trial(self) -> RoleTrial | None:
        """The trial for a role-based config, or None (no roles; or refused: a problem is recorded)."""
        found = self.section()
        if found is None:
            return None
        roles = self._roles(*found)
        if roles is None:
            return None
        if len(roles) == 1 and roles[0].replicas == 1:
            role = roles[0]
            self._note(role, f"the {role.name} role's one process runs as the trial")
            return RoleTrial(role.command, max(role.gpus, 1), _image(role.image))
        return self._distributed(roles)

    def _distributed(self, roles: Sequence[Role]) -> RoleTrial | None:
        names = {role.name for role in roles}
        shape = ", ".join(f"{role.name} × {role.replicas}" for role in roles)
        pytorch = (
            names == {"master", "worker"}
            and len({role.command for role in roles}) == 1
            and all(role.gpus <= 1 for role in roles)
            and next(r for r in roles if r.name == "master").replicas == 1
        )
        if pytorch:
            slots = sum(role.replicas for role in roles)
            for role in roles:
                self._note(role, f"one of the {slots} ranks of stratus.launchers.torch_distributed")
            master = next(r for r in roles if r.name == "master")
            return RoleTrial(f"{DISTRIBUTED_LAUNCHER} {master.command}", slots, _image(master.image))
        first = roles[0]
        why = (
            "FrameworkController's task roles find each other through its FC_* variables"
            if ".taskRoles[" in first.path
            else "TensorFlow's parameter-server and multi-worker jobs find each other through TF_CONFIG"
            if "master" not in names
            else "these roles find each other through their operator's environment"
        )
        self.problem(
            first.path,
            f"a distributed job ({shape}) cannot run on Stratus: {why}, which Stratus does not set. "
            "Run one process (one role, one replica), or write a Determined config with "
            "resources.slots_per_trial and a launcher "
            f"(entrypoint: {DISTRIBUTED_LAUNCHER} python3 train.py)",
        )
        return None

    def _roles(self, path: str, node: Mapping[str, Any]) -> list[Role] | None:
        fields = _V1_FIELDS if self.version == 1 else _V2_FIELDS
        if node.get("taskRoles") is not None:
            tasks = node["taskRoles"]
            if not isinstance(tasks, list) or not tasks or not all(isinstance(t, Mapping) for t in tasks):
                self.problem(f"{path}.taskRoles", "must be a list of task roles, each with a command")
                return None
            found = [
                self._role(f"{path}.taskRoles[{i}]", str(t.get("name") or f"task {i}"), t, fields["tasks"])
                for i, t in enumerate(tasks)
            ]
        else:
            found = [
                self._role(f"{path}.{name}", name, node[name], fields["kubeflow"])
                for name in KUBEFLOW_ROLES
                if isinstance(node.get(name), Mapping)
            ]
        roles = [role for role in found if role is not None]
        return roles if len(roles) == len(found) else None

    def _role(
        self, path: str, name: str, raw: Mapping[str, Any], fields: tuple[str, str, str]
    ) -> Role | None:
        replicas_key, gpus_key, image_key = fields
        command, replicas, gpus = raw.get("command"), raw.get(replicas_key, 1), raw.get(gpus_key, 0)
        ok = True
        if not isinstance(command, str) or not command.strip():
            self.problem(
                dotted(path, "command"), "required: the command this role runs, e.g. python3 mnist.py"
            )
            ok = False
        if not is_int(replicas) or replicas < 1:
            self.problem(dotted(path, replicas_key), "must be a whole number of processes (1 or more)")
            ok = False
        if gpus is not None and (not is_int(gpus) or gpus < 0):
            self.problem(dotted(path, gpus_key), "must be a whole number of GPUs (0 or more)")
            ok = False
        if not ok:
            return None
        used = {"name", "command", replicas_key, gpus_key, image_key}
        ignored = tuple(sorted(str(k) for k, v in raw.items() if k not in used and v is not None))
        return Role(path, name, int(replicas), command, int(gpus or 0), raw.get(image_key), ignored)

    def _note(self, role: Role, what: str) -> None:
        message = f"{what} ({role.command})"
        if role.ignored:
            message += (
                f"; {', '.join(role.ignored)} ignored: Stratus sizes trials by resources.slots_per_trial"
            )
        self.warn(role.path, message)


def _image(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
