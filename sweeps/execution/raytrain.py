"""Ray Train's private names, in one place, pinned to the Ray release they were tested with.

A lane's `fit()` would have Ray Train spawn a controller actor: a new process (Ray Train gives it
a runtime env of its own, so no pre-started worker process can take it) that imports Ray Train
again before it asks for a worker: 3.6 s to spawn and 2.6 s to initialize on 2 cores, all on the
path to a lane's first trial. The lane host is a process with Ray Train imported already, so it
runs the controller itself. `TrainController` is a plain class whose `run()` is a coroutine; the
actor around it adds nothing a lane uses (its SIGINT handler needs a main thread, which a lane
host's call never has; nobody calls `abort()` on a lane, the pool stops lanes through the broker).

Helper actors Ray Train starts for every run are left out where they have nothing to do; each
is a process spawned while the lane's worker spawns:
- the placement-group cleaner, which removes a worker group's placement group should the
  controller's actor die without doing it. Here the controller is the lane host itself, the
  placement group's creator, and Ray deletes a placement group with its creator (without the
  cleaner a lane's first request came at 9.45 s, with it 10.11 s: means of 6 sweeps each way);
- the dataset manager, when the run has no Ray Datasets (a lane never has);
- the autoscaling coordinator, on a Ray that `ensure_ray` started in-process: no autoscaler
  reads its requests there. Its first request waits for the actor to spawn (~1 s on 2 cores)
  on a fresh cluster, before the controller asks for a worker.
"""

from __future__ import annotations

import functools
import os
from typing import Any

# The Ray releases whose private names this module uses (>= first, < second); pyproject pins the
# same range and tests/test_adapters.py checks the installed one, so an upgrade fails there.
RAY_TESTED = ("2.60", "2.61")

# Set by `ensure_ray` for a Ray of the process's own (its processes inherit it).
NO_AUTOSCALER_ENV = "SWEEPS_NO_AUTOSCALER"


@functools.cache
def in_process_trainer_class() -> type:
    """TorchTrainer whose controller runs in the calling process, in a fresh event loop of the
    calling thread (the lane host runs each lane's fit() in a thread of its own)."""
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

    class NoAutoscalerPolicy(FixedScalingPolicy):  # type: ignore[misc, valid-type]
        """Fixed-size worker group that never asks the autoscaling coordinator for nodes."""

        def after_controller_start(self, train_run_context: Any) -> None:
            pass

        def _maybe_send_resource_request(self) -> None:
            pass

    class InProcessTorchTrainer(TorchTrainer):  # type: ignore[misc, valid-type]
        def _create_default_callbacks(self) -> list[Any]:
            callbacks = super()._create_default_callbacks()
            unused: tuple[type, ...] = (PlacementGroupCleanerCallback,)
            if not self.datasets:
                unused += (DatasetsCallback,)
            return [c for c in callbacks if not isinstance(c, unused)]

        def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
            import asyncio

            policy = controller_init_kwargs["scaling_policy"]
            if os.environ.get(NO_AUTOSCALER_ENV) == "1" and type(policy) is FixedScalingPolicy:
                controller_init_kwargs["scaling_policy"] = NoAutoscalerPolicy(policy.scaling_config)
            controller = TrainController(**controller_init_kwargs)
            asyncio.run(controller.run())
            return controller.get_result()

    return InProcessTorchTrainer


def actor_classes() -> dict[str, str]:
    """Actor id -> class name of every actor the cluster has made, dead ones included (the
    GCS actor table). Ray's public state API needs the dashboard, which sweeps does not start."""
    import ray._private.state

    return {aid: a["ActorClassName"] for aid, a in ray._private.state.actors().items()}
