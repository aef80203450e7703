#!/usr/bin/env python3
"""Check the documentation (README.md and docs/*.md) against a kiln binary.

    python3 scripts/check-docs.py target/release/kiln

1. Every subcommand that `kiln --help` lists and every flag that `kiln SUB --help` lists must be
   written somewhere in README.md or docs/*.md: a subcommand as `kiln SUB`, a flag as its literal
   text (`--ctx-size`, `-c`). --help, --version, -h and -V are exempt.
2. Every relative link between the pages must name a file that exists and, for `page.md#anchor`,
   a heading of that page (GitHub's anchors).
3. The runnable examples must run: a fenced ```sh block whose fence line follows the line
   `<!-- check -->` (or `<!-- check exit=N -->` when the example is meant to exit with N) runs as
   one bash script (set -euo pipefail) within 30 s, in a scratch folder where `kiln` is the binary,
   `model.gguf` the committed tiny test model and `products.json` a small product list, with
   KILN_BACKEND=cpu and HF_HUB_OFFLINE=1: offline, on the CPU.

Exits 1 naming every problem; prints a closing summary line. Standard library only.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "tiny-llama.gguf")
EXEMPT_FLAGS = {"--help", "--version", "-h", "-V"}
EXEMPT_SUBCOMMANDS = {"help"}
TIMEOUT_S = 30
PRODUCTS_JSON = """\
{"sku": "K-100", "name": "a small electric kiln for enamel"}
{"sku": "K-200", "name": "a gas kiln for stoneware"}
"""
CHECK_MARK = re.compile(r"^<!--\s*check(?:\s+exit=(\d+))?\s*-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        files += sorted(
            os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md")
        )
    return files


def rel(path):
    return os.path.relpath(path, ROOT)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# --- 1. subcommands and flags -------------------------------------------------------------------


def help_text(kiln, *args):
    out = subprocess.run(
        [kiln, *args, "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=TIMEOUT_S,
        env=dict(os.environ, COLUMNS="100"),
    )
    if out.returncode != 0:
        sys.exit(f"check-docs: `{kiln} {' '.join(args)} --help` failed:\n{out.stdout}")
    return out.stdout


def sections(text):
    """clap's help as {section title: [lines]} ("Commands", "Options", "Arguments", …)."""
    result, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^([A-Z][\w ]*):\s*$", line)
        if m:
            current = m.group(1)
            result[current] = []
        elif current is not None:
            result[current].append(line)
    return result


def subcommands(text):
    names = []
    for line in sections(text).get("Commands", []):
        m = re.match(r"^  ([a-z][\w-]*)(\s|$)", line)
        if m and m.group(1) not in EXEMPT_SUBCOMMANDS:
            names.append(m.group(1))
    return names


# An option's own line: `  -m, --model <PATH>`, `      --chat`, `  -v` (descriptions are indented
# further, so they never match).
OPTION_LINE = re.compile(r"^  (?:(-[A-Za-z0-9])(?:, )?)?(?: {4})?(--[A-Za-z0-9][\w-]*)?")


def flags(text):
    found = []
    for line in sections(text).get("Options", []):
        m = OPTION_LINE.match(line)
        if not m:
            continue
        for flag in m.groups():
            if flag and flag not in EXEMPT_FLAGS:
                found.append(flag)
        # clap lists visible aliases in brackets: [aliases: --foo], [short aliases: -f]
        for alias_list in re.findall(r"\[(?:short )?aliases?: ([^\]]*)\]", line):
            for a in re.split(r",\s*", alias_list):
                a = a.strip()
                if a and not a.startswith("-"):
                    a = ("-" if len(a) == 1 else "--") + a
                if a and a not in EXEMPT_FLAGS:
                    found.append(a)
    return found


def mentioned(token, text):
    return re.search(r"(?<![\w-])" + re.escape(token) + r"(?![\w-])", text) is not None


def check_coverage(kiln, corpus):
    """(number of items checked, problems)."""
    top = help_text(kiln)
    subs = subcommands(top)
    if not subs:
        sys.exit("check-docs: found no subcommands in `kiln --help`: has its format changed?")
    owners = {}  # flag -> [subcommands]
    for flag in flags(top):
        owners.setdefault(flag, []).append("kiln")
    for sub in subs:
        for flag in flags(help_text(kiln, sub)):
            owners.setdefault(flag, []).append("kiln " + sub)
    problems = []
    for sub in subs:
        if re.search(r"\bkiln " + re.escape(sub) + r"\b", corpus) is None:
            problems.append(f"subcommand `kiln {sub}` is not documented")
    for flag, subs_of in sorted(owners.items()):
        if not mentioned(flag, corpus):
            problems.append(f"flag `{flag}` of {', '.join(subs_of)} is not documented")
    return len(subs), len(owners), problems


# --- 2. links -----------------------------------------------------------------------------------


def strip_code_blocks(text):
    """The text with fenced code blocks blanked (their headings and links are not the page's)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
        elif fence is not None and line.strip().startswith(fence):
            fence = None
            out.append("")
        else:
            out.append("" if fence else line)
    return "\n".join(out)


def anchors(path):
    """GitHub's heading anchors of a markdown file."""
    seen, result = {}, set()
    for line in strip_code_blocks(read(path)).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def check_links(files):
    problems, count = [], 0
    for path in files:
        text = strip_code_blocks(read(path))
        text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            count += 1
            file_part, _, anchor = target.partition("#")
            dest = (
                os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if file_part
                else path
            )
            if not os.path.exists(dest):
                problems.append(f"{rel(path)}: link `{target}`: no file {rel(dest)}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{rel(path)}: link `{target}`: no heading #{anchor} in {rel(dest)}")
    return count, problems


# --- 3. examples --------------------------------------------------------------------------------


def examples(path):
    """[(line number, expected exit code, script)] of the runnable blocks; problems."""
    lines = read(path).splitlines()
    found, problems = [], []
    i = 0
    while i < len(lines):
        mark = CHECK_MARK.match(lines[i].strip())
        if not mark:
            i += 1
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not fence or fence.group(2) != "sh":
            problems.append(f"{rel(path)}:{i + 1}: `<!-- check -->` not followed by a ```sh fence")
            i += 1
            continue
        close = fence.group(1)[0] * len(fence.group(1))
        body, j = [], i + 2
        while j < len(lines) and not lines[j].strip().startswith(close):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            problems.append(f"{rel(path)}:{i + 2}: unclosed code block")
        elif not re.search(r"(?<![\w/.-])kiln\s", "\n".join(body)):
            problems.append(f"{rel(path)}:{i + 2}: a runnable example that never calls kiln")
        else:
            found.append((i + 2, int(mark.group(1) or 0), "\n".join(body) + "\n"))
        i = j + 1
    return found, problems


def run_example(kiln, script, workdir):
    """(exit code or None on timeout, seconds, combined output)."""
    os.makedirs(workdir)
    bindir = os.path.join(workdir, ".bin")
    os.makedirs(bindir)
    os.symlink(kiln, os.path.join(bindir, "kiln"))
    os.symlink(MODEL, os.path.join(workdir, "model.gguf"))
    with open(os.path.join(workdir, "products.json"), "w") as f:
        f.write(PRODUCTS_JSON)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(
        PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
        KILN_BACKEND="cpu",
        HF_HUB_OFFLINE="1",
        HOME=workdir,  # chat history and caches stay in the scratch folder
    )
    start = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    return code, time.monotonic() - start, out.decode("utf-8", "replace")


def check_examples(kiln, files):
    problems, count = [], 0
    scratch = tempfile.mkdtemp(prefix="kiln-check-docs-")
    try:
        for path in files:
            found, found_problems = examples(path)
            problems += found_problems
            for line, want, script in found:
                count += 1
                where = f"{rel(path)}:{line}"
                code, secs, out = run_example(kiln, script, os.path.join(scratch, str(count)))
                if code == want:
                    print(f"  ok   {where} ({secs:.1f} s)")
                    continue
                got = f"timed out after {TIMEOUT_S} s" if code is None else f"exit code {code}"
                print(f"  FAIL {where}: {got}, expected {want}")
                tail = "\n".join(out.rstrip().splitlines()[-15:])
                print("    " + script.rstrip().replace("\n", "\n    "))
                print("    --- output (last lines) ---")
                print("    " + tail.replace("\n", "\n    "))
                problems.append(f"{where}: example: {got}, expected {want}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return count, problems


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit("usage: python3 scripts/check-docs.py PATH/TO/kiln")
    kiln = os.path.abspath(sys.argv[1])
    if not os.access(kiln, os.X_OK):
        sys.exit(f"check-docs: {sys.argv[1]} is not an executable (cargo build --release first)")
    if not os.path.exists(MODEL):
        sys.exit(f"check-docs: the test model {rel(MODEL)} is missing")
    files = doc_files()
    corpus = "\n".join(read(f) for f in files)

    n_subs, n_flags, problems = check_coverage(kiln, corpus)
    print(f"check-docs: {n_subs} subcommands and {n_flags} flags of `kiln --help`")
    n_links, link_problems = check_links(files)
    problems += link_problems
    print(f"check-docs: {n_links} links between the pages")
    print("check-docs: running the examples")
    n_examples, example_problems = check_examples(kiln, files)
    problems += example_problems

    if problems:
        print(f"check-docs: {len(problems)} problem(s):")
        for p in problems:
            print("  " + p)
        sys.exit(1)
    print(
        f"check-docs: {n_subs} subcommands, {n_flags} flags, {n_links} links, "
        f"{n_examples} examples: all ok"
    )


if __name__ == "__main__":
    main()
