"""Run a :class:`~tfk8s.core.job.TrainingJob`'s replicas and watch them: start, watch, restart, stop.

A backend ("start a replica, watch it, stop it") takes a job and returns a
:class:`~tfk8s.core.job.LaunchResult` or raises one of :mod:`tfk8s.core.errors`; what a failed replica means is
the shared policy, :mod:`tfk8s.core.policy`, and what the launcher then does (success and its grace periods, the
group settle window, the restart budget, preemptions, the timeout) is the engine's, :mod:`tfk8s.launcher.engine`,
written once: each backend only observes its replicas, asks :func:`~tfk8s.launcher.engine.decide`, and acts.
What a backend provides (launch, the volume, inspection for the ``tfk8s`` verbs) and the backends by name:
:mod:`tfk8s.launcher.backends`, the only module other layers import (with
:mod:`tfk8s.launcher.kubernetes.settings`, the Kubernetes settings' public face):

- ``local``       :mod:`tfk8s.launcher.local`: each replica a process on 127.0.0.1 (tests, ``make run``)
- ``kubernetes``  :mod:`tfk8s.launcher.kubernetes`: one batch/v1 Job + one headless Service per replica

Both run the progress watchdog (:mod:`tfk8s.launcher.watchdog`) and take SIGTERM and SIGINT one way
(:mod:`tfk8s.launcher.stopping`). This layer imports :mod:`tfk8s.core` only, and
the two backends never import each other.
"""
