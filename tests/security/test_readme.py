"""Keeps README.md's table of attack scripts in sync with the scripts'
docstrings, and checks that every script follows the contract's basics.

Regenerate the table after adding or renaming a script:

    python3 tests/security/test_readme.py --write
"""
import ast
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
BEGIN = "<!-- attack-table:begin -->"
END = "<!-- attack-table:end -->"
MIN_SCRIPTS = 40
# the scripts run with the template's python3: standard library and ctypes only
ALLOWED_IMPORTS = {"_attack", "ctypes", "errno", "fcntl", "glob", "json", "mmap", "os", "shutil", "signal", "socket", "stat",
                   "struct", "subprocess", "sys", "time", "traceback"}


def scripts():
    return sorted(glob.glob(os.path.join(HERE, "attacks", "[0-9][0-9]_*.py")))


def summary(path):
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    return (doc or "").strip().splitlines()[0] if doc else ""


def table():
    rows = ["| script | attack |", "|---|---|"]
    for p in scripts():
        text = summary(p).replace("|", "\\|")
        rows.append("| `%s` | %s |" % (os.path.basename(p), text))
    return "\n".join(rows)


def current_table():
    with open(README) as f:
        text = f.read()
    m = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    assert m, "README.md lacks the %s ... %s markers" % (BEGIN, END)
    return text, m


def test_enough_scripts():
    assert len(scripts()) >= MIN_SCRIPTS, len(scripts())
    numbers = [os.path.basename(p)[:2] for p in scripts()]
    assert len(set(numbers)) == len(numbers), "two scripts share a number: %s" % numbers


def test_readme_table_lists_every_script():
    _, m = current_table()
    listed = re.findall(r"^\| `([^`]+)` \|", m.group(1), re.M)
    names = [os.path.basename(p) for p in scripts()]
    assert sorted(listed) == names, "README table out of date: missing %s, extra %s (run %s --write)" % (
        sorted(set(names) - set(listed)), sorted(set(listed) - set(names)), os.path.relpath(__file__))
    assert m.group(1) == table(), "README table descriptions differ from the docstrings (run %s --write)" % (
        os.path.relpath(__file__))


def test_scripts_follow_the_contract():
    for p in scripts():
        name = os.path.basename(p)
        with open(p) as f:
            src = f.read()
        tree = ast.parse(src, p)
        line = summary(p)
        assert line and line.endswith("."), "%s: the docstring's first line must describe the attack" % name
        mods = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                mods.add((node.module or "").split(".")[0])
        assert mods <= ALLOWED_IMPORTS, "%s imports %s" % (name, sorted(mods - ALLOWED_IMPORTS))
        # the verdict and exit codes come from the shared module's finish()
        assert "from _attack import" in src and "finish(main)" in src, "%s: no verdict through finish()" % name
        assert 'if __name__ == "__main__":' in src, name
    with open(os.path.join(HERE, "attacks", "_attack.py")) as f:
        lib = f.read()
    for needle in ('"BLOCKED: "', '"ESCAPED: "', "sys.exit(2)", "sys.exit(1)", "sys.exit(0)"):
        assert needle in lib, "_attack.py lacks %s" % needle


def write():
    text, m = current_table()
    new = text[:m.start(1)] + table() + text[m.end(1):]
    with open(README, "w") as f:
        f.write(new)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
        print("README table updated: %d scripts" % len(scripts()))
    else:
        print(table())
