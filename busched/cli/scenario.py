"""`busched scenario run FILE [--json]` and `busched scenario check PATH...`."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenario", help="run conformance scenarios (one scheduling cycle each)")
    ss = p.add_subparsers(dest="scenario_command", required=True)
    r = ss.add_parser("run", help="run one scenario file and print its decisions")
    r.add_argument("file")
    r.add_argument("--json", action="store_true", help="print the decisions as one JSON object")
    r.add_argument("--seed", type=int, default=0, help="seed for tie-breaks (default 0)")
    r.set_defaults(func=cmd_run)
    c = ss.add_parser("check", help="run scenarios and compare with their expect blocks")
    c.add_argument("paths", nargs="+")
    c.add_argument("-v", "--verbose", action="store_true", help="print every case, not only misses")
    c.set_defaults(func=cmd_check)


def cmd_run(args: argparse.Namespace) -> int:
    from busched.scenario.runner import ScenarioError, load_scenario, run_scenario

    try:
        report = run_scenario(load_scenario(args.file), seed=args.seed)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, sort_keys=False))
    else:
        for k, v in report.items():
            if v:
                print(f"{k}: {json.dumps(v)}")
    return 0


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(path.rglob("*.yaml")))
        else:
            out.append(path)
    return out


def cmd_check(args: argparse.Namespace) -> int:
    from busched.scenario.runner import ScenarioError, check_report, load_scenario, run_scenario

    files = _files(args.paths)
    passed = failed = 0
    per_dir: dict[str, list[int]] = {}
    for f in files:
        d = f.parent.name
        per_dir.setdefault(d, [0, 0])
        try:
            sc = load_scenario(f)
            misses = check_report(run_scenario(sc), sc.expect)
        except ScenarioError as e:
            misses = [f"error: {e}"]
        except Exception as e:  # noqa: BLE001 - a crash is a miss with its traceback's last line, not the end of the run
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            misses = [f"crash: {tb}"]
        if misses:
            failed += 1
            per_dir[d][1] += 1
            print(f"FAIL {f}")
            for m in misses:
                print(f"    {m}")
        else:
            passed += 1
            per_dir[d][0] += 1
            if args.verbose:
                print(f"ok   {f}")
    for d, (ok, bad) in sorted(per_dir.items()):
        print(f"{d}: {ok} passed, {bad} failed")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1
