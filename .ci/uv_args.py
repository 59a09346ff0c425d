"""uv's options for the package sources pip is configured with here (`python3 -m pip config list` on standard input, the
PIP_* environment as pip reads it): the same indexes, local wheel folders and constraints, so that uv resolves what pip
would. One option or value per line, for a bash array."""
import ast
import os
import re
import sys

OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
           "constraint": "--constraint"}
seen = {}
for line in sys.stdin:
    m = re.match(r"^[^.]*\.([a-z-]+)=(.*)$", line.strip())  # e.g. global.find-links='/a /b'
    if m and m.group(1) in OPTIONS:
        seen.setdefault(m.group(1), []).extend(ast.literal_eval(m.group(2)).split())
for key in OPTIONS:  # pip's environment variables win over its files, as in pip
    value = os.environ.get("PIP_" + key.upper().replace("-", "_"))
    if value: seen[key] = value.split()
print("--index-strategy\nunsafe-best-match")  # pip's rule: the best version over every index, not the first index's
for key, values in seen.items():
    for v in dict.fromkeys(values):
        print(f"{OPTIONS[key]}\n{v}")
