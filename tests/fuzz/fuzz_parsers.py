"""Coverage-guided fuzzing of the C parsers (atheris): ``python fuzz_parsers.py TARGET
[libFuzzer options] [corpus dirs]``, TARGET one of demand, monitor, update_lines, counted, decoders
(the JSON decoders of the contract, pure Python).

``make fuzz`` runs each target for longer; ``make asan`` runs each briefly on the
AddressSanitizer/UBSan build (CI). New inputs go to the first corpus directory given.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():  # coverage of the twins, whose branches mirror the C code
    from hotkeyd.protocol import demand, strictjson, wire  # noqa: F401
    from hotkeyd.sketch import _sketch_py  # noqa: F401
    from hotkeyd.sources import _demand_py  # noqa: F401
    from hotkeyd.sources.monitor import _monitor_py  # noqa: F401
    from tests.fuzz.checks import CHECKS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in CHECKS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(CHECKS)}}} [libFuzzer options] [corpus]")
    check = CHECKS[sys.argv.pop(1)]
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
