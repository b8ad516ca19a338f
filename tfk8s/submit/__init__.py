"""Getting the pipeline to an orchestrator:

- :mod:`~tfk8s.submit.kfp_client`  a run or a recurring run on a Kubeflow Pipelines API
- :mod:`~tfk8s.submit.cron`        cron expressions checked before any request
- :mod:`~tfk8s.submit.pipeline_inputs` ``--param key=value`` parsed against the compiled package's inputs
- :mod:`~tfk8s.submit.checks`      every parameter checked before a run starts (local or submitted)
- :mod:`~tfk8s.submit.ir`          the compiled KFP IR as data the Argo export translates
- :mod:`~tfk8s.submit.argo`        the same pipeline as a plain Argo Workflow
- :mod:`~tfk8s.submit.cli`         ``pipelines/train.py``'s ``--run``, ``--schedule`` and ``--format argo``
- :mod:`~tfk8s.submit.errors`      how submitting fails
"""
