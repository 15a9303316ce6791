#!/usr/bin/env python3
"""Check every relative link and anchor in the repository's Markdown files.

    python3 .ci/check-links.py            # every tracked (and new, unignored) *.md
    python3 .ci/check-links.py FILE.md... # only these

A link fails when the file or directory it names does not exist, when it
leaves the repository, or when its `#anchor` names no heading (or explicit
`<a id>`/`<a name>`) of the Markdown file it points at. Anchors are made the
way GitHub makes them (github-slugger): the heading's text as rendered
(backticks, emphasis markers, link targets and HTML tags gone), lower-cased,
every character that is not a letter, a mark, a number, a connector (`_`), a
hyphen or a space dropped, each space turned into a hyphen; a repeated
heading gets `-1`, `-2`, ... Links into other files may name a line
(`#L10`, `#L10-L20`). External links (http:, https:, mailto:) are not
fetched: CI has no internet. Links inside fenced code blocks and inline code
are not links. Exit status 1 lists every broken link with its file and line.
"""

import os
import re
import subprocess
import sys
import unicodedata
from urllib.parse import unquote

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
EXPLICIT_ANCHOR = re.compile(r"""<a\s+[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](dest "title") and ![alt](dest); the text may hold one level of brackets.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def slug(text):
    """GitHub's anchor for a heading's rendered text."""
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            out.append(ch)
    return "".join(out).replace(" ", "-")


def rendered(heading):
    """A heading's text as GitHub renders it, near enough for its anchor."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)  # links -> their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), text)
    return text


def lines_outside_code(path):
    """(line number, text) for every line outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if fence is None and m:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            if fence is not None:
                if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                    fence = None
                continue
            yield number, line.rstrip("\n")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        for _, line in lines_outside_code(path):
            for a in EXPLICIT_ANCHOR.findall(line):
                found.add(a)
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(rendered(m.group(2)))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = found
    return _anchors[path]


def links(path):
    for number, line in lines_outside_code(path):
        bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        for m in INLINE_LINK.finditer(bare):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(bare)
        if m:
            yield number, m.group(1)
        for m in HTML_LINK.finditer(bare):
            yield number, m.group(1)


def check(path):
    problems = []
    here = os.path.dirname(path)
    for number, target in links(path):
        target = target.strip()
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # external (http:, https:, mailto:): not fetched
        where = f"{os.path.relpath(path, ROOT)}:{number}"
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part)
        if file_part:
            base = ROOT if file_part.startswith("/") else here
            dest = os.path.realpath(os.path.join(base, file_part.lstrip("/")))
            if dest != ROOT and not dest.startswith(ROOT + os.sep):
                problems.append(f"{where}: {target}: leaves the repository")
                continue
            if not os.path.exists(dest):
                problems.append(f"{where}: {target}: {os.path.relpath(dest, ROOT)} does not exist")
                continue
        else:
            dest = path
        if not anchor:
            continue
        anchor = unquote(anchor)
        if dest.endswith(".md") and os.path.isfile(dest):
            if anchor not in anchors(dest):
                problems.append(f"{where}: {target}: no heading in {os.path.relpath(dest, ROOT)} has the anchor #{anchor}")
        elif not LINE_ANCHOR.match(anchor):
            problems.append(f"{where}: {target}: #{anchor} in a file that is not Markdown (only #L<n> is allowed)")
    return problems


def markdown_files():
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    files = [os.path.join(ROOT, p) for p in out.split("\0") if p]
    return sorted(p for p in files if os.path.isfile(p) and "/node_modules/" not in p)


def main(argv):
    files = [os.path.realpath(p) for p in argv] if argv else markdown_files()
    problems = []
    count = 0
    for path in files:
        for p in check(path):
            problems.append(p)
        count += sum(1 for _ in links(path))
    for p in problems:
        print(p)
    print(f"{len(files)} Markdown files, {count} links checked, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
