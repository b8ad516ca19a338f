"""tfk8s: distributed TensorFlow training on Kubernetes, as Kubeflow Pipelines components.

The package's folders are its layers; each imports only the ones below it (``tests/project/test_layers.py`` holds the
table, README.md's architecture section draws it):

- :mod:`tfk8s.core`      the shared vocabulary (replica types and TF_CONFIG, the contract, the volume layout,
  the data format, the job, its errors and failure policy); standard library only
- :mod:`tfk8s.runtime`   what runs inside a replica (strategy, data, callbacks, outputs); the public helper
- :mod:`tfk8s.launcher`  runs a job's replicas: the local and the Kubernetes backend
- :mod:`tfk8s.tracking`  job records, kept replica logs, the progress view
- :mod:`tfk8s.steps`     the pipeline's steps as plain functions, and the parameter table
- :mod:`tfk8s.submit`    to an orchestrator: KFP client, cron, ``--param`` parsing, checks, the Argo export
- :mod:`tfk8s.localrun`  ``pipelines/train.py --local``: kfp.local, the step server, the short output
- :mod:`tfk8s.cmd`       the ``tfk8s`` command

Nothing imports KFP, TensorFlow or a Kubernetes client at module load but the components and the pipeline.
"""

__version__ = "0.1.0"

DEFAULT_IMAGE = "ghcr.io/tfk8s/tfk8s:0.1.0"
"""The project image, its CPU variant (``make image`` builds it; TensorFlow from ``tensorflow-cpu``): every
component and, by default, every replica that requests no GPU runs it."""

DEFAULT_GPU_IMAGE = "ghcr.io/tfk8s/tfk8s:0.1.0-gpu"
"""The project image's GPU variant (``make image VARIANT=gpu``; TensorFlow's CUDA build): by default what a
replica type with ``gpus > 0`` runs when ``image`` is :data:`DEFAULT_IMAGE`."""
