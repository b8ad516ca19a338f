"""KFP components of tfk8s, one module each: the thin KFP-facing function plus a CLI
(``python -m components.<name> --help``) that calls the same function of :mod:`tfk8s.steps`, so every step runs in
any container engine. The work itself lives in :mod:`tfk8s`.

Components run inside the project image and pip-install nothing at start (``install_kfp_package=False``).
"""

from tfk8s import DEFAULT_IMAGE

__all__ = ["DEFAULT_IMAGE"]
