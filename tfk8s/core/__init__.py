"""The shared vocabulary every other layer speaks, in plain Python (standard library only):

- :mod:`~tfk8s.core.cluster`          replica types, replica names, the cluster spec and TF_CONFIG (one builder)
- :mod:`~tfk8s.core.contract`         what every replica is handed: the ``TFK8S_*`` variables, placeholders, metrics
- :mod:`~tfk8s.core.layout`           where everything lives on the volume: every folder and file name, once
- :mod:`~tfk8s.core.volume`           a failure of the volume itself as one error naming the path and the fix
- :mod:`~tfk8s.core.data_format`      the prepared data: metadata.json and the shard files
- :mod:`~tfk8s.core.progress`         the progress records a program writes and the launcher reads
- :mod:`~tfk8s.core.job`              a training job, its result, its name, its success policy
- :mod:`~tfk8s.core.errors`           how a job fails, backend-neutral
- :mod:`~tfk8s.core.policy`           what a failed replica means: the failure rules as one table, restart groups
- :mod:`~tfk8s.core.diagnosis`        what a failed replica's log says: last lines, the exception, known fixes
- :mod:`~tfk8s.core.proxy`            the NO_PROXY variables that keep a job's own traffic off any proxy
- :mod:`~tfk8s.core.builtin_trainer`  how the built-in trainer is started, its defaults and flags
"""
