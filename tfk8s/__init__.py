"""tfk8s: distributed TensorFlow training on Kubernetes, as Kubeflow Pipelines components.

The logic lives in plain modules that import neither KFP nor a Kubernetes client at module load:

- :mod:`tfk8s.cluster`   replica types, replica names, cluster spec and TF_CONFIG (shared by every backend)
- :mod:`tfk8s.launcher`  the launch step: a backend-neutral job spec, success policy and the local backend
- :mod:`tfk8s.dataset`   TFDS -> sharded TFRecords + metadata
- :mod:`tfk8s.export`    versioned, atomic SavedModel exports (TF Serving layout)
- :mod:`tfk8s.evaluation` metrics, confusion matrix and the quality gate (blessing)
"""

__version__ = "0.1.0"

DEFAULT_IMAGE = "ghcr.io/tfk8s/tfk8s:0.1.0"
"""The project image (``make image`` builds it): every component and, by default, every replica runs it."""
