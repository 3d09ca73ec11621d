"""The constant tables of docs/model.md, generated from clustertwin.constants.

Run: python benchmarks/constants_table.py                      # every constant, as Markdown
     python benchmarks/constants_table.py --architectures      # the per-architecture summary
     python benchmarks/constants_table.py --write docs/model.md # regenerate the doc's tables
     python benchmarks/constants_table.py --check docs/model.md # exit 1 if they differ
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clustertwin.constants import architecture_table, markdown_table, render


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--architectures", action="store_true", help="print the per-architecture summary table")
    ap.add_argument("--write", metavar="DOC", help="regenerate the constant tables of DOC")
    ap.add_argument("--check", metavar="DOC", help="exit 1 if DOC's constant tables differ from the table")
    args = ap.parse_args(argv)
    if args.write or args.check:
        path = Path(args.write or args.check)
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if args.check:
            if new != text:
                print(f"{path}: constant tables differ from clustertwin.constants; "
                      f"run python benchmarks/constants_table.py --write {path}", file=sys.stderr)
                return 1
            return 0
        path.write_text(new, encoding="utf-8")
        return 0
    print(architecture_table() if args.architectures else markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
