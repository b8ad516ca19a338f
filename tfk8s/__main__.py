"""``python -m tfk8s``: the ``tfk8s`` command (:mod:`tfk8s.cmd`)."""

from tfk8s.cmd import entry_point

if __name__ == "__main__":
    entry_point()
