"""Make docs/status-page.png: the status page of a small live cluster, in a real headless Chromium.

    .venv/bin/python scripts/status_screenshot.py [--out docs/status-page.png]

The cluster is the one tests/web/test_status_browser.py checks (two queues, two running jobs, a gang
too big for any node, three simulated 4-cpu nodes), on a nats-server of its own in a temporary
directory; everything it starts is stopped before it exits.  Needs /usr/bin/chromium (Debian's
``chromium`` package).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from busched.scheduler import overview  # noqa: E402
from busched.web import start_http  # noqa: E402
from tests.nats_fixture import Harness, NatsServer  # noqa: E402
from tests.web import browser  # noqa: E402
from tests.web.test_status_browser import settled  # noqa: E402


async def make(out: Path) -> None:
    chromium = browser.find()
    if chromium is None:
        raise SystemExit(f"no Chromium at {browser.CHROMIUM}: sudo apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="busched-screenshot-") as tmp:
        server = NatsServer(Path(tmp) / "nats", host="127.0.0.1", port=0)
        server.start(timeout=10)
        harness = Harness(server.url)
        http = None
        try:
            sched = await settled(harness)
            await asyncio.sleep(0.5)  # a few idle cycles too: the page folds them into one row
            http = await start_http("127.0.0.1", 0, sched.metrics.registry, ready=lambda: sched.ready,
                                    status=lambda: overview.build(sched))
            await asyncio.to_thread(browser.screenshot, chromium, f"{http.url}/?refresh=0", out, size="1280,900")
        finally:
            if http is not None:
                await http.stop()
            await harness.close()
            server.stop()
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "status-page.png")
    asyncio.run(make(p.parse_args().out))


if __name__ == "__main__":
    main()
