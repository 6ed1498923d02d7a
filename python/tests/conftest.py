"""What the tests share: the posflow binary they check the package against."""

import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def posflow():
    """The posflow binary: POSFLOW_BIN, or cargo's build of this checkout."""
    if "POSFLOW_BIN" in os.environ:
        return os.environ["POSFLOW_BIN"]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("debug", "release"):
        candidate = target / profile / "posflow"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("posflow")
    if found is None:
        pytest.fail("no posflow binary: build it (cargo build) or set POSFLOW_BIN")
    return found
