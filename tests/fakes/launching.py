"""The launch step as its component and CLI call it (components/launch_training.py): the parameters by name
(the backend's too) read once into a :class:`~tfk8s.steps.parameters.LaunchSpec`, then
:func:`~tfk8s.steps.launch_training.launch_training_step`. For tests that start from parameters."""

from collections.abc import Mapping
from typing import Any

from tfk8s.steps.launch_training import launch_training_step
from tfk8s.steps.parameters import LaunchSpec


def launch(params: Mapping[str, Any], *, backend: str, data_dir: str, volume_root: str, run_id: str = "r1",
           **kwargs: Any) -> Any:
    """``launch_training_step`` with ``params`` (launch parameter names) read as the component reads them;
    ``kwargs``: ``dry_run``, ``log_sink``."""
    spec = LaunchSpec.from_params(params, backend=backend, volume_root=volume_root)
    return launch_training_step(data_dir=data_dir, run_id=run_id, spec=spec, **kwargs)
