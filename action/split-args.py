"""Split an Action input into arguments as a shell would (quotes kept together, nothing globbed or expanded),
NUL-separated on stdout: ``mapfile -d '' -t args < <(python split-args.py "$INPUT")``."""

import shlex
import sys

try:
    words = shlex.split(sys.argv[1] if len(sys.argv) > 1 else "")
except ValueError as exc:  # an unclosed quote
    sys.exit(f"cannot split {sys.argv[1]!r} into arguments: {exc}")
sys.stdout.write("".join(f"{word}\0" for word in words))
