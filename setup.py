"""Build the private C extensions from native/.

The native core is optional for end users (a pure-Python twin takes over), but
CI sets HOTKEYD_REQUIRE_NATIVE=1 so that a failed compile fails the build
instead of silently falling back.
"""

from __future__ import annotations

import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

REQUIRE_NATIVE = os.environ.get("HOTKEYD_REQUIRE_NATIVE", "") not in ("", "0")

CFLAGS = ["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fno-strict-aliasing"]


class OptionalBuildExt(build_ext):
    """Build extensions; tolerate failure unless HOTKEYD_REQUIRE_NATIVE is set."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # pragma: no cover - depends on the machine
            if REQUIRE_NATIVE:
                raise
            print(
                f"WARNING: native build failed ({exc}); using the pure-Python twin", file=sys.stderr
            )

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # pragma: no cover - depends on the machine
            if REQUIRE_NATIVE:
                raise
            print(f"WARNING: building {ext.name} failed ({exc})", file=sys.stderr)


class BuildPyWithSpec(build_py):
    """Ship the language-neutral contract (spec/schema, spec/lua, spec/limits.json) as hotkeyd/spec/.

    spec/ at the repository root is the single source (other clients read it too);
    the wheel carries a copy that hotkeyd.protocol.contract finds at runtime. Editable installs
    and checkouts read spec/ in place.
    """

    def run(self) -> None:
        super().run()
        for kind in ("schema", "lua"):
            src = os.path.join("spec", kind)
            if not os.path.isdir(src):
                continue
            dst = os.path.join(self.build_lib, "hotkeyd", "spec", kind)
            os.makedirs(dst, exist_ok=True)
            for name in sorted(os.listdir(src)):
                if name.endswith((".json", ".lua")):
                    shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
        # The limits every part enforces (hotkeyd.protocol.limits reads them).
        shutil.copyfile(
            os.path.join("spec", "limits.json"),
            os.path.join(self.build_lib, "hotkeyd", "spec", "limits.json"),
        )


def _sources(*names: str) -> list[str]:
    return [os.path.join("native", n) for n in names]


ext_modules = []
if os.path.exists(os.path.join("native", "_sketchmodule.c")):
    ext_modules.append(
        Extension(
            "hotkeyd.sketch._sketch",
            sources=_sources("murmur3.c", "keyhash.c", "sketch.c", "lines.c", "_sketchmodule.c"),
            include_dirs=["native"],
            extra_compile_args=CFLAGS,
        )
    )
if os.path.exists(os.path.join("native", "_monitormodule.c")):
    ext_modules.append(
        Extension(
            "hotkeyd.sources.monitor._monitor",
            sources=_sources("monitor_parse.c", "_monitormodule.c"),
            include_dirs=["native"],
            extra_compile_args=CFLAGS,
        )
    )

if os.path.exists(os.path.join("native", "_tracemodule.c")):
    ext_modules.append(
        Extension(
            "hotkeyd.replay._trace",
            sources=_sources("trace_parse.c", "_tracemodule.c"),
            include_dirs=["native"],
            extra_compile_args=CFLAGS,
        )
    )
if os.path.exists(os.path.join("native", "_demandmodule.c")):
    ext_modules.append(
        Extension(
            "hotkeyd.sources._demand",
            sources=_sources("demand_parse.c", "_demandmodule.c"),
            include_dirs=["native"],
            extra_compile_args=CFLAGS,
        )
    )

if os.path.exists(os.path.join("native", "_tickmodule.c")):
    ext_modules.append(
        Extension(
            "hotkeyd.detector._tick",
            sources=_sources("tick.c", "_tickmodule.c"),
            include_dirs=["native"],
            extra_compile_args=CFLAGS,
        )
    )

setup(
    ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithSpec}
)
