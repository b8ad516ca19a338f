"""The pipeline's steps as plain functions, one module per step: what each KFP component (``components/``) and
its CLI call. Lower layers only: :mod:`tfk8s.core`, :mod:`tfk8s.runtime` (the data reader), :mod:`tfk8s.launcher`
and :mod:`tfk8s.tracking`; nothing here imports KFP or a Kubernetes client at module load, so a component body
(which runs under KFP's lightweight runtime) and a test can both import them.

- :mod:`~tfk8s.steps.parameters`       every pipeline parameter, defined once (the table), its checks and the
                                       launch read into typed objects once (:class:`~tfk8s.steps.parameters.LaunchSpec`)
- :mod:`~tfk8s.steps.ensure_volume`    the shared volume exists (PVC) before anything mounts it
- :mod:`~tfk8s.steps.prepare_dataset`  a TFDS data set -> sharded TFRecords + metadata.json (or the user's folder)
- :mod:`~tfk8s.steps.launch_training`  the training job on a backend, the coordinator's model and metrics
- :mod:`~tfk8s.steps.export_model`     the next versioned SavedModel (:mod:`~tfk8s.steps.model_versions`)
- :mod:`~tfk8s.steps.evaluate_model`   metrics (:mod:`~tfk8s.steps.evaluation`, :mod:`~tfk8s.steps.eval_command`),
                                       the gate, the reports (:mod:`~tfk8s.steps.summary`, :mod:`~tfk8s.steps.report`;
                                       its event files read by :mod:`~tfk8s.steps.event_files`, without TensorFlow)
- :mod:`~tfk8s.steps.push_model`       a blessed version into the serving base
- :mod:`~tfk8s.steps.cli`              what every component's CLI shares (flags, one-line errors, result files)
"""
