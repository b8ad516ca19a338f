"""``pipelines/train.py --local`` (``make run``): the whole pipeline on this machine.

- :mod:`~tfk8s.localrun.runner`       kfp.local with a local folder for the volume
- :mod:`~tfk8s.localrun.step_server`  the steps' pre-warmed interpreter (KFP and TensorFlow imported once)
- :mod:`~tfk8s.localrun.step_output`  each step's output to its output.log, one line per step on the terminal
- :mod:`~tfk8s.localrun.outcome`      the closing block
- :mod:`~tfk8s.localrun.signals`      SIGTERM and SIGINT (Ctrl-C) reach every step; exit 143 / 130
"""
