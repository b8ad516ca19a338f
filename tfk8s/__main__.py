"""``python -m tfk8s``: the ``tfk8s`` command (:mod:`tfk8s.ctl`)."""

from tfk8s.ctl import entry_point

if __name__ == "__main__":
    entry_point()
