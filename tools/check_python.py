"""Is this Python one the course supports? The one range is pyproject.toml's requires-python.

`make` (its bootstrap check), the Dockerfile and tools/recording/gpu_setup.sh ask this script;
environment.yml names the same range (tests/test_repository.py checks that they agree).

    python3 tools/check_python.py            # "Python 3.11: ok" (exit 0), else what to do (exit 1)
    python3 tools/check_python.py --range    # the range itself, e.g. >=3.10,<3.13

Written for old Pythons too (no f-strings), so that an unsupported one still gets the message.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def supported_range(pyproject=os.path.join(REPO, "pyproject.toml")):
    """(spec, lowest, first unsupported): (">=3.10,<3.13", (3, 10), (3, 13))."""
    with open(pyproject) as f:
        m = re.search(r'^requires-python\s*=\s*"(>=(\d+)\.(\d+),\s*<(\d+)\.(\d+))"', f.read(), re.M)
    if not m:
        raise SystemExit("pyproject.toml: requires-python is not of the form >=X.Y,<X.Z")
    return m.group(1), (int(m.group(2)), int(m.group(3))), (int(m.group(4)), int(m.group(5)))


def main(argv):
    spec, low, high = supported_range()
    if "--range" in argv:
        print(spec)
        return 0
    v = tuple(sys.version_info[:2])
    newest = (high[0], high[1] - 1)
    if low <= v < high:
        print("Python %d.%d: ok" % v)
        return 0
    print("Python %d.%d: the course supports Python %d.%d-%d.%d (pyproject.toml: requires-python %s); "
          "pass BOOTSTRAP_PYTHON=python%d.%d" % (v + low + newest + (spec,) + newest))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
