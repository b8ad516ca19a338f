"""What a failed replica's log says: its last lines, the exception that ended it, and known errors with their fix.

Both backends keep a replica's output in a :class:`LogTail` (the local backend from the process's output, the
Kubernetes one from the followed pod log) and hand :meth:`LogTail.lines` and :attr:`LogTail.error` to the
:class:`~tfk8s.core.errors.ReplicaFailedError`. A Python traceback ends with the exception's first line
(``ValueError: ...``) and then whatever the exception's message holds: a tensor's repr can run to hundreds of
lines, which would push the one line that says what went wrong out of the last 30. So the tail remembers the
last exception line it saw (the first unindented line after a ``Traceback (most recent call last):`` header
and its frames), and every kept line is cut to :data:`MAX_LINE_CHARS` characters.

:func:`hints` names the fix of errors seen often enough to be recognised (:data:`KNOWN_ERRORS`), e.g. Keras 3's
``fit`` under MultiWorkerMirroredStrategy (keras-team/keras#20585): use tf-keras.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

LAST_LINES = 30
MAX_LINE_CHARS = 400
TRACEBACK = "Traceback (most recent call last):"
TF_KERAS_FIX = ("use tf-keras (Keras 2), which tfk8s's runtime and the built-in trainer use: pip install tf-keras, set "
                "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported and build the model with tf.keras or tf_keras "
                "(docs/training-program.md)")

KNOWN_ERRORS: tuple[tuple[tuple[re.Pattern[str], ...], str], ...] = (
    # Keras 3's fit under MultiWorkerMirroredStrategy (keras-team/keras#20585), TF 2.21 + Keras 3.x: a frame of
    # Keras 3 (keras/src/..., tf-keras's are tf_keras/src/...) and "ValueError: Attempt to convert a value
    # (PerReplica:{ ... }) with an unsupported type (<class '...values.PerReplica'>) to a Tensor."
    ((re.compile(r"[/\\]keras[/\\]src[/\\]"), re.compile(r"\bPerReplica\b")),
     "Keras 3's Model.fit does not work under MultiWorkerMirroredStrategy (keras-team/keras#20585): "
     + TF_KERAS_FIX),
    # Keras 3's model.save(dir): "Invalid filepath extension for saving. Please add either a `.keras` extension
    # ... Use `model.export(filepath)` if you want to export a SavedModel ..."
    ((re.compile(r"Invalid filepath extension for saving"),),
     "Keras 3 saves .keras files, not SavedModels: export the model with model.export(os.environ["
     "'TFK8S_MODEL_DIR']) (Keras 3), or " + TF_KERAS_FIX),
)
"""``(patterns, fix)``: an output in which every pattern matched some line gets ``fix`` in the failure's
message."""


def cut(line: str, limit: int = MAX_LINE_CHARS) -> str:
    """``line`` cut to ``limit`` characters, saying how many were left out."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... ({len(line) - limit} more characters)"


class LogTail:
    """A replica's last log lines and the last exception line seen in its whole output (thread-safe enough:
    one writer, the log reader; readers take copies).

    Args:
        size: how many of the last lines to keep.
    """

    def __init__(self, size: int = LAST_LINES):
        self._lines: collections.deque[str] = collections.deque(maxlen=size)
        self.error = ""
        """The first line of the last Python exception in the output (``""``: none seen)."""
        self._in_traceback = False
        self._seen: set[re.Pattern[str]] = set()  # the KNOWN_ERRORS patterns some line matched

    def append(self, line: str) -> None:
        """Keep one output line (without its newline)."""
        self._lines.append(cut(line))
        if line.startswith(TRACEBACK):
            self._in_traceback = True
        elif self._in_traceback and line and not line.startswith((" ", "\t")):
            self._in_traceback = False
            self.error = cut(line)
        for patterns, _ in KNOWN_ERRORS:
            self._seen.update(p for p in patterns if p not in self._seen and p.search(line))

    def extend(self, lines: Iterable[str]) -> None:
        """Keep several lines."""
        for line in lines:
            self.append(line)

    def __bool__(self) -> bool:
        return bool(self._lines)

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self):
        return iter(list(self._lines))

    def lines(self) -> list[str]:
        """The last lines, oldest first (each at most :data:`MAX_LINE_CHARS` characters)."""
        return list(self._lines)

    def hints(self) -> list[str]:
        """The fixes of the known errors seen anywhere in the output, in the order of :data:`KNOWN_ERRORS`."""
        return [fix for patterns, fix in KNOWN_ERRORS if all(p in self._seen for p in patterns)]


def exception_line(lines: Iterable[str]) -> str:
    """The first line of the last Python exception in ``lines`` (``""`` when there is none)."""
    tail = LogTail(0)
    tail.extend(lines)
    return tail.error


def hints(lines: Iterable[str]) -> list[str]:
    """The fixes of :data:`KNOWN_ERRORS` whose pattern one of ``lines`` matches."""
    tail = LogTail(0)
    tail.extend(lines)
    return tail.hints()
