"""Installing the client package leaves its tree clean (no build/, no egg-info/) and ships the MCP console
script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "python"


def litter() -> set[str]:
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*")
        if p.name == "build" or p.suffix == ".egg-info"
    }


def test_building_the_client_leaves_no_build_or_egg_info_and_ships_sundry_desk_mcp(tmp_path: Path) -> None:
    before = litter()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(PACKAGE)],
        check=True,
        timeout=300,
    )
    assert litter() == before == set()
    (wheel,) = tmp_path.glob("sundry_desk_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "sundry_desk_client/py.typed" in names and "sundry_desk_client/langchain.py" in names
    assert "sundry-desk-mcp = sundry_desk_client.mcp_server:main" in entry_points
