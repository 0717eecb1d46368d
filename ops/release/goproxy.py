"""Write the Go client (clients/go) as a Go module proxy tree: ``dist/goproxy``.

``GOPROXY=file://<dist>/goproxy`` then serves ``go get github.com/hotkeyd/hotkeyd/clients/go``
exactly as the public proxy will once the tag ``clients/go/v<VERSION>`` is pushed (a module
in a subdirectory is tagged with its directory as prefix). The layout is the GOPROXY
protocol's: ``<module>/@v/list``, ``v<V>.info``, ``v<V>.mod`` and ``v<V>.zip``, whose
entries are ``<module>@v<V>/<path>``: the files git tracks in clients/go.

Usage: python ops/release/goproxy.py <out-dir>
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_DIR = ROOT / "clients" / "go"


def main(out: Path) -> None:
    version = "v" + (ROOT / "VERSION").read_text().strip()
    module = (MODULE_DIR / "go.mod").read_text().splitlines()[0].split()[1]
    files = subprocess.run(
        ["git", "ls-files", "-z", "."], cwd=MODULE_DIR, capture_output=True, check=True
    ).stdout.split(b"\0")
    at = out / module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(at / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for raw in sorted(f for f in files if f):
            rel = raw.decode()
            if (MODULE_DIR / rel).is_file():
                z.write(MODULE_DIR / rel, f"{module}@{version}/{rel}")
    (at / f"{version}.mod").write_bytes((MODULE_DIR / "go.mod").read_bytes())
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": stamp}))
    (at / "list").write_text(version + "\n")
    print(at / f"{version}.zip")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
