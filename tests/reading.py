"""The reading rule for the first things a reader sees (README's opening sections, the study report's first screen): one
idea a sentence, no sentence over LIMIT words. Code blocks, tables and HTML comments are not prose and are left out."""
from __future__ import annotations

import re

LIMIT = 40


def sentences(text: str) -> list[str]:
    "The sentences of markdown or plain `text`: split at paragraph and bullet breaks, then after . ! ? before a capital, `, * ( or [."
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith(("|", "<!--")))
    parts = re.split(r"\n\s*\n|\n\s*[*-] ", text)
    return [s for p in parts for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*`(\[])", " ".join(p.split())) if s.strip()]


def long_sentences(text: str, limit: int = LIMIT) -> list[tuple[int, str]]:
    "(words, its first 80 characters) of every sentence of `text` over `limit` words."
    return [(len(s.split()), s[:80]) for s in sentences(text) if len(s.split()) > limit]
