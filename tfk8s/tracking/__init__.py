"""Keeping track of training jobs, from the lines a backend already sends and the files on the volume:

- :mod:`~tfk8s.tracking.records`       the job record (``<train dir>/job.json``): written, read, listed, summed up
- :mod:`~tfk8s.tracking.replica_logs`  every replica's log kept on the volume as it streams
- :mod:`~tfk8s.tracking.progress_view` the live progress bar (terminal) or plain progress line (logs)
- :mod:`~tfk8s.tracking.tracked`       all three around one launch (what the launch step wraps a backend in)

Nothing here can fail a job: write errors are said once and ignored. Imports :mod:`tfk8s.core` only.
"""
