#!/usr/bin/env python3
"""check_readme.py — the README's snippets run as written, and its links lead
somewhere: every ```c block compiles (warnings as errors) against the build's
libstof and runs; every ```python block runs with the binding; every
`build/stof` line of a ```sh block runs (on the CPU); every relative link names
a file or folder of the repository.

    python3 scripts/check_readme.py [BUILD_DIR]      (default build)
"""

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def blocks(text, lang):
    return re.findall(r"^```" + lang + r"\n(.*?)^```", text, flags=re.S | re.M)


def run(cmd, env, what, cwd=ROOT):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"check_readme: {what} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.path.join(ROOT, "python"),
               STOF_LIBRARY=os.path.join(build, "libstof.so"))

    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target and not os.path.exists(os.path.join(ROOT, target)):
            sys.exit(f"check_readme: the README links to {target}, which does not exist")

    with tempfile.TemporaryDirectory() as tmp:
        for i, code in enumerate(blocks(text, "c")):
            src, exe = os.path.join(tmp, f"snippet{i}.c"), os.path.join(tmp, f"snippet{i}")
            open(src, "w").write(code)
            run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "include"),
                 src, "-o", exe, "-L", build, "-lstof", "-Wl,-rpath," + build, "-lm"], env,
                f"compiling C snippet {i}")
            print(run([exe], env, f"running C snippet {i}").strip())
        for i, code in enumerate(blocks(text, "python")):
            run([sys.executable, "-c", code], env, f"Python snippet {i}")
            print(f"check_readme: Python snippet {i} ran")
    # The command lines run in a scratch folder that sees the repository's models/,
    # examples/ and tests/ (the tiny checkpoints), so that what they write lands there.
    with tempfile.TemporaryDirectory() as tmp:
        for sub in ("models", "examples", "tests"):
            os.symlink(os.path.join(ROOT, sub), os.path.join(tmp, sub))
        for code in blocks(text, "sh"):
            for line in code.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("build/stof ") and line.endswith("&"):
                    # A server started in the background: tests/serve/test_serve.py runs
                    # the README's serving block against a live server.
                    print(f"check_readme: left to test_serve: {line}")
                elif line.startswith("build/stof "):
                    cmd = os.path.join(build, "stof") + line[len("build/stof"):]
                    run(["sh", "-c", cmd], env, line, cwd=tmp)
                    print(f"check_readme: ran {line}")


if __name__ == "__main__":
    main()
