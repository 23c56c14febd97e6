"""The Python SDK page's example (docs/sdk.md), extracted and run as a user would (a script of its
own)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
#: The page whose first example the tests run.
SDK_PAGE = ROOT / "docs" / "sdk.md"


def sdk_example() -> tuple[str, str]:
    """The page's first Python block and the output block right after it."""
    found = re.search(r"```python\n(.*?)```\s*```\n(.*?)```", SDK_PAGE.read_text(), re.S)
    assert found is not None, "docs/sdk.md lost its example or its output"
    return found.group(1), found.group(2)


def run_sdk_example(tmp: Path, **env: str) -> str:
    """Run the example in ``tmp`` with the repository's config/ and ``env``; its output (it must
    log nothing: warnings go to stderr)."""
    code, _ = sdk_example()
    script = tmp / "example.py"
    script.write_text(code)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=tmp,
        env={
            **clean,
            "FLEET_HOME": str(tmp / "home"),
            "FLEET_CONFIG_DIR": str(ROOT / "config"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]  # nothing logged: no retry, no lock timeout
    return done.stdout
