#!/usr/bin/env python3
"""Compiles (and where they are whole programs, runs) every code snippet of
README.md and docs/*.md, so the documents cannot drift from the code.

Each ```cpp and ```python block must be preceded by a tag line saying what
it is; an untagged block is an error:

  <!-- snippet: program -->      a whole program over <cohort/cohort.hpp>:
                                  compiled with only include/ on the path,
                                  linked with the build's libcohort, run
  <!-- snippet: fragment -->     statements over the public API: compiled
                                  inside a function
  <!-- snippet: caf-program -->  a whole CAF program over the internal
                                  headers (actors/runtime.hpp): compiled
  <!-- snippet: caf-fragment --> statements over the internal headers,
                                  compiled inside a function that has
                                  `caf::actor_system& sys`, `rt` (the
                                  runtime facade), `item`, `items`, `more`
  <!-- snippet: python -->       run with the build's Python module, in a
                                  scratch folder, the build's `cohort`
                                  on PATH
  <!-- snippet: none (why) -->   not compiled, with the reason

Compiler errors point at the document's lines (#line). Prints one line per
snippet and a summary; exits 1 if any failed.

Usage: doc_snippets.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

TAG = re.compile(r"<!--\s*snippet:\s*([a-z-]+)")
KINDS = {"program", "fragment", "caf-program", "caf-fragment", "python", "none"}

FRAGMENT_HEAD = """#include <cohort/cohort.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>
"""

CAF_HEAD = """#include "actors/runtime.hpp"
#include "messages/convert.hpp"
#include "messages/system_config.hpp"
#include <cstdio>
#include <vector>
"""
CAF_PARAMS = ("caf::actor_system& sys, std::unique_ptr<cohort::actors::runtime>& rt, "
              "cohort::work_item item, std::vector<cohort::work_item> items, "
              "std::vector<cohort::work_item> more")


def snippets(src):
    files = [os.path.join(src, "README.md")] + sorted(
        os.path.join(src, "docs", f) for f in os.listdir(os.path.join(src, "docs"))
        if f.endswith(".md"))
    for path in files:
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(cpp|c\+\+|python)\s*$", lines[i])
            if not m:
                i += 1
                continue
            start = i + 1
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            t = TAG.search(prev)
            kind = t.group(1) if t else None
            yield (os.path.relpath(path, src), start + 1, m.group(1),
                   "\n".join(lines[start:j]) + "\n", kind)
            i = j + 1


def caf_flags(build):
    """The compile flags of examples/embed.cpp, the CAF embedding example:
    every include path the internal headers need (CAF, protobuf's generated
    headers, the source tree)."""
    db = json.load(open(os.path.join(build, "compile_commands.json")))
    entry = next(e for e in db if e["file"].endswith("examples/embed.cpp"))
    args = shlex.split(entry["command"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c", "-MQ", "-MF"):
            skip = True
            continue
        if a == "-MD" or a.endswith(".cpp"):
            continue
        out.append(a)
    return args[0], out, entry["directory"]


def caf_link(build, obj, exe):
    """examples/embed's link command (the internal static libraries and what
    they need, as ninja has it), for `obj` into `exe`."""
    rc, out = run(["ninja", "-C", build, "-t", "commands", "examples/embed"])
    line = out.strip().split("\n")[-1]
    args = shlex.split(line)
    args[args.index("-o") + 1] = exe
    return [obj if a.endswith("embed.cpp.o") else a for a in args]


def run(cmd, cwd=None, env=None):
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    return p.returncode, p.stdout


def main():
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    cxx, flags, cdir = caf_flags(build)
    flags.append("-fdiagnostics-color=never")
    tmp = tempfile.mkdtemp(prefix="cohort-doc-snippets-")
    failed, done = [], []
    groups = {"fragment": [], "caf-fragment": []}

    def report(where, ok, what, log=""):
        print(f"doc snippet {where}: {'ok' if ok else 'FAILED'} ({what})")
        if not ok:
            print(log.rstrip())
            failed.append(where)
        else:
            done.append(where)

    for path, line, lang, code, kind in snippets(src):
        where = f"{path}:{line}"
        if kind is None:
            report(where, False, "untagged",
                   "  precede it with <!-- snippet: KIND --> (see scripts/doc_snippets.py)")
            continue
        fits = kind == "none" or (lang == "python") == (kind == "python")
        if kind not in KINDS or not fits:
            report(where, False, f"tag '{kind}' does not fit a {lang} block")
            continue
        if kind == "none":
            continue
        located = f'#line {line} "{path}"\n{code}'
        if kind in groups:
            groups[kind].append((where, located))
        elif kind == "program":
            base = os.path.join(tmp, f"program{len(done) + len(failed)}")
            open(base + ".cpp", "w").write(located)
            rc, log = run([cxx, "-std=c++20", "-fdiagnostics-color=never", "-I", os.path.join(src, "include"),
                           base + ".cpp", "-o", base,
                           os.path.join(build, "api", "libcohort.so"),
                           "-Wl,-rpath," + os.path.join(build, "api")])
            if rc == 0:
                rc, out = run([base], cwd=tmp)
                log += out
            report(where, rc == 0, "compiled, linked and run", log)
        elif kind == "caf-program":
            base = os.path.join(tmp, f"caf{len(done) + len(failed)}")
            open(base + ".cpp", "w").write(located)
            rc, log = run([cxx] + flags + ["-c", base + ".cpp", "-o", base + ".o"], cwd=cdir)
            if rc == 0:
                rc, out = run(caf_link(build, base + ".o", base), cwd=cdir)
                log += out
            if rc == 0:
                rc, out = run([base], cwd=tmp)
                log += out
            report(where, rc == 0, "compiled, linked and run", log)
        elif kind == "python":
            pkg = os.path.join(build, "python", "cohort")
            if not os.path.isdir(pkg) or not any(
                    f.startswith("_cohort") for f in os.listdir(pkg)):
                print(f"doc snippet {where}: SKIPPED (this build has no Python module)")
                continue
            # The build's `cohort` is on PATH, for snippets that run it.
            env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"),
                       PATH=os.path.join(build, "tools") + os.pathsep +
                       os.environ.get("PATH", ""))
            f = os.path.join(tmp, f"snippet{len(done) + len(failed)}.py")
            open(f, "w").write(code)
            rc, log = run(["/usr/bin/python3", f], cwd=tmp, env=env)
            report(where, rc == 0, "run", log)

    # Fragments: one translation unit per kind, one function per snippet.
    for kind, items in groups.items():
        if not items:
            continue
        head, params = (FRAGMENT_HEAD, "") if kind == "fragment" else (CAF_HEAD, CAF_PARAMS)
        body = head + "".join(
            f"\n[[maybe_unused]] static void snippet_{n}({params}) {{\n{{\n{code}}}\n}}\n"
            for n, (_, code) in enumerate(items))
        f = os.path.join(tmp, kind + ".cpp")
        open(f, "w").write(body)
        if kind == "fragment":
            cmd = [cxx, "-std=c++20", "-fdiagnostics-color=never", "-fsyntax-only", "-I", os.path.join(src, "include"), f]
        else:
            cmd = [cxx] + flags + ["-fsyntax-only", f]
        rc, log = run(cmd, cwd=cdir)
        for n, (where, _) in enumerate(items):
            # The errors name the documents' lines; print them once.
            report(where, rc == 0, "compiled", log if n == 0 else "  (see above)")
    # docs/config.md is generated from messages/cohort.proto: it must say
    # what the proto says now.
    reference = os.path.join(build, "tools", "config_reference")
    descriptor = os.path.join(build, "messages", "cohort.desc")
    rc, text = run([reference, descriptor])
    want = open(os.path.join(src, "docs", "config.md")).read()
    report("docs/config.md", rc == 0 and text == want,
           "the reference of messages/cohort.proto",
           text if rc != 0 else
           "  differs from what tools/config_reference prints: ./dev.sh config-doc")
    print(f"doc snippets: {len(done)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
