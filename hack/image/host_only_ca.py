"""Prints one distinctive base64 line of each certificate in the bundle HOST that none of the PUBLIC bundles
has: the build host's own CAs (a TLS-intercepting proxy's, from /usr/local/share/ca-certificates), to search a
built image for (hack/image/smoke.sh, tests/project/test_dockerfile.py's e2e test).

    python3 host_only_ca.py HOST_BUNDLE PUBLIC...   (PUBLIC: PEM files, or folders of *.crt / *.pem)

PUBLIC is the image's own bundle and the host's Mozilla set (/usr/share/ca-certificates/mozilla), so a
public CA that one of the two lacks is not taken for a private one."""

import re
import sys
from pathlib import Path

PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.*?)\s*-----END CERTIFICATE-----", re.DOTALL)


def certificates(path: str | Path) -> dict[bytes, list[bytes]]:
    """The certificates of PEM files (a file, or a folder's *.crt and *.pem): base64 joined -> its lines."""
    path = Path(path)
    files = sorted([*path.glob("*.crt"), *path.glob("*.pem")]) if path.is_dir() else [path]
    out = {}
    for f in files:
        if not f.is_file():
            continue
        for body in PEM.findall(f.read_bytes()):
            lines = [line.strip() for line in body.splitlines() if line.strip()]
            out[b"".join(lines)] = lines
    return out


def host_only_lines(host: str | Path, *public: str | Path) -> list[bytes]:
    known = {key for p in public for key in certificates(p)}
    # a line from the middle: the key's bits, unlike the first lines, which many certificates share
    return [lines[len(lines) // 2] for key, lines in certificates(host).items() if key not in known]


if __name__ == "__main__":
    for line in host_only_lines(sys.argv[1], *sys.argv[2:]):
        sys.stdout.buffer.write(line + b"\n")
