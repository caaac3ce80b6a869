#!/usr/bin/env python3
"""Checks the repository's Markdown (README.md, docs/, examples/ and every other *.md outside
.git, .venv, build*, subprojects and hidden folders other than .github):

  links  every relative link [text](path), [text](path#anchor), [text](#anchor), image and
         reference definition ([label]: path) names a file or folder of the repository, and an
         #anchor names a heading of the target Markdown file (GitHub's slugs: lowercase,
         punctuation other than '-' and '_' dropped, each space a '-', repeats -1, -2, ...) or an
         <a name/id> in it. http(s), mailto and other URLs with a scheme are not fetched.
         A Markdown file named in the text rather than linked ("see docs/engine.md",
         `params.md`) must exist as well, beside the file or from the repository root; and no
         line names a path of one machine (/work/..., /home/..., /root/..., /Users/..., ~/...).
         Paths that leave the repository (../shared/...) count as missing.
  flags  every command in a fenced code block (sh, bash, shell, console; an unlabelled block's
         lines that start with a command, after an optional '$ ' prompt and VAR=value
         assignments) that runs pact-info or pact-perf (any path ending in those names) uses
         only options the tool lists: BUILD/perf/pact-info --help, BUILD/perf/pact-perf --help
         (the modes) and BUILD/perf/pact-perf MODE --help. Continuation lines (trailing '\\')
         are joined; <placeholders>, values of options that take one, negative numbers and
         shell variables are not flags. Without the two binaries this part is skipped.

Prints one line per problem, "FILE:LINE: what is wrong", then a summary line. Exit status 1
when a problem was found (or, with --require-build, when the flags part was skipped), else 0.
Standard library only; no network.
"""
import argparse
import os
import re
import subprocess
import sys
import urllib.parse

TOOLS = ("pact-info", "pact-perf")
SHELL_LANGS = {"sh", "bash", "shell", "console", "shell-session", "zsh"}
SKIP_DIRS = {".git", ".venv", "subprojects", "node_modules", "__pycache__"}

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
                  r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
MENTION = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)*\.md)\b")
MACHINE_PATH = re.compile(r"(?<![\w.~-])(?:/(?:work|home|root|Users)/|~/)[^\s`'\")\]]*")
REFDEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(\S+)", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"<[A-Za-z_.][^<>\s]*>")
PH = "\x01"  # stands for a <placeholder> in a command's words
NUMBER = re.compile(r"^-[0-9.]")


# ---------------------------------------------------------------------------------- Markdown


def md_files(root, only):
    if only:
        return [os.path.relpath(os.path.abspath(p if os.path.exists(p) else os.path.join(root, p)),
                                root) for p in only]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")
                         and not (x.startswith(".") and x != ".github"))
        out += [os.path.relpath(os.path.join(d, f), root) for f in sorted(files) if f.endswith(".md")]
    return out


def split_blocks(lines):
    """(prose, blocks): prose is the text with fenced blocks blanked (line count kept); blocks
    is a list of (info, first line number of the content, content lines)."""
    prose, blocks, fence, info, start, body = [], [], None, "", 0, []
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None:
            if m and not (m.group(2)[0] == "`" and "`" in line[m.end(2):]):
                fence, info, start, body = m.group(2), m.group(3).lower(), n + 1, []
                prose.append("")
            else:
                prose.append(line)
        else:
            prose.append("")
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) and not m.group(3):
                blocks.append((info, start, body))
                fence = None
            else:
                body.append(line)
    if fence is not None:
        blocks.append((info, start, body))
    return prose, blocks


def strip_inline(text):
    """A heading's rendered text: links to their text, code and emphasis marks and HTML out."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text


def slug(text):
    text = strip_inline(text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(lines):
    prose, _ = split_blocks(lines)
    seen, out = {}, set()

    def add(base):
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")

    for i, line in enumerate(prose):
        m = ATX.match(line)
        if m and (m.group(2) or "").strip():
            add(slug(m.group(2)))
        elif (re.match(r"^ {0,3}(=+|-+)[ \t]*$", line) and i > 0 and prose[i - 1].strip()
              and not re.match(r"^\s*([-*+>|#]|\d+[.)])", prose[i - 1])
              and not (i > 1 and prose[i - 2].strip())):
            add(slug(prose[i - 1]))
        for a in HTML_ANCHOR.findall(line):
            out.add(a)
    return out


class Links:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.cache = {}
        self.checked = 0
        self.mentions = 0

    def inside(self, path):
        return path == self.root or path.startswith(self.root + os.sep)

    def anchors_of(self, path):
        if path not in self.cache:
            with open(path, encoding="utf-8", errors="replace") as f:
                self.cache[path] = anchors(f.read().split("\n"))
        return self.cache[path]

    def check(self, rel, lines, report):
        prose, _ = split_blocks(lines)
        text = "\n".join(prose)
        here = os.path.join(self.root, rel)
        self.check_mentions(rel, text, here, report)
        # Code spans are not links: blank them, keeping offsets (and so line numbers).
        text = INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        found = [(m.start(2), m.group(2)) for m in LINK.finditer(text)]
        found += [(m.start(2), m.group(2)) for m in REFDEF.finditer(text)]
        for pos, target in found:
            line = text.count("\n", 0, pos) + 1
            target = target.strip()
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            self.checked += 1
            path, _, frag = target.partition("#")
            path = urllib.parse.unquote(path.split("?", 1)[0])
            if path:
                base = self.root if path.startswith("/") else os.path.dirname(here)
                dest = os.path.realpath(os.path.join(base, path.lstrip("/")))
                if not self.inside(dest):
                    report(rel, line, f"link '{target}' points outside the repository")
                    continue
                if not os.path.exists(dest):
                    report(rel, line, f"link '{target}': no such file "
                                      f"'{os.path.relpath(dest, self.root)}'")
                    continue
            else:
                dest = os.path.realpath(here)
            if frag and os.path.isfile(dest) and dest.endswith(".md"):
                if urllib.parse.unquote(frag) not in self.anchors_of(dest):
                    where = "this file" if dest == os.path.realpath(here) else \
                        os.path.relpath(dest, self.root)
                    report(rel, line, f"link '{target}': no heading '#{frag}' in {where}")

    def check_mentions(self, rel, text, here, report):
        """A Markdown file named in the text, not as a link ("see docs/engine.md", `params.md`),
        must exist too: beside this file or from the repository root."""
        blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
        text = REFDEF.sub(blank, LINK.sub(blank, text))
        text = re.sub(r"[a-z][a-z0-9+.-]*://\S+", "", text)
        for m in MENTION.finditer(text):
            name = m.group(1)
            self.mentions += 1
            if any(self.inside(p) and os.path.exists(p)
                   for p in (os.path.realpath(os.path.join(base, name))
                             for base in (os.path.dirname(here), self.root))):
                continue
            report(rel, text.count("\n", 0, m.start()) + 1,
                   f"names '{name}', which is not in the repository")


# ---------------------------------------------------------------------------------- commands


def tokenize(cmd):
    """Shell words and operators of one logical line ('#' comments dropped, quotes removed).
    A word that had a <placeholder> in it carries PH."""
    cmd = PLACEHOLDER.sub(PH, cmd)
    words, word, have, i, n = [], [], False, 0, len(cmd)
    while i < n:
        c = cmd[i]
        if c in " \t":
            if have:
                words.append("".join(word))
                word, have = [], False
        elif c == "#" and not have:
            break
        elif c == "\\" and i + 1 < n:
            word.append(cmd[i + 1])
            have = True
            i += 1
        elif c in "'\"":
            j = cmd.find(c, i + 1)
            j = n if j < 0 else j
            word.append(cmd[i + 1:j])
            have = True
            i = j
        elif c in ";|&()":
            if have:
                words.append("".join(word))
                word, have = [], False
            op = cmd[i:i + 2] if cmd[i:i + 2] in ("&&", "||", ";;") else c
            words.append(op)
            i += len(op) - 1
            if op == "&" and words[-2:-1] and words[-2].endswith(">"):
                words.pop()  # 2>&1
        elif c in "<>":
            if have and not "".join(word).isdigit():
                words.append("".join(word))
            word, have = [], False
            while i + 1 < n and cmd[i + 1] in "<>&":
                i += 1
            # The redirection's target is not an argument either.
            while i + 1 < n and cmd[i + 1] in " \t":
                i += 1
            j = i + 1
            while j < n and cmd[j] not in " \t;|&()":
                j += 1
            i = j - 1
        else:
            word.append(c)
            have = True
        i += 1
    if have:
        words.append("".join(word))
    return words


def segments(words):
    seg = []
    for w in words:
        if w in (";", "|", "||", "&&", "&", "(", ")", ";;"):
            if seg:
                yield seg
            seg = []
        else:
            seg.append(w)
    if seg:
        yield seg


def logical_lines(body, start, prompt_only):
    """(line number, text) of each command line; continuations joined; with prompt_only only
    the lines after a '$ ' prompt (console output is not a command)."""
    out, cur, first = [], None, 0
    for k, raw in enumerate(body):
        n = start + k
        line = raw.rstrip()
        if cur is None:
            s = line.lstrip()
            if s.startswith("$ ") or s == "$":
                s = s[1:].lstrip()
            elif prompt_only:
                continue
            cur, first = "", n
            line = s
        if line.endswith("\\") and not line.endswith("\\\\"):
            cur += line[:-1] + " "
            continue
        out.append((first, cur + line))
        cur = None
    if cur is not None:
        out.append((first, cur))
    return out


def tool_of(word):
    base = word.rsplit("/", 1)[-1]
    return base if base in TOOLS else None


class Options:
    """What a tool's --help lists: {name: takes_value} per (tool, mode)."""

    OPT_LINE = re.compile(r"^  (-\S.*)$")

    def __init__(self, build):
        self.build = build
        self.table = {}
        self.modes = set()
        self.error = None

    def run(self, *args):
        try:
            p = subprocess.run(list(args), capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo"))
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"{' '.join(args)}: {e}")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit status {p.returncode}: "
                               f"{(p.stderr or p.stdout).strip()[:200]}")
        return p.stdout

    @classmethod
    def parse(cls, text):
        opts, section, takes_value = {}, None, False
        for line in text.split("\n"):
            if re.match(r"^\S.*:$", line):
                section = line[:-1]
                continue
            if section != "Options":
                continue
            m = cls.OPT_LINE.match(line)
            if m:
                # "  -b,--minbytes TEXT=8   smallest size": names, then a type if it takes a value.
                head = re.split(r"\s{2,}", m.group(1).strip(), maxsplit=1)
                parts = head[0].split(" ")
                takes_value = len(parts) > 1
                for name in parts[0].split(","):
                    name = re.sub(r"\{.*\}$", "", name)  # --poll{false}
                    if name.startswith("-"):
                        opts[name] = takes_value
                desc = head[1] if len(head) > 1 else ""
            else:
                desc = line  # the description of the option above, on a line of its own
            # Aliases the help names in words: "--np INT  fork ... (-np works too)".
            for alias in re.findall(r"\((-[\w-]+) works too\)", desc):
                opts[alias] = takes_value
        return opts

    def load(self):
        info = os.path.join(self.build, "perf", "pact-info")
        perf = os.path.join(self.build, "perf", "pact-perf")
        missing = [p for p in (info, perf) if not os.access(p, os.X_OK)]
        if missing:
            self.error = f"no build ({', '.join(missing)} missing)"
            return False
        self.table[("pact-info", None)] = self.parse(self.run(info, "--help"))
        top = self.run(perf, "--help")
        self.table[("pact-perf", None)] = self.parse(top)
        sub = re.search(r"^Subcommands:\n((?:  .*\n?)*)", top, re.M)
        self.modes = set(re.findall(r"^  (\S+)", sub.group(1), re.M)) if sub else set()
        for mode in sorted(self.modes):
            self.table[("pact-perf", mode)] = self.parse(self.run(perf, mode, "--help"))
        return True


def check_command(words, opts, report_here):
    """Checks one command's words from the tool's name on; returns True if it was one."""
    for k, w in enumerate(words):
        tool = tool_of(w)
        if tool:
            break
    else:
        return False
    args = words[k + 1:]
    mode = None
    if tool == "pact-perf":
        positional = [a for a in args if not a.startswith("-")]
        first = args[0] if args else None
        if first and not first.startswith("-"):
            if PH in first or first.startswith("$"):
                return True  # a mode left to the reader
            if first not in opts.modes:
                report_here(f"pact-perf: unknown mode '{first}' "
                            f"(modes: {', '.join(sorted(opts.modes))})")
                return True
            mode, args = first, args[1:]
        elif positional and not any(a in ("-h", "--help") for a in args):
            report_here(f"pact-perf: '{first}' before the mode (pact-perf MODE [OPTIONS])")
    table = opts.table[(tool, mode)]
    name = f"{tool} {mode}" if mode else tool
    skip_value = False
    for a in args:
        a = a.strip("[]")
        if skip_value:
            skip_value = False
            if not a.startswith("-") or NUMBER.match(a):
                continue
        if a == "--":
            break
        if not a.startswith("-") or a == "-" or NUMBER.match(a) or PH in a or "$" in a:
            continue
        if a in ("-...", "--..."):
            continue
        flag, eq, _ = a.partition("=")
        if flag in table:
            skip_value = table[flag] and not eq
            continue
        if not flag.startswith("--") and flag[:2] in table:
            continue  # -n20: a short option with its value attached
        report_here(f"{name}: unknown option '{flag}' (not in '{name} --help')")
    return True


def check_commands(rel, lines, opts, report, verbose=False):
    _, blocks = split_blocks(lines)
    count = 0
    for info, start, body in blocks:
        lang = info.split(",")[0].strip("{}.")
        if lang and lang not in SHELL_LANGS:
            continue
        prompts = any(re.match(r"^\s*\$ ", b) for b in body)
        for n, text in logical_lines(body, start, prompt_only=prompts and lang in ("", "console")):
            words = tokenize(text)
            for seg in segments(words):
                if not lang:
                    # Unlabelled block: only lines that start with the tool (after assignments).
                    lead = [w for w in seg if not ENV_ASSIGN.match(w)][:1]
                    if not lead or not tool_of(lead[0]):
                        continue
                if check_command(seg, opts, lambda msg, n=n: report(rel, n, msg)):
                    count += 1
                    if verbose:
                        print(f"{rel}:{n}: checked: {' '.join(seg).replace(PH, '<>')}")
    return count


# ---------------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build",
                    help="build directory with perf/pact-info and perf/pact-perf (default: build)")
    ap.add_argument("--require-build", action="store_true",
                    help="fail when the build's tools are missing (default: skip the flags check)")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="repository root (default: the parent of ci/)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="also print every pact-info/pact-perf command the flags part checked")
    ap.add_argument("files", nargs="*", help="Markdown files to check (default: all)")
    a = ap.parse_args()
    root = os.path.realpath(a.root)
    build = a.build if os.path.isabs(a.build) else os.path.join(root, a.build)
    problems = []

    def report(rel, line, msg):
        problems.append((rel, line, msg))

    opts = Options(build)
    try:
        have_tools = opts.load()
    except RuntimeError as e:
        report(os.path.relpath(build, root), 0, f"cannot read the tools' options: {e}")
        have_tools = False
    files = md_files(root, a.files)
    links = Links(root)
    commands = 0
    for rel in files:
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                lines = f.read().split("\n")
        except OSError as e:
            report(rel, 0, f"cannot read: {e.strerror}")
            continue
        links.check(rel, lines, report)
        for n, line in enumerate(lines, 1):
            for m in MACHINE_PATH.finditer(line):
                report(rel, n, f"names a machine's path '{m.group(0)}' (home or work folders "
                               "exist on one machine only)")
        if have_tools:
            commands += check_commands(rel, lines, opts, report, a.verbose)
    for rel, line, msg in sorted(problems, key=lambda p: (p[0], p[1])):
        print(f"{rel}:{line}: {msg}")
    flags = f"{commands} pact-info/pact-perf commands" if have_tools else \
        f"flags: skipped: {opts.error or 'the tools could not be read'}"
    print(f"docs_check: {len(files)} files, {links.checked} relative links, "
          f"{links.mentions} Markdown files named in text, {flags}; "
          f"{len(problems)} problem(s)")
    if problems or (a.require_build and not have_tools):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
