import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def fixtures_dir():
    for d in (os.environ.get("TERN_FIXTURES"), os.path.join(REPO, "..", "shared", "fixtures")):
        if d and os.path.isdir(d):
            return os.path.abspath(d)
    return None


def need_fixture(rel):
    """Path of a fixture file; skips visibly when absent, fails under CI=true."""
    d = fixtures_dir()
    p = os.path.join(d, rel) if d else None
    if not p or not os.path.exists(p):
        msg = "fixture %s missing (TERN_FIXTURES or ../shared/fixtures)" % rel
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg + " -- required under CI")
        pytest.skip(msg)
    return p


def tern_bin():
    b = os.environ.get("TERN_BIN") or os.path.join(REPO, "build", "tern")
    if not os.path.exists(b):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("tern binary %s missing" % b)
        pytest.skip("tern binary %s missing (build it or set TERN_BIN)" % b)
    return b
